/**
 * Registries that misbehave, for pull tests against a real dockerd: one that accepts TCP connections
 * and never says a word, and a minimal Docker Registry HTTP API v2 serving one single-layer image whose
 * layer it sends in slow chunks, optionally stopping halfway. The image is real (its digests check), so
 * dockerd pulls it when nothing stalls.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import { createServer as createTcpServer, type Server, type Socket } from 'node:net';
import { gzipSync } from 'node:zlib';
import { tarFiles } from '../../src/core/tar.js';

/** A running fake registry. */
export interface FakeRegistry {
  /** `host:port`, the registry part of an image reference. */
  readonly address: string;
  /** TCP connections accepted so far. */
  connections(): number;
  close(): Promise<void>;
}

const sha256 = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

function track(server: Server): { connections: () => number; close: () => Promise<void> } {
  let count = 0;
  const open = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    count += 1;
    open.add(s);
    s.on('close', () => open.delete(s));
  });
  return {
    connections: () => count,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  };
}

async function listen(server: Server, host: string): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve());
  });
  return `${host}:${(server.address() as { port: number }).port}`;
}

/** A "registry" that accepts connections and stays silent. */
export async function silentRegistry(host: string): Promise<FakeRegistry> {
  const server = createTcpServer(() => undefined);
  const t = track(server);
  const address = await listen(server, host);
  return { address, connections: t.connections, close: t.close };
}

/** How the layer is sent: `chunks` pieces, `gapMs` apart; with `stopAfter`, nothing after that many. */
export interface SlowLayer {
  readonly chunks: number;
  readonly gapMs: number;
  readonly stopAfter?: number;
}

/**
 * A registry serving one image, `<address>/<any name>:<any tag>`, of one layer holding `layerBytes`
 * of random data (random, so gzip cannot shrink it and dockerd reports real download progress).
 */
export async function slowRegistry(
  host: string,
  layer: SlowLayer,
  layerBytes = 2 * 1024 * 1024,
): Promise<FakeRegistry> {
  const tar = tarFiles([{ path: 'payload.bin', data: randomBytes(layerBytes), mode: 0o644 }]);
  const blob = gzipSync(tar, { level: 1 });
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { Labels: { 'stackctl-test': '1' } },
      rootfs: { type: 'layers', diff_ids: [sha256(tar)] },
      history: [{ created_by: 'stackctl test registry' }],
    }),
  );
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.docker.distribution.manifest.v2+json',
      config: {
        mediaType: 'application/vnd.docker.container.image.v1+json',
        size: config.length,
        digest: sha256(config),
      },
      layers: [
        { mediaType: 'application/vnd.docker.image.rootfs.diff.tar.gzip', size: blob.length, digest: sha256(blob) },
      ],
    }),
  );
  const server = createHttpServer((req, res) => {
    const path = req.url?.split('?')[0] ?? '';
    res.setHeader('Docker-Distribution-API-Version', 'registry/2.0');
    if (path === '/v2/' || path === '/v2') return void res.end('{}');
    if (/\/manifests\/[^/]+$/.test(path)) {
      res.writeHead(200, {
        'Content-Type': 'application/vnd.docker.distribution.manifest.v2+json',
        'Content-Length': manifest.length,
        'Docker-Content-Digest': sha256(manifest),
      });
      return void res.end(req.method === 'HEAD' ? undefined : manifest);
    }
    if (path.endsWith(`/blobs/${sha256(config)}`)) {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': config.length });
      return void res.end(req.method === 'HEAD' ? undefined : config);
    }
    if (path.endsWith(`/blobs/${sha256(blob)}`)) {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': blob.length });
      if (req.method === 'HEAD') return void res.end();
      const size = Math.ceil(blob.length / layer.chunks);
      let sent = 0;
      let timer: NodeJS.Timeout | undefined;
      res.on('close', () => clearTimeout(timer));
      const next = (): void => {
        if (layer.stopAfter !== undefined && sent >= layer.stopAfter) return; // and never another byte
        const piece = blob.subarray(sent * size, (sent + 1) * size);
        sent += 1;
        if (sent * size >= blob.length) return void res.end(piece);
        res.write(piece);
        timer = setTimeout(next, layer.gapMs);
      };
      return next();
    }
    res.writeHead(404, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ errors: [{ code: 'NAME_UNKNOWN', message: 'unknown' }] }));
  });
  const t = track(server);
  const address = await listen(server, host);
  return { address, connections: t.connections, close: t.close };
}
