import { readFileSync } from 'node:fs';
import type { Command, Values } from '../command.ts';
import { CliError, EXIT, UsageError } from '../exit-codes.ts';
import { table } from '../output.ts';
import { envPairs } from './clusters.ts';
import { age } from './resolve.ts';

interface Endpoint {
  id: string;
  name: string;
  status: string;
  statusReason: string | null;
  url: string;
  image: string | null;
  gpuType: string;
  gpuCount: number;
  createdAt: string;
  workers: { target: number; ready: number; starting: number; draining: number };
}

/** A JSON body given as --file <path> ("-" for stdin), or --data '<json>'. */
export function jsonBody(values: Values): Record<string, unknown> | undefined {
  const file = values['file'] as string | undefined;
  const data = values['data'] as string | undefined;
  if (file === undefined && data === undefined) return undefined;
  let text: string;
  try {
    text = data ?? readFileSync(file === '-' ? 0 : file!, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read ${file}: ${(error as Error).message}`);
  }
  try {
    const parsed = JSON.parse(text) as unknown;
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not a JSON object');
    return parsed as Record<string, unknown>;
  } catch (error) {
    throw new UsageError(`the request body is not a JSON object: ${(error as Error).message}`);
  }
}

export const BODY_OPTIONS = {
  file: {
    type: 'string' as const,
    short: 'f',
    description: 'The request body from a JSON file ("-": stdin)',
    value: 'path',
  },
  data: { type: 'string' as const, short: 'd', description: 'The request body as JSON text', value: 'json' },
};

const list: Command = {
  path: ['endpoints', 'list'],
  summary: 'List serverless endpoints',
  examples: ['anvil endpoints list', 'anvil endpoints list --json'],
  async run(context) {
    const api = context.api();
    const all: Endpoint[] = [];
    for (let offset = 0; ; ) {
      const page = await api.call<{ endpoints: Endpoint[]; pagination: { hasMore: boolean } }>(
        'GET',
        '/v2/endpoints',
        {
          query: { limit: 100, offset },
        },
      );
      all.push(...page.endpoints);
      offset += page.endpoints.length;
      if (!page.pagination.hasMore || page.endpoints.length === 0) break;
    }
    context.show(all, () =>
      table(all, [
        { header: 'id', value: (e) => e.id },
        { header: 'name', value: (e) => e.name },
        { header: 'status', value: (e) => e.status },
        { header: 'gpus', value: (e) => `${e.gpuCount}x${e.gpuType}` },
        { header: 'workers', value: (e) => `${e.workers.ready}/${e.workers.target}` },
        { header: 'image', value: (e) => e.image },
        { header: 'age', value: (e) => age(e.createdAt) },
      ]),
    );
    return EXIT.ok;
  },
};

const create: Command = {
  path: ['endpoints', 'create'],
  summary: 'Create a serverless endpoint',
  description:
    'Flags build the common body; --file or --data give the whole body of POST /v2/endpoints (flags given too ' +
    'override its fields). --wait waits until a worker is ready (status active).',
  options: {
    name: { type: 'string', description: 'Name', value: 'name' },
    image: { type: 'string', description: 'Worker image', value: 'image' },
    template: { type: 'string', description: 'Template id', value: 'id' },
    'gpu-type': { type: 'string', description: 'GPU type, e.g. H100', value: 'type' },
    'gpu-count': { type: 'string', description: 'GPUs per worker', value: 'n' },
    workers: { type: 'string', description: 'Worker count', value: 'n' },
    'max-concurrency': { type: 'string', description: 'Jobs per worker at once', value: 'n' },
    env: { type: 'string', multiple: true, description: 'Environment variable', value: 'name=value' },
    wait: { type: 'boolean', description: 'Wait until the endpoint is active' },
    ...BODY_OPTIONS,
  },
  examples: [
    'anvil endpoints create --name llm --image my/worker:1 --gpu-type H100 --workers 1 --wait',
    'anvil endpoints create --file endpoint.json',
  ],
  async run(context, { values }) {
    const body: Record<string, unknown> = jsonBody(values) ?? {};
    const number = (name: string) => {
      const text = values[name] as string | undefined;
      if (text !== undefined && !/^\d+$/.test(text)) throw new UsageError(`--${name} takes a whole number`);
      return text === undefined ? undefined : Number(text);
    };
    const set = (field: string, value: unknown) => {
      if (value !== undefined) body[field] = value;
    };
    set('name', values['name']);
    set('image', values['image']);
    set('templateId', values['template']);
    set('gpuType', values['gpu-type']);
    set('gpuCount', number('gpu-count'));
    const configuration = { ...((body['configuration'] as Record<string, unknown>) ?? {}) };
    if (number('workers') !== undefined) configuration['workerCount'] = number('workers');
    if (number('max-concurrency') !== undefined) configuration['maxConcurrency'] = number('max-concurrency');
    const env = envPairs(values['env'] as string[] | undefined);
    if (env) configuration['environmentVariables'] = env;
    if (Object.keys(configuration).length) body['configuration'] = configuration;
    if (!body['name']) throw new UsageError('--name is required (or a name in --file/--data)');
    const api = context.api();
    let endpoint = await api.call<Endpoint>('POST', '/v2/endpoints', { body });
    if (values['wait']) {
      const { waitUntil } = await import('../wait.ts');
      const ready = await waitUntil(600_000, async () => {
        const e = await api.call<Endpoint>('GET', `/v2/endpoints/${endpoint.id}`);
        return e.status === 'active' || e.status === 'error' || e.status === 'failed' ? e : null;
      });
      if (!ready) throw new CliError(`endpoint ${endpoint.id} is not active after 600 s`, EXIT.failure);
      if (ready.status !== 'active')
        throw new CliError(
          `endpoint ${endpoint.id} is ${ready.status}: ${ready.statusReason ?? ''}`,
          EXIT.jobFailed,
        );
      endpoint = ready;
    }
    context.show(endpoint, () => `${endpoint.id} ${endpoint.status}  ${endpoint.url}\n`);
    return EXIT.ok;
  },
};

const remove: Command = {
  path: ['endpoints', 'delete'],
  summary: 'Delete an endpoint: its queued jobs are cancelled and its workers removed',
  args: '<endpoint id>',
  arity: [1, 1],
  options: { yes: { type: 'boolean', short: 'y', description: 'Confirm' } },
  examples: ['anvil endpoints delete ep_abc123 --yes'],
  async run(context, { values, positionals }) {
    if (!values['yes'])
      throw new UsageError(`deleting ${positionals[0]} cancels its queued jobs: add --yes to confirm`);
    const result = await context
      .api()
      .call<{ id: string; cancelledJobs: number }>(
        'DELETE',
        `/v2/endpoints/${encodeURIComponent(positionals[0]!)}`,
      );
    context.show(result, () => `${result.id} deleted (${result.cancelledJobs} queued jobs cancelled)\n`);
    return EXIT.ok;
  },
};

interface JobStatus {
  id: string;
  status: string;
  output?: unknown;
  error?: unknown;
}

const FINAL_FAILURES = new Set(['FAILED', 'CANCELLED', 'TIMED_OUT']);

const run: Command = {
  path: ['run'],
  summary: 'Submit a job to a serverless endpoint',
  args: "<endpoint id> '<json input>'",
  arity: [2, 2],
  description:
    'Without --sync prints the job id (IN_QUEUE); with --sync waits for the result (runsync, then status-sync ' +
    "while it runs longer) and prints the output; exit 9 when the job ends FAILED, CANCELLED or TIMED_OUT. '-' reads the input from stdin.",
  options: {
    sync: { type: 'boolean', short: 's', description: 'Wait for the result and print the output' },
    timeout: { type: 'string', description: 'Seconds --sync waits (default 300)', value: 'seconds' },
  },
  examples: [
    'anvil run ep_abc123 \'{"prompt":"hello"}\' --sync',
    'anvil run ep_abc123 \'{"prompt":"hello"}\'   # → the job id',
    'anvil run ep_abc123 "$(cat input.json)" --sync --json | jq .output',
  ],
  async run(context, { values, positionals }) {
    const [endpoint, text] = positionals as [string, string];
    let input: unknown;
    try {
      input = JSON.parse(text === '-' ? readFileSync(0, 'utf8') : text);
    } catch (error) {
      throw new UsageError(`the input is not JSON: ${(error as Error).message}`);
    }
    const api = context.api();
    const base = `/v2/${encodeURIComponent(endpoint)}`;
    if (!values['sync']) {
      const job = await api.call<JobStatus>('POST', `${base}/run`, { body: { input } });
      context.show(job, () => `${job.id} ${job.status}\n`);
      return EXIT.ok;
    }
    const timeout = Number((values['timeout'] as string | undefined) ?? 300) * 1000;
    if (!Number.isFinite(timeout) || timeout <= 0) throw new UsageError('--timeout takes seconds');
    const deadline = Date.now() + timeout;
    const wait = () => Math.max(0, Math.min(60_000, deadline - Date.now()));
    let job = await api.call<JobStatus>('POST', `${base}/runsync`, {
      body: { input },
      query: { wait: wait() },
    });
    while (!['COMPLETED', ...FINAL_FAILURES].includes(job.status) && Date.now() < deadline) {
      job = await api.call<JobStatus>('GET', `${base}/status-sync/${job.id}`, { query: { wait: wait() } });
    }
    context.show(job, () =>
      job.status === 'COMPLETED'
        ? `${JSON.stringify(job.output)}\n`
        : `${job.id} ${job.status}${job.error ? `: ${JSON.stringify(job.error)}` : ''}\n`,
    );
    if (FINAL_FAILURES.has(job.status)) return EXIT.jobFailed;
    if (job.status !== 'COMPLETED') {
      context.warn(`job ${job.id} is still ${job.status} after ${timeout / 1000} s`);
      return EXIT.failure;
    }
    return EXIT.ok;
  },
};

export const endpointCommands = [list, create, remove, run];
