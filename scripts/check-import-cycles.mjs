#!/usr/bin/env node
// `npm run lint` runs this: no module of the workspaces' code imports itself round a cycle, type-only
// imports included. A type-only cycle costs nothing at run time, but it ties the modules together (one
// cannot be read, moved or tested without the other) and is one value import away from a cycle that
// breaks start-up order. A type both sides need goes in a module of its own.
// Plain Node on purpose, like check-deps.mjs: it runs before anything is built.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

// The repository (a test passes another tree as the first argument).
const ROOT = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));
const SOURCE_ROOTS = ['shared/src', 'control-plane/src', 'agent/src', 'cli/src'];
/** Cycles known and owned by an open issue, each as its modules sorted and joined by ' '. */
const KNOWN = new Set([]);

const IMPORT = /^\s*(?:import|export)\s+(?:[^'";]*?\s+from\s+)?'(\.{1,2}\/[^']+)'/gm;

function sourceFiles() {
  return SOURCE_ROOTS.filter((dir) => existsSync(join(ROOT, dir))).flatMap((dir) =>
    readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
      .filter((file) => /\.tsx?$/.test(file) && !/\.test\.tsx?$/.test(file) && !file.includes('generated'))
      .map((file) => `${dir}/${file}`),
  );
}

/** Each module and the modules of the repository it imports. */
function importGraph(files) {
  const graph = new Map();
  for (const file of files) {
    const targets = new Set();
    for (const match of readFileSync(join(ROOT, file), 'utf8').matchAll(IMPORT)) {
      const target = relative(ROOT, resolve(ROOT, dirname(file), match[1]));
      if (existsSync(join(ROOT, target))) targets.add(target);
    }
    graph.set(file, [...targets]);
  }
  return graph;
}

/** The strongly connected components of more than one module (Tarjan's algorithm, iterative). */
function cycles(graph) {
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const found = [];
  let next = 0;
  for (const start of graph.keys()) {
    if (index.has(start)) continue;
    const work = [[start, 0]];
    index.set(start, next);
    low.set(start, next++);
    stack.push(start);
    onStack.add(start);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      const [node, i] = frame;
      const targets = graph.get(node) ?? [];
      if (i < targets.length) {
        frame[1] = i + 1;
        const target = targets[i];
        if (!graph.has(target)) continue;
        if (!index.has(target)) {
          index.set(target, next);
          low.set(target, next++);
          stack.push(target);
          onStack.add(target);
          work.push([target, 0]);
        } else if (onStack.has(target)) {
          low.set(node, Math.min(low.get(node), index.get(target)));
        }
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1][0];
        low.set(parent, Math.min(low.get(parent), low.get(node)));
      }
      if (low.get(node) === index.get(node)) {
        const component = [];
        let member;
        do {
          member = stack.pop();
          onStack.delete(member);
          component.push(member);
        } while (member !== node);
        if (component.length > 1) found.push(component.sort());
      }
    }
  }
  return found;
}

const unknown = cycles(importGraph(sourceFiles())).filter((c) => !KNOWN.has(c.join(' ')));
if (unknown.length === 0) {
  process.stdout.write('no import cycles\n');
} else {
  for (const cycle of unknown) process.stderr.write(`import cycle: ${cycle.join(' <-> ')}\n`);
  process.stderr.write(
    'Move what both sides need into a module of its own (scripts/check-import-cycles.mjs says why).\n',
  );
  process.exit(1);
}
