/**
 * Typed views of the few Redfish resources the client reads. BMC JSON is
 * untrusted input: every field is checked for its type, and a field that is
 * missing or malformed reads as undefined instead of throwing deep inside.
 */

/** The `Boot` object of a ComputerSystem. */
export interface BootView {
  readonly target?: string;
  readonly enabled?: string;
  readonly mode?: string;
  readonly allowedTargets?: readonly string[];
  readonly allowedModes?: readonly string[];
}

/** The `#ComputerSystem.Reset` action of a ComputerSystem. */
export interface ResetActionView {
  /** Path to POST to. */
  readonly target: string;
  /** `ResetType@Redfish.AllowableValues`, when given inline. */
  readonly allowable?: readonly string[];
  /** `@Redfish.ActionInfo` path, where some services list the allowable values instead. */
  readonly actionInfo?: string;
}

/** The parts of a ComputerSystem resource stackctl uses. */
export interface SystemView {
  readonly id?: string;
  readonly powerState?: string;
  readonly boot: BootView;
  readonly reset: ResetActionView;
  readonly manufacturer?: string;
  readonly model?: string;
  readonly serialNumber?: string;
  readonly uuid?: string;
  readonly biosVersion?: string;
  /** Path of the first manager in `Links.ManagedBy`. */
  readonly managedBy?: string;
  /** The ETag header, or `@odata.etag` from the body. */
  readonly etag?: string;
}

type Json = Readonly<Record<string, unknown>>;

/** The object value of `obj[key]`, or undefined. */
export function objectAt(obj: unknown, key: string): Json | undefined {
  if (typeof obj !== 'object' || obj === null) return undefined;
  const value = (obj as Json)[key];
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
}

/** The string value of `obj[key]`, or undefined. */
export function stringAt(obj: unknown, key: string): string | undefined {
  if (typeof obj !== 'object' || obj === null) return undefined;
  const value = (obj as Json)[key];
  return typeof value === 'string' ? value : undefined;
}

/** The string-array value of `obj[key]` (non-strings dropped), or undefined. */
export function stringsAt(obj: unknown, key: string): readonly string[] | undefined {
  if (typeof obj !== 'object' || obj === null) return undefined;
  const value = (obj as Json)[key];
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : undefined;
}

/** Read a ComputerSystem; `systemPath` supplies the conventional action path when none is given. */
export function readSystem(json: unknown, systemPath: string, etagHeader?: string): SystemView {
  const boot = objectAt(json, 'Boot');
  const reset = objectAt(objectAt(json, 'Actions'), '#ComputerSystem.Reset');
  const managedBy = objectAt(json, 'Links')?.['ManagedBy'];
  const firstManager = Array.isArray(managedBy) ? stringAt(managedBy[0], '@odata.id') : undefined;
  return {
    id: stringAt(json, 'Id'),
    powerState: stringAt(json, 'PowerState'),
    boot: {
      target: stringAt(boot, 'BootSourceOverrideTarget'),
      enabled: stringAt(boot, 'BootSourceOverrideEnabled'),
      mode: stringAt(boot, 'BootSourceOverrideMode'),
      allowedTargets: stringsAt(boot, 'BootSourceOverrideTarget@Redfish.AllowableValues'),
      allowedModes: stringsAt(boot, 'BootSourceOverrideMode@Redfish.AllowableValues'),
    },
    reset: {
      target: stringAt(reset, 'target') ?? `${systemPath}/Actions/ComputerSystem.Reset`,
      allowable: stringsAt(reset, 'ResetType@Redfish.AllowableValues'),
      actionInfo: stringAt(reset, '@Redfish.ActionInfo'),
    },
    manufacturer: stringAt(json, 'Manufacturer'),
    model: stringAt(json, 'Model'),
    serialNumber: stringAt(json, 'SerialNumber'),
    uuid: stringAt(json, 'UUID'),
    biosVersion: stringAt(json, 'BiosVersion'),
    managedBy: firstManager,
    etag: etagHeader ?? stringAt(json, '@odata.etag'),
  };
}

/** The allowable values of one parameter in an ActionInfo resource. */
export function actionInfoAllowable(json: unknown, parameter: string): readonly string[] | undefined {
  const params = typeof json === 'object' && json !== null ? (json as Json)['Parameters'] : undefined;
  if (!Array.isArray(params)) return undefined;
  const entry: unknown = params.find((p) => stringAt(p, 'Name') === parameter);
  return stringsAt(entry, 'AllowableValues');
}

/** The operator-readable part of a Redfish error body (`error.message` and the first extended message). */
export function redfishErrorText(json: unknown): string | undefined {
  const error = objectAt(json, 'error');
  if (!error) return undefined;
  const info = error['@Message.ExtendedInfo'];
  const first = Array.isArray(info) ? stringAt(info[0], 'Message') : undefined;
  const text = [stringAt(error, 'message'), first].filter((s) => s !== undefined && s !== '').join(': ');
  return text ? text.slice(0, 300) : undefined;
}
