import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const HERE = dirname(fileURLToPath(import.meta.url));
const CLIENT = join(HERE, 'client');
const UPLOT_CSS = createRequire(import.meta.url).resolve('uplot/dist/uPlot.min.css');

export interface Asset {
  body: Buffer;
  contentType: string;
  /** Strong validator: a hash of the body. */
  etag: string;
}

export interface DashboardAssets {
  html: Asset;
  script: Asset;
  style: Asset;
}

function asset(body: Buffer | string, contentType: string): Asset {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  const etag = `"${createHash('sha256').update(bytes).digest('base64url').slice(0, 27)}"`;
  return { body: bytes, contentType, etag };
}

/**
 * The dashboard's files: its TypeScript is bundled once per process with esbuild (in memory, about
 * 50 ms), so what runs in the browser is always built from the sources beside it and there is no
 * build step to forget. The page itself names the bundle by its hash, so a browser never mixes an old
 * page with a new script.
 */
export async function buildDashboardAssets(): Promise<DashboardAssets> {
  const result = await build({
    entryPoints: [join(CLIENT, 'main.ts')],
    bundle: true,
    write: false,
    format: 'esm',
    target: 'es2022',
    minify: true,
    sourcemap: false,
    legalComments: 'none',
    logLevel: 'silent',
  });
  const code = result.outputFiles[0];
  if (!code) throw new Error('dashboard bundle produced no output');
  const script = asset(Buffer.from(code.contents), 'text/javascript; charset=utf-8');
  // uPlot's own rules (legend, cursor) first, so the dashboard's may refine them.
  const css = await Promise.all([readFile(UPLOT_CSS), readFile(join(CLIENT, 'dashboard.css'))]);
  const style = asset(Buffer.concat([css[0], Buffer.from('\n'), css[1]]), 'text/css; charset=utf-8');
  const html = asset(page(script.etag.slice(1, 13), style.etag.slice(1, 13)), 'text/html; charset=utf-8');
  return { html, script, style };
}

function page(scriptVersion: string, styleVersion: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Anvil operators</title>
<link rel="stylesheet" href="/dashboard/app.css?v=${styleVersion}">
<script type="module" src="/dashboard/app.js?v=${scriptVersion}"></script>
</head>
<body><main id="app" aria-live="polite"><p class="muted">Loading…</p></main></body>
</html>
`;
}
