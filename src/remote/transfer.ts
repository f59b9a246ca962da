/**
 * File transfer to and from nodes over SFTP. Uploads are atomic: the data
 * goes to `<dest>.tmp-<random>` in the same folder, is fsynced, gets its mode
 * and owner, and is then renamed over `dest` with posix-rename, so a reader
 * on the node sees the old file or the new one, never half of one.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open as openLocal, rename as renameLocal, unlink as unlinkLocal } from 'node:fs/promises';
import { basename, dirname, posix } from 'node:path';
import { IoError, RemoteError } from '../core/errors.js';
import type { RemoteHandle, SftpSession, SshPool, SshTarget } from './ssh.js';

/** Tuning of transfers. */
export const TRANSFER_DEFAULTS = {
  /** Bytes per SFTP write/read request (OpenSSH's sftp-server accepts up to 256 KiB). */
  chunkBytes: 64 * 1024,
  /** Requests in flight per file: hides the round-trip time on long links. */
  window: 16,
  /** Mode of uploaded files unless given. */
  fileMode: 0o644,
  /** Mode of folders created for an upload. */
  dirMode: 0o755,
} as const;

/** What to upload: a local file path or the bytes themselves. */
export type UploadSource = { readonly file: string } | { readonly data: string | Buffer };

/** Options of one upload. */
export interface UploadOptions {
  /** File mode, applied before the rename (default 0644; use 0600 for secrets). */
  readonly mode?: number;
  /** Numeric owner and group, applied before the rename (needs root on the node). */
  readonly owner?: { readonly uid: number; readonly gid: number };
  /** Create missing parent folders (default true). */
  readonly mkdirs?: boolean;
}

/** Moves files between this machine and a node. */
export interface FileTransfer {
  /** Upload atomically to `dest` (absolute path on the node). Returns the bytes written. */
  upload(t: SshTarget, source: UploadSource, dest: string, opts?: UploadOptions): Promise<number>;
  /** Download `src` into a local file, atomically (temporary file + rename), with `mode`. */
  download(t: SshTarget, src: string, localFile: string, opts?: { mode?: number }): Promise<number>;
  /** Read a remote file into memory (small files: configs, state). */
  readFile(t: SshTarget, src: string): Promise<Buffer>;
}

/** Chunks of a source, in order. */
async function* chunksOf(source: UploadSource, size: number): AsyncGenerator<Buffer> {
  if ('data' in source) {
    const buf = typeof source.data === 'string' ? Buffer.from(source.data, 'utf8') : source.data;
    for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
    return;
  }
  for await (const chunk of createReadStream(source.file, { highWaterMark: size })) yield chunk as Buffer;
}

/** Create `dir` and its missing parents on the node. */
async function mkdirs(sftp: SftpSession, dir: string, mode: number): Promise<void> {
  const missing: string[] = [];
  for (let d = dir; d !== '/' && d !== '.'; d = posix.dirname(d)) {
    const st = await sftp.stat(d);
    if (st?.isDirectory) break;
    missing.unshift(d);
  }
  for (const d of missing) {
    try {
      await sftp.mkdir(d, mode);
    } catch (err) {
      // Another upload may have created it meanwhile; only a still-missing folder is an error.
      if (!(await sftp.stat(d))?.isDirectory) throw err;
    }
  }
}

/** Write every chunk with up to `window` requests in flight. */
async function writeAll(sftp: SftpSession, h: RemoteHandle, source: UploadSource): Promise<number> {
  let position = 0;
  const inflight = new Set<Promise<void>>();
  let failed: unknown;
  for await (const chunk of chunksOf(source, TRANSFER_DEFAULTS.chunkBytes)) {
    if (failed) break;
    // ssh2 may keep a reference to the buffer until the request is sent; copy stream chunks that get reused.
    const p = sftp.write(h, Buffer.from(chunk), position).catch((err: unknown) => {
      failed ??= err;
    });
    position += chunk.length;
    inflight.add(p);
    void p.finally(() => inflight.delete(p));
    if (inflight.size >= TRANSFER_DEFAULTS.window) await Promise.race(inflight);
  }
  await Promise.all(inflight);
  if (failed) throw failed;
  return position;
}

/** SFTP transfers over an `SshPool`'s shared connections. */
export class SftpTransfer implements FileTransfer {
  constructor(
    private readonly pool: SshPool,
    /** Random suffix source for temporary names (injectable for tests). */
    private readonly random: () => string = () => randomBytes(6).toString('hex'),
  ) {}

