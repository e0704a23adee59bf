#!/usr/bin/env node
// `npm run lint` runs this: the README's table of control-plane folders is the map a newcomer reads
// first, so it must name every folder under control-plane/src (and every group folder's children, like
// fleet/agents/) and nothing that is gone. A row names folders in backticks: `fleet/agents/`, or several
// in one row (`ratelimit/`, `usage/`, `billing/`); `api/<area>/` stands for api/. It also holds the API
// areas' files to one naming (below).
// Plain Node on purpose, like check-wiring.mjs: it runs before anything is built.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));
const SRC = join(ROOT, 'control-plane/src');
/** Folders that only group others: their children are listed instead. */
const GROUPS = ['fleet'];
/** Generated or build output, not code a person moves in. */
const IGNORED = new Set(['db/generated']);

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const start = readme.indexOf('Inside `control-plane/src/`');
if (start < 0) fail(['README.md has no "Inside `control-plane/src/`" table']);
const table = readme.slice(start).split('\n\n')[1] ?? '';
const listed = new Set();
for (const row of table.split('\n').slice(2)) {
  const first = row.split('|')[1] ?? '';
  for (const [, name] of first.matchAll(/`([^`]+)\/`/g)) listed.add(name.replace(/\/<[^>]+>$/, ''));
}

const isDir = (p) => existsSync(p) && statSync(p).isDirectory();
const actual = new Set();
for (const entry of readdirSync(SRC)) {
  if (!isDir(join(SRC, entry))) continue;
  if (GROUPS.includes(entry)) {
    for (const child of readdirSync(join(SRC, entry)))
      if (isDir(join(SRC, entry, child))) actual.add(`${entry}/${child}`);
  } else actual.add(entry);
}

const problems = [];
// Route, schema and OpenAPI-text files of the API areas are named for their topic: <topic>.routes.ts,
// <topic>.schemas.ts, <topic>.docs.ts (the area's own name for its main plugin), never a bare routes.ts.
const API = join(SRC, 'api');
for (const area of readdirSync(API)) {
  if (!isDir(join(API, area))) continue;
  for (const file of readdirSync(join(API, area))) {
    if (/^(routes|schemas|docs)\.ts$/.test(file) || /[-_](routes|schemas|docs)\.ts$/.test(file)) {
      problems.push(
        `control-plane/src/api/${area}/${file}: name it <topic>.${file.replace(/^.*?(routes|schemas|docs)\.ts$/, '$1')}.ts`,
      );
    }
  }
}
for (const name of actual)
  if (!listed.has(name) && !IGNORED.has(name))
    problems.push(`control-plane/src/${name}/ is not in the README's folder table`);
for (const name of listed)
  if (!actual.has(name))
    problems.push(`the README's folder table names ${name}/, which control-plane/src does not have`);
if (problems.length > 0) fail(problems);
process.stdout.write(
  `README folder table matches control-plane/src (${actual.size} folders); API files named by topic\n`,
);

function fail(lines) {
  for (const line of lines) process.stderr.write(`check-layout: ${line}\n`);
  process.exit(1);
}
