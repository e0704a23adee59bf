import type { ApiClient } from '../api.ts';
import type { Command, Context, Values } from '../command.ts';
import { CliError, EXIT, UsageError } from '../exit-codes.ts';
import { details, table } from '../output.ts';
import { waitUntil } from '../wait.ts';
import { age, type ClusterView, findCluster, listClusters } from './resolve.ts';

const COLUMNS = [
  { header: 'id', value: (c: ClusterView) => c.id },
  { header: 'name', value: (c: ClusterView) => c.name },
  { header: 'status', value: (c: ClusterView) => c.status },
  { header: 'gpus', value: (c: ClusterView) => `${c.gpu_count}x${c.gpu_type}` },
  { header: 'image', value: (c: ClusterView) => c.docker_image },
  { header: 'ssh', value: (c: ClusterView) => (c.ssh_connection ? 'yes' : 'no') },
  { header: 'age', value: (c: ClusterView) => age(c.created_at) },
];

function describe(c: ClusterView): string {
  const ssh = c.ssh_connection;
  return details([
    ['ID', c.id],
    ['Name', c.name],
    ['Status', c.status_reason ? `${c.status} (${c.status_reason})` : c.status],
    ['GPUs', `${c.gpu_count}x${c.gpu_type}`],
    ['CPU / memory / disk', `${c.cpu_cores} cores / ${c.memory_gb} GiB / ${c.storage_gb} GB`],
    ['Image', c.docker_image],
    ['SSH', ssh ? `ssh -p ${ssh.port} ${ssh.username}@${ssh.host}   (or: anvil ssh ${c.name})` : 'disabled'],
    ['Proxy', c.proxy_url],
    ['Ports', c.port_mappings.map((p) => `${p.internal_port}/${p.protocol}`).join(', ')],
    ['Cost', `${c.cost.total_cost} ${c.cost.currency} (${c.cost.hourly_rate}/h)`],
    ['Created', c.created_at],
  ]);
}

const list: Command = {
  path: ['clusters', 'list'],
  summary: 'List clusters',
  options: {
    status: {
      type: 'string',
      description: 'Only clusters in this status (running, stopped, …)',
      value: 'status',
    },
  },
  examples: ['anvil clusters list', 'anvil clusters list --status running --json'],
  async run(context, { values }) {
    const status = values['status'] as string | undefined;
    const clusters = await listClusters(context.api(), status ? { status } : {});
    context.show(clusters, () => table(clusters, COLUMNS));
    return EXIT.ok;
  },
};

const get: Command = {
  path: ['clusters', 'get'],
  summary: 'Show a cluster (by name or id)',
  args: '<cluster>',
  arity: [1, 1],
  examples: ['anvil clusters get dev', 'anvil clusters get cluster_abc123 --json'],
  async run(context, { positionals }) {
    const cluster = await findCluster(context.api(), positionals[0]!);
    context.show(cluster, () => describe(cluster));
    return EXIT.ok;
  },
};

function int(values: Values, name: string): number | undefined {
  const text = values[name] as string | undefined;
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text)) throw new UsageError(`--${name} takes a whole number, got "${text}"`);
  return Number(text);
}

export function envPairs(list: string[] | undefined): Record<string, string> | undefined {
  if (!list?.length) return undefined;
  return Object.fromEntries(
    list.map((pair) => {
      const at = pair.indexOf('=');
      if (at <= 0) throw new UsageError(`--env takes NAME=value, got "${pair}"`);
      return [pair.slice(0, at), pair.slice(at + 1)];
    }),
  );
}

/** Polls the cluster until it runs (or fails): `--wait` on create and start. */
async function waitRunning(
  context: Context,
  api: ApiClient,
  id: string,
  seconds: number,
): Promise<ClusterView> {
  const cluster = await waitUntil(seconds * 1000, async () => {
    const c = await api.call<ClusterView>('GET', `/v1/clusters/${id}`);
    return c.status === 'running' || c.status === 'error' ? c : null;
  });
  if (!cluster) throw new CliError(`cluster ${id} is not running after ${seconds} s`, EXIT.failure);
  if (cluster.status === 'error') {
    context.warn(`cluster ${id} failed: ${cluster.status_reason ?? 'no reason given'}`);
    throw new CliError(`cluster ${id} is in error`, EXIT.jobFailed);
  }
  return cluster;
}

const WAIT = {
  wait: { type: 'boolean' as const, description: 'Wait until the cluster runs (exit 9 if it goes to error)' },
  timeout: { type: 'string' as const, description: 'Seconds --wait waits (default 600)', value: 'seconds' },
};

