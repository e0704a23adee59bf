import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const SCRIPT = new URL('../../scripts/check-import-cycles.mjs', import.meta.url).pathname;
const REPO = new URL('../..', import.meta.url).pathname;

function check(root: string) {
  const run = spawnSync(process.execPath, [SCRIPT, root], { encoding: 'utf8' });
  return { code: run.status, output: run.stdout + run.stderr };
}

describe('scripts/check-import-cycles.mjs (part of npm run lint)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'anvil-import-cycles-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('passes on this repository', () => {
    expect(check(REPO)).toEqual({ code: 0, output: 'no import cycles\n' });
  });

  it('fails on a cycle made of type-only imports, and names its modules', () => {
    const src = join(dir, 'control-plane', 'src', 'x');
    mkdirSync(src, { recursive: true });
    writeFileSync(join(src, 'a.ts'), "import type { B } from './b.ts';\nexport interface A { b: B }\n");
    writeFileSync(join(src, 'b.ts'), "import type {\n  A,\n} from './a.ts';\nexport interface B { a?: A }\n");
    writeFileSync(join(src, 'c.ts'), "import type { A } from './a.ts';\nexport type C = A;\n");
    const result = check(dir);
    expect(result.code).toBe(1);
    expect(result.output).toContain('import cycle: control-plane/src/x/a.ts <-> control-plane/src/x/b.ts\n');
    expect(result.output).not.toContain('c.ts');
  });
});
