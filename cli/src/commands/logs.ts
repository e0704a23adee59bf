import type { ApiClient } from '../api.ts';
import type { Command, Context } from '../command.ts';
import { ApiFailure, CliError, EXIT, UsageError } from '../exit-codes.ts';
import { readEvents } from '../sse.ts';
import { findCluster } from './resolve.ts';

interface ClusterLogEntry {
  id: string;
  timestamp: string;
  level: string;
  message: string;
  metadata: { stream: string };
}

interface WorkloadLogs {
  lines: Array<{ seq: number; stream: string; ts: string; line: string }>;
  next: number;
}

export function clusterLine(entry: ClusterLogEntry, timestamps: boolean): string {
  const prefix = timestamps
    ? `${entry.timestamp} ${entry.level.toUpperCase()} [${entry.metadata.stream}] `
    : '';
  return `${prefix}${entry.message}\n`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Where a resource's logs are read: a page, and the SSE stream with its query (resumed: Last-Event-ID sent). */
interface LogRoutes {
  page: string;
  stream: string;
  streamQuery: (tail: number, resumed: boolean) => Record<string, string | number | boolean>;
}

const clusterRoutes = (id: string): LogRoutes => ({
  page: `/v1/clusters/${id}/logs`,
  stream: `/v1/clusters/${id}/logs/stream`,
  streamQuery: (tail, resumed): Record<string, number> => (resumed ? {} : { tail }),
});

/** The customer routes of training jobs (rank 0 unless the server picks otherwise) and endpoint workers. */
const followedRoutes = (page: string): LogRoutes => ({
  page,
  stream: page,
  streamQuery: (tail, resumed): Record<string, number | boolean> =>
    resumed ? { follow: true } : { follow: true, limit: tail },
});

/** Cluster, job or worker logs: a page, or with --follow the SSE stream, reconnected with Last-Event-ID after a drop. */
async function resourceLogs(
  context: Context,
  api: ApiClient,
  routes: LogRoutes,
  tail: number,
  follow: boolean,
  timestamps: boolean,
) {
  if (!follow) {
    const data = await api.call<{ logs: ClusterLogEntry[] }>('GET', routes.page, {
      query: { limit: tail, tail: true },
    });
    for (const entry of data.logs)
      context.out(context.jsonOutput ? `${JSON.stringify(entry)}\n` : clusterLine(entry, timestamps));
    return EXIT.ok;
  }
  let lastId: string | null = null;
  for (let attempt = 0; ; attempt++) {
    try {
      const response = await api.send('GET', routes.stream, {
        query: routes.streamQuery(tail, lastId !== null),
        headers: { accept: 'text/event-stream', ...(lastId === null ? {} : { 'last-event-id': lastId }) },
      });
      attempt = 0;
      for await (const event of readEvents(response.body!)) {
        if (event.event === 'revoked')
          throw new CliError(`log stream ended: access revoked (${event.data})`, EXIT.forbidden);
        if (event.event === 'end') return EXIT.ok;
        if (event.event !== 'log') continue;
        if (event.id) lastId = event.id;
        const entry = JSON.parse(event.data) as ClusterLogEntry;
        context.out(context.jsonOutput ? `${event.data}\n` : clusterLine(entry, timestamps));
      }
    } catch (error) {
      // A refusal ends it; a dropped connection or an unreachable control plane is retried a few times.
      const transient = !(error instanceof CliError) || error.exitCode === EXIT.unreachable;
      if (!transient) throw error;
      if (attempt >= 5) {
        throw error instanceof CliError
          ? error
          : new CliError(`log stream failed: ${(error as Error).message}`, EXIT.unreachable);
      }
    }
    await sleep(Math.min(1000 * 2 ** attempt, 10_000));
  }
}

/** A workload's logs (a training job's rank 0, an endpoint worker) through the operators' workload route; -f polls. */
async function workloadLogs(
  context: Context,
  api: ApiClient,
  workloadId: string,
  tail: number,
  follow: boolean,
) {
  let after = 0;
  let first = true;
  for (;;) {
    const page = await api.call<WorkloadLogs>(
      'GET',
      `/v2/admin/workloads/${encodeURIComponent(workloadId)}/logs`,
      {
        query: { after, limit: 1000 },
      },
    );
    const lines = first && !follow ? page.lines.slice(-tail) : page.lines;
    for (const line of lines)
      context.out(context.jsonOutput ? `${JSON.stringify(line)}\n` : `${line.line}\n`);
    if (page.lines.length === 1000) {
      after = page.next;
      continue;
    }
    first = false;
    after = page.next;
    if (!follow) return EXIT.ok;
    await sleep(1000);
  }
}

function int(text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text)) throw new UsageError(`--tail takes a number of lines, got "${text}"`);
  return Number(text);
}

