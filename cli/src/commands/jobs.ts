import type { Command } from '../command.ts';
import { EXIT, UsageError } from '../exit-codes.ts';
import { table } from '../output.ts';
import { BODY_OPTIONS, jsonBody } from './endpoints.ts';
import { LOG_OPTIONS, showLogs } from './logs.ts';
import { age } from './resolve.ts';

interface Job {
  id: string;
  name: string;
  status: string;
  statusReason: string | null;
  modelType: string | null;
  gpuType: string;
  maxWorkers: number;
  progress: { percentage?: number } | null;
  createdAt: string;
}

const COLUMNS = [
  { header: 'id', value: (j: Job) => j.id },
  { header: 'name', value: (j: Job) => j.name },
  { header: 'status', value: (j: Job) => j.status },
  { header: 'gpus', value: (j: Job) => `${j.maxWorkers}x${j.gpuType}` },
  {
    header: 'progress',
    value: (j: Job) => (j.progress?.percentage === undefined ? null : `${j.progress.percentage}%`),
  },
  { header: 'age', value: (j: Job) => age(j.createdAt) },
];

const list: Command = {
  path: ['jobs', 'list'],
  summary: 'List training jobs',
  options: { status: { type: 'string', description: 'Only jobs in this status', value: 'status' } },
  examples: ['anvil jobs list', 'anvil jobs list --status running --json'],
  async run(context, { values }) {
    const api = context.api();
    const all: Job[] = [];
    for (let offset = 0; ; ) {
      const page = await api.call<{ jobs: Job[]; pagination: { total: number } }>(
        'GET',
        '/v2/training/jobs',
        {
          query: { limit: 100, offset, status: values['status'] as string | undefined },
        },
      );
      all.push(...page.jobs);
      offset += page.jobs.length;
      if (page.jobs.length === 0 || offset >= page.pagination.total) break;
    }
    context.show(all, () => table(all, COLUMNS));
    return EXIT.ok;
  },
};

const create: Command = {
  path: ['jobs', 'create'],
  summary: 'Create a training job from a JSON body (POST /v2/training/jobs)',
  options: BODY_OPTIONS,
  examples: [
    'anvil jobs create --file job.json',
    'anvil jobs create -d \'{"name":"ft","modelType":"llm","datasetId":"ds_…","gpuType":"H100","maxWorkers":1,"config":{…}}\'',
  ],
  async run(context, { values }) {
    const body = jsonBody(values);
    if (!body) throw new UsageError('give the job as --file <path> or --data <json>');
    const job = await context.api().call<Job>('POST', '/v2/training/jobs', { body });
    context.show(job, () => table([job], COLUMNS));
    return EXIT.ok;
  },
};

function action(verb: 'stop' | 'resume', summary: string): Command {
  return {
    path: ['jobs', verb],
    summary,
    args: '<job id>',
    arity: [1, 1],
    examples: [`anvil jobs ${verb} job_abc123`],
    async run(context, { positionals }) {
      const id = encodeURIComponent(positionals[0]!);
      const job = await context.api().call<Job>('POST', `/v2/training/jobs/${id}/${verb}`, { body: {} });
      context.show(job, () => `${job.id ?? positionals[0]} ${job.status ?? verb}\n`);
      return EXIT.ok;
    },
  };
}

const logs: Command = {
  path: ['jobs', 'logs'],
  summary: "Print (or follow) a training job's logs",
  args: '<job id>',
  arity: [1, 1],
  options: LOG_OPTIONS,
  examples: ['anvil jobs logs job_abc123 -f'],
  async run(context, { values, positionals }) {
    return showLogs(context, positionals[0]!, values);
  },
};

export const jobCommands = [
  list,
  create,
  action('stop', 'Stop a training job (it keeps its checkpoints)'),
  action('resume', 'Resume a stopped job from its last checkpoint'),
  logs,
];
