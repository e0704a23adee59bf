import { statSync } from 'node:fs';
import { basename } from 'node:path';
import type { Command } from '../command.ts';
import { CliError, EXIT, UsageError } from '../exit-codes.ts';
import { bytes, parseBytes, table } from '../output.ts';
import { DatasetUploader, MULTIPART_ABOVE, progressBar, type UploadTarget } from '../upload.ts';
import { waitUntil } from '../wait.ts';
import { age } from './resolve.ts';

interface Dataset {
  id: string;
  name: string;
  status: string;
  format: string | null;
  size?: { bytes: number | null; examples: number | null } | null;
  createdAt: string;
  uploadUrl?: string;
  uploadToken?: string;
  error?: unknown;
  [field: string]: unknown;
}

/** The format the control plane analyses, from the file's extension (null: let it detect). */
export function formatOf(file: string): string | null {
  const name = file.toLowerCase();
  const known: Array<[RegExp, string]> = [
    [/\.jsonl$|\.ndjson$|\.json$/, 'jsonl'],
    [/\.csv$/, 'csv'],
    [/\.parquet$/, 'parquet'],
    [/\.h5$|\.hdf5$/, 'hdf5'],
    [/\.zip$/, 'zip'],
    [/\.tar$|\.tar\.gz$|\.tgz$/, 'tar'],
  ];
  return known.find(([pattern]) => pattern.test(name))?.[1] ?? null;
}

/** The dataset type the API requires, by format where one fits; archives hold anything, so they need --type. */
export function typeOf(format: string | null): string | null {
  if (format === 'jsonl') return 'text';
  if (format === 'csv' || format === 'parquet' || format === 'hdf5') return 'structured';
  return null;
}

const list: Command = {
  path: ['datasets', 'list'],
  summary: 'List training datasets',
  examples: ['anvil datasets list'],
  async run(context) {
    const answer = await context.api().call<{ datasets: Dataset[] }>('GET', '/v2/training/datasets', {
      query: { limit: 100 },
    });
    const datasets = answer.datasets;
    context.show(datasets, () =>
      table(datasets, [
        { header: 'id', value: (d) => d.id },
        { header: 'name', value: (d) => d.name },
        { header: 'status', value: (d) => d.status },
        { header: 'format', value: (d) => d.format },
        { header: 'size', value: (d) => (typeof d.size?.bytes === 'number' ? bytes(d.size.bytes) : null) },
        { header: 'examples', value: (d) => d.size?.examples },
        { header: 'age', value: (d) => age(d.createdAt) },
      ]),
    );
    return EXIT.ok;
  },
};

function size(text: string | undefined, option: string, fallback?: number): number | undefined {
  if (text === undefined) return fallback;
  const value = parseBytes(text);
  if (value === null) throw new UsageError(`--${option} takes a size such as 64MiB or 100MB, got "${text}"`);
  return value;
}

