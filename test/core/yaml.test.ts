import { describe, expect, it } from 'vitest';
import { parseYaml, parseYamlFull } from '../../src/core/yaml.js';
import { loadFast } from '../../src/core/yaml-fast.js';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..');

describe('YAML loading', () => {
  it('reads every shipped YAML file identically on the fast and the full path', () => {
    const files = [
      ...readdirSync(join(root, 'inventories'))
        .filter((f) => f.endsWith('.yaml'))
        .map((f) => join(root, 'inventories', f)),
      ...readdirSync(join(root, 'roles', 'services')).map((f) => join(root, 'roles', 'services', f)),
      join(root, 'images', 'releases', 'zed.yaml'),
    ];
    for (const file of files) {
      const text = readFileSync(file, 'utf8');
      const fast = loadFast(text);
      // Inventories must take the fast path; role files may use YAML features it leaves to the full parser.
      if (file.includes('/inventories/')) expect(fast, file).toBeDefined();
      if (!fast) continue;
      expect(fast!.data, file).toEqual(parseYamlFull(file, text).data);
    }
  });

  it.each([
    {
      scenario: 'an unquoted MAC (base 60 in YAML 1.1)',
      text: 'mac: 52:54:00:00:10:01\n',
      reading: 'base-60',
      column: 6,
    },
    { scenario: 'no read as false', text: 'a: 1\nflag: no\n', reading: 'boolean false', line: 2 },
    { scenario: 'on read as true', text: 'x: on\n', reading: 'boolean true' },
    { scenario: 'an octal number', text: 'mode: 0644\n', reading: 'octal' },
    { scenario: 'a binary number', text: 'b: 0b101\n', reading: 'binary' },
    { scenario: 'a number with underscores', text: 'count: 1_000\n', reading: 'a number' },
    { scenario: 'an ambiguous key', text: 'yes: 1\n', reading: 'boolean true' },
  ])('flags $scenario, with its position, on both paths', ({ text, reading, line, column }) => {
    expect(loadFast(text)).toBeUndefined();
    const src = parseYaml('f.yaml', text);
    const issue = src.issues.find((i) => i.code === 'E_YAML_AMBIGUOUS');
    expect(issue?.message).toContain(reading);
    if (line) expect(issue?.location.line).toBe(line);
    if (column) expect(issue?.location.column).toBe(column);
  });

  it.each([
    { scenario: 'a quoted MAC', text: "mac: '52:54:00:00:10:01'\n", value: { mac: '52:54:00:00:10:01' } },
    {
      scenario: 'a MAC that no YAML reads as a number',
      text: 'mac: 52:54:00:ab:10:01\n',
      value: { mac: '52:54:00:ab:10:01' },
    },
    { scenario: 'true and false', text: 'a: true\nb: false\n', value: { a: true, b: false } },
    { scenario: 'a plain integer', text: 'vlan: 20\n', value: { vlan: 20 } },
    { scenario: 'a quoted no', text: "x: 'no'\n", value: { x: 'no' } },
  ])('accepts $scenario', ({ text, value }) => {
    const src = parseYaml('f.yaml', text);
    expect(src.issues).toEqual([]);
    expect(src.data).toEqual(value);
    expect(parseYamlFull('f.yaml', text).data).toEqual(value);
  });

  it('reports every syntax error with line and column', () => {
    const src = parseYaml('bad.yaml', 'a: 1\nb: [1, 2\nc: 3\n');
    expect(src.data).toBeUndefined();
    expect(src.issues.length).toBeGreaterThan(0);
    expect(src.issues[0]!.code).toBe('E_YAML_SYNTAX');
    expect(src.issues[0]!.location.line).toBeGreaterThanOrEqual(2);
  });

  it('refuses duplicate keys', () => {
    const src = parseYaml('dup.yaml', 'a: 1\na: 2\n');
    expect(src.issues.some((i) => i.code === 'E_YAML_SYNTAX' && i.location.line === 2)).toBe(true);
  });

  it('limits alias expansion ("billion laughs")', () => {
    let text = 'a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n';
    for (let i = 1; i < 8; i++)
      text += `a${i}: &a${i} [${Array(10)
        .fill(`*a${i - 1}`)
        .join(', ')}]\n`;
    const src = parseYaml('bomb.yaml', text);
    expect(src.issues.map((i) => i.code)).toContain('E_YAML_ALIAS_LIMIT');
    expect(src.data).toBeUndefined();
  });

  it('locates values and keys by JSON path', () => {
    const src = parseYaml('f.yaml', 'nodes:\n  - name: a\n    role: X\n');
    expect(src.locate(['nodes', 0, 'role'])).toMatchObject({ line: 3, column: 11, path: '/nodes/0/role' });
    expect(src.locate(['nodes', 0, 'role'], { key: true })).toMatchObject({ line: 3, column: 5 });
    // A path that does not exist falls back to the nearest parent.
    expect(src.locate(['nodes', 0, 'missing'])).toMatchObject({ line: 2, column: 5 });
  });
});
