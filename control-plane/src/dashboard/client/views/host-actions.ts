import { h } from '../dom.ts';
import type { Host } from '../types.ts';
import type { ViewContext } from '../view.ts';

/** Cordon or uncordon, and drain: the operator actions on one host, then `done` to re-read. */
export function hostActions(host: Host, context: ViewContext, done: () => Promise<void>): HTMLElement {
  const act = async (button: HTMLButtonElement, path: string, verb: string) => {
    button.disabled = true;
    try {
      const result = await context.api.post<{ message: string }>(`/v2/admin/hosts/${host.id}/${path}`, {});
      context.notify(result.message);
    } catch (error) {
      context.notify(`${verb} ${host.name}: ${(error as Error).message}`, 'error');
    } finally {
      button.disabled = false;
      await done();
    }
  };
  const cordon = h(
    'button',
    { attrs: { type: 'button', 'data-action': host.cordoned ? 'uncordon' : 'cordon' } },
    host.cordoned ? 'Uncordon' : 'Cordon',
  );
  cordon.addEventListener('click', () => {
    void act(cordon, host.cordoned ? 'uncordon' : 'cordon', host.cordoned ? 'uncordon' : 'cordon');
  });
  const drain = h('button', { attrs: { type: 'button', 'data-action': 'drain' } }, 'Drain');
  drain.addEventListener('click', () => void act(drain, 'drain', 'drain'));
  return h('span', { class: 'actions' }, cordon, drain);
}

export function statusBadge(host: Host): HTMLElement {
  return h('span', { class: `badge ${host.status}`, attrs: { 'data-status': host.status } }, host.status);
}