const upload: Command = {
  path: ['datasets', 'upload'],
  summary: 'Upload a file as a training dataset (multipart above 100 MB, resumable)',
  args: '<file>',
  arity: [1, 1],
  description:
    'Creates the dataset (named after the file unless --name; format from the extension) and sends the bytes: ' +
    'one PUT up to --multipart-above (default 100MB), else a multipart upload in parts of --part-size (default ' +
    "the control plane's suggestion). An interrupted multipart upload continues where it stopped when the same " +
    'command runs again (state in $XDG_STATE_HOME/anvil/uploads, default ~/.local/state), or with --dataset and ' +
    '--resume <upload id>. A progress bar shows on a terminal. --wait waits for processing: exit 9 if the ' +
    'dataset ends in error.',
  options: {
    name: { type: 'string', description: 'Dataset name (default: the file name)', value: 'name' },
    format: {
      type: 'string',
      description: 'jsonl, csv, parquet, hdf5, zip or tar (default: from the extension)',
      value: 'format',
    },
    type: {
      type: 'string',
      description: 'text, image, audio, video, structured or multimodal',
      value: 'type',
    },
    dataset: {
      type: 'string',
      description: 'Upload a new version of this dataset instead of creating one',
      value: 'ds_…',
    },
    resume: {
      type: 'string',
      description: 'Continue this multipart upload (with --dataset)',
      value: 'dsup_…',
    },
    'multipart-above': {
      type: 'string',
      description: 'Files larger than this go multipart (default 100MB)',
      value: 'size',
    },
    'part-size': { type: 'string', description: 'Multipart part size (at least 5MiB)', value: 'size' },
    wait: { type: 'boolean', description: 'Wait until the dataset is processed (ready or error)' },
  },
  examples: [
    'anvil datasets upload train.jsonl --wait',
    'anvil datasets upload images.tar --name images-v2 --type image',
    'anvil datasets upload big.parquet --part-size 256MiB   # run it again after an interruption to resume',
  ],
  async run(context, { values, positionals }) {
    const file = positionals[0]!;
    let fileSize: number;
    try {
      const stat = statSync(file);
      if (!stat.isFile()) throw new Error('not a regular file');
      fileSize = stat.size;
    } catch (error) {
      throw new UsageError(`cannot upload ${file}: ${(error as Error).message}`);
    }
    const api = context.api();
    const uploader = new DatasetUploader(
      api,
      context.env,
      progressBar(context.io.stderr, basename(file)),
      (line) => context.warn(line),
    );
    const resume = values['resume'] as string | undefined;
    let datasetId = values['dataset'] as string | undefined;
    if (resume && !datasetId)
      throw new UsageError('--resume needs --dataset (the dataset the upload belongs to)');
    const uploadPath = '/v2/training/uploads';
    let target: UploadTarget;
    let resumeUploadId = resume;
    const remembered = resume ? null : uploader.remembered(file);
    if (remembered && (!datasetId || datasetId === remembered.datasetId)) {
      target = {
        datasetId: remembered.datasetId,
        uploadPath: remembered.uploadPath,
        ...(remembered.token ? { token: remembered.token } : {}),
      };
      resumeUploadId = remembered.uploadId;
    } else if (datasetId) {
      target = { datasetId, uploadPath };
    } else {
      const format = (values['format'] as string | undefined) ?? formatOf(file);
      const type = (values['type'] as string | undefined) ?? typeOf(format);
      if (!type)
        throw new UsageError(
          `give the dataset's --type (text, image, audio, video, structured or multimodal)`,
        );
      const created = await api.call<Dataset>('POST', '/v2/training/datasets', {
        body: {
          name: (values['name'] as string | undefined) ?? basename(file),
          ...(format ? { format } : {}),
          type,
        },
      });
      datasetId = created.id;
      // The upload routes of the control plane this profile reaches (uploadUrl names the public URL, which
      // may not be the address this machine uses).
      target = {
        datasetId: created.id,
        uploadPath: created.uploadUrl ? new URL(created.uploadUrl).pathname.replace(/\/+$/, '') : uploadPath,
        ...(created.uploadToken ? { token: created.uploadToken } : {}),
      };
    }
    const accepted = await uploader.upload(target, {
      file,
      size: fileSize,
      multipartAbove: size(
        values['multipart-above'] as string | undefined,
        'multipart-above',
        MULTIPART_ABOVE,
      )!,
      ...(values['part-size'] ? { partSize: size(values['part-size'] as string, 'part-size')! } : {}),
      ...(resumeUploadId ? { resumeUploadId } : {}),
    });
    let dataset: Dataset | null = null;
    if (values['wait']) {
      dataset = await waitUntil(3_600_000, async () => {
        const d = await api.call<Dataset>('GET', `/v2/training/datasets/${target.datasetId}`);
        return d.status === 'ready' || d.status === 'error' ? d : null;
      });
    }
    const result = dataset ?? accepted;
    context.show(result, () =>
      dataset
        ? `${dataset.id} ${dataset.status}${dataset.status === 'error' ? `: ${JSON.stringify(dataset.error ?? dataset['statusReason'] ?? '')}` : ''}\n`
        : `${target.datasetId} uploaded (${bytes(fileSize)}), processing\n`,
    );
    if (dataset?.status === 'error') {
      throw new CliError(`dataset ${dataset.id} failed processing`, EXIT.jobFailed);
    }
    return EXIT.ok;
  },
};

export const datasetCommands = [list, upload];
