import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { buildCli, CLI_BUNDLE } from '../scripts/build.ts';

// The bundle is committed so that `npm install -g <checkout>/cli` needs no build; it must be what the
// sources build to. On failure: npm run build -w @anvil/cli, and commit cli/dist/anvil.mjs.
it('the committed bundle cli/dist/anvil.mjs is what cli/src builds to, and is executable', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'anvil-cli-build-'));
  try {
    const fresh = await buildCli(join(dir, 'anvil.mjs'));
    expect(
      readFileSync(CLI_BUNDLE, 'utf8') === readFileSync(fresh, 'utf8'),
      'cli/dist/anvil.mjs is stale',
    ).toBe(true);
    expect(readFileSync(CLI_BUNDLE, 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
    expect(statSync(CLI_BUNDLE).mode & 0o111).toBe(0o111);
    // One file, no loader: nothing is imported but Node's own modules.
    const imports = [
      ...readFileSync(CLI_BUNDLE, 'utf8').matchAll(/^import\s[^;]*?from\s*["']([^"']+)["']/gm),
    ].map((m) => m[1]);
    expect(imports.length).toBeGreaterThan(3);
    expect(imports.filter((name) => !name!.startsWith('node:'))).toEqual([]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
