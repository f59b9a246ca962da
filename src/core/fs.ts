import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
  type BigIntStats,
  type Stats,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { IoError, InputError } from './errors.js';

/** What a file that is not a regular file is, in words. */
function fileKind(st: Stats | BigIntStats): string {
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isDirectory()) return 'a directory';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

function readError(file: string, err: unknown): IoError {
  return new IoError('E_FILE_READ', `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`, {
    hint: 'Check the path given with -i/--inventory (or --secrets).',
    cause: err,
    location: { file },
  });
}

function notRegular(file: string, st: Stats | BigIntStats): IoError {
  return new IoError('E_FILE_TYPE', `${file} is ${fileKind(st)}, not a regular file`, {
    hint: 'Give the path of a regular file: stackctl does not read inventories, secrets or state from pipes or devices.',
    location: { file },
  });
}

/**
 * Stat a file that must be a regular file; throws E_FILE_READ when it cannot
 * be read and E_FILE_TYPE for a FIFO, device, directory or socket (reading a
 * FIFO would wait for a writer forever).
 */
export function regularFile(file: string): Stats {
  let st: Stats;
  try {
    st = statSync(file);
  } catch (err) {
    throw readError(file, err);
  }
  if (!st.isFile()) throw notRegular(file, st);
  return st;
}

/**
 * Read a file whole, refusing files larger than `maxBytes` (a guard against
 * mistaken or hostile input) and anything but a regular file. The type is
 * checked before the file is opened (opening some devices has effects) and
 * again on the open descriptor, which is opened non-blocking, so a file
 * swapped for a FIFO in between cannot hang the read either. Resolves to the
 * bytes and the status of the very file they were read from.
 */
export function readFileChecked(file: string, maxBytes: number): { data: Buffer; stat: BigIntStats } {
  regularFile(file);
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (err) {
    throw readError(file, err);
  }
  try {
    const st = fstatSync(fd, { bigint: true });
    if (!st.isFile()) throw notRegular(file, st);
    if (st.size > BigInt(maxBytes)) {
      throw new InputError(
        'E_FILE_TOO_LARGE',
        `${file} is ${st.size} bytes, more than the limit of ${maxBytes} bytes`,
        {
          hint: 'Inventories this large are almost certainly a mistake; split the file or check what was written into it.',
          location: { file },
        },
      );
    }
    try {
      return { data: readFileSync(fd), stat: st };
    } catch (err) {
      throw readError(file, err);
    }
  } finally {
    closeSync(fd);
  }
}

/** Read a text file (UTF-8) with the checks of readFileChecked. */
export function readTextFile(file: string, maxBytes: number): string {
  return readFileChecked(file, maxBytes).data.toString('utf8');
}

/** True when an error of this module says that the file does not exist. */
export function isMissingFile(e: unknown): boolean {
  return e instanceof IoError && (e.cause as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
}

/** readTextFile, or undefined when the file does not exist. */
export function readTextFileIfExists(file: string, maxBytes: number): string | undefined {
  try {
    return readTextFile(file, maxBytes);
  } catch (e) {
    if (isMissingFile(e)) return undefined;
    throw e;
  }
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

/**
 * Make the entries of a folder durable (a file created, renamed or removed
 * in it): fsync of the folder itself. Filesystems that cannot fsync a folder
 * (EINVAL) are left as they are.
 */
export function fsyncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
    fsyncSync(fd);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EINVAL') return;
    throw new IoError(
      'E_FILE_WRITE',
      `cannot sync the folder ${dir}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`,
      {
        hint: 'Check that the folder exists and is writable.',
        cause: err,
        location: { file: dir },
      },
    );
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
