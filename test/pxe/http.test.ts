/**
 * The HTTP boot server, driven by Debian's curl: Range requests, published
 * digests, boot scripts, the agent API's one-time tokens, and what is handed
 * out once and to the node's address only (the node is 127.0.0.1 here; curl
 * --interface 127.0.0.2 is another machine).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { $ } from 'zx';
import type { StackctlEvent } from '../../src/core/events.js';
import { Secret } from '../../src/core/secret.js';
import { BootServer, parseRange, renderAgentCommand, type AgentCommand, type AgentReport } from '../../src/pxe/http.js';
import { requireTools } from './netns.js';

const KERNEL = randomBytes(200_000);
const MAC = '52:54:00:00:10:01';
/** The source address of "another machine on the segment". */
const ELSEWHERE = ['--interface', '127.0.0.2'];
const INTROSPECTION = {
  cpu: { count: 2, arch: 'x86_64' },
  memory_mib: 2048,
  disks: [{ name: '/dev/vda', size_bytes: 10_737_418_240, serial: 'disk-0' }],
  interfaces: [{ name: 'eth0', mac: MAC }],
  boot_mode: 'bios',
};

let dir: string;
let server: BootServer;
const events: StackctlEvent[] = [];
const reports: AgentReport[] = [];
let failStore = false;

beforeAll(async () => {
  requireTools('curl');
  dir = mkdtempSync(join(tmpdir(), 'stackctl-boot-'));
  writeFileSync(join(dir, 'vmlinuz'), KERNEL);
  writeFileSync(join(dir, 'initrd.gz'), 'initrd');
  writeFileSync(join(dir, 'empty.img'), '');
  server = await BootServer.start({
    host: '127.0.0.1',
    port: 0,
    filesDir: dir,
    kernel: 'vmlinuz',
    initrd: 'initrd.gz',
    kernelArgs: ['console=ttyS0,115200'],
    nodes: [
      { name: 'ctl-0', mac: MAC, ip: '127.0.0.1' },
      { name: 'cmp-0', mac: '52:54:00:00:20:01', ip: '127.0.0.1' },
    ],
    events: { emit: (e) => events.push(e) },
    onReport: (r) => {
      if (failStore) throw new Error('disk full');
      reports.push(r);
    },
  });
});

afterAll(async () => {
  await server?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  events.length = 0;
  reports.length = 0;
  failStore = false;
});

/** curl: status, headers and body (as a Buffer). */
async function curl(path: string, args: string[] = []): Promise<{ status: number; headers: string; body: Buffer }> {
  const hfile = join(dir, 'headers.txt');
  const bfile = join(dir, 'body.bin');
  const r = await $({
    quiet: true,
  })`curl -sS -o ${bfile} -D ${hfile} -w ${'%{http_code}'} ${args} ${server.url + path}`;
  return { status: Number(r.stdout), headers: readFileSync(hfile, 'utf8'), body: readFileSync(bfile) };
}

function post(node: string, endpoint: string, body: unknown, token?: string, args: string[] = []) {
  return curl(`/v1/agent/${node}/${endpoint}`, [
    ...args,
    '-X',
    'POST',
    '-H',
    'Content-Type: application/json',
    ...(token ? ['-H', `Authorization: Bearer ${token}`] : []),
    '--data-binary',
    JSON.stringify(body),
  ]);
}

/** Arm a node and read its token from its boot script, the way the node gets it. */
async function armAndReadToken(
  node: string,
  mac: string,
  purpose: 'inspect' | 'deploy',
  command?: AgentCommand,
): Promise<string> {
  server.arm(node, purpose, command);
  const script = (await curl(`/boot/${mac.replace(/:/g, '-')}.ipxe`)).body.toString();
  const m = /stackctl\.token=(\S+)/.exec(script);
  expect(m).not.toBeNull();
  return m![1]!;
}

