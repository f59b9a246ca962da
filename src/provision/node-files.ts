/**
 * The file operations of the node state store (machine.ts), as one
 * interface with two implementations: the disk (DISK_NODE_FILES: every
 * write durable before it returns) and memory (memoryNodeFiles(), for
 * workflows tested without a folder). Tests and benches wrap one to count or
 * fail what is written (CONVENTIONS.md 8).
 */
import {
  closeSync,
  constants,
  fdatasyncSync,
  fstatSync,
  ftruncateSync,
  openSync,
  readSync,
  statSync,
  unlinkSync,
  writeSync,
  type BigIntStats,
} from 'node:fs';
import { dirname } from 'node:path';
import { IoError } from '../core/errors.js';
import { fsyncDir, isMissingFile, readFileChecked, writeFileAtomic } from '../core/fs.js';

/**
 * What tells one version of a file from another without reading it. Two
 * equal stamps: the same file (device and inode), same size, same last
 * change (modification and status change times, in nanoseconds).
 */
export interface FileStamp {
  readonly id: string;
  readonly size: number;
  readonly changed: string;
}

/** True when both stamps are the same version (or both files are missing). */
export function sameStamp(a: FileStamp | undefined, b: FileStamp | undefined): boolean {
  return (
    a === b || (a !== undefined && b !== undefined && a.id === b.id && a.size === b.size && a.changed === b.changed)
  );
}

/** Bytes of a file with the stamp of what was read. */
export interface StampedData {
  readonly data: Uint8Array;
  readonly stamp: FileStamp;
}

/** What the store does with its files. */
export interface NodeFiles {
  /** The file's stamp; undefined when there is none. */
  stat(file: string): FileStamp | undefined;
  /** The whole file (at most `maxBytes`); undefined when there is none. */
  read(file: string, maxBytes: number): StampedData | undefined;
  /** The bytes from `offset` to the end (at most `maxBytes`); undefined when the file is gone. */
  readFrom(file: string, offset: number, maxBytes: number): StampedData | undefined;
  /** Replace the file whole, durably: a crash leaves the old or the new file, and the new one once this returns. */
  replace(file: string, text: string): FileStamp;
  /**
   * Append to an existing file, durably, after cutting it back to `at`
   * bytes (what lies beyond is an append cut short). On failure the file is
   * cut back to `at` again, so a failed append leaves nothing behind.
   */
  append(file: string, at: number, text: string): FileStamp;
  /** Remove the file, durably; nothing when it does not exist. */
  remove(file: string): void;
}

const errno = (e: unknown): string => (e as NodeJS.ErrnoException).code ?? 'error';

function writeError(file: string, err: unknown): IoError {
  if (err instanceof IoError) return err;
  return new IoError('E_FILE_WRITE', `cannot write ${file}: ${errno(err)}`, {
    hint: 'Check that the folder exists and is writable, and that the disk is not full.',
    cause: err,
    location: { file },
  });
}

function readError(file: string, err: unknown): IoError {
  return new IoError('E_FILE_READ', `cannot read ${file}: ${errno(err)}`, {
    hint: "Check the permissions of the inventory's folder.",
    cause: err,
    location: { file },
  });
}

const stampOf = (st: BigIntStats): FileStamp => ({
  id: `${st.dev}:${st.ino}`,
  size: Number(st.size),
  changed: `${st.mtimeNs}:${st.ctimeNs}`,
});

/** The files on disk. */
export const DISK_NODE_FILES: NodeFiles = {
  stat(file) {
    try {
      const st = statSync(file, { bigint: true, throwIfNoEntry: false });
      return st && stampOf(st);
    } catch (err) {
      throw readError(file, err);
    }
  },
  read(file, maxBytes) {
    try {
      const { data, stat } = readFileChecked(file, maxBytes);
      return { data, stamp: stampOf(stat) };
    } catch (e) {
      if (isMissingFile(e)) return undefined;
      throw e;
    }
  },
  readFrom(file, offset, maxBytes) {
    let fd: number;
    try {
      fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
    } catch (err) {
      if (errno(err) === 'ENOENT') return undefined;
      throw readError(file, err);
    }
    try {
      const st = fstatSync(fd, { bigint: true });
      const size = Math.min(Math.max(Number(st.size) - offset, 0), maxBytes);
      const data = Buffer.alloc(size);
      let got = 0;
      while (got < size) {
        const n = readSync(fd, data, got, size - got, offset + got);
        if (n === 0) break;
        got += n;
      }
      return { data: data.subarray(0, got), stamp: stampOf(st) };
    } catch (err) {
      throw readError(file, err);
    } finally {
      closeSync(fd);
    }
  },
  replace(file, text) {
    writeFileAtomic(file, text);
    // the rename is durable once the folder is: before this, a power cut could bring the old file back
    fsyncDir(dirname(file));
    return DISK_NODE_FILES.stat(file)!;
  },
  append(file, at, text) {
    let fd: number | undefined;
    try {
      fd = openSync(file, constants.O_WRONLY | constants.O_APPEND);
      const size = Number(fstatSync(fd, { bigint: true }).size);
      if (size < at) throw new Error(`ESHORT`);
      if (size > at) ftruncateSync(fd, at);
      const data = Buffer.from(text, 'utf8');
      // one write: a line is appended whole or, cut short by a crash, left without its newline
      for (let done = 0; done < data.length;) done += writeSync(fd, data, done);
      fdatasyncSync(fd);
      return stampOf(fstatSync(fd, { bigint: true }));
    } catch (err) {
      if (fd !== undefined) {
        try {
          ftruncateSync(fd, at);
        } catch {
          // the incomplete line stays; the next append cuts it (it has no newline, readers ignore it)
        }
      }
      if ((err as Error).message === 'ESHORT') {
        throw new IoError('E_FILE_WRITE', `cannot append to ${file}: it is shorter than this run last saw it`, {
          hint: 'Another program cut the file; run the command again (it reads the files anew).',
          location: { file },
        });
      }
      throw writeError(file, err);
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
  },
  remove(file) {
    try {
      unlinkSync(file);
    } catch (err) {
      if (errno(err) === 'ENOENT') return;
      throw writeError(file, err);
    }
    fsyncDir(dirname(file));
  },
};

/** Files kept in memory: what a workflow test gives a store that must not touch a folder. */
export function memoryNodeFiles(): NodeFiles {
  const files = new Map<string, { data: Buffer; id: number; version: number }>();
  let next = 1;
  const stamp = (f: { data: Buffer; id: number; version: number }): FileStamp => ({
    id: String(f.id),
    size: f.data.length,
    changed: String(f.version),
  });
  return {
    stat: (file) => {
      const f = files.get(file);
      return f && stamp(f);
    },
    read: (file) => {
      const f = files.get(file);
      return f && { data: Buffer.from(f.data), stamp: stamp(f) };
    },
    readFrom: (file, offset) => {
      const f = files.get(file);
      return f && { data: Buffer.from(f.data.subarray(offset)), stamp: stamp(f) };
    },
    replace: (file, text) => {
      const f = { data: Buffer.from(text, 'utf8'), id: next++, version: next++ };
      files.set(file, f);
      return stamp(f);
    },
    append: (file, at, text) => {
      const f = files.get(file);
      if (!f || f.data.length < at) throw writeError(file, Object.assign(new Error('gone'), { code: 'ENOENT' }));
      f.data = Buffer.concat([f.data.subarray(0, at), Buffer.from(text, 'utf8')]);
      f.version = next++;
      return stamp(f);
    },
    remove: (file) => void files.delete(file),
  };
}
