/**
 * `stackctl rotate keystone-keys --timer EVERY`: a systemd timer on the deploy host that rotates a
 * key repository and deploys its service, every EVERY (docs/tls.md, "A timer for key rotation").
 * The service unit runs the two commands an operator runs by hand, as two ExecStart= lines of a
 * oneshot unit: the deploy runs only when the rotation succeeded, and a rotation whose deploy
 * failed makes the next rotation refuse (E_ROTATE_NOT_DEPLOYED), so a failing timer never stacks
 * rotations. Both take the inventory's run lock, so the timer never interleaves with an operator's run.
 */
import { UsageError } from '../core/errors.js';

/** Where systemd reads the units of the system manager from. */
export const SYSTEM_UNIT_DIR = '/etc/systemd/system';

/**
 * Keystone's `[resource] allow_expired_window` default (seconds): how long after its expiry a
 * token may still be fetched with `allow_expired`. stackctl does not set it, so Keystone's default holds.
 */
export const KEYSTONE_ALLOW_EXPIRED_WINDOW_S = 172_800;

const SPAN_UNITS: Readonly<Record<string, number>> = { h: 3600, d: 86_400, w: 604_800 };

/** `12h`, `3d`, `1w` → seconds; anything else is refused with E_ROTATE_TIMER_SPAN. */
export function parseSpan(text: string): number {
  const m = /^([1-9]\d{0,4})([hdw])$/.exec(text);
  if (!m) {
    throw new UsageError(
      'E_ROTATE_TIMER_SPAN',
      `--timer must be a whole number of hours, days or weeks, not '${text}'`,
      {
        hint: "For example --timer 7d (or 12h, 2w); '--timer off' removes the timer.",
      },
    );
  }
  return Number(m[1]) * SPAN_UNITS[m[2]!]!;
}

/**
 * The shortest rotation period that keeps every token valid for its whole life: a key signs
 * tokens while it is the primary, then stays as a secondary for `maxActive - 2` rotations, so
 * `(maxActive - 2) × period` must cover the token's lifetime and the allow-expired window
 * (Keystone's rule, max_active_keys = (expiration + allow_expired_window) / period + 2).
 * Infinity when `maxActive` is 2: each rotation then drops the key that signed the live tokens.
 */
export function minRotationPeriodS(expirationS: number, maxActive: number): number {
  return maxActive <= 2 ? Infinity : Math.ceil((expirationS + KEYSTONE_ALLOW_EXPIRED_WINDOW_S) / (maxActive - 2));
}

/**
 * One argument of an ExecStart= line, as systemd.service(5) parses it: double-quoted, `\` and `"`
 * escaped, `%` (a specifier) doubled, `$` (a variable) doubled. Control characters (a newline would
 * end the line and start another setting) are refused.
 */
export function systemdArg(arg: string): string {
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(arg)) {
    throw new UsageError(
      'E_ROTATE_TIMER_PATH',
      `a path for the timer holds a control character: ${JSON.stringify(arg)}`,
      {
        hint: 'Move the inventory (or stackctl) to a path without one. Nothing was written.',
      },
    );
  }
  return `"${arg
    .replace(/[\\"]/g, (c) => `\\${c}`)
    .replace(/%/g, '%%')
    .replace(/\$/g, '$$$$')}"`;
}

/** What the timer runs and how often. */
export interface TimerSpec {
  /** The rotation (`keystone-keys`) and the service whose containers read the keys (`keystone`). */
  readonly rotation: string;
  readonly service: string;
  readonly cloud: string;
  readonly everyS: number;
  /** Absolute paths: node, stackctl's entry point, the inventory; the inventory options to pass on. */
  readonly node: string;
  readonly bin: string;
  readonly inventory: string;
  readonly extra: readonly string[];
  /** The user the unit runs as (the one who installs it: the secrets file and SSH keys are theirs). */
  readonly user: string;
}

/** The unit's name, without `.service` / `.timer`. */
export function timerUnitName(rotation: string, cloud: string): string {
  return `stackctl-rotate-${rotation}-${cloud}`;
}

/** The service and timer units of a rotation timer. */
export function timerUnits(spec: TimerSpec): { name: string; service: string; timer: string } {
  const name = timerUnitName(spec.rotation, spec.cloud);
  const cmd = (...args: string[]): string =>
    [spec.node, spec.bin, ...args, '-i', spec.inventory, ...spec.extra].map(systemdArg).join(' ');
  const service = [
    '# written by stackctl rotate --timer; removed by --timer off',
    '[Unit]',
    `Description=stackctl: rotate ${spec.rotation} of cloud ${spec.cloud}, then deploy ${spec.service}`,
    'Wants=network-online.target',
    'After=network-online.target',
    '',
    '[Service]',
    'Type=oneshot',
    `User=${spec.user}`,
    // the second line runs only when the first succeeded
    `ExecStart=${cmd('rotate', spec.rotation)}`,
    `ExecStart=${cmd('deploy', '--services', spec.service)}`,
    '',
  ].join('\n');
  const timer = [
    '# written by stackctl rotate --timer; removed by --timer off',
    '[Unit]',
    `Description=stackctl: rotate ${spec.rotation} of cloud ${spec.cloud} every ${spec.everyS} s`,
    '',
    '[Timer]',
    // counted from the timer's start and from the last run: a reboot or a stopped timer only
    // lengthens the period, never shortens it (a shorter one could drop a key live tokens need)
    `OnActiveSec=${spec.everyS}s`,
    `OnUnitActiveSec=${spec.everyS}s`,
    'AccuracySec=1min',
    '',
    '[Install]',
    'WantedBy=timers.target',
    '',
  ].join('\n');
  return { name, service, timer };
}