describe('boot files', () => {
  it('serves a whole file, and its SHA-256 matches the published one', async () => {
    const r = await curl('/files/vmlinuz');
    expect(r.status).toBe(200);
    expect(r.body.equals(KERNEL)).toBe(true);
    const sum = await curl('/files/vmlinuz.sha256');
    const expected = createHash('sha256').update(KERNEL).digest('hex');
    expect(sum.body.toString()).toBe(`${expected}  vmlinuz\n`);
    expect(createHash('sha256').update(r.body).digest('hex')).toBe(expected);
    // once computed, the digest also rides along as a header
    expect((await curl('/files/vmlinuz', ['-r', '0-0'])).headers).toMatch(
      new RegExp(`x-checksum-sha256: ${expected}`, 'i'),
    );
  });

  it.each([
    ['0-9', 0, 9],
    ['199990-', 199_990, 199_999],
    ['-5', 199_995, 199_999],
    ['100-999999', 100, 199_999],
  ])('answers Range bytes=%s with 206 and exactly those bytes', async (range, start, end) => {
    const r = await curl('/files/vmlinuz', ['-r', range]);
    expect(r.status).toBe(206);
    expect(r.headers).toMatch(new RegExp(`content-range: bytes ${start}-${end}/200000`, 'i'));
    expect(r.body.equals(KERNEL.subarray(start, end + 1))).toBe(true);
  });

  it.each([['200000-'], ['10-5'], ['0-1,5-6'], ['x-y']])('answers Range bytes=%s with 416', async (range) => {
    const r = await curl('/files/vmlinuz', ['-H', `Range: bytes=${range}`]);
    expect(r.status).toBe(416);
    expect(r.headers).toMatch(/content-range: bytes \*\/200000/i);
  });

  it('lets a broken download resume where it stopped (curl -C)', async () => {
    const part = join(dir, 'part.bin');
    writeFileSync(part, KERNEL.subarray(0, 123_456));
    await $({ quiet: true })`curl -sS -C - -o ${part} ${server.url + '/files/vmlinuz'}`;
    expect(readFileSync(part).equals(KERNEL)).toBe(true);
  });

  it.each([['/files/nope'], ['/files/..%2Fetc%2Fpasswd'], ['/files/.hidden'], ['/nothing']])(
    'answers 404 for %s',
    async (path) => {
      expect((await curl(path)).status).toBe(404);
    },
  );

  it('handles empty files and HEAD', async () => {
    expect((await curl('/files/empty.img')).status).toBe(200);
    const head = await curl('/files/vmlinuz', ['-I']);
    expect(head.status).toBe(200);
    expect(head.headers).toMatch(/content-length: 200000/i);
  });

  it('unit: parseRange', () => {
    expect(parseRange(undefined, 10)).toBeUndefined();
    expect(parseRange('items=0-1', 10)).toBeUndefined();
    expect(parseRange('bytes=0-', 0)).toBe('unsatisfiable');
    expect(parseRange('bytes=-20', 10)).toEqual([0, 9]);
  });
});

describe('boot scripts', () => {
  it('chains iPXE to the per-MAC script', async () => {
    const r = await curl('/boot.ipxe');
    expect(r.body.toString()).toContain(`chain --autofree ${server.url}/boot/\${netX/mac:hexhyp}.ipxe`);
  });

  it("gives an armed node its ramdisk with callback and token, and an unarmed one 'exit'", async () => {
    server.arm('ctl-0', 'inspect');
    const r = await curl('/boot/52-54-00-00-10-01.ipxe');
    expect(r.headers).toMatch(/cache-control: no-store/i);
    expect(r.body.toString()).toMatch(
      new RegExp(
        `^#!ipxe\\nkernel --name kernel ${server.url}/files/vmlinuz initrd=initrd BOOTIF=01-52-54-00-00-10-01 ` +
          `stackctl.node=ctl-0 stackctl.api=${server.url} stackctl.token=[A-Za-z0-9_-]{43} ` +
          `stackctl.purpose=inspect console=ttyS0,115200\\ninitrd --name initrd ${server.url}/files/initrd.gz\\nboot\\n$`,
      ),
    );
    server.disarm('ctl-0');
    expect((await curl('/boot/52-54-00-00-10-01.ipxe')).body.toString()).toContain('exit');
  });

  it('answers 404 for an unknown MAC and records an event', async () => {
    expect((await curl('/boot/52-54-00-ff-ff-ff.ipxe')).status).toBe(404);
    expect(events).toEqual([
      { kind: 'pxe.unknown-mac', mac: '52:54:00:ff:ff:ff', path: '/boot/52-54-00-ff-ff-ff.ipxe' },
    ]);
  });
});

