import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const SCRIPT = new URL('../../scripts/check-sleeps.mjs', import.meta.url).pathname;
const REPO = new URL('../..', import.meta.url).pathname;

function check(root: string) {
  const run = spawnSync(process.execPath, [SCRIPT, root], { encoding: 'utf8' });
  return { code: run.status, output: run.stdout + run.stderr };
}

describe('scripts/check-sleeps.mjs (part of npm run lint)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'anvil-sleeps-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('passes on this repository', () => {
    const result = check(REPO);
    expect(result.output).toMatch(/^no fixed sleeps in \d+ test files\n$/);
    expect(result.code).toBe(0);
  });

  it('fails on a test that sleeps, and names the line; polling and timers that do work pass', () => {
    // Spelled through a variable, so this file's own source holds no sleep.
    const timer = 'setTimeout';
    const src = join(dir, 'agent', 'src', 'x');
    mkdirSync(src, { recursive: true });
    writeFileSync(
      join(src, 'slow.test.ts'),
      [
        `import { ${timer} as delay } from 'node:timers/promises';`,
        "it('waits', async () => {",
        `  await new Promise((resolve) => ${timer}(resolve, 200));`,
        '  await vi.waitFor(() => expect(done).toBe(true));',
        '  setTimeout(() => socket.destroy(), 50);',
        '});',
        '',
      ].join('\n'),
    );
    writeFileSync(join(src, 'helper.ts'), `export const pause = () => new Promise((r) => ${timer}(r, 5));\n`);
    const result = check(dir);
    expect(result.code).toBe(1);
    expect(result.output).toContain(
      'fixed sleep: agent/src/x/slow.test.ts:1: import { setTimeout as delay }',
    );
    expect(result.output).toContain('fixed sleep: agent/src/x/slow.test.ts:3: await new Promise(');
    expect(result.output).not.toContain(':4:');
    expect(result.output).not.toContain(':5:');
    expect(result.output).not.toContain('helper.ts');
  });
});
