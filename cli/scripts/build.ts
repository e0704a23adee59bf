/**
 * Bundles the CLI's TypeScript into one plain JavaScript file, cli/dist/anvil.mjs, with no dependency left
 * to install and no TypeScript loader at run time: `npm install -g <checkout>/cli` links it as `anvil`, and
 * `npx anvil` finds it in a checkout. The bundle is committed (so installing needs no build tools and no
 * install scripts, which npm 11 asks to allow for global installs); cli/src/build.test.ts fails when it
 * differs from what the sources build to. Not minified: errors stay readable.
 *
 * Run: `npm run build --workspace @anvil/cli`.
 */
import { chmodSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const CLI = join(dirname(fileURLToPath(import.meta.url)), '..');
export const CLI_BUNDLE = join(CLI, 'dist', 'anvil.mjs');

export async function buildCli(outfile = CLI_BUNDLE): Promise<string> {
  await build({
    entryPoints: [join(CLI, 'src', 'main.ts')],
    absWorkingDir: CLI,
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20.19',
    banner: {
      js: '#!/usr/bin/env node\n// Built from cli/src by cli/scripts/build.ts (npm run build -w @anvil/cli). Do not edit.',
    },
    legalComments: 'none',
    logLevel: 'warning',
  });
  chmodSync(outfile, 0o755);
  return outfile;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const out = await buildCli();
  process.stdout.write(`built ${out}\n`);
}
