import type { Command } from '../command.ts';
import { EXIT, UsageError } from '../exit-codes.ts';
import { bytes, table } from '../output.ts';
import { age } from './resolve.ts';

interface Host {
  id: string;
  name: string;
  hostname: string | null;
  region: string | null;
  state: string;
  status: string;
  cordoned: boolean;
  connected: boolean;
  agentVersion: string | null;
  lastHeartbeatAt: string | null;
  gpus: { count: number; models: string[]; simulated: boolean };
  memoryBytes: number | null;
}

const COLUMNS = [
  { header: 'id', value: (h: Host) => h.id },
  { header: 'name', value: (h: Host) => h.name },
  { header: 'state', value: (h: Host) => `${h.state}${h.cordoned ? ',cordoned' : ''}` },
  { header: 'connected', value: (h: Host) => (h.connected ? 'yes' : 'no') },
  {
    header: 'gpus',
    value: (h: Host) =>
      `${h.gpus.count}x${[...new Set(h.gpus.models)].join('+') || '-'}${h.gpus.simulated ? ' (simulated)' : ''}`,
  },
  { header: 'memory', value: (h: Host) => (h.memoryBytes === null ? null : bytes(h.memoryBytes)) },
  { header: 'agent', value: (h: Host) => h.agentVersion },
  { header: 'heartbeat', value: (h: Host) => (h.lastHeartbeatAt ? `${age(h.lastHeartbeatAt)} ago` : null) },
];

const list: Command = {
  path: ['hosts', 'list'],
  summary: 'List GPU servers (operators)',
  examples: ['anvil hosts list', "anvil hosts list --json | jq '.[] | select(.connected | not) | .id'"],
  async run(context) {
    const { hosts } = await context.api().call<{ hosts: Host[] }>('GET', '/v2/admin/hosts');
    context.show(hosts, () => table(hosts, COLUMNS));
    return EXIT.ok;
  },
};

const get: Command = {
  path: ['hosts', 'get'],
  summary: 'Show a host with its inventory and workloads (operators)',
  args: '<host id>',
  arity: [1, 1],
  examples: ['anvil hosts get host_abc123 --json'],
  async run(context, { positionals }) {
    const host = await context
      .api()
      .call<Host & { workloadList: Array<{ id: string; kind: string; phase: string; gpus: number[] }> }>(
        'GET',
        `/v2/admin/hosts/${encodeURIComponent(positionals[0]!)}`,
      );
    context.show(host, () =>
      [
        table([host], COLUMNS),
        '',
        table(host.workloadList, [
          { header: 'workload', value: (w) => w.id },
          { header: 'kind', value: (w) => w.kind },
          { header: 'phase', value: (w) => w.phase },
          { header: 'gpus', value: (w) => w.gpus.join(',') },
        ]),
      ].join('\n'),
    );
    return EXIT.ok;
  },
};

function hostAction(verb: 'cordon' | 'uncordon' | 'drain', summary: string): Command {
  return {
    path: ['hosts', verb],
    summary,
    args: '<host id>',
    arity: [1, 1],
    options:
      verb === 'uncordon'
        ? {}
        : { reason: { type: 'string', description: 'Why (kept with the host)', value: 'text' } },
    examples: [`anvil hosts ${verb} host_abc123${verb === 'uncordon' ? '' : " --reason 'disk replacement'"}`],
    async run(context, { values, positionals }) {
      const body = values['reason'] ? { reason: values['reason'] } : {};
      const result = await context
        .api()
        .call<Record<string, unknown>>(
          'POST',
          `/v2/admin/hosts/${encodeURIComponent(positionals[0]!)}/${verb}`,
          { body },
        );
      context.show(result, () => `${positionals[0]} ${verb === 'drain' ? 'draining' : `${verb}ed`}\n`);
      return EXIT.ok;
    },
  };
}

const joinToken: Command = {
  path: ['join-token'],
  summary: 'Create a join token for a new GPU server and print the command that joins it (operators)',
  options: {
    uses: {
      type: 'string',
      description: 'How many servers may join with it (default 1; 0 = any until expiry)',
      value: 'n',
    },
    'expires-in': { type: 'string', description: 'Seconds it stays valid', value: 'seconds' },
    description: { type: 'string', description: 'What it is for', value: 'text' },
  },
  examples: ['anvil join-token', 'anvil join-token --uses 10 --expires-in 86400 --description rack-4'],
  async run(context, { values }) {
    const whole = (name: string) => {
      const text = values[name] as string | undefined;
      if (text !== undefined && !/^\d+$/.test(text))
        throw new UsageError(`--${name} takes a whole number, got "${text}"`);
      return text === undefined ? undefined : Number(text);
    };
    const uses = whole('uses');
    const expires = whole('expires-in');
    const body = {
      ...(uses === undefined ? {} : { maxUses: uses === 0 ? null : uses }),
      ...(expires === undefined ? {} : { expiresIn: expires }),
      ...(values['description'] ? { description: values['description'] } : {}),
    };
    const created = await context
      .api()
      .call<{ value: string; installCommand: string; token: { id: string; expiresAt: string | null } }>(
        'POST',
        '/v2/admin/hosts/join-tokens',
        { body },
      );
    context.show(
      created,
      () =>
        `Join token ${created.token.id} (shown once):\n  ${created.value}\nOn the GPU server:\n  ${created.installCommand}\n`,
    );
    return EXIT.ok;
  },
};

export const hostCommands = [
  list,
  get,
  hostAction('cordon', 'Stop placing new work on a host (operators)'),
  hostAction('uncordon', 'Place work on a host again (operators)'),
  hostAction('drain', 'Cordon a host and move its work away (operators)'),
  joinToken,
];
