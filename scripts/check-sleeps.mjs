#!/usr/bin/env node
// `npm run lint` runs this: a test waits by polling for what it expects (`waitFor` of
// control-plane/src/testing/wait.ts, vitest's `vi.waitFor`) or by moving an injected clock, never by a
// fixed sleep, which is either too short on a loaded machine (a flaky test) or too long everywhere else.
// It flags, in every *.test.ts, a timer that resolves a promise (`setTimeout(resolve, …)`) and the
// promise form of setTimeout from node:timers/promises. The few that are not waits are listed below,
// with why and how many. Plain Node on purpose, like check-wiring.mjs: it runs before anything is built.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));
/** Where test files live (test/tiers.ts lists the same). */
const ROOTS = ['shared/src', 'control-plane/src', 'agent/src', 'cli/src', 'test'];
/** Timers in tests that are part of what a test simulates, not a wait for something to happen. */
const ALLOWED = {
  'control-plane/src/proxy/sessions.test.ts': [1, 'the slow database it simulates answers its counts late'],
  'test/ha/failover.e2e.db.test.ts': [2, 'the retry backoff and pacing of the load it simulates'],
  'test/proxy/proxy-agent.e2e.test.ts': [1, 'its polling helper, which stops at once on a refusal'],
};
const SLEEP = [
  /setTimeout\(\s*(?:r|res|resolve|done)\s*,/,
  /import\s*\{[^}]*\bsetTimeout\b[^}]*\}\s*from\s*['"](?:node:)?timers\/promises['"]/,
];

const problems = [];
let files = 0;
for (const dir of ROOTS) {
  let names;
  try {
    names = readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' });
  } catch {
    continue;
  }
  for (const name of names) {
    if (!name.endsWith('.test.ts') || name.includes('node_modules')) continue;
    files += 1;
    const path = `${dir}/${name}`;
    const lines = readFileSync(join(ROOT, path), 'utf8').split('\n');
    const found = [];
    lines.forEach((line, i) => {
      if (SLEEP.some((pattern) => pattern.test(line))) found.push(`${path}:${i + 1}: ${line.trim()}`);
    });
    const [allowed] = ALLOWED[path] ?? [0];
    if (found.length > allowed) for (const line of found) problems.push(`fixed sleep: ${line}`);
    else if (found.length < allowed)
      problems.push(`${path} is allowed ${allowed} timers but has ${found.length}: lower its count`);
  }
}
if (problems.length > 0) {
  for (const line of problems) process.stderr.write(`check-sleeps: ${line}\n`);
  process.stderr.write('check-sleeps: wait by polling (waitFor, vi.waitFor) or an injected clock instead\n');
  process.exit(1);
}
process.stdout.write(`no fixed sleeps in ${files} test files\n`);