  async upload(t: SshTarget, source: UploadSource, dest: string, opts: UploadOptions = {}): Promise<number> {
    if (!posix.isAbsolute(dest)) {
      throw new RemoteError('E_SFTP_PATH', `${t.node}: upload destination '${dest}' is not an absolute path`, {
        hint: 'Give the full path on the node, e.g. /etc/kolla/keystone/keystone.conf.',
      });
    }
    const sftp = await this.pool.sftp(t);
    if (opts.mkdirs ?? true) await mkdirs(sftp, posix.dirname(dest), TRANSFER_DEFAULTS.dirMode);
    const tmp = `${dest}.tmp-${this.random()}`;
    const mode = opts.mode ?? TRANSFER_DEFAULTS.fileMode;
    // 'wx' + the final mode from creation: a secret is never readable by others, not even briefly.
    const h = await sftp.open(tmp, 'wx', mode);
    let size = 0;
    try {
      size = await writeAll(sftp, h, source);
      await sftp.fsync(h);
      // Creation applies the umask; set the mode explicitly.
      await sftp.fchmod(h, mode);
      if (opts.owner) await sftp.fchown(h, opts.owner.uid, opts.owner.gid);
      await sftp.close(h);
    } catch (err) {
      await sftp.close(h).catch(() => undefined);
      await sftp.unlink(tmp).catch(() => undefined);
      throw err;
    }
    try {
      await sftp.rename(tmp, dest);
    } catch (err) {
      await sftp.unlink(tmp).catch(() => undefined);
      throw err;
    }
    return size;
  }

  async readFile(t: SshTarget, src: string): Promise<Buffer> {
    const parts: Buffer[] = [];
    await this.#read(t, src, async (b) => void parts.push(Buffer.from(b)));
    return Buffer.concat(parts);
  }

  async download(t: SshTarget, src: string, localFile: string, opts: { mode?: number } = {}): Promise<number> {
    const tmp = `${dirname(localFile)}/.${basename(localFile)}.${process.pid}.${this.random()}.tmp`;
    let fh;
    try {
      fh = await openLocal(tmp, 'wx', opts.mode ?? TRANSFER_DEFAULTS.fileMode);
    } catch (err) {
      throw new IoError(
        'E_FILE_WRITE',
        `cannot write ${localFile}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`,
        {
          hint: 'Check that the folder exists and is writable.',
          cause: err,
          location: { file: localFile },
        },
      );
    }
    try {
      const n = await this.#read(t, src, async (b) => void (await fh.write(b)));
      await fh.sync();
      await fh.close();
      await renameLocal(tmp, localFile);
      return n;
    } catch (err) {
      await fh.close().catch(() => undefined);
      await unlinkLocal(tmp).catch(() => undefined);
      throw err;
    }
  }

  /** Read `src` sequentially, handing each chunk to `sink`; returns the byte count. */
  async #read(t: SshTarget, src: string, sink: (b: Buffer) => Promise<void>): Promise<number> {
    const sftp = await this.pool.sftp(t);
    const h = await sftp.open(src, 'r');
    try {
      const size = (await sftp.stat(src))?.size ?? 0;
      const chunk = TRANSFER_DEFAULTS.chunkBytes;
      let position = 0;
      // Read ahead `window` chunks at a time, then hand them over in order.
      for (;;) {
        // As many requests as the stat size calls for (one at least, to see the end), at most `window`.
        const wanted = Math.max(1, Math.min(TRANSFER_DEFAULTS.window, Math.ceil((size - position) / chunk)));
        const batch = await Promise.all(
          Array.from({ length: wanted }, async (_, i) => {
            const buf = Buffer.alloc(chunk);
            const n = await sftp.read(h, buf, position + i * chunk);
            return buf.subarray(0, n);
          }),
        );
        let short = false;
        let got = 0;
        for (const b of batch) {
          if (short) break;
          if (b.length) await sink(b);
          position += b.length;
          got += b.length;
          short = b.length < chunk;
        }
        // A short chunk at or past the stat size ends the file (so does an empty batch: the file shrank);
        // a short read before it only means the server split the reply, so read on from there.
        if (short && (position >= size || got === 0)) break;
      }
      return position;
    } finally {
      await sftp.close(h).catch(() => undefined);
    }
  }
}
