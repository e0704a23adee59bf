import { h, replace } from '../dom.ts';
import { ago, dateTime } from '../format.ts';
import type { JoinToken } from '../types.ts';
import type { View, ViewContext } from '../view.ts';

interface Created {
  token: JoinToken;
  value: string;
  installCommand: string;
}

/** Join tokens: create one for new hosts (its value is shown once), see how they were used, revoke. */
export function tokensView(context: ViewContext): View {
  const created = h('div', { attrs: { 'data-created': true } });
  const rows = h('tbody');
  const description = h('input', {
    attrs: { name: 'description', maxlength: 500, placeholder: 'rack 4, new H100s' },
  });
  const uses = h('input', { attrs: { name: 'maxUses', type: 'number', min: 1, value: 1 } });
  const hours = h('input', {
    attrs: { name: 'expiresInHours', type: 'number', min: 1, max: 8760, value: 24 },
  });
  const region = h('input', { attrs: { name: 'region', pattern: '[a-z0-9][a-z0-9-]*', maxlength: 64 } });
  const form = h(
    'form',
    { class: 'inline', attrs: { 'data-form': 'join-token' } },
    h('label', null, 'Description ', description),
    h('label', null, 'Hosts it may register ', uses),
    h('label', null, 'Valid for (hours) ', hours),
    h('label', null, 'Region ', region),
    h('button', { attrs: { type: 'submit' } }, 'Create join token'),
  );
  const element = h(
    'div',
    { attrs: { 'data-view': 'tokens' } },
    h('h2', null, 'Join tokens'),
    form,
    created,
    h(
      'table',
      { attrs: { 'data-table': 'tokens' } },
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          ['Token', 'Description', 'Status', 'Used', 'Region', 'Expires', 'Last used', ''].map((t) =>
            h('th', null, t),
          ),
        ),
      ),
      rows,
    ),
  );

  const refresh = async () => {
    const { join_tokens: tokens } = await context.api.get<{ join_tokens: JoinToken[] }>(
      '/v2/admin/hosts/join-tokens',
    );
    replace(
      rows,
      tokens.map((token) => row(token)),
    );
  };

  const row = (token: JoinToken) => {
    const revoke =
      token.status === 'active'
        ? h('button', { attrs: { type: 'button', 'data-action': 'revoke' } }, 'Revoke')
        : null;
    revoke?.addEventListener('click', async () => {
      revoke.disabled = true;
      try {
        await context.api.delete(`/v2/admin/hosts/join-tokens/${encodeURIComponent(token.id)}`);
        context.notify(`join token ${token.id} revoked`);
      } catch (error) {
        context.notify(`revoke: ${(error as Error).message}`, 'error');
      }
      await refresh();
    });
    return h(
      'tr',
      { attrs: { 'data-token': token.id } },
      h('td', { class: 'mono' }, `${token.prefix}…`),
      h('td', null, token.description ?? '—'),
      h('td', null, h('span', { class: `badge ${token.status}` }, token.status)),
      h('td', null, `${token.useCount} / ${token.maxUses ?? '∞'}`),
      h('td', null, token.region ?? '—'),
      h('td', null, dateTime(token.expiresAt)),
      h('td', null, ago(token.lastUsedAt)),
      h('td', null, revoke),
    );
  };

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body: Record<string, unknown> = {
      maxUses: Number(uses.value) || 1,
      expiresIn: Math.round((Number(hours.value) || 24) * 3600),
    };
    if (description.value.trim()) body['description'] = description.value.trim();
    if (region.value.trim()) body['region'] = region.value.trim();
    try {
      const result = await context.api.post<Created>('/v2/admin/hosts/join-tokens', body);
      replace(
        created,
        h(
          'div',
          { class: 'secret' },
          h('p', null, 'Copy it now: the token is shown only once. On the new server, run:'),
          h('pre', { class: 'mono', attrs: { 'data-install': true } }, result.installCommand),
        ),
      );
      form.reset();
      await refresh();
    } catch (error) {
      context.notify(`create join token: ${(error as Error).message}`, 'error');
    }
  });

  return { title: 'Join tokens', element, refresh };
}
