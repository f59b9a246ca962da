import { mkdtempSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { vi } from 'vitest';
import { main } from '../../src/cli/main.js';

/** Result of one in-process CLI run. */
export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Run the stackctl CLI in-process with argv, capturing its output. */
export async function runCli(...args: string[]): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stdout += String(chunk);
    return true;
  });
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  const savedExit = process.exitCode;
  process.exitCode = undefined;
  try {
    const code = await main(['node', 'stackctl', ...args]);
    return { code, stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
    process.exitCode = savedExit;
  }
}

/** A fresh temporary folder. */
export function tempDir(prefix = 'stackctl-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** Copy a shipped inventory into a fresh folder (so state files land there); returns its path. */
export function copyInventory(name: string): string {
  const dir = tempDir();
  const dest = join(dir, name);
  cpSync(join(import.meta.dirname, '..', '..', 'inventories', name), dest);
  return dest;
}
