#!/usr/bin/env node
// `npm run lint` runs this: one way to wire. A part gets what it needs when it is built (constructor
// or factory options), never from a setter called afterwards: with setters, a part exists half-wired
// for a while (a logger that is silent until start(), a kick that goes nowhere), and the order of
// set-up calls becomes a contract nobody wrote down. A construction-order cycle is broken by building
// in another order, or by an object made first and handed to both sides (util/signal.ts).
// What it refuses, in the code of control-plane/src and agent/src (tests aside):
// - a method named `use<Something>(…)`: the setter naming this code base used;
// - a method named `on<Something>(…)` that returns void and keeps its argument in a field: a setter
//   for one callback. A subscription (several listeners, like FleetEvents.onAgentGreeted) returns its
//   unsubscribe function instead, and a callback in a constructor's options is declared, not set.
// Plain Node on purpose, like check-import-cycles.mjs: it runs before anything is built.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

// The repository (a test passes another tree as the first argument).
const ROOT = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));
const SOURCE_ROOTS = ['control-plane/src', 'agent/src'];
/** Setters known and owned by an open issue, or callbacks of a protocol the caller drives, as `file#method`. */
const KNOWN = new Set([
  // undici's dispatch handler: undici calls it as the request goes, it wires nothing.
  'control-plane/src/proxy/relay.ts#onConnect',
  // The agent's message channel: a socket's message handler, taken once the handshake is done.
  'agent/src/connection/channel.ts#onMessage',
]);

// A method (of a class or an object literal) with its body: modifiers, name, parameters (one level of
// nested parentheses, for callback types), an optional return type, then `{`. Interface members (`;`)
// declare a shape; whatever implements them is checked.
const METHOD =
  /^(\s*)(?:(?:public|protected|private|static|async|override)\s+)*((?:use|on)[A-Z]\w*)\s*(?:<[^>]*>)?\(((?:[^()]|\([^()]*\))*)\)\s*(?::\s*([^{;]+?))?\s*\{\s*$/;

/** Whether the method's body (up to its closing brace) keeps a parameter in a field. */
function keepsParameter(lines, start, indent, parameters) {
  const names = [...parameters.matchAll(/(?:^|,)\s*(\w+)\s*[:?,)]?/g)].map((m) => m[1]);
  for (let i = start + 1; i < lines.length && !lines[i].startsWith(`${indent}}`); i++) {
    for (const name of names) {
      if (new RegExp(`this\\.#?\\w+\\s*=\\s*${name}\\b`).test(lines[i])) return true;
    }
  }
  return false;
}

function sourceFiles() {
  return SOURCE_ROOTS.filter((dir) => existsSync(join(ROOT, dir))).flatMap((dir) =>
    readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
      .filter(
        (file) =>
          /\.tsx?$/.test(file) &&
          !/\.test\.tsx?$/.test(file) &&
          !file.includes('generated') &&
          !file.split('/').includes('testing'),
      )
      .map((file) => `${dir}/${file}`),
  );
}

const found = [];
for (const file of sourceFiles()) {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  lines.forEach((line, i) => {
    const match = METHOD.exec(line);
    if (!match) return;
    const [, indent, name, parameters, returns] = match;
    const setter =
      name.startsWith('use') || (returns?.trim() === 'void' && keepsParameter(lines, i, indent, parameters));
    if (setter && !KNOWN.has(`${file}#${name}`)) found.push(`${file}:${i + 1}: ${name}`);
  });
}
if (found.length === 0) {
  process.stdout.write('no setters to finish wiring\n');
} else {
  for (const setter of found) process.stderr.write(`setter after construction: ${setter}\n`);
  process.stderr.write(
    'Hand the dependency over at construction (scripts/check-wiring.mjs says why and how).\n',
  );
  process.exit(1);
}
