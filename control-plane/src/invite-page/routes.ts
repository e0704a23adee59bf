import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { AcceptInput } from '../accounts/invitations.ts';
import type { AppContext } from '../context.ts';
import {
  type FormValues,
  INVITE_PAGE_HEADERS,
  renderAccepted,
  renderInvitation,
  renderRefusal,
} from './render.ts';

/** Invitation tokens are 32 random bytes in base64url; anything else names no invitation. */
const TOKEN = /^[A-Za-z0-9_-]{20,128}$/;
const USERNAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{2,38}$/;
/** A name and a username fit in far less; a larger form is refused before it is parsed. */
const FORM_LIMIT_BYTES = 4096;

/** The same rules as the JSON accept route's schema, for the form's two optional fields. */
function checkForm(values: FormValues): { input: AcceptInput } | { error: string } {
  const input: AcceptInput = {};
  const name = values.name?.trim();
  if (name) {
    if (name.length > 100) return { error: 'The name may have at most 100 characters.' };
    input.name = name;
  }
  const username = values.username?.trim();
  if (username) {
    if (!USERNAME.test(username)) {
      return {
        error:
          'A username has 3 to 39 characters: letters, digits, "_", "." and "-", starting with a letter or digit.',
      };
    }
    input.username = username;
  }
  return { input };
}

/**
 * The page behind inviteUrl (`<ANVIL_PUBLIC_URL>/invite/<token>`): server-rendered HTML with no script.
 * GET shows who invites whom to which account and role and changes nothing (mail scanners and link
 * previews fetch it); the form POSTs back to the same URL, accepts exactly as
 * POST /v2/accounts/team/invitations/{token}/accept does, and shows the member's first API key once.
 * The token in the path is the credential, so a forged cross-site POST would need the token already.
 */
export const invitePageRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const { invitations } = context.accounts;
  const config = { public: true };
  const schema = { hide: true };

  // Encapsulated in this plugin: the API itself takes JSON only.
  app.addContentTypeParser(
    'application/x-www-form-urlencoded',
    { parseAs: 'string', bodyLimit: FORM_LIMIT_BYTES },
    (_request, body, done) => {
      const params = new URLSearchParams(body as string);
      done(null, { name: params.get('name') ?? undefined, username: params.get('username') ?? undefined });
    },
  );

  const html = (reply: FastifyReply, status: number, body: string) =>
    reply.code(status).headers(INVITE_PAGE_HEADERS).type('text/html; charset=utf-8').send(body);

  const refuse = (reply: FastifyReply, error: unknown) => {
    if (error instanceof ApiError && error.status < 500)
      return html(reply, error.status, renderRefusal(error.message));
    throw error;
  };

  app.get<{ Params: { token: string } }>('/invite/:token', { config, schema }, async (request, reply) => {
    const { token } = request.params;
    if (!TOKEN.test(token)) return html(reply, 404, renderRefusal('No invitation has this link.'));
    try {
      return html(reply, 200, renderInvitation(await invitations.preview(token)));
    } catch (error) {
      return refuse(reply, error);
    }
  });

  app.post<{ Params: { token: string }; Body: FormValues | undefined }>(
    '/invite/:token',
    { config, schema },
    async (request, reply) => {
      const { token } = request.params;
      if (!TOKEN.test(token)) return html(reply, 404, renderRefusal('No invitation has this link.'));
      const values: FormValues = request.body ?? {};
      try {
        const checked = checkForm(values);
        if ('error' in checked) {
          return html(reply, 400, renderInvitation(await invitations.preview(token), values, checked.error));
        }
        const preview = await invitations.preview(token);
        const accepted = await invitations.accept(token, checked.input, request.ip ?? null);
        return html(
          reply,
          200,
          renderAccepted(preview.accountName, accepted.member.role, accepted.apiKey.value),
        );
      } catch (error) {
        return refuse(reply, error);
      }
    },
  );
};
