// What a benchmark needs outside Node, checked before it starts: a missing program is named with the Debian
// package that provides it, instead of an unhandled `spawn … ENOENT` halfway through.
import { accessSync, constants } from 'node:fs';
import { delimiter, isAbsolute, join } from 'node:path';
import { dockerAvailable } from '../test/fixtures/images/docker.ts';

export interface Program {
  /** A name looked up on PATH, or an absolute path. */
  command: string;
  /** The Debian package that provides it. */
  debianPackage: string;
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export function installed(command: string): boolean {
  if (isAbsolute(command)) return executable(command);
  return (process.env['PATH'] ?? '').split(delimiter).some((dir) => dir && executable(join(dir, command)));
}

/**
 * Null when everything is there, else the line to print instead of the benchmark's figures:
 * `<bench>: skipped (<what> missing: apt-get install <packages>)`.
 */
export function missingPrerequisites(
  bench: string,
  options: { docker?: boolean; programs?: Program[] },
): string | null {
  const missing: string[] = [];
  const packages = new Set<string>();
  if (options.docker && !dockerAvailable()) {
    missing.push('a Docker engine');
    packages.add('docker.io');
  }
  for (const program of options.programs ?? []) {
    if (installed(program.command)) continue;
    missing.push(program.command);
    packages.add(program.debianPackage);
  }
  if (missing.length === 0) return null;
  return `${bench}: skipped (${missing.join(', ')} missing: apt-get install ${[...packages].join(' ')})\n`;
}
