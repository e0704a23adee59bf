import { createHash } from 'node:crypto';
import {
  createReadStream,
  existsSync,
  mkdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { Readable, Transform } from 'node:stream';
import type { ApiClient } from './api.ts';
import type { Env } from './config.ts';
import { ApiFailure, CliError, EXIT } from './exit-codes.ts';

export const MULTIPART_ABOVE = 100 * 1000 * 1000;
const MIN_PART = 5 * 1024 * 1024;

export interface UploadTarget {
  datasetId: string;
  /** The upload routes' path (/v2/training/uploads), served by the control plane the profile names. */
  uploadPath: string;
  /** The dataset's upload token (dsu_…) when this run created the dataset; else the API key is used. */
  token?: string;
}

export interface UploadPlan {
  file: string;
  size: number;
  multipartAbove: number;
  partSize?: number;
  /** A multipart upload to continue (--resume), else the one the state file remembers for this file. */
  resumeUploadId?: string;
}

interface MultipartState {
  file: string;
  size: number;
  mtimeMs: number;
  datasetId: string;
  uploadPath: string;
  uploadId: string;
  partSize: number;
  token?: string;
}

interface MultipartUpload {
  uploadId: string;
  partSize: number;
  minPartSize: number;
  maxPartSize: number;
  maxParts: number;
  parts: Array<{ partNumber: number; size: number; checksum: string }>;
}

export interface Progress {
  start(total: number, already: number): void;
  add(bytes: number): void;
  done(): void;
}

/** Where interrupted multipart uploads are remembered: $XDG_STATE_HOME/anvil/uploads (~/.local/state). */
export function stateDir(env: Env): string {
  return join(env['XDG_STATE_HOME'] || join(env['HOME'] || '/', '.local', 'state'), 'anvil', 'uploads');
}

/** One state file per file path, size and modification time: a changed file starts afresh. */
function statePath(env: Env, file: string, size: number, mtimeMs: number): string {
  const id = createHash('sha256')
    .update(`${resolve(file)}\0${size}\0${mtimeMs}`)
    .digest('hex')
    .slice(0, 32);
  return join(stateDir(env), `${id}.json`);
}

function sha256Of(file: string, start: number, end: number): Promise<string> {
  return new Promise((done, fail) => {
    const hash = createHash('sha256');
    createReadStream(file, { start, end: end - 1 })
      .on('data', (chunk) => hash.update(chunk))
      .on('end', () => done(hash.digest('hex')))
      .on('error', fail);
  });
}

/** The bytes [start, end) of the file as a request body, counted into the progress as they are read. */
function body(file: string, start: number, end: number, progress: Progress): ReadableStream {
  if (end === start) return Readable.toWeb(Readable.from([])) as ReadableStream;
  const counting = new Transform({
    transform(chunk: Buffer, _encoding, next) {
      progress.add(chunk.length);
      next(null, chunk);
    },
  });
  return Readable.toWeb(createReadStream(file, { start, end: end - 1 }).pipe(counting)) as ReadableStream;
}

/**
 * Sends a file's bytes to a dataset: one PUT up to `multipartAbove` bytes, else S3-style multipart. A
 * multipart upload is remembered in a state file (mode 0600, it may hold the upload token) until it
 * completes, so running the same command again after an interruption sends only the parts the control
 * plane does not already hold with the same SHA-256.
 */
export class DatasetUploader {
  constructor(
    private readonly api: ApiClient,
    private readonly env: Env,
    private readonly progress: Progress,
    private readonly note: (line: string) => void,
  ) {}

  async upload(target: UploadTarget, plan: UploadPlan): Promise<unknown> {
    if (plan.size <= plan.multipartAbove && !plan.resumeUploadId) {
      this.progress.start(plan.size, 0);
      const answer = await this.api.call('PUT', `${target.uploadPath}/datasets/${target.datasetId}`, {
        raw: { body: body(plan.file, 0, plan.size, this.progress), length: plan.size },
        ...(target.token ? { token: target.token } : {}),
      });
      this.progress.done();
      return answer;
    }
    return this.multipart(target, plan);
  }

  /** The remembered upload of this file, if any (`anvil datasets upload` run again continues it). */
  remembered(file: string): MultipartState | null {
    const { size, mtimeMs } = statSync(file);
    const path = statePath(this.env, file, size, mtimeMs);
    if (!existsSync(path)) return null;
    try {
      return JSON.parse(readFileSync(path, 'utf8')) as MultipartState;
    } catch {
      return null;
    }
  }

  private async multipart(target: UploadTarget, plan: UploadPlan): Promise<unknown> {
    const { mtimeMs } = statSync(plan.file);
    const state = statePath(this.env, plan.file, plan.size, mtimeMs);
    const auth = target.token ? { token: target.token } : {};
    const base = `${target.uploadPath}/datasets/${target.datasetId}/multipart`;
    let upload: MultipartUpload | null = null;
    if (plan.resumeUploadId) {
      upload = await this.api.call<MultipartUpload>('GET', `${base}/${plan.resumeUploadId}`, auth);
    }
    if (!upload) {
      upload = await this.api.call<MultipartUpload>('POST', base, {
        ...auth,
        body: { filename: basename(plan.file), size: plan.size },
      });
    }
    const partSize = plan.resumeUploadId ? this.partSizeOf(upload, plan) : (plan.partSize ?? upload.partSize);
    if (partSize < upload.minPartSize && plan.size > partSize)
      throw new CliError(`--part-size must be at least ${upload.minPartSize} bytes`, EXIT.usage);
    const record: MultipartState = {
      file: resolve(plan.file),
      size: plan.size,
      mtimeMs,
      datasetId: target.datasetId,
      uploadPath: target.uploadPath,
      uploadId: upload.uploadId,
      partSize,
      ...(target.token ? { token: target.token } : {}),
    };
    mkdirSync(stateDir(this.env), { recursive: true, mode: 0o700 });
    writeFileSync(state, JSON.stringify(record), { mode: 0o600 });

    const count = Math.max(1, Math.ceil(plan.size / partSize));
    const held = new Map(upload.parts.map((p) => [p.partNumber, p]));
    const checksums = new Map<number, string>();
    let already = 0;
    for (let n = 1; n <= count; n++) {
      const start = (n - 1) * partSize;
      const end = Math.min(plan.size, start + partSize);
      const part = held.get(n);
      if (part && part.size === end - start && part.checksum === (await sha256Of(plan.file, start, end))) {
        checksums.set(n, part.checksum);
        already += end - start;
      }
    }
    if (checksums.size)
      this.note(`resuming upload ${upload.uploadId}: ${checksums.size} of ${count} parts already uploaded`);
    this.progress.start(plan.size, already);
    for (let n = 1; n <= count; n++) {
      if (checksums.has(n)) continue;
      const start = (n - 1) * partSize;
      const end = Math.min(plan.size, start + partSize);
      const answer = await this.api.call<{ checksum: string }>(
        'PUT',
        `${base}/${upload.uploadId}/parts/${n}`,
        {
          ...auth,
          raw: { body: body(plan.file, start, end, this.progress), length: end - start },
        },
      );
      checksums.set(n, answer.checksum);
    }
    this.progress.done();
    const parts = [...checksums]
      .sort(([a], [b]) => a - b)
      .map(([partNumber, checksum]) => ({ partNumber, checksum }));
    let answer: unknown;
    try {
      answer = await this.api.call('POST', `${base}/${upload.uploadId}/complete`, {
        ...auth,
        body: { parts },
      });
    } catch (error) {
      // The parts were refused as a whole: starting over is the only way on.
      if (error instanceof ApiFailure && error.status === 400) rmSync(state, { force: true });
      throw error;
    }
    rmSync(state, { force: true });
    return answer;
  }

  /** A resumed upload keeps the part size its first run used (the held parts' size), else the server's. */
  private partSizeOf(upload: MultipartUpload, plan: UploadPlan): number {
    const first = upload.parts.find((p) => p.partNumber === 1);
    if (first && first.size >= MIN_PART && first.size < plan.size) return first.size;
    return plan.partSize ?? upload.partSize;
  }
}

/** A one-line progress bar on stderr, redrawn at most ten times a second; nothing when stderr is not a TTY. */
export function progressBar(
  stream: { write(text: string): unknown; isTTY?: boolean },
  label: string,
): Progress {
  if (!stream.isTTY) return { start() {}, add() {}, done() {} };
  let total = 0;
  let sent = 0;
  let began = Date.now();
  let drawn = 0;
  let base = 0;
  const draw = (force: boolean) => {
    const now = Date.now();
    if (!force && now - drawn < 100) return;
    drawn = now;
    const fraction = total === 0 ? 1 : sent / total;
    const width = 30;
    const filled = Math.round(fraction * width);
    const rate = (sent - base) / Math.max(0.001, (now - began) / 1000);
    const mib = (n: number) => (n / 1024 / 1024).toFixed(1);
    stream.write(
      `\r${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(fraction * 100).toFixed(0).padStart(3)}% ` +
        `${mib(sent)}/${mib(total)} MiB ${mib(rate)} MiB/s `,
    );
  };
  return {
    start(t, already) {
      total = t;
      sent = already;
      base = already;
      began = Date.now();
      draw(true);
    },
    add(bytes) {
      sent += bytes;
      draw(false);
    },
    done() {
      draw(true);
      stream.write('\n');
    },
  };
}
