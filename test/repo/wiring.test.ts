import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const SCRIPT = new URL('../../scripts/check-wiring.mjs', import.meta.url).pathname;
const REPO = new URL('../..', import.meta.url).pathname;

function check(root: string) {
  const run = spawnSync(process.execPath, [SCRIPT, root], { encoding: 'utf8' });
  return { code: run.status, output: run.stdout + run.stderr };
}

describe('scripts/check-wiring.mjs (part of npm run lint)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'anvil-wiring-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('passes on this repository', () => {
    expect(check(REPO)).toEqual({ code: 0, output: 'no setters to finish wiring\n' });
  });

  it('fails on setters called after construction, and names them; subscriptions and options pass', () => {
    const src = join(dir, 'control-plane', 'src', 'x');
    mkdirSync(src, { recursive: true });
    writeFileSync(
      join(src, 'service.ts'),
      [
        'export class Service {',
        '  #kick: () => void = () => {};',
        '  #logger: unknown = null;',
        '  readonly #listeners = new Set<() => void>();',
        '  constructor(private readonly o: { onChange(id: string): void }) {}',
        '  useLogger(logger: unknown): void {',
        '    this.#logger = logger;',
        '  }',
        '  onKick(kick: () => void): void {',
        '    this.#kick = kick;',
        '  }',
        '  onChange(listener: () => void): () => void {',
        '    this.#listeners.add(listener);',
        '    return () => this.#listeners.delete(listener);',
        '  }',
        '  onError(error: Error): void {',
        '    this.o.onChange(error.message);',
        '  }',
        '}',
        '',
      ].join('\n'),
    );
    const result = check(dir);
    expect(result.code).toBe(1);
    expect(result.output).toContain(
      'setter after construction: control-plane/src/x/service.ts:6: useLogger\n',
    );
    expect(result.output).toContain('setter after construction: control-plane/src/x/service.ts:9: onKick\n');
    expect(result.output).not.toContain('onChange');
    expect(result.output).not.toContain('onError');
  });
});
