/**
 * Where certificates and keys live and how they are read. Generated ones go
 * to `<inventory>.certs/` next to the inventory's secrets file (folder 0700,
 * keys 0600, certificates 0644); operator files are named by the inventory's
 * `tls:` section, relative to the inventory's folder. Key text is read here
 * and handed to x509.ts; it never reaches a message.
 */
import { chmodSync, existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { IoError, StackctlError, messageOf } from '../core/errors.js';
import { readTextFile, writeFileAtomic } from '../core/fs.js';

/** Largest PEM file read (a certificate bundle of a few dozen certificates). */
export const MAX_PEM_BYTES = 1024 * 1024;

/** Mode of the folder of generated certificates and keys. */
export const CERTS_DIR_MODE = 0o700;
/** Mode of a private key file. */
export const KEY_MODE = 0o600;
/** Mode of a certificate file. */
export const CERT_MODE = 0o644;

/** `site.yaml` -> `site.certs`: the folder of an inventory's generated certificates. */
export function certsDirFor(inventoryFile: string): string {
  return inventoryFile.replace(/\.ya?ml$/, '') + '.certs';
}

/** The files of one generated certificate (`ca`, `public`, ...) in `dir`. */
export function generatedFiles(dir: string, name: string): { cert: string; key: string } {
  return { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
}

/** An operator's path from the inventory: relative to the inventory's folder. */
export function operatorPath(inventoryFile: string, path: string): string {
  return isAbsolute(path) ? path : resolve(dirname(inventoryFile), path);
}

/** Create the folder with mode 0700 (and tighten an existing one to it). */
export function ensureCertsDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: CERTS_DIR_MODE });
    if ((statSync(dir).mode & 0o777) !== CERTS_DIR_MODE) chmodSync(dir, CERTS_DIR_MODE);
  } catch (e) {
    throw new IoError('E_FILE_WRITE', `cannot create ${dir}: ${(e as NodeJS.ErrnoException).code ?? messageOf(e)}`, {
      hint: 'Check that the folder of the inventory is writable.',
      location: { file: dir },
    });
  }
}

/** Read a PEM file; throws Error with the reason (the caller names the file and the field). */
export function readPem(file: string): string {
  try {
    return readTextFile(file, MAX_PEM_BYTES);
  } catch (e) {
    throw new Error(e instanceof StackctlError ? e.message : messageOf(e));
  }
}

/** The permission bits of a file a group or others can access, else undefined. */
export function looseMode(file: string): string | undefined {
  const mode = statSync(file).mode & 0o777;
  return mode & 0o077 ? mode.toString(8).padStart(4, '0') : undefined;
}

/** Write a key (0600) or a certificate (0644) atomically. */
export function writePem(file: string, pem: string, mode: number): void {
  writeFileAtomic(file, pem, mode);
}

/** Whether both files of a generated certificate exist. */
export function bothExist(files: { cert: string; key: string }): { cert: boolean; key: boolean } {
  return { cert: existsSync(files.cert), key: existsSync(files.key) };
}
