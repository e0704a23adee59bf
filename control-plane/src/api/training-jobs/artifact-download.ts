import { Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ApiError } from '@anvil/shared';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { parseRange } from '../../training/artifacts/byte-range.ts';
import type { ArtifactDownload } from '../../training/artifacts/service.ts';

/** Passes exactly `expected` bytes; fewer (the agent's side cut off) is an error, never a short success. */
class ExactLength extends Transform {
  #seen = 0;
  constructor(private readonly expected: number) {
    super();
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.#seen += chunk.length;
    if (this.#seen > this.expected) done(new Error(`the host sent more than ${this.expected} bytes`));
    else done(null, chunk);
  }
  override _flush(done: TransformCallback): void {
    done(
      this.#seen === this.expected
        ? null
        : new Error(`the host sent ${this.#seen} of ${this.expected} bytes`),
    );
  }
}

/** A filename for Content-Disposition: the artifact name's last segment, in a safe alphabet. */
function filenameOf(name: string): string {
  const last = name.split('/').filter(Boolean).at(-1) ?? 'artifact';
  return last.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 200) || 'artifact';
}

/**
 * Answers a download: 200 with the whole file, or 206 with one range (Range: bytes=a-b, a-, -n; If-Range
 * with the ETag), 416 past the end, 304 for If-None-Match with the ETag. ETag is the SHA-256 (a strong
 * validator: equal tags mean equal bytes), repeated as X-Checksum-SHA256 (hex) and Repr-Digest (RFC 9530)
 * for the whole file. HEAD answers the headers without opening a tunnel.
 */
export async function sendArtifact(
  request: FastifyRequest,
  reply: FastifyReply,
  download: ArtifactDownload,
): Promise<FastifyReply> {
  const { sizeBytes: size, sha256 } = download;
  const etag = `"${sha256}"`;
  const noneMatch = request.headers['if-none-match'];
  if (noneMatch?.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag)) {
    return reply.code(304).header('etag', etag).send();
  }
  const ifRange = request.headers['if-range'];
  const rangeHeader =
    ifRange === undefined || String(ifRange).trim() === etag ? request.headers.range : undefined;
  const range = parseRange(rangeHeader, size);
  if (range === 'unsatisfiable') {
    throw new ApiError(
      'RANGE_NOT_SATISFIABLE',
      `the range ${rangeHeader} starts past the end (${size} bytes)`,
      { range: rangeHeader, sizeBytes: size },
      { headers: { 'content-range': `bytes */${size}` } },
    );
  }
  reply
    .header('accept-ranges', 'bytes')
    .header('etag', etag)
    .header('x-checksum-sha256', sha256)
    .header('repr-digest', `sha-256=:${Buffer.from(sha256, 'hex').toString('base64')}:`)
    .header('cache-control', 'private, no-cache')
    .header('content-disposition', `attachment; filename="${filenameOf(download.artifact.name)}"`);
  if (download.modifiedAt) reply.header('last-modified', download.modifiedAt.toUTCString());
  const offset = range?.start ?? 0;
  const length = range ? range.end - range.start + 1 : size;
  reply.type('application/octet-stream').header('content-length', String(length));
  if (range) reply.code(206).header('content-range', `bytes ${range.start}-${range.end}/${size}`);
  if (request.method === 'HEAD' || length === 0) return reply.send();
  const socket = await download.open(offset, length);
  const body = new ExactLength(length);
  reply.raw.on('close', () => socket.destroy());
  pipeline(socket, body).catch((error: unknown) => {
    request.log.warn({ err: error, artifactId: download.artifact.id }, 'artifact download cut off');
  });
  return reply.send(body);
}
