import { createHash } from 'node:crypto';
import type { InvitationPreview } from '../accounts/invitations.ts';

/** The page's only style, inline and allowed by its hash: the page loads nothing else. */
const STYLE =
  'body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem;color:#1a1a1a}' +
  'h1{font-size:1.4rem}label{display:block;margin:.75rem 0 .25rem}' +
  'input{width:100%;padding:.4rem;font:inherit;box-sizing:border-box}' +
  'button{margin-top:1rem;padding:.5rem 1rem;font:inherit}' +
  '.key{font-family:ui-monospace,monospace;word-break:break-all;background:#f3f3f3;padding:.75rem}' +
  '.error{color:#a00000}.muted{color:#555}';

const STYLE_HASH = createHash('sha256').update(STYLE).digest('base64');

/**
 * No script at all, the style by hash, forms only to this origin, never framed: the page shows an API key
 * once, so nothing else may run in it or read it.
 */
export const INVITE_PAGE_HEADERS = {
  'content-security-policy':
    `default-src 'none'; style-src 'sha256-${STYLE_HASH}'; form-action 'self'; base-uri 'none'; ` +
    "frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  // The token is in the URL: no other site may learn it from a Referer.
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  // Neither the invitation nor the key may sit in a cache.
  'cache-control': 'no-store',
};

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

function page(title: string, body: string): string {
  return (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">' +
    '<meta name="viewport" content="width=device-width,initial-scale=1">' +
    `<title>${escapeHtml(title)} · Anvil</title><style>${STYLE}</style></head>` +
    `<body><main>${body}</main></body></html>`
  );
}

export interface FormValues {
  name?: string | undefined;
  username?: string | undefined;
}

/** The invitation, and a form that accepts it (a POST to the same URL). */
export function renderInvitation(
  preview: InvitationPreview,
  values: FormValues = {},
  error?: string,
): string {
  const team = preview.accountName ?? 'a team';
  const from = preview.invitedBy ? `${escapeHtml(preview.invitedBy)} invited you` : 'You are invited';
  return page(
    `Join ${team}`,
    `<h1>Join ${escapeHtml(team)} on Anvil</h1>` +
      `<p data-invitation>${from} (<strong>${escapeHtml(preview.email)}</strong>) to join ` +
      `<strong>${escapeHtml(team)}</strong> as <strong data-role>${escapeHtml(preview.role)}</strong>.</p>` +
      (preview.message ? `<blockquote>${escapeHtml(preview.message)}</blockquote>` : '') +
      `<p class="muted">This invitation expires at ${escapeHtml(preview.expiresAt.toISOString())}.</p>` +
      (error ? `<p class="error" role="alert">${escapeHtml(error)}</p>` : '') +
      '<form method="post">' +
      '<label for="name">Your name (optional)</label>' +
      `<input id="name" name="name" maxlength="100" autocomplete="name" value="${escapeHtml(values.name ?? '')}">` +
      '<label for="username">Username (optional)</label>' +
      `<input id="username" name="username" maxlength="39" autocomplete="username" value="${escapeHtml(values.username ?? '')}">` +
      '<button type="submit">Accept invitation</button></form>',
  );
}

/** After acceptance: the member's first API key, shown this once. */
export function renderAccepted(accountName: string | null, role: string, keyValue: string): string {
  const team = accountName ?? 'the team';
  return page(
    'Invitation accepted',
    `<h1>Welcome to ${escapeHtml(team)}</h1>` +
      `<p>You are now a member with the role <strong>${escapeHtml(role)}</strong>. Your first API key:</p>` +
      `<p class="key" data-api-key>${escapeHtml(keyValue)}</p>` +
      '<p><strong>Store it now: it will not be shown again.</strong> Use it as ' +
      '<code>Authorization: Bearer &lt;key&gt;</code> with the API.</p>',
  );
}

/** An invitation that cannot be accepted: unknown, expired, cancelled or already accepted. */
export function renderRefusal(message: string): string {
  return page(
    'Invitation unavailable',
    `<h1>This invitation cannot be accepted</h1><p class="error" role="alert">${escapeHtml(message)}</p>` +
      '<p class="muted">Ask the person who invited you to send it again.</p>',
  );
}