describe('agent API', () => {
  it('accepts the token once, stores the report, and refuses its reuse with 401 and an event', async () => {
    const token = await armAndReadToken('ctl-0', MAC, 'inspect');
    const first = await post('ctl-0', 'introspection', INTROSPECTION, token);
    expect(first.status).toBe(202);
    expect(reports).toEqual([{ node: 'ctl-0', endpoint: 'introspection', body: INTROSPECTION }]);
    expect(server.isArmed('ctl-0')).toBe(false);

    const again = await post('ctl-0', 'introspection', INTROSPECTION, token);
    expect(again.status).toBe(401);
    expect(reports.length).toBe(1);
    expect(events).toEqual([
      { kind: 'pxe.agent-report', node: 'ctl-0', endpoint: 'introspection' },
      { kind: 'pxe.token-rejected', node: 'ctl-0', endpoint: 'introspection', reason: 'token already used' },
    ]);
    // tokens are secrets: never in events
    expect(JSON.stringify(events)).not.toContain(token);
  });

  it('refuses a wrong or missing token, and a token armed for another purpose', async () => {
    const token = await armAndReadToken('cmp-0', '52:54:00:00:20:01', 'deploy');
    expect((await post('cmp-0', 'result', { status: 'ok', step: 'write-image' }, token + 'x')).status).toBe(401);
    expect((await post('cmp-0', 'result', { status: 'ok', step: 'write-image' })).status).toBe(401);
    expect((await post('cmp-0', 'introspection', INTROSPECTION, token)).status).toBe(401);
    expect(events.map((e) => (e.kind === 'pxe.token-rejected' ? e.reason : e.kind))).toEqual([
      'wrong token',
      'no bearer token',
      'token is for deploy',
    ]);
    // the right call still works afterwards
    expect((await post('cmp-0', 'result', { status: 'ok', step: 'write-image' }, token)).status).toBe(202);
    expect(reports).toEqual([{ node: 'cmp-0', endpoint: 'result', body: { status: 'ok', step: 'write-image' } }]);
  });

  it('answers 404 for an unknown node or endpoint', async () => {
    expect((await post('nope-9', 'result', { status: 'ok', step: 'x' }, 'abc')).status).toBe(404);
    expect((await post('ctl-0', 'reboot', {}, 'abc')).status).toBe(404);
  });

  it('refuses a body that does not match its schema, without spending the token', async () => {
    const token = await armAndReadToken('ctl-0', MAC, 'inspect');
    const bad = await post('ctl-0', 'introspection', { ...INTROSPECTION, memory_mib: 'lots', extra: 1 }, token);
    expect(bad.status).toBe(400);
    const body = JSON.parse(bad.body.toString()) as { code: string; issues: { path: string }[] };
    expect(body.code).toBe('E_AGENT_BODY');
    expect(body.issues.map((i) => i.path).sort()).toEqual(['/extra', '/memory_mib']);
    expect((await post('ctl-0', 'introspection', '{', token)).status).toBe(400);
    expect((await post('ctl-0', 'introspection', INTROSPECTION, token)).status).toBe(202);
  });

  it('keeps the token usable when storing the report fails, so the agent can retry', async () => {
    const token = await armAndReadToken('ctl-0', MAC, 'inspect');
    failStore = true;
    expect((await post('ctl-0', 'introspection', INTROSPECTION, token)).status).toBe(500);
    failStore = false;
    expect((await post('ctl-0', 'introspection', INTROSPECTION, token)).status).toBe(202);
  });

  it('refuses a token once the node is disarmed (after the deploy)', async () => {
    const token = await armAndReadToken('ctl-0', MAC, 'inspect');
    server.disarm('ctl-0');
    expect((await post('ctl-0', 'introspection', INTROSPECTION, token)).status).toBe(401);
    expect(events.at(-1)).toMatchObject({ reason: 'node not armed' });
  });
});