const create: Command = {
  path: ['clusters', 'create'],
  summary: 'Create a GPU cluster',
  options: {
    name: { type: 'string', description: 'Name (required)', value: 'name' },
    image: { type: 'string', description: 'Docker image (unless the template names one)', value: 'image' },
    template: { type: 'string', description: 'Template id', value: 'id' },
    'gpu-type': { type: 'string', description: 'GPU type, e.g. H100', value: 'type' },
    'gpu-count': { type: 'string', description: 'GPUs (default 1)', value: 'n' },
    cpu: { type: 'string', description: 'CPU cores', value: 'n' },
    memory: { type: 'string', description: 'Memory in GiB', value: 'gib' },
    storage: { type: 'string', description: 'Volume size in GB', value: 'gb' },
    region: { type: 'string', description: 'Region', value: 'region' },
    command: { type: 'string', description: 'Command, run as sh -c', value: 'command' },
    env: { type: 'string', multiple: true, description: 'Environment variable', value: 'name=value' },
    port: { type: 'string', multiple: true, description: 'Container port to map (TCP)', value: 'port' },
    ssh: { type: 'boolean', description: 'Enable SSH (anvil ssh, anvil ssh-config)' },
    ...WAIT,
  },
  examples: [
    'anvil clusters create --name dev --image pytorch/pytorch:2.4.0-cuda12.4 --gpu-type H100 --gpu-count 2 --ssh --wait',
    'anvil clusters create --name web --image my/app:1 --port 8080 --env MODE=prod',
  ],
  async run(context, { values }) {
    const name = values['name'] as string | undefined;
    if (!name) throw new UsageError('--name is required');
    const ports = (values['port'] as string[] | undefined)?.map((p) => {
      if (!/^\d+$/.test(p)) throw new UsageError(`--port takes a port number, got "${p}"`);
      return { internal_port: Number(p) };
    });
    const body = {
      name,
      docker_image: values['image'],
      template_id: values['template'],
      gpu_type: values['gpu-type'],
      gpu_count: int(values, 'gpu-count'),
      cpu_cores: int(values, 'cpu'),
      memory_gb: int(values, 'memory'),
      storage_gb: int(values, 'storage'),
      region: values['region'],
      command: values['command'],
      env: envPairs(values['env'] as string[] | undefined),
      ports,
      ssh_enabled: values['ssh'] === true ? true : undefined,
    };
    const api = context.api();
    let cluster = await api.call<ClusterView>('POST', '/v1/clusters', { body });
    if (values['wait']) cluster = await waitRunning(context, api, cluster.id, int(values, 'timeout') ?? 600);
    context.show(cluster, () => describe(cluster));
    return EXIT.ok;
  },
};

const start: Command = {
  path: ['clusters', 'start'],
  summary: 'Start a stopped cluster',
  args: '<cluster>',
  arity: [1, 1],
  options: WAIT,
  examples: ['anvil clusters start dev --wait'],
  async run(context, { values, positionals }) {
    const api = context.api();
    const { id } = await findCluster(api, positionals[0]!);
    let cluster = await api.call<ClusterView>('POST', `/v1/clusters/${id}/start`);
    if (values['wait']) cluster = await waitRunning(context, api, id, int(values, 'timeout') ?? 600);
    context.show(cluster, () => `${cluster.id} ${cluster.status}\n`);
    return EXIT.ok;
  },
};

const stop: Command = {
  path: ['clusters', 'stop'],
  summary: 'Stop a running cluster (its volume is kept)',
  args: '<cluster>',
  arity: [1, 1],
  options: {
    wait: { type: 'boolean', description: 'Wait until it has stopped' },
    reason: { type: 'string', description: 'Why (kept with the cluster)', value: 'text' },
  },
  examples: ['anvil clusters stop dev', 'anvil clusters stop dev --wait'],
  async run(context, { values, positionals }) {
    const api = context.api();
    const { id } = await findCluster(api, positionals[0]!);
    const body = {
      ...(values['wait'] ? { wait_for_completion: true } : {}),
      ...(values['reason'] ? { stop_reason: values['reason'] } : {}),
    };
    const result = await api.call<{ status?: string }>('POST', `/v1/clusters/${id}/stop`, { body });
    context.show(result, () => `${id} ${result.status ?? 'stopping'}\n`);
    return EXIT.ok;
  },
};

const remove: Command = {
  path: ['clusters', 'delete'],
  summary: 'Delete a cluster and its volume',
  args: '<cluster>',
  arity: [1, 1],
  options: {
    yes: { type: 'boolean', short: 'y', description: 'Confirm: the volume is deleted with the cluster' },
    wait: { type: 'boolean', description: 'Wait until it is gone' },
    force: { type: 'boolean', description: 'Delete even if the container does not stop cleanly' },
  },
  examples: ['anvil clusters delete dev --yes'],
  async run(context, { values, positionals }) {
    if (!values['yes'])
      throw new UsageError(`deleting ${positionals[0]} removes its volume: add --yes to confirm`);
    const api = context.api();
    const { id } = await findCluster(api, positionals[0]!);
    const body = {
      confirm_deletion: 'DELETE',
      ...(values['wait'] ? { wait_for_completion: true } : {}),
      ...(values['force'] ? { force: true } : {}),
    };
    const result = await api.call<{ status?: string }>('DELETE', `/v1/clusters/${id}`, { body });
    context.show(result, () => `${id} ${result.status ?? 'deleting'}\n`);
    return EXIT.ok;
  },
};

export const clusterCommands = [list, get, create, start, stop, remove];
