#!/usr/bin/env node
// `npm run lint` runs this: every package a workspace's code imports is declared in that workspace's
// package.json, and every package it declares is imported somewhere in it (or is a tool on the allow-list
// below, with the reason). A package that resolves only because another workspace hoisted it breaks the
// day that workspace drops it; a declared package nothing imports is installed and audited for nothing.
// Plain Node on purpose: it runs before anything is built and needs no dependency of its own.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

// The repository (a test passes another tree as the first argument).
const ROOT = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));

/**
 * Each package and where its code lives. The root package holds the repository's scripts and
 * configuration files; its devDependencies are the shared toolchain every workspace may use (vitest,
 * tsx, typescript, @types/node).
 */
const rootManifest = readJson(join(ROOT, 'package.json'));
const WORKSPACES = rootManifest.workspaces ?? [];
const PACKAGES = [
  ...WORKSPACES.map((dir) => ({ dir, folders: ['.'] })),
  { dir: '.', folders: ['scripts', '.'], shallow: ['.'] },
];
const WORKSPACE_NAMES = new Map(
  WORKSPACES.map((dir) => [
    join(ROOT, dir),
    JSON.parse(readFileSync(join(ROOT, dir, 'package.json'), 'utf8')).name,
  ]),
);

/**
 * The workspace a relative import reaches into, if another one: that counts as using its package when it
 * is declared (test/ reaches into control-plane/src), but is not required to be (a unit test of shared/
 * borrowing a fixture of test/ must not make shared depend on test).
 */
function workspaceOf(file, specifier) {
  if (!specifier.startsWith('.')) return null;
  const target = resolve(dirname(file), specifier);
  for (const [dir, name] of WORKSPACE_NAMES) if (target.startsWith(`${dir}/`)) return name;
  return null;
}

/** Declared without an import in code, each for a reason. */
const USED_WITHOUT_IMPORT = {
  typescript: 'tsc: npm run typecheck',
  '@biomejs/biome': 'biome: npm run lint',
  prisma: 'the Prisma CLI: control-plane/scripts/generate-prisma-client.mjs and migrations',
  tsx: 'node --import tsx runs the TypeScript sources (npm start, npm run agent, build scripts); the agent resolves it at run time for its NVML sampler (gpu/nvml-sampler.ts)',
  '@prisma/client':
    'imported by the generated client (control-plane/src/db/generated, not scanned: built by npm run generate)',
  esbuild: 'bundles the agent and the CLI (scripts/build.ts), where it is also imported',
  'playwright-core': 'drives Chromium in the dashboard tests',
  'smtp-server': 'a real SMTP server in the e-mail tests',
};

const SKIPPED_DIRS = new Set([
  'node_modules',
  'dist',
  'generated',
  'data',
  '.git',
  'results',
  'test-artifacts',
]);
const SOURCE = /\.(?:ts|mts|mjs|js)$/;
const BUILTINS = new Set(builtinModules);

function sourceFiles(dir, shallow) {
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!shallow && !SKIPPED_DIRS.has(entry.name) && !entry.name.startsWith('.'))
        out.push(...sourceFiles(path));
    } else if (SOURCE.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** Comments out (so an example in a comment is no import); strings kept, since specifiers are strings. */
function withoutComments(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1');
}

const SPECIFIERS = [
  /\bimport\s+(?:type\s+)?[\w*{}\s,$]*?\bfrom\s*['"]([^'"]+)['"]/g,
  /\bexport\s+(?:type\s+)?[\w*{}\s,$]*?\bfrom\s*['"]([^'"]+)['"]/g,
  /^\s*import\s*['"]([^'"]+)['"]/gm,
  /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
  /\brequire\(\s*['"]([^'"]+)['"]\s*\)/g,
];

/** The package a specifier names, or null for builtins, relative and absolute paths. */
function packageOf(specifier) {
  if (specifier.startsWith('node:') || specifier.startsWith('.') || specifier.startsWith('/')) return null;
  if (specifier.startsWith('#')) return null;
  const parts = specifier.split('/');
  const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
  return BUILTINS.has(name) ? null : name;
}

function readJson(path) {
  return JSON.parse(readFileSync(path, 'utf8'));
}

const toolchain = new Set(Object.keys(rootManifest.devDependencies ?? {}));
const problems = [];

for (const pkg of PACKAGES) {
  const manifest = readJson(join(ROOT, pkg.dir, 'package.json'));
  const isRoot = pkg.dir === '.';
  const declared = new Set([
    ...Object.keys(manifest.dependencies ?? {}),
    ...Object.keys(manifest.devDependencies ?? {}),
    ...Object.keys(manifest.peerDependencies ?? {}),
    ...Object.keys(manifest.optionalDependencies ?? {}),
  ]);
  /** package -> a file importing it, for the message */
  const imported = new Map();
  const reached = new Set();
  for (const folder of pkg.folders) {
    const dir = join(ROOT, pkg.dir, folder);
    if (!existsSync(dir)) continue;
    for (const file of sourceFiles(dir, pkg.shallow?.includes(folder))) {
      const text = withoutComments(readFileSync(file, 'utf8'));
      for (const pattern of SPECIFIERS) {
        for (const match of text.matchAll(pattern)) {
          const workspace = workspaceOf(file, match[1]);
          if (workspace) reached.add(workspace);
          const name = packageOf(match[1]);
          if (name && name !== manifest.name && !imported.has(name)) imported.set(name, relative(ROOT, file));
        }
      }
    }
  }
  const where = isRoot ? 'package.json (root: scripts/, configuration)' : `${pkg.dir}/package.json`;
  for (const [name, file] of imported) {
    if (!declared.has(name) && !toolchain.has(name))
      problems.push(`${where}: "${name}" is imported (${file}) but not declared`);
  }
  for (const name of declared) {
    if (imported.has(name) || reached.has(name) || name.startsWith('@types/') || name in USED_WITHOUT_IMPORT)
      continue;
    problems.push(`${where}: "${name}" is declared but nothing imports it`);
  }
}

if (problems.length > 0) {
  process.stderr.write(
    `check-deps: ${problems.length} problem(s)\n${problems.map((p) => `  ${p}\n`).join('')}`,
  );
  process.exit(1);
}
process.stdout.write('check-deps: every import declared, every dependency used\n');
