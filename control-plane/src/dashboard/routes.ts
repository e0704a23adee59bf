import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { type Asset, buildDashboardAssets, type DashboardAssets } from './assets.ts';

/**
 * The page loads only its own script and style and talks only to this origin's API: no inline code,
 * no third parties, no framing (the operator's key is in the page's session storage).
 */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
};

/**
 * The operators' dashboard at /dashboard: a static page whose script calls the admin API with the
 * operator's own key (sent as a Bearer header, never a cookie, so no request forgery can use it). The
 * routes are public (the files hold no data); everything shown comes from /v2/admin and /v2/auth
 * under the usual permission checks.
 */
export const dashboardRoutes: FastifyPluginAsync = async (app) => {
  let assets: Promise<DashboardAssets> | null = null;
  const load = () => {
    assets ??= buildDashboardAssets().catch((error: unknown) => {
      assets = null;
      throw error;
    });
    return assets;
  };
  const config = { public: true };
  const schema = { hide: true };

  const send = (request: FastifyRequest, reply: FastifyReply, file: Asset, cache: string) => {
    reply.headers(SECURITY_HEADERS).header('cache-control', cache).header('etag', file.etag);
    if (request.headers['if-none-match'] === file.etag) return reply.code(304).send();
    return reply.type(file.contentType).send(file.body);
  };

  app.get('/dashboard', { config, schema }, async (request, reply) =>
    send(request, reply, (await load()).html, 'no-cache'),
  );
  app.get('/dashboard/', { config, schema }, async (_request, reply) => reply.redirect('/dashboard', 301));
  // Versioned by the page (?v=<hash>), so they may be cached for long.
  app.get('/dashboard/app.js', { config, schema }, async (request, reply) =>
    send(request, reply, (await load()).script, 'public, max-age=31536000, immutable'),
  );
  app.get('/dashboard/app.css', { config, schema }, async (request, reply) =>
    send(request, reply, (await load()).style, 'public, max-age=31536000, immutable'),
  );
};
