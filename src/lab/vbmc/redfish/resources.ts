import { createHash } from 'node:crypto';
import type { BootSetting, PowerState } from '../../../bmc/driver.js';
import {
  MACHINE_BOOT_TARGET,
  MACHINE_POWER_STATE,
  OVERRIDE_ENABLED_VALUES,
  REDFISH_MODE_UEFI,
  REDFISH_TARGET_DEVICE,
} from './mappings.js';
import type { LabSession } from './sessions.js';

/** JSON bodies of the virtual BMC's Redfish resources. */

/** A JSON object body. */
export type Body = Record<string, unknown>;

/** Fixed URIs of the service. */
export const PATHS = {
  /** Version discovery document. */
  versions: '/redfish',
  /** Service root. */
  root: '/redfish/v1',
  /** Systems collection. */
  systems: '/redfish/v1/Systems',
  /** Managers collection. */
  managers: '/redfish/v1/Managers',
  /** Session service. */
  sessionService: '/redfish/v1/SessionService',
  /** Session collection (login by POST). */
  sessions: '/redfish/v1/SessionService/Sessions',
} as const;

/** The manager's Id: one BMC per machine. */
export const MANAGER_ID = 'BMC';

/** What the system resource reports about its hardware. */
export interface SystemIdentity {
  readonly manufacturer: string;
  readonly model: string;
  readonly serialNumber: string;
  readonly uuid: string;
  readonly biosVersion: string;
  readonly firmwareVersion: string;
}

/** A stable identity derived from the machine name, so a lab machine keeps its UUID across runs. */
export function defaultIdentity(machineName: string): SystemIdentity {
  const h = createHash('sha256').update(`redfish:${machineName}`).digest('hex');
  const uuid = `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
  return {
    manufacturer: 'stackctl',
    model: 'Virtual Redfish machine',
    serialNumber: `VM-${h.slice(0, 10).toUpperCase()}`,
    uuid,
    biosVersion: '1.0.0-virtual',
    firmwareVersion: '1.0.0',
  };
}

/** `/redfish/v1/Systems/{id}`. */
export function systemPath(systemId: string): string {
  return `${PATHS.systems}/${encodeURIComponent(systemId)}`;
}

/** `/redfish/v1/Managers/BMC`. */
export function managerPath(): string {
  return `${PATHS.managers}/${MANAGER_ID}`;
}

/** `{ "@odata.id": path }`. */
export function link(path: string): Body {
  return { '@odata.id': path };
}

/** The service root: readable without authentication, as the specification requires. */
export function serviceRoot(uuid: string): Body {
  return {
    '@odata.type': '#ServiceRoot.v1_5_0.ServiceRoot',
    '@odata.id': PATHS.root,
    Id: 'RootService',
    Name: 'Root Service',
    RedfishVersion: '1.8.0',
    UUID: uuid,
    Systems: link(PATHS.systems),
    Managers: link(PATHS.managers),
    SessionService: link(PATHS.sessionService),
    Links: { Sessions: link(PATHS.sessions) },
  };
}

/** A resource collection. */
export function collection(type: string, path: string, name: string, members: readonly string[]): Body {
  return {
    '@odata.type': `#${type}.${type}`,
    '@odata.id': path,
    Name: name,
    'Members@odata.count': members.length,
    Members: members.map(link),
  };
}

/** The session service. */
export function sessionService(timeoutSeconds: number): Body {
  return {
    '@odata.type': '#SessionService.v1_1_8.SessionService',
    '@odata.id': PATHS.sessionService,
    Id: 'SessionService',
    Name: 'Session Service',
    ServiceEnabled: true,
    SessionTimeout: timeoutSeconds,
    Sessions: link(PATHS.sessions),
  };
}

/** One session (the token is only ever sent in the X-Auth-Token header of the login answer). */
export function sessionBody(session: LabSession): Body {
  return {
    '@odata.type': '#Session.v1_3_0.Session',
    '@odata.id': `${PATHS.sessions}/${session.id}`,
    Id: session.id,
    Name: 'User Session',
    UserName: session.userName,
  };
}

/** How the reset action lists its allowable values. */
export type ResetInfoStyle = 'inline' | 'action-info';