describe('deploy command and heartbeats', () => {
  const COMMAND: Extract<AgentCommand, { kind: 'deploy' }> = {
    kind: 'deploy',
    image: 'host-abc.img.lzo',
    sha256: 'a'.repeat(64),
    rawBytes: 1_000_000,
    bytes: 400_000,
    hints: { serial: 'S-1', rotational: false, min_size_gb: 4 },
    files: [
      { path: '/etc/hostname', mode: 0o644, content: 'cmp-0\n' },
      { path: '/etc/ssh/ssh_host_ed25519_key', mode: 0o600, content: new Secret('-----PRIVATE-----\n') },
    ],
  };

  it('hands the command to the token without spending it; heartbeats keep it; the result spends it', async () => {
    server.arm('cmp-0', 'deploy', COMMAND);
    const script = (await curl('/boot/52-54-00-00-20-01.ipxe')).body.toString();
    const token = /stackctl\.token=(\S+)/.exec(script)![1]!;
    expect(server.agentContact('cmp-0')).toBeUndefined();

    const auth = ['-H', `Authorization: Bearer ${token}`];
    const cmd = await curl('/v1/agent/cmp-0/command', auth);
    expect(cmd.status).toBe(200);
    expect(cmd.headers).toMatch(/cache-control: no-store/i);
    expect(cmd.body.toString()).toBe(
      [
        'deploy',
        `image ${server.url}/files/host-abc.img.lzo ${'a'.repeat(64)} 1000000 400000`,
        'hint serial S-1',
        'hint rotational 0',
        'hint min_size_gb 4',
        `file 0644 /etc/hostname ${Buffer.from('cmp-0\n').toString('base64')}`,
        `file 0600 /etc/ssh/ssh_host_ed25519_key ${Buffer.from('-----PRIVATE-----\n').toString('base64')}`,
        'end',
        '',
      ].join('\n'),
    );
    expect(server.agentContact('cmp-0')).toMatchObject({ step: 'command' });
    expect((await post('cmp-0', 'heartbeat', { step: 'write-image' }, token)).status).toBe(202);
    expect(server.agentContact('cmp-0')).toMatchObject({ step: 'write-image' });
    expect(server.isArmed('cmp-0')).toBe(true);
    expect(
      (await post('cmp-0', 'result', { status: 'ok', step: 'deploy', timings: { 'write-image': 12.5 } }, token)).status,
    ).toBe(202);
    expect(server.isArmed('cmp-0')).toBe(false);
    expect((await curl('/v1/agent/cmp-0/command', auth)).status).toBe(401);
    expect(events).toContainEqual({ kind: 'pxe.agent-command', node: 'cmp-0', command: 'deploy' });
    expect(events.at(-1)).toMatchObject({
      kind: 'pxe.token-rejected',
      endpoint: 'command',
      reason: 'token already used',
    });
    // neither the token nor the key in any event
    expect(JSON.stringify(events)).not.toContain(token);
    expect(JSON.stringify(events)).not.toContain('PRIVATE');
  });

  it('refuses the command to a missing token and to the wrong method', async () => {
    server.arm('cmp-0', 'deploy', COMMAND);
    expect((await curl('/v1/agent/cmp-0/command')).status).toBe(401);
    expect((await post('cmp-0', 'command', {}, 'x')).status).toBe(405);
    server.disarm('cmp-0');
  });

  it('counts the bytes of boot files sent to each node by its address', async () => {
    const s = await BootServer.start({
      host: '127.0.0.1',
      port: 0,
      filesDir: dir,
      kernel: 'vmlinuz',
      initrd: 'initrd.gz',
      nodes: [{ name: 'local-0', mac: '52:54:00:00:30:01', ip: '127.0.0.1' }],
      onReport: () => undefined,
    });
    try {
      await $({ quiet: true })`curl -sS -o /dev/null ${s.url + '/files/vmlinuz'}`;
      await $({ quiet: true })`curl -sS -o /dev/null -H ${'Range: bytes=0-99'} ${s.url + '/files/vmlinuz'}`;
      expect(s.bytesServed('local-0')).toEqual({ vmlinuz: KERNEL.length + 100 });
    } finally {
      await s.close();
    }
  });

  it('asks the agent for a host key it makes itself, and ends every command with `end`', () => {
    const text = renderAgentCommand(
      { ...COMMAND, files: [], hostKey: { type: 'ed25519', comment: 'root@cmp-0' } },
      'http://x',
    );
    expect(text.split('\n').slice(-3)).toEqual(['hostkey ed25519 root@cmp-0', 'end', '']);
    expect(renderAgentCommand({ kind: 'clean' }, 'http://x')).toBe('clean\nend\n');
  });

  it('refuses to put line breaks or relative paths into a command; blanks inside a hint are fine', () => {
    expect(renderAgentCommand({ ...COMMAND, hints: { model: 'QEMU HARDDISK' } }, 'http://x')).toContain(
      '\nhint model QEMU HARDDISK\n',
    );
    expect(() => renderAgentCommand({ ...COMMAND, hints: { model: 'two\nlines' } }, 'http://x')).toThrow(
      /E_AGENT_COMMAND|cannot be sent/,
    );
    expect(() =>
      renderAgentCommand({ ...COMMAND, files: [{ path: '/etc/../shadow', mode: 0o600, content: 'x' }] }, 'http://x'),
    ).toThrow(/cannot be sent/);
  });
});

