import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const SCRIPT = new URL('../../scripts/check-deps.mjs', import.meta.url).pathname;
const REPO = new URL('../..', import.meta.url).pathname;

function check(root?: string) {
  const run = spawnSync(process.execPath, [SCRIPT, ...(root ? [root] : [])], { encoding: 'utf8' });
  return { code: run.status, output: run.stdout + run.stderr };
}

describe('scripts/check-deps.mjs (part of npm run lint)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'anvil-check-deps-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('passes on this repository: every import declared, every dependency used', () => {
    expect(check(REPO)).toEqual({ code: 0, output: expect.stringContaining('every import declared') });
  });

  it('fails on an undeclared import and on a declared package nothing imports', () => {
    const json = (path: string, value: unknown) => writeFileSync(join(dir, path), JSON.stringify(value));
    json('package.json', { name: 'root', workspaces: ['a'], devDependencies: { vitest: '1' } });
    mkdirSync(join(dir, 'a', 'src'), { recursive: true });
    json('a/package.json', { name: '@x/a', dependencies: { 'left-pad': '1', pino: '1' } });
    // Kept in a .txt file: as code here, its imports would be this workspace's own.
    copyFileSync(new URL('./fixtures/imports.ts.txt', import.meta.url), join(dir, 'a', 'src', 'x.ts'));
    writeFileSync(join(dir, 'vitest.config.ts'), "import { defineConfig } from 'vitest/config';\n");
    const result = check(dir);
    expect(result.code).toBe(1);
    expect(result.output).toContain('"ssh2" is imported (a/src/x.ts) but not declared');
    expect(result.output).toContain('"find-my-way" is imported (a/src/x.ts) but not declared');
    expect(result.output).toContain('"left-pad" is declared but nothing imports it');
    expect(result.output).toContain('3 problem(s)');
    expect(result.output).not.toContain('in-a-comment');
    expect(result.output).not.toContain('"pino"');
    expect(result.output).not.toContain('"vitest"');
  });
});
