/**
 * A minimal ustar writer for the few small files put into a container (a lab
 * node's host key, authorized_keys and daemon.json; the registry's TLS
 * configuration): Docker's archive API takes a tar, and a 40-line writer
 * beats a dependency.
 */

/** One regular file of an archive. */
export interface TarFile {
  /** Path inside the archive, without a leading slash; at most 100 bytes. */
  readonly path: string;
  readonly data: string | Uint8Array;
  readonly mode: number;
}

function header(path: string, size: number, mode: number): Buffer {
  const h = Buffer.alloc(512, 0);
  const put = (text: string, offset: number, length: number): void => void h.write(text, offset, length, 'utf8');
  const octal = (n: number, length: number): string => n.toString(8).padStart(length - 1, '0');
  if (Buffer.byteLength(path) > 100) throw new Error(`tar path too long: ${path}`);
  put(path, 0, 100);
  put(octal(mode, 8), 100, 8);
  put(octal(0, 8), 108, 8); // uid root
  put(octal(0, 8), 116, 8); // gid root
  put(octal(size, 12), 124, 12);
  put(octal(Math.floor(Date.now() / 1000), 12), 136, 12);
  put('        ', 148, 8); // checksum field counts as spaces while summing
  put('0', 156, 1); // regular file
  put('ustar\u000000', 257, 8);
  put('root', 265, 32);
  put('root', 297, 32);
  let sum = 0;
  for (const b of h) sum += b;
  put(sum.toString(8).padStart(6, '0') + '\u0000 ', 148, 8);
  return h;
}

/** The tar archive of `files`, owned by root. */
export function tarFiles(files: readonly TarFile[]): Buffer {
  const parts: Buffer[] = [];
  for (const f of files) {
    const data = typeof f.data === 'string' ? Buffer.from(f.data, 'utf8') : Buffer.from(f.data);
    parts.push(header(f.path, data.length, f.mode), data, Buffer.alloc((512 - (data.length % 512)) % 512, 0));
  }
  parts.push(Buffer.alloc(1024, 0));
  return Buffer.concat(parts);
}
