import { describe, expect, it } from 'vitest';
import { chainScript, kernelArgs, localBootScript, macHexhyp, nodeScript } from '../../src/pxe/ipxe.js';

const SCRIPT = {
  node: 'ctl-0',
  mac: '52:54:00:00:10:01',
  kernelUrl: 'http://192.168.24.1:8080/files/vmlinuz',
  initrdUrl: 'http://192.168.24.1:8080/files/initrd.gz',
  apiUrl: 'http://192.168.24.1:8080',
  token: 'tok_EN-123',
  extraArgs: ['console=ttyS0,115200'],
};

describe('iPXE scripts', () => {
  it('chains every iPXE client to the script of the MAC it booted from', () => {
    expect(chainScript('http://192.168.24.1:8080')).toBe(
      [
        '#!ipxe',
        'chain --autofree http://192.168.24.1:8080/boot/${netX/mac:hexhyp}.ipxe || goto none',
        ':none',
        'echo No boot script for ${netX/mac}: booting the next device in 5 s',
        'sleep 5',
        'exit',
        '',
      ].join('\n'),
    );
  });

  it("boots a node's ramdisk with its callback URL, node name and token", () => {
    expect(nodeScript(SCRIPT)).toBe(
      [
        '#!ipxe',
        'kernel --name kernel http://192.168.24.1:8080/files/vmlinuz initrd=initrd BOOTIF=01-52-54-00-00-10-01 ' +
          'stackctl.node=ctl-0 stackctl.api=http://192.168.24.1:8080 stackctl.token=tok_EN-123 console=ttyS0,115200',
        'initrd --name initrd http://192.168.24.1:8080/files/initrd.gz',
        'boot',
        '',
      ].join('\n'),
    );
  });

  it('sends a node that should not boot from the network to its next boot device', () => {
    expect(localBootScript('cmp-0')).toBe('#!ipxe\necho cmp-0: not booting from the network\nexit\n');
  });

  it('writes MACs in hexhyp form', () => {
    expect(macHexhyp('52:54:00:AA:10:01')).toBe('52-54-00-aa-10-01');
  });

  it.each([['a b'], ['${x}'], ['x"y'], ["it's"], ['a\nb'], ['']])(
    'refuses a kernel argument iPXE would interpret: %j',
    (arg) => {
      expect(() => kernelArgs({ ...SCRIPT, extraArgs: [arg] })).toThrow(/characters iPXE would interpret/);
    },
  );
});
