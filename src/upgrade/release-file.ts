/**
 * The end of an upgrade: the inventory's `cloud.release` becomes the target
 * (comments and layout kept), so status and deploy see the new release.
 */
import { chmodSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { isScalar, parseDocument } from 'yaml';
import { IoError, messageOf } from '../core/errors.js';

/** Set `cloud.release` in an inventory file, keeping its comments and layout; written atomically. */
export function setInventoryRelease(file: string, release: string): void {
  try {
    const text = readFileSync(file, 'utf8');
    const doc = parseDocument(text);
    const node = doc.getIn(['cloud', 'release'], true);
    let out: string;
    if (isScalar(node) && node.range) {
      // Replace the value's characters only: every other byte of the file stays as it was.
      const value = /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(release) ? release : JSON.stringify(release);
      out = text.slice(0, node.range[0]) + value + text.slice(node.range[1]);
    } else {
      doc.setIn(['cloud', 'release'], release);
      out = doc.toString();
    }
    const mode = statSync(file).mode & 0o777;
    const tmp = `${file}.tmp-${process.pid}`;
    writeFileSync(tmp, out, { mode });
    chmodSync(tmp, mode);
    renameSync(tmp, file);
  } catch (err) {
    throw new IoError('E_INVENTORY_WRITE', `cannot set cloud.release: ${release} in ${file}: ${messageOf(err)}`, {
      hint: `The upgrade itself is done: set 'cloud.release: ${release}' in ${file} by hand.`,
      cause: err,
    });
  }
}
