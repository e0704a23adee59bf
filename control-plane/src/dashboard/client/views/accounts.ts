import { h, replace } from '../dom.ts';
import { dateTime } from '../format.ts';
import type { AccountList, AdminAccount } from '../types.ts';
import type { View, ViewContext } from '../view.ts';

const TIERS = ['free', 'pro', 'enterprise'];

/** Tenants: create one (its owner is invited), change a tier, see members and what each one uses. */
export function accountsView(context: ViewContext): View {
  const rows = h('tbody');
  const created = h('div', { attrs: { 'data-created-account': true } });
  const name = h('input', { attrs: { name: 'name', required: true, maxlength: 100 } });
  const email = h('input', { attrs: { name: 'ownerEmail', type: 'email', required: true, maxlength: 254 } });
  const tier = h(
    'select',
    { attrs: { name: 'tier' } },
    TIERS.map((t) => h('option', { attrs: { value: t } }, t)),
  );
  const form = h(
    'form',
    { class: 'inline', attrs: { 'data-form': 'account' } },
    h('label', null, 'Name ', name),
    h('label', null, 'Owner e-mail ', email),
    h('label', null, 'Tier ', tier),
    h('button', { attrs: { type: 'submit' } }, 'Create account'),
  );
  const element = h(
    'div',
    { attrs: { 'data-view': 'accounts' } },
    h('h2', null, 'Accounts'),
    form,
    created,
    h(
      'table',
      { attrs: { 'data-table': 'accounts' } },
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          ['Account', 'Tier', 'Members', 'Invited', 'Active clusters', 'GPUs held', 'Created'].map((t) =>
            h('th', null, t),
          ),
        ),
      ),
      rows,
    ),
  );

  const refresh = async () => {
    const list = await context.api.get<AccountList>('/v2/admin/accounts?limit=500');
    replace(rows, list.accounts.map(row));
  };

  const row = (account: AdminAccount) => {
    const select = h(
      'select',
      { attrs: { name: 'tier', 'aria-label': `Tier of ${account.name}` } },
      TIERS.map((t) => h('option', { attrs: { value: t, selected: t === account.tier } }, t)),
    );
    select.addEventListener('change', async () => {
      try {
        await context.api.request('PATCH', `/v2/admin/accounts/${encodeURIComponent(account.id)}`, {
          tier: select.value,
        });
        context.notify(`${account.name} is now on the ${select.value} tier`);
      } catch (error) {
        context.notify(`change tier: ${(error as Error).message}`, 'error');
      }
      await refresh();
    });
    return h(
      'tr',
      { attrs: { 'data-account': account.id } },
      h(
        'td',
        null,
        account.name,
        account.operator ? h('span', { class: 'tag' }, 'operators') : null,
        h('div', { class: 'mono small muted' }, account.id),
      ),
      h('td', null, select),
      h(
        'td',
        null,
        `${account.members.active}`,
        account.members.suspended ? ` (+${account.members.suspended} suspended)` : '',
      ),
      h('td', null, account.pendingInvitations),
      h('td', null, account.clusters.active),
      h('td', null, account.clusters.gpusHeld),
      h('td', null, dateTime(account.createdAt)),
    );
  };

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      const result = await context.api.post<{
        inviteUrl: string;
        emailDelivery: string;
        account: AdminAccount;
      }>('/v2/admin/accounts', { name: name.value.trim(), ownerEmail: email.value.trim(), tier: tier.value });
      replace(
        created,
        h(
          'div',
          { class: 'secret' },
          h(
            'p',
            null,
            `${result.account.name} created. Send its owner this link (shown once`,
            result.emailDelivery === 'sent' ? '; it was also e-mailed' : '',
            '):',
          ),
          h('pre', { class: 'mono', attrs: { 'data-invite-url': true } }, result.inviteUrl),
        ),
      );
      form.reset();
      await refresh();
    } catch (error) {
      context.notify(`create account: ${(error as Error).message}`, 'error');
    }
  });

  return { title: 'Accounts', element, refresh };
}