/** Inputs of the ComputerSystem body. */
export interface SystemState {
  readonly systemId: string;
  readonly machineName: string;
  readonly power: PowerState;
  readonly boot: BootSetting;
  readonly identity: SystemIdentity;
  readonly resetTypes: readonly string[];
  readonly resetInfo: ResetInfoStyle;
}

/** The ComputerSystem resource (without `@odata.etag`, which is computed over this body). */
export function systemBody(s: SystemState): Body {
  const path = systemPath(s.systemId);
  const target = MACHINE_BOOT_TARGET[s.boot.device];
  const enabled = target === 'None' ? 'Disabled' : s.boot.persistent ? 'Continuous' : 'Once';
  const reset: Body = { target: `${path}/Actions/ComputerSystem.Reset`, title: 'Reset' };
  if (s.resetInfo === 'inline') reset['ResetType@Redfish.AllowableValues'] = [...s.resetTypes];
  else reset['@Redfish.ActionInfo'] = `${path}/ResetActionInfo`;
  return {
    '@odata.type': '#ComputerSystem.v1_13_0.ComputerSystem',
    '@odata.id': path,
    Id: s.systemId,
    Name: s.machineName,
    SystemType: 'Physical',
    Manufacturer: s.identity.manufacturer,
    Model: s.identity.model,
    SerialNumber: s.identity.serialNumber,
    UUID: s.identity.uuid,
    BiosVersion: s.identity.biosVersion,
    PowerState: MACHINE_POWER_STATE[s.power],
    Status: { State: 'Enabled', Health: 'OK' },
    Boot: {
      BootSourceOverrideTarget: target,
      'BootSourceOverrideTarget@Redfish.AllowableValues': Object.keys(REDFISH_TARGET_DEVICE),
      BootSourceOverrideEnabled: enabled,
      'BootSourceOverrideEnabled@Redfish.AllowableValues': [...OVERRIDE_ENABLED_VALUES],
      BootSourceOverrideMode: s.boot.uefi ? 'UEFI' : 'Legacy',
      'BootSourceOverrideMode@Redfish.AllowableValues': Object.keys(REDFISH_MODE_UEFI),
    },
    Actions: { '#ComputerSystem.Reset': reset },
    Links: { ManagedBy: [link(managerPath())] },
  };
}

/** The ActionInfo resource of the reset action. */
export function resetActionInfo(systemId: string, resetTypes: readonly string[]): Body {
  return {
    '@odata.type': '#ActionInfo.v1_1_2.ActionInfo',
    '@odata.id': `${systemPath(systemId)}/ResetActionInfo`,
    Id: 'ResetActionInfo',
    Name: 'Reset Action Info',
    Parameters: [{ Name: 'ResetType', Required: true, DataType: 'String', AllowableValues: [...resetTypes] }],
  };
}

/** The manager (the BMC itself). */
export function managerBody(systemId: string, firmwareVersion: string): Body {
  return {
    '@odata.type': '#Manager.v1_10_0.Manager',
    '@odata.id': managerPath(),
    Id: MANAGER_ID,
    Name: 'Virtual BMC',
    ManagerType: 'BMC',
    FirmwareVersion: firmwareVersion,
    Status: { State: 'Enabled', Health: 'OK' },
    Links: { ManagerForServers: [link(systemPath(systemId))] },
  };
}

/** A weak ETag over a body: it changes whenever the state shown changes. */
export function etagOf(body: Body): string {
  return `W/"${createHash('sha256').update(JSON.stringify(body)).digest('hex').slice(0, 16)}"`;
}

/** A Redfish error body (`error.code`, `error.message`, one extended message). */
export function errorBody(messageId: string, message: string, resolution?: string): Body {
  return {
    error: {
      code: `Base.1.8.${messageId}`,
      message,
      '@Message.ExtendedInfo': [
        {
          '@odata.type': '#Message.v1_1_1.Message',
          MessageId: `Base.1.8.${messageId}`,
          Message: message,
          Severity: 'Warning',
          ...(resolution ? { Resolution: resolution } : {}),
        },
      ],
    },
  };
}

/** The body of a successful action. */
export function successBody(): Body {
  return {
    '@Message.ExtendedInfo': [
      {
        '@odata.type': '#Message.v1_1_1.Message',
        MessageId: 'Base.1.8.Success',
        Message: 'The request completed successfully.',
        Severity: 'OK',
      },
    ],
  };
}
