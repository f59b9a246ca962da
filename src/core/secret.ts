import { inspect } from 'node:util';

const REDACTED = '<redacted>';

/**
 * A secret value (password, key) that refuses to be printed: `String()`,
 * JSON, template literals and `util.inspect` all give `<redacted>`. Call
 * `reveal()` only at the one place that must put the value on the wire.
 */
export class Secret {
  readonly #value: string;
  constructor(value: string) {
    this.#value = value;
  }
  /** The clear value: use only where it is sent to a peer or written to a 0600 file. */
  reveal(): string {
    return this.#value;
  }
  /** True when the secret holds no characters. */
  get empty(): boolean {
    return this.#value.length === 0;
  }
  toString(): string {
    return REDACTED;
  }
  toJSON(): string {
    return REDACTED;
  }
  [inspect.custom](): string {
    return REDACTED;
  }
}
