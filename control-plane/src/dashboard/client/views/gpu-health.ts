import { h } from '../dom.ts';
import { ago } from '../format.ts';
import type { HostDetail } from '../types.ts';
import type { ViewContext } from '../view.ts';

type Device = HostDetail['gpuDevices'][number];

/**
 * The host page's GPU health section: whether the host takes GPU work at all (and what to fix if not),
 * then per GPU its board, MIG mode, whether placement uses it, and the health kept since the last reset,
 * with the reasons the agent gave; a reset button where there is something to reset.
 */
export function gpuHealthSection(
  host: HostDetail,
  context: ViewContext,
  done: () => Promise<void>,
): HTMLElement {
  return h(
    'section',
    { attrs: { 'data-section': 'gpu-health' } },
    h('h3', null, 'GPU health'),
    host.gpuWork.offered
      ? null
      : h(
          'p',
          { class: 'error', attrs: { 'data-gpu-work': 'refused' } },
          `No GPU work: ${host.gpuWork.reason}`,
        ),
    host.gpuDevices.length === 0
      ? h('p', { class: 'muted' }, 'No GPUs reported.')
      : h(
          'table',
          { attrs: { 'data-table': 'gpu-health' } },
          h(
            'thead',
            null,
            h(
              'tr',
              null,
              ['#', 'Board', 'Type', 'MIG', 'Schedulable', 'Health', 'Since', 'Reasons', ''].map((t) =>
                h('th', null, t),
              ),
            ),
          ),
          h(
            'tbody',
            null,
            host.gpuDevices.map((device) => row(host, device, context, done)),
          ),
        ),
  );
}

function row(host: HostDetail, device: Device, context: ViewContext, done: () => Promise<void>): HTMLElement {
  const state = device.health?.state ?? null;
  return h(
    'tr',
    { attrs: { 'data-gpu-health': String(device.index), 'data-state': state ?? 'unknown' } },
    h('td', null, device.index),
    h('td', null, device.boardType ?? device.name),
    h('td', { class: 'mono small' }, device.gpuType ?? '—'),
    h('td', null, device.migEnabled === null ? '—' : device.migEnabled ? 'on' : 'off'),
    h('td', null, device.schedulable ? 'yes' : 'no'),
    h('td', null, state ? h('span', { class: `badge ${state}` }, state) : '—'),
    h('td', null, device.health ? ago(device.health.since) : '—'),
    h(
      'td',
      { class: 'small' },
      device.health && device.health.reasons.length > 0
        ? h(
            'ul',
            null,
            device.health.reasons.map((r) => h('li', null, `${r.code}: ${r.message} (${r.source})`)),
          )
        : '—',
    ),
    h(
      'td',
      null,
      state === 'failed' || state === 'degraded' ? resetButton(host, device, context, done) : null,
    ),
  );
}

function resetButton(
  host: HostDetail,
  device: Device,
  context: ViewContext,
  done: () => Promise<void>,
): HTMLElement {
  const button = h('button', { attrs: { type: 'button', 'data-action': 'reset-health' } }, 'Reset health');
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      const path = `/v2/admin/hosts/${encodeURIComponent(host.id)}/gpus/${device.index}/reset-health`;
      const result = await context.api.post<{ message: string }>(path, {});
      context.notify(result.message);
    } catch (error) {
      context.notify(`reset GPU ${device.index}: ${(error as Error).message}`, 'error');
    } finally {
      button.disabled = false;
      await done();
    }
  });
  return button;
}
