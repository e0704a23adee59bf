import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { CONTROL_PLANE_NODE_FLAGS, missingNodeFlags } from './node-flags.ts';
import { REPO_ROOT } from './testing/process.ts';

const run = promisify(execFile);

describe('control-plane V8 flags', () => {
  it('are passed by npm start, ahead of the entry point', () => {
    const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    const start = pkg.scripts['start']!.split(/\s+/);
    const entry = start.indexOf('control-plane/src/main.ts');
    expect(entry).toBeGreaterThan(0);
    for (const flag of CONTROL_PLANE_NODE_FLAGS) {
      expect(start.indexOf(flag), `${flag} in npm start`).toBeGreaterThan(0);
      expect(start.indexOf(flag)).toBeLessThan(entry);
    }
  });

  it('give a process a larger heap than plain node (the young generation it reserves)', async () => {
    const script =
      "process.stdout.write(String(require('node:v8').getHeapStatistics().total_available_size))";
    const plain = Number((await run(process.execPath, ['-e', script])).stdout);
    const flagged = Number((await run(process.execPath, [...CONTROL_PLANE_NODE_FLAGS, '-e', script])).stdout);
    // 3 semi-spaces' worth (two for copying, one for promotion headroom) more than the 16 MiB default.
    expect(flagged - plain).toBeGreaterThanOrEqual(3 * 48 * 1024 * 1024);
  });

  it('names the flags a process lacks, from its command line or NODE_OPTIONS', () => {
    expect(missingNodeFlags(['--import', 'tsx'], undefined)).toEqual([...CONTROL_PLANE_NODE_FLAGS]);
    expect(missingNodeFlags([...CONTROL_PLANE_NODE_FLAGS, '--import', 'tsx'], undefined)).toEqual([]);
    expect(missingNodeFlags([], `--enable-source-maps ${CONTROL_PLANE_NODE_FLAGS.join(' ')}`)).toEqual([]);
  });
});
