import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import config from '../vitest.config.ts';
import { testFiles, testTiers } from './tiers.ts';

describe('test tiers', () => {
  const files = testFiles();
  const tiers = testTiers();

  it('puts every test file in exactly one of the unit, database and end-to-end projects', () => {
    const projects = (config.test?.projects ?? []) as { test: { name: string; include: string[] } }[];
    const include = (name: string) => projects.find((p) => p.test.name === name)?.test.include ?? [];
    const placed = [...include('unit'), ...include('database'), ...include('e2e')];
    expect([...placed].sort()).toEqual(files);
    expect(new Set(placed).size).toBe(placed.length);
    expect(include('unit')).toEqual(tiers.unit);
    // A sample of each, so a rule that silently moved everything into one tier fails here.
    expect(tiers.unit).toContain('control-plane/src/ratelimit/limiter.test.ts');
    expect(tiers.database).toContain('control-plane/src/accounts/webhook-outbox.test.ts');
    expect(tiers.e2e).toContain('agent/src/docker/runtime.test.ts');
    expect(tiers.postgres).not.toContain('control-plane/src/accounts/webhook-outbox.test.ts');
  });

  it('never skips a Docker suite silently: each decides with dockerOrFail, which fails under ANVIL_REQUIRE_DOCKER=1', () => {
    const usesDocker = /fixtures\/images\/(docker|busybox)\.ts|fleet\/docker\.ts|\bstartAgent\(|testDocker\(/;
    const silent = files.filter((file) => {
      const source = readFileSync(file, 'utf8');
      return (
        /dockerAvailable\(\)/.test(source) || (usesDocker.test(source) && !source.includes('dockerOrFail('))
      );
    });
    expect(silent).toEqual([]);
  });
});
