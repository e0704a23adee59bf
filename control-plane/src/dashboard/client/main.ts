import { Api, ApiFailure } from './api.ts';
import { h, replace } from './dom.ts';
import type { View, ViewContext } from './view.ts';
import { accountsView } from './views/accounts.ts';
import { clustersView } from './views/clusters.ts';
import { fleetView } from './views/fleet.ts';
import { hostView } from './views/host.ts';
import { tokensView } from './views/tokens.ts';
import { workloadView } from './views/workload.ts';

/** The key lives in this tab's session storage only: closing the tab signs out. */
const KEY_STORAGE = 'anvil.operatorKey';
const REFRESH_MS = 5_000;

const root = document.getElementById('app') as HTMLElement;

function signIn(message?: string): void {
  const key = h('input', {
    attrs: { type: 'password', name: 'key', autocomplete: 'off', required: true, placeholder: 'anv_live_…' },
  });
  const error = h('p', { class: 'error', attrs: { role: 'alert' } }, message ?? '');
  const form = h(
    'form',
    { class: 'signin', attrs: { 'data-form': 'sign-in' } },
    h('h1', null, 'Anvil operators'),
    h('p', { class: 'muted' }, 'Sign in with an API key of an owner or admin of the operators account.'),
    h('label', null, 'API key ', key),
    h('button', { attrs: { type: 'submit' } }, 'Sign in'),
    error,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const api = new Api(key.value.trim());
    try {
      // The admin API decides: a valid key of anyone else gets its 403 here, shown as is.
      await api.get('/v2/admin/hosts');
      sessionStorage.setItem(KEY_STORAGE, key.value.trim());
      start(api);
    } catch (failure) {
      error.textContent = (failure as Error).message;
    }
  });
  replace(root, form);
  key.focus();
}

function start(api: Api): void {
  const status = h('p', { class: 'status', attrs: { role: 'status', 'data-status-line': true } });
  const content = h('section', { class: 'content' });
  const nav = h(
    'nav',
    null,
    h('strong', null, 'Anvil'),
    h('a', { attrs: { href: '#/fleet' } }, 'Fleet'),
    h('a', { attrs: { href: '#/clusters' } }, 'Clusters'),
    h('a', { attrs: { href: '#/accounts' } }, 'Accounts'),
    h('a', { attrs: { href: '#/tokens' } }, 'Join tokens'),
    h('span', { class: 'spacer' }),
    h('a', { attrs: { href: '/docs', target: '_blank', rel: 'noopener' } }, 'API docs'),
    h('button', { attrs: { type: 'button', 'data-action': 'sign-out' }, on: { click: signOut } }, 'Sign out'),
  );
  replace(root, nav, status, content);

  const context: ViewContext = {
    api,
    notify(message, kind = 'info') {
      status.textContent = message;
      status.className = `status ${kind}`;
    },
  };
  let current: View | null = null;
  let timer: number | undefined;

  const refresh = async (view: View) => {
    try {
      await view.refresh();
    } catch (failure) {
      if (failure instanceof ApiFailure && failure.status === 401)
        return signOut('Your key no longer works.');
      if (view === current) context.notify((failure as Error).message, 'error');
    }
  };
  const route = () => {
    const [, section, id] = (location.hash || '#/fleet').split('/');
    const decoded = id ? decodeURIComponent(id) : '';
    const view =
      section === 'hosts' && decoded
        ? hostView(context, decoded)
        : section === 'workloads' && decoded
          ? workloadView(context, decoded)
          : section === 'tokens'
            ? tokensView(context)
            : section === 'clusters'
              ? clustersView(context, decoded)
              : section === 'accounts'
                ? accountsView(context)
                : fleetView(context);
    current = view;
    document.title = `${view.title} · Anvil operators`;
    context.notify('');
    replace(content, view.element);
    void refresh(view);
  };
  function signOut(message?: unknown): void {
    window.clearInterval(timer);
    window.removeEventListener('hashchange', route);
    sessionStorage.removeItem(KEY_STORAGE);
    signIn(typeof message === 'string' ? message : undefined);
  }
  window.addEventListener('hashchange', route);
  timer = window.setInterval(() => {
    if (current && document.visibilityState === 'visible') void refresh(current);
  }, REFRESH_MS);
  route();
}

const saved = sessionStorage.getItem(KEY_STORAGE);
if (saved) start(new Api(saved));
else signIn();
