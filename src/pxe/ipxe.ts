/**
 * iPXE scripts served by the boot server. dnsmasq points every iPXE client at
 * one chain script; it asks for the script of its own MAC, which boots the
 * ramdisk with the node's kernel arguments (agent callback URL and one-time
 * token included).
 */
import { InputError } from '../core/errors.js';

/**
 * iPXE expands `${...}` in script lines and splits on whitespace, so every
 * value put into a script is limited to characters that are inert there.
 */
const SAFE_WORD = /^[A-Za-z0-9._:/=,@+%?&-]+$/;

function safe(what: string, value: string): string {
  if (!SAFE_WORD.test(value)) {
    throw new InputError('E_IPXE_UNSAFE', `${what} contains characters iPXE would interpret: '${value}'`, {
      hint: 'Use letters, digits and . _ : / = , @ + % ? & - only (no spaces, quotes or $).',
    });
  }
  return value;
}

/** The MAC in iPXE's `hexhyp` form: `52-54-00-00-10-01`. */
export function macHexhyp(mac: string): string {
  return mac.toLowerCase().replace(/:/g, '-');
}

/**
 * The script every iPXE client gets from DHCP: fetch the script of the MAC
 * it booted from. When there is none (an unknown machine, or a node that is
 * not expected to boot from the network) it leaves iPXE, so the firmware
 * tries its next boot device.
 */
export function chainScript(baseUrl: string): string {
  return [
    '#!ipxe',
    `chain --autofree ${safe('base URL', baseUrl)}/boot/\${netX/mac:hexhyp}.ipxe || goto none`,
    ':none',
    'echo No boot script for ${netX/mac}: booting the next device in 5 s',
    'sleep 5',
    'exit',
    '',
  ].join('\n');
}

/** What a node's boot script holds. */
export interface NodeScript {
  readonly node: string;
  readonly mac: string;
  readonly kernelUrl: string;
  readonly initrdUrl: string;
  /** URL of the agent API, e.g. http://192.168.24.1:8080 */
  readonly apiUrl: string;
  /** The one-time token, revealed only here: the script is the one place that hands it to the node. */
  readonly token: string;
  /** Extra kernel arguments, e.g. console=ttyS0,115200 */
  readonly extraArgs?: readonly string[];
}

/** The kernel arguments of a node's ramdisk boot, in order. */
export function kernelArgs(s: NodeScript): string[] {
  return [
    'initrd=initrd',
    // BOOTIF tells the ramdisk which NIC the machine booted from (PXELINUX's convention)
    `BOOTIF=01-${macHexhyp(s.mac)}`,
    `stackctl.node=${s.node}`,
    `stackctl.api=${s.apiUrl}`,
    `stackctl.token=${s.token}`,
    ...(s.extraArgs ?? []),
  ].map((a) => safe('a kernel argument', a));
}

/** A node's boot script: kernel and initrd over HTTP, then boot. */
export function nodeScript(s: NodeScript): string {
  return [
    '#!ipxe',
    `kernel --name kernel ${safe('kernel URL', s.kernelUrl)} ${kernelArgs(s).join(' ')}`,
    `initrd --name initrd ${safe('initrd URL', s.initrdUrl)}`,
    'boot',
    '',
  ].join('\n');
}

/** The script for a known node that is not expected to boot from the network: leave iPXE, boot the disk. */
export function localBootScript(node: string): string {
  return ['#!ipxe', `echo ${safe('node name', node)}: not booting from the network`, 'exit', ''].join('\n');
}