describe("single use, and the node's address only", () => {
  const SCRIPT = '/boot/52-54-00-00-10-01.ipxe';
  const refusals = (): StackctlEvent[] => events.filter((e) => e.kind === 'pxe.refused');
  const DEPLOY: AgentCommand = {
    kind: 'deploy',
    image: 'host-abc.img.lzo',
    sha256: 'a'.repeat(64),
    rawBytes: 1_000_000,
    bytes: 400_000,
    hints: {},
    hostKey: { type: 'ed25519', comment: 'root@ctl-0' },
    files: [{ path: '/etc/hostname', mode: 0o644, content: 'ctl-0\n' }],
  };

  it('serves the boot script once, to the address of its lease only; a repeat makes the arming suspect', async () => {
    server.arm('ctl-0', 'deploy', DEPLOY);
    const other = await curl(SCRIPT, ELSEWHERE);
    expect(other.status).toBe(403);
    expect(other.body.toString()).not.toContain('token');
    expect(refusals()).toEqual([
      {
        kind: 'pxe.refused',
        node: 'ctl-0',
        mac: MAC,
        client: '127.0.0.2',
        asked: 'boot script',
        reason: "not from the node's address",
      },
    ]);
    // nothing was handed out: the node can still boot
    expect(server.suspicion('ctl-0')).toBeUndefined();
    expect((await curl(SCRIPT, ['-I'])).status).toBe(405);

    const first = await curl(SCRIPT);
    expect(first.status).toBe(200);
    const token = /stackctl\.token=(\S+)/.exec(first.body.toString())![1]!;
    const again = await curl(SCRIPT);
    expect(again.status).toBe(403);
    expect(again.body.toString()).not.toContain(token);
    expect(refusals().at(-1)).toMatchObject({
      client: '127.0.0.1',
      asked: 'boot script',
      reason: 'boot script already served in this arming',
    });
    expect(server.suspicion('ctl-0')).toBe('its boot script was asked for a second time (from 127.0.0.1)');
    expect(JSON.stringify(events)).not.toContain(token);

    // a new arming starts clean
    server.arm('ctl-0', 'deploy', DEPLOY);
    expect(server.suspicion('ctl-0')).toBeUndefined();
    expect((await curl(SCRIPT)).status).toBe(200);
    server.disarm('ctl-0');
  });

  it('keeps the arming after the token is spent: a script asked for then is still a repeat', async () => {
    const token = await armAndReadToken('ctl-0', MAC, 'inspect');
    expect((await post('ctl-0', 'introspection', INTROSPECTION, token)).status).toBe(202);
    expect(server.isArmed('ctl-0')).toBe(false);
    // e.g. someone took the script first, reported, and the node asks now
    expect((await curl(SCRIPT)).status).toBe(403);
    expect(server.suspicion('ctl-0')).toMatch(/asked for a second time/);
    // disarmed after the workflow: the node boots its disk
    server.disarm('ctl-0');
    expect((await curl(SCRIPT)).body.toString()).toContain('not booting from the network');
  });

  it('answers agent calls from the node only; its valid token shown elsewhere makes the arming suspect', async () => {
    const token = await armAndReadToken('ctl-0', MAC, 'deploy');
    const auth = (t: string) => ['-H', `Authorization: Bearer ${t}`];
    expect((await curl('/v1/agent/ctl-0/command', [...ELSEWHERE, ...auth('not-the-token')])).status).toBe(403);
    expect(server.suspicion('ctl-0')).toBeUndefined();
    const leaked = await post('ctl-0', 'result', { status: 'ok', step: 'deploy' }, token, ELSEWHERE);
    expect(leaked.status).toBe(403);
    expect(JSON.parse(leaked.body.toString())).toEqual({ code: 'E_BOOT_FORBIDDEN', message: 'forbidden' });
    expect(refusals().map((e) => e.kind === 'pxe.refused' && [e.client, e.asked, e.reason])).toEqual([
      ['127.0.0.2', 'command', "not from the node's address"],
      ['127.0.0.2', 'result', "not from the node's address, with the node's valid token"],
    ]);
    expect(server.suspicion('ctl-0')).toBe('its token was shown from 127.0.0.2');
    // nothing was taken from the other address: no report, the token is still the node's
    expect(reports).toEqual([]);
    expect(server.isArmed('ctl-0')).toBe(true);
    expect(JSON.stringify(events)).not.toContain(token);
    server.disarm('ctl-0');
  });

  it('hands a command with key material out once; a second request gets 403 and an event', async () => {
    const secret: AgentCommand = {
      ...DEPLOY,
      files: [{ path: '/etc/secret', mode: 0o600, content: new Secret('-----PRIVATE-----\n') }],
    };
    const token = await armAndReadToken('ctl-0', MAC, 'deploy', secret);
    const auth = ['-H', `Authorization: Bearer ${token}`];
    const first = await curl('/v1/agent/ctl-0/command', auth);
    expect(first.status).toBe(200);
    expect(first.body.toString()).toContain(Buffer.from('-----PRIVATE-----\n').toString('base64'));
    const second = await curl('/v1/agent/ctl-0/command', auth);
    expect(second.status).toBe(403);
    expect(second.body.toString()).not.toContain(Buffer.from('-----PRIVATE-----\n').toString('base64'));
    expect(refusals()).toEqual([
      {
        kind: 'pxe.refused',
        node: 'ctl-0',
        mac: MAC,
        client: '127.0.0.1',
        asked: 'command',
        reason: 'command with key material already served',
      },
    ]);
    // the token itself is not spent: the agent can still report that it failed
    expect((await post('ctl-0', 'result', { status: 'failed', step: 'command' }, token)).status).toBe(202);
    expect(JSON.stringify(events)).not.toContain('PRIVATE');
    server.disarm('ctl-0');
  });

  it('hands a command without secrets out again until the agent calls on (a cut-short read is retried)', async () => {
    const token = await armAndReadToken('ctl-0', MAC, 'deploy', DEPLOY);
    const auth = ['-H', `Authorization: Bearer ${token}`];
    const one = await curl('/v1/agent/ctl-0/command', auth);
    const two = await curl('/v1/agent/ctl-0/command', auth);
    expect([one.status, two.status]).toEqual([200, 200]);
    expect(two.body.toString()).toBe(one.body.toString());
    expect(one.body.toString()).toMatch(/\nhostkey ed25519 root@ctl-0\n.*\nend\n$/s);
    expect((await post('ctl-0', 'heartbeat', { step: 'select-disk' }, token)).status).toBe(202);
    expect((await curl('/v1/agent/ctl-0/command', auth)).status).toBe(403);
    expect(refusals().at(-1)).toMatchObject({ asked: 'command', reason: 'command already taken by the agent' });
    expect(server.suspicion('ctl-0')).toBeUndefined();
    server.disarm('ctl-0');
  });
});

