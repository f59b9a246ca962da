/**
 * The built command as a shell pipeline meets it: everything written reaches a pipe before the
 * process exits (a 300-node plan is ~200 KB, past the 64 KiB a pipe holds), and a run that loads
 * only its own command prints what an in-process run of the whole program prints.
 */
import { execFile } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/core/paths.js';
import { generateInventoryYaml } from '../../src/inventory/generate.js';
import { runCli, tempDir } from '../helpers/cli.js';

const bin = join(packageRoot(), 'dist', 'src', 'cli', 'bin.js');
const run = promisify(execFile);

describe('the stackctl process', () => {
  it('writes a whole 300-node plan into a pipe, as the in-process run prints it', async () => {
    expect(existsSync(bin), 'build first: npm run build').toBe(true);
    const inv = join(tempDir(), 'big.yaml');
    writeFileSync(inv, generateInventoryYaml({ controllers: 3, computes: 297 }));
    const piped = await run('node', [bin, 'plan', '--no-save', '-i', inv], { maxBuffer: 64 * 1024 * 1024 });
    const inProcess = await runCli('plan', '--no-save', '-i', inv);
    expect(inProcess.code).toBe(0);
    expect(piped.stdout.length).toBeGreaterThan(128 * 1024);
    expect(piped.stdout).toBe(inProcess.stdout);
    expect(piped.stderr).toBe(inProcess.stderr);
  });
});
