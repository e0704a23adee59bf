import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';

/** Where Debian's chromium package puts the browser; ANVIL_CHROMIUM names another. */
const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];

export function chromiumPath(): string | null {
  const chosen = process.env['ANVIL_CHROMIUM'];
  if (chosen) return existsSync(chosen) ? chosen : null;
  return CANDIDATES.find((path) => existsSync(path)) ?? null;
}

/**
 * Whether the browser tests can run. CI sets ANVIL_REQUIRE_BROWSER=1 (it installs chromium), so there a
 * missing browser fails the run instead of skipping the tests.
 */
export function browserOrFail(what: string): boolean {
  if (chromiumPath()) return true;
  const message = `${what}: no Chromium (install Debian's chromium package or set ANVIL_CHROMIUM)`;
  if (process.env['ANVIL_REQUIRE_BROWSER'] === '1') throw new Error(`ANVIL_REQUIRE_BROWSER=1 but ${message}`);
  process.stderr.write(`SKIPPED ${message}\n`);
  return false;
}

/**
 * Headless Chromium driven by playwright-core (no browser download: the system's own); `extraArgs` are
 * further command-line switches (e.g. `--host-resolver-rules`).
 */
export function launchChromium(extraArgs: string[] = []): Promise<Browser> {
  const executablePath = chromiumPath();
  if (!executablePath) throw new Error('no Chromium found');
  // Root (CI containers) cannot use Chromium's sandbox; the pages are our own, on loopback.
  return chromium.launch({
    executablePath,
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', ...extraArgs],
  });
}
