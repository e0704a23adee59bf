import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { parseByteRange } from '../../http/byte-range.ts';
import { flatErrors } from '../../http/error-body.ts';
import { actorOf } from '../accounts/common.ts';
import { ACCESS, PROCESSING, UPLOADS } from './datasets.docs.ts';
import {
  CreateDatasetBody,
  CreatedDataset,
  Dataset,
  DatasetList,
  DatasetParams,
  DatasetSummary,
  DeletedDataset,
  DownloadQuery,
  ListQuery,
  UpdateDatasetBody,
} from './datasets.schemas.ts';

const tags = ['training datasets'];

/** /v2/training/datasets: thin HTTP over the datasets domain (flat errors, bare bodies). */
export const datasetRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  const datasets = context.datasets.service;
  app.addSchema(Dataset);
  app.addSchema(DatasetSummary);
  const config = { scope: 'training' as const };

  app.post(
    '/v2/training/datasets',
    {
      config,
      schema: {
        tags,
        summary: 'Create a dataset',
        description:
          `${ACCESS} Full form: name, type, format required (format outside jsonl, csv, parquet, hdf5, zip, tar: ` +
          '400 UNSUPPORTED_FORMAT {providedFormat, supportedFormats}); answers 201 with the dataset in status ' +
          '`uploading`, its uploadUrl and uploadToken (shown once; only its SHA-256 is stored). Short form: ' +
          "name, description, format `json` (JSON Lines, as Hugging Face's json loader reads it), dataUrl, " +
          'splitRatio (recorded as given; it must add up to 1, nothing is split). The control plane downloads ' +
          'dataUrl itself (http/https only, no credentials in the URL, at most 5 redirects each checked again, ' +
          '30 s without data ends it, ANVIL_DATASET_MAX_BYTES): loopback, private and link-local targets are ' +
          'refused — a literal address at once (400 VALIDATION_ERROR {field: dataUrl}), a name when it resolves ' +
          'to one (at connection time, so DNS rebinding cannot pass) — unless ANVIL_OUTBOUND_ALLOW_PRIVATE=true. ' +
          'The short form answers datasetId too; the download runs after the answer (status uploading, then ' +
          'processing; a failed download sets status error with error {code FETCH_FAILED, details {url, ' +
          `reason}}) and is started again after a restart. ${UPLOADS}`,
        body: CreateDatasetBody,
        response: { 201: CreatedDataset, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request, reply) => reply.code(201).send(await datasets.create(actorOf(request), request.body)),
  );

  app.get(
    '/v2/training/datasets',
    {
      config,
      schema: {
        tags,
        summary: "The account's datasets",
        description:
          `${ACCESS} Filters type and status match exactly. sort: created_at (default), updated_at, name, size ` +
          '(size.bytes; datasets without bytes yet come last in both orders); order desc by default; ties ' +
          'broken by id. pagination.total counts every match; hasMore = offset + returned < total.',
        querystring: ListQuery,
        response: { 200: DatasetList, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => datasets.list(actorOf(request), request.query),
  );

  app.get(
    '/v2/training/datasets/:dataset_id',
    {
      config,
      schema: {
        tags,
        summary: 'One dataset',
        description: `${ACCESS} ${PROCESSING}`,
        params: DatasetParams,
        response: { 200: Type.Ref('Dataset'), ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => datasets.get(actorOf(request), request.params.dataset_id),
  );

  app.get(
    '/v2/training/datasets/:dataset_id/download',
    {
      config,
      schema: {
        tags,
        summary: 'Download the bytes of a dataset version',
        description:
          `${ACCESS} Not in the spec. Streams the stored bytes of the current version (currentVersionId, the latest upload), or of \`version\` ` +
          '(dsv_…), as application/octet-stream with Content-Length, ETag "<sha256 hex>" (the version\'s ' +
          'checksum), X-Content-SHA256 and Content-Disposition attachment (<name>.<format>). One byte range ' +
          '(Range: bytes=a-b, a- or -n) answers 206 with Content-Range; a range starting past the end 416 ' +
          'RANGE_NOT_SATISFIABLE with Content-Range bytes */<size>; several ranges or a malformed Range the ' +
          'whole body (200). If-None-Match with the ETag answers 304. A dataset with no upload yet answers ' +
          '400 INVALID_STATE {datasetId, status}; an unknown version 404 NOT_FOUND {datasetId, versionId}.',
        params: DatasetParams,
        querystring: DownloadQuery,
        response: flatErrors(400, 401, 403, 404, 416, 429),
      },
    },
    async (request, reply) => {
      const actor = actorOf(request);
      const file = await datasets.download(actor, request.params.dataset_id, request.query.version);
      const etag = `"${file.checksum}"`;
      reply
        .header('etag', etag)
        .header('accept-ranges', 'bytes')
        .header('x-content-sha256', file.checksum)
        .header('content-disposition', `attachment; filename="${file.fileName}"`);
      if (request.headers['if-none-match'] === etag) return reply.code(304).send();
      const range = parseByteRange(request.headers.range, file.sizeBytes);
      if (range === 'unsatisfiable') {
        throw new ApiError(
          'RANGE_NOT_SATISFIABLE',
          `the dataset version is ${file.sizeBytes} bytes; the range asked for starts beyond them`,
          { size: file.sizeBytes, range: request.headers.range },
          { headers: { 'content-range': `bytes */${file.sizeBytes}` } },
        );
      }
      reply.type('application/octet-stream');
      const body = context.datasets.storage.read(file.path, range ?? undefined);
      // Data transfer usage: the bytes that left for this response, counted when it ends (sent or cut).
      let sent = 0;
      body.on('data', (chunk: Buffer) => {
        sent += chunk.length;
      });
      const { accountId } = actor.principal;
      reply.raw.once('close', () =>
        context.transfer.recordResource(
          accountId,
          'dataset',
          request.params.dataset_id,
          'dataset_download',
          sent,
        ),
      );
      if (!range) return reply.header('content-length', file.sizeBytes).send(body);
      return reply
        .code(206)
        .header('content-range', `bytes ${range.start}-${range.end}/${file.sizeBytes}`)
        .header('content-length', range.end - range.start + 1)
        .send(body);
    },
  );

  app.patch(
    '/v2/training/datasets/:dataset_id',
    {
      config,
      schema: {
        tags,
        summary: 'Change name, description, tags or metadata',
        description:
          `${ACCESS} Each given field replaces the stored one (metadata and tags as a whole; description null ` +
          'clears it); at least one field. Answers the dataset.',
        params: DatasetParams,
        body: UpdateDatasetBody,
        response: { 200: Type.Ref('Dataset'), ...flatErrors(400, 401, 403, 404, 429) },
      },
    },
    async (request) => datasets.update(actorOf(request), request.params.dataset_id, request.body),
  );

  app.delete(
    '/v2/training/datasets/:dataset_id',
    {
      config,
      schema: {
        tags,
        summary: 'Delete a dataset',
        description:
          `${ACCESS} Removes its rows (versions, multipart uploads) and every stored file, in any status; a ` +
          'processing pass in flight finds the dataset gone and writes nothing. A dataset used by a training ' +
          'job cannot be deleted (409 DATASET_IN_USE {datasetId, trainingJobIds}, in any job status). Answers {id, deleted, deletedAt}.',
        params: DatasetParams,
        response: { 200: DeletedDataset, ...flatErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request) => datasets.delete(actorOf(request), request.params.dataset_id),
  );
};
