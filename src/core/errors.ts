/**
 * One error base class for the whole project (CONVENTIONS.md 7).
 *
 * Every error carries a stable `code` (documented in docs/cli.md), the values
 * its message was built from, and a `hint` telling the operator what to do.
 * The CLI prints message and hint, the stack only with `--debug`, and maps the
 * code's category to an exit status.
 */

/** Where in a source file a fault sits: file, 1-based line and column, JSON path. */
export interface SourceLocation {
  readonly file: string;
  readonly line?: number;
  readonly column?: number;
  /** JSON pointer-ish path such as `/nodes/3/nics/0/mac`. */
  readonly path?: string;
}

/** Exit statuses by error category; documented in docs/cli.md. */
export const ExitCode = {
  /** Everything went well. */
  OK: 0,
  /** An unexpected internal error (a bug): please report it. */
  INTERNAL: 1,
  /** Wrong command-line usage. */
  USAGE: 2,
  /** Invalid input: inventory, roles, release manifest, secrets file. */
  INVALID_INPUT: 3,
  /** A file could not be read or written, or has unsafe permissions. */
  IO: 4,
  /** A remote peer (BMC, node, registry) refused or failed. */
  REMOTE: 5,
  /** A remote peer did not answer in time. */
  TIMEOUT: 6,
  /** Authentication against a BMC or node failed. */
  AUTH: 7,
  /** Another stackctl run holds the inventory's run lock; nothing was done. */
  LOCKED: 11,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

export interface StackctlErrorOptions {
  readonly hint?: string;
  readonly cause?: unknown;
  readonly location?: SourceLocation;
  readonly exitCode?: ExitCode;
  /** Values the message was built from, for machine-readable output. */
  readonly details?: Readonly<Record<string, unknown>>;
}

/** Base class of every error stackctl raises on purpose. */
export class StackctlError extends Error {
  readonly code: string;
  readonly hint: string | undefined;
  readonly location: SourceLocation | undefined;
  readonly exitCode: ExitCode;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: string, message: string, options: StackctlErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.hint = options.hint;
    this.location = options.location;
    this.exitCode = options.exitCode ?? ExitCode.INTERNAL;
    this.details = options.details ?? {};
  }

  /** `file:line:col` prefix for messages, or '' when there is no location. */
  static where(loc: SourceLocation | undefined): string {
    if (!loc) return '';
    let s = loc.file;
    if (loc.line !== undefined) s += `:${loc.line}`;
    if (loc.line !== undefined && loc.column !== undefined) s += `:${loc.column}`;
    return s;
  }

  /** Plain JSON form for `--json` output; never contains secrets by construction. */
  toJSON(): Record<string, unknown> {
    return {
      code: this.code,
      message: this.message,
      ...(this.hint ? { hint: this.hint } : {}),
      ...(this.location ? { location: this.location } : {}),
      ...(Object.keys(this.details).length ? { details: this.details } : {}),
    };
  }
}

/** A StackctlError subclass whose exit status is fixed by its category. */
function category(exitCode: ExitCode) {
  return class extends StackctlError {
    constructor(code: string, message: string, options: Omit<StackctlErrorOptions, 'exitCode'> = {}) {
      super(code, message, { ...options, exitCode });
    }
  };
}

/** Invalid operator input; exit status INVALID_INPUT. */
export class InputError extends category(ExitCode.INVALID_INPUT) {}

/** File-system problems: unreadable, unwritable, unsafe permissions; exit status IO. */
export class IoError extends category(ExitCode.IO) {}

/** A remote peer (BMC, node) failed or refused; exit status REMOTE. */
export class RemoteError extends category(ExitCode.REMOTE) {}

/** A remote peer did not answer within its deadline; exit status TIMEOUT. */
export class TimeoutError extends category(ExitCode.TIMEOUT) {}

/** Credentials refused by a BMC or node; exit status AUTH. */
export class AuthError extends category(ExitCode.AUTH) {}

/** Wrong command-line usage; exit status USAGE. */
export class UsageError extends category(ExitCode.USAGE) {}

/**
 * Many input faults found in one pass (schema + semantic checks report
 * everything at once). `issues` holds errors and warnings; only errors fail.
 */
export class ValidationFailed extends InputError {
  readonly issues: readonly Issue[];
  constructor(file: string, issues: readonly Issue[]) {
    const errors = issues.filter((i) => i.severity === 'error');
    super('E_VALIDATION', `${file}: ${errors.length} error(s) found`, {
      hint: 'Fix every error listed above, then run the command again; nothing was written.',
      details: { file, errors: errors.length },
    });
    this.issues = issues;
  }
}

/** One finding of a validation pass. */
export interface Issue {
  readonly severity: 'error' | 'warning';
  readonly code: string;
  readonly message: string;
  readonly hint?: string;
  readonly location: SourceLocation;
}

/** Format one finding as `file:line:col: error CODE at /path: message (hint: …)`. */
export function formatIssue(issue: Issue): string {
  const where = StackctlError.where(issue.location);
  const path = issue.location.path ? ` at ${issue.location.path}` : '';
  const hint = issue.hint ? `\n    hint: ${issue.hint}` : '';
  return `${where}: ${issue.severity} ${issue.code}${path}: ${issue.message}${hint}`;
}

/** Narrow an unknown thrown value to a message without leaking objects. */
export function messageOf(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/** A failure as reported per node in command results: code, message, hint and exit status. */
export interface FailureSummary {
  readonly code: string;
  readonly message: string;
  readonly hint?: string;
  readonly exit: ExitCode;
}

/** Summarise any thrown value; what is not a StackctlError counts as internal. */
export function summarizeFailure(e: unknown): FailureSummary {
  const err = e instanceof StackctlError ? e : undefined;
  return {
    code: err?.code ?? 'E_INTERNAL',
    message: e instanceof Error ? e.message : String(e),
    ...(err?.hint ? { hint: err.hint } : {}),
    exit: err?.exitCode ?? ExitCode.INTERNAL,
  };
}