describe('token lifetime', () => {
  it('refuses a token used after its time-to-live', async () => {
    let now = 1_000_000;
    const seen: StackctlEvent[] = [];
    const s = await BootServer.start({
      host: '127.0.0.1',
      port: 0,
      filesDir: dir,
      kernel: 'vmlinuz',
      initrd: 'initrd.gz',
      nodes: [{ name: 'ctl-0', mac: MAC, ip: '127.0.0.1' }],
      events: { emit: (e) => seen.push(e) },
      onReport: () => undefined,
      now: () => now,
      newToken: () => 'fixed-token-for-this-test',
      tokenTtlMs: 60_000,
    });
    try {
      s.arm('ctl-0', 'inspect');
      now += 60_001;
      const url = `${s.url}/v1/agent/ctl-0/introspection`;
      const auth = 'Authorization: Bearer fixed-token-for-this-test';
      const r = await $({
        quiet: true,
      })`curl -s -o /dev/null -w ${'%{http_code}'} -H ${auth} --data-binary ${JSON.stringify(INTROSPECTION)} ${url}`;
      expect(r.stdout).toBe('401');
      expect(seen).toEqual([
        { kind: 'pxe.token-rejected', node: 'ctl-0', endpoint: 'introspection', reason: 'token expired' },
      ]);
      // an expired node boots from its disk, not into the ramdisk
      const script = await $({ quiet: true })`curl -s ${s.url + '/boot/52-54-00-00-10-01.ipxe'}`;
      expect(script.stdout).toContain('exit');
    } finally {
      await s.close();
    }
  });
});
