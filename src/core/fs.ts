import { closeSync, fsyncSync, openSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { IoError, InputError } from './errors.js';

/** Read a text file, refusing files larger than `maxBytes` (a guard against mistaken or hostile input). */
export function readTextFile(file: string, maxBytes: number): string {
  let size: number;
  try {
    size = statSync(file).size;
  } catch (err) {
    throw new IoError('E_FILE_READ', `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`, {
      hint: 'Check the path given with -i/--inventory (or --secrets).',
      cause: err,
      location: { file },
    });
  }
  if (size > maxBytes) {
    throw new InputError('E_FILE_TOO_LARGE', `${file} is ${size} bytes, more than the limit of ${maxBytes} bytes`, {
      hint: 'Inventories this large are almost certainly a mistake; split the file or check what was written into it.',
      location: { file },
    });
  }
  return readFileSync(file, 'utf8');
}

/**
 * Write a file atomically: a temporary file in the same folder, fsync, then
 * rename over the target, so a crash leaves either the old or the new file,
 * never half of one. `mode` applies from creation (no window with wider access).
 */
export function writeFileAtomic(file: string, data: string, mode = 0o644): void {
  const tmp = join(dirname(file), `.${basename(file)}.${process.pid}.${Date.now()}.tmp`);
  let fd: number | undefined;
  try {
    fd = openSync(tmp, 'wx', mode);
    writeSync(fd, data);
    fsyncSync(fd);
    closeSync(fd);
    fd = undefined;
    renameSync(tmp, file);
  } catch (err) {
    if (fd !== undefined) closeSync(fd);
    try {
      unlinkSync(tmp);
    } catch {
      // the temporary file may not exist; nothing to clean up
    }
    throw new IoError('E_FILE_WRITE', `cannot write ${file}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`, {
      hint: 'Check that the folder exists and is writable.',
      cause: err,
      location: { file },
    });
  }
}

/** True when the file exists. */
export function exists(file: string): boolean {
  try {
    statSync(file);
    return true;
  } catch {
    return false;
  }
}