export async function showLogs(
  context: Context,
  target: string,
  values: Record<string, unknown>,
): Promise<number> {
  const api = context.api();
  const tail = int(values['tail'] as string | undefined, 100);
  const follow = values['follow'] === true;
  try {
    const timestamps = values['timestamps'] === true;
    if (target.startsWith('job_')) {
      const page = `/v2/training/jobs/${encodeURIComponent(target)}/logs`;
      return await resourceLogs(context, api, followedRoutes(page), tail, follow, timestamps);
    }
    // <endpoint>/<worker>: the endpoint's own route, read with the endpoint's permissions.
    const worker = /^(ep_[a-z0-9]+)\/(wl_[a-z0-9]+)$/.exec(target);
    if (worker) {
      const page = `/v2/endpoints/${worker[1]}/workers/${worker[2]}/logs`;
      return await resourceLogs(context, api, followedRoutes(page), tail, follow, timestamps);
    }
    if (target.startsWith('wl_')) return await workloadLogs(context, api, target, tail, follow);
    const cluster = await findCluster(api, target);
    return await resourceLogs(context, api, clusterRoutes(cluster.id), tail, follow, timestamps);
  } catch (error) {
    if (error instanceof ApiFailure && error.status === 403 && target.startsWith('wl_')) {
      context.warn(
        "a bare worker id is read through the operators' workload API: name it as <endpoint>/<worker> (ep_…/wl_…)",
      );
    }
    throw error;
  }
}

export const LOG_OPTIONS = {
  follow: {
    type: 'boolean' as const,
    short: 'f',
    description: 'Keep printing new lines as they come (Ctrl-C stops)',
  },
  tail: { type: 'string' as const, description: 'Lines of history to print first (default 100)', value: 'n' },
  timestamps: {
    type: 'boolean' as const,
    short: 't',
    description: 'Prefix cluster lines with time, level and stream',
  },
};

const logs: Command = {
  path: ['logs'],
  summary: 'Print (or follow) the logs of a cluster, a training job or an endpoint worker',
  args: '<cluster|job_…|ep_…/wl_…>',
  arity: [1, 1],
  description:
    'A cluster (by name or id) streams over Server-Sent Events with -f and resumes after a dropped connection ' +
    'without losing lines; so do a training job (job_…, its rank-0 worker) and an endpoint worker (ep_…/wl_…, ' +
    'the ids `anvil endpoints` and GET /v2/endpoints/{id}/workers show), with the resource’s own permissions. ' +
    "Operators may name a bare workload id (wl_…): the operators' workload route.",
  options: LOG_OPTIONS,
  examples: [
    'anvil logs dev --tail 50',
    'anvil logs dev -f',
    'anvil logs job_abc123 -f',
    'anvil logs ep_abc/wl_def --tail 20',
    'anvil logs dev --json | jq .level',
  ],
  async run(context, { values, positionals }) {
    return showLogs(context, positionals[0]!, values);
  },
};

export const logCommands = [logs];
