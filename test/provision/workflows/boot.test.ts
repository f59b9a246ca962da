/** The boot side of a run: a ramdisk older than the agent files stackctl ships is named. */
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { staleRamdiskFiles } from '../../../src/provision/workflows/boot.js';
import { tempDir } from '../../helpers/cli.js';

describe('a ramdisk older than the agent files', () => {
  it('is named, file by file, so the operator rebuilds it before nodes run an old agent', () => {
    const src = tempDir();
    const built = tempDir();
    writeFileSync(`${src}/init`, 'init v1\n');
    writeFileSync(`${src}/agent.sh`, 'agent v2\n');
    const hash = (t: string): string => createHash('sha256').update(t).digest('hex');
    writeFileSync(
      `${built}/ramdisk.json`,
      JSON.stringify({ inputs: { files: { init: hash('init v1\n'), 'agent.sh': hash('agent v1\n') } } }),
    );
    expect(staleRamdiskFiles(built, src)).toEqual(['agent.sh']);
    writeFileSync(`${src}/agent.sh`, 'agent v1\n');
    expect(staleRamdiskFiles(built, src)).toEqual([]);
    // no manifest: nothing to compare (readRamdiskManifest reports the missing ramdisk)
    expect(staleRamdiskFiles(src, src)).toEqual([]);
  });
});
