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

/** Cluster logs: a page, or with --follow the SSE stream, reconnected with Last-Event-ID after a drop. */
async function clusterLogs(
  context: Context,
  api: ApiClient,
  id: string,
  tail: number,
  follow: boolean,
  timestamps: boolean,
) {
  if (!follow) {
    const data = await api.call<{ logs: ClusterLogEntry[] }>('GET', `/v1/clusters/${id}/logs`, {
      query: { limit: tail, tail: true },
    });
    for (const entry of data.logs)
      context.out(context.jsonOutput ? `${JSON.stringify(entry)}\n` : clusterLine(entry, timestamps));
    return EXIT.ok;
  }
  let lastId: string | null = null;
  for (let attempt = 0; ; attempt++) {
    try {
      const response = await api.send('GET', `/v1/clusters/${id}/logs/stream`, {
        query: lastId === null ? { tail } : {},
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

/** A training job's logs: the customer route where the control plane has it, else rank 0's workload. */
async function jobLogs(context: Context, api: ApiClient, jobId: string, tail: number, follow: boolean) {
  await api.call('GET', `/v2/training/jobs/${encodeURIComponent(jobId)}`);
  return workloadLogs(context, api, `${jobId}-r0`, tail, follow);
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
    if (target.startsWith('job_')) return await jobLogs(context, api, target, tail, follow);
    if (target.startsWith('wl_')) return await workloadLogs(context, api, target, tail, follow);
    const cluster = await findCluster(api, target);
    return await clusterLogs(context, api, cluster.id, tail, follow, values['timestamps'] === true);
  } catch (error) {
    if (error instanceof ApiFailure && error.status === 403 && !target.startsWith('cluster_')) {
      context.warn(
        "logs of jobs and endpoint workers are read through the operators' workload API on this control plane",
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
  args: '<cluster|job_…|wl_…>',
  arity: [1, 1],
  description:
    'A cluster (by name or id) streams over Server-Sent Events with -f and resumes after a dropped connection ' +
    'without losing lines. A training job (job_…) shows its rank-0 worker; an endpoint worker by its id (wl_…).',
  options: LOG_OPTIONS,
  examples: [
    'anvil logs dev --tail 50',
    'anvil logs dev -f',
    'anvil logs job_abc123 -f',
    'anvil logs dev --json | jq .level',
  ],
  async run(context, { values, positionals }) {
    return showLogs(context, positionals[0]!, values);
  },
};

export const logCommands = [logs];
