import { Readable } from 'node:stream';
import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../../context.ts';
import { UPLOAD_BASE_PATH } from '../../datasets/view.ts';
import type { Dataset } from '../../db/generated/client.ts';
import { flatErrors } from '../../http/error-body.ts';
import { PROCESSING, UPLOAD_AUTH, UPLOADS } from './datasets.docs.ts';
import {
  AbortedUpload,
  CompleteMultipartBody,
  DatasetParams,
  InitiateMultipartBody,
  MultipartUpload,
  PartParams,
  UploadAccepted,
  UploadedPart,
  UploadParams,
} from './datasets.schemas.ts';
import { contentLengthOf, datasetForUpload } from './upload-auth.ts';

const tags = ['training datasets'];
// Public to the request guard: these routes check the upload token or API key themselves.
const config = { public: true };
const BYTES_NOTE =
  'Body: the raw bytes with Content-Type: application/octet-stream (any type but application/json, or ' +
  'none, is taken as bytes too, as S3 does), streamed to disk (never held in ' +
  'memory) under a temporary name and renamed when complete; Content-Length, when sent, must match what ' +
  'arrives (400 otherwise); more than the limit: 413 PAYLOAD_TOO_LARGE (the app-wide JSON body limit does ' +
  'not apply here).';

function bodyStream(request: FastifyRequest): Readable {
  const body = request.body as Readable | undefined;
  // Fastify skips the parser of an empty body: an empty upload is still an upload.
  if (body === undefined) return Readable.from([]);
  if (typeof (body as Readable).pipe !== 'function') {
    throw new ApiError(
      'UNSUPPORTED_MEDIA_TYPE',
      'send the bytes with Content-Type: application/octet-stream',
    );
  }
  return body;
}

/** {upload_url}/datasets/…: single PUT and multipart uploads of a dataset's bytes. */
export const datasetUploadRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const { service, multipart } = context.datasets;
  // Byte bodies reach the handler as the request stream itself (this plugin only). Any type but JSON
  // counts as bytes, as S3 takes them: `curl -T` sends none, `curl --data-binary` a form type.
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload));
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
  const base = `${UPLOAD_BASE_PATH}/datasets/:dataset_id`;
  const security = [{ bearer: [] }];
  // Authenticated before the body is read: a refused upload never touches the disk.
  const opened = new WeakMap<FastifyRequest, Dataset>();
  const onRequest = async (request: FastifyRequest, reply: FastifyReply) => {
    const { dataset_id } = request.params as { dataset_id: string };
    opened.set(request, await datasetForUpload(context, request, reply, dataset_id));
  };
  const datasetOf = (request: FastifyRequest) => opened.get(request)!;
  // The JSON routes of this plugin keep the app's rule: a body that is not JSON is 415.
  const jsonOnly = async (request: FastifyRequest) => {
    if (typeof (request.body as Readable | undefined)?.pipe === 'function')
      throw new ApiError('UNSUPPORTED_MEDIA_TYPE', 'unsupported Content-Type; send application/json');
  };

  app.put(
    base,
    {
      config,
      onRequest,
      schema: {
        tags,
        security,
        summary: "Upload a dataset's bytes (single PUT)",
        description:
          `${UPLOAD_AUTH} ${BYTES_NOTE} ${UPLOADS} Answers 202 {datasetId, status: processing, version {id, ` +
          `createdAt, size, checksum, source}}; the dataset then goes ready or error. ${PROCESSING}`,
        params: DatasetParams,
        response: { 202: UploadAccepted, ...flatErrors(400, 401, 403, 404, 413, 415) },
      },
    },
    async (request, reply) => {
      const dataset = datasetOf(request);
      const body = bodyStream(request);
      return reply.code(202).send(await service.upload(dataset, body, contentLengthOf(request)));
    },
  );

  app.post(
    `${base}/multipart`,
    {
      config,
      onRequest,
      preValidation: jsonOnly,
      schema: {
        tags,
        security,
        summary: 'Start a multipart upload',
        description:
          `${UPLOAD_AUTH} For files above 100 MB. The protocol, as S3's: (1) this call with {filename, size} ` +
          'answers 201 {uploadId, partSize (a suggestion: max(5 MiB, size/10000, min(size, 64 MiB))), partCount, ' +
          'minPartSize, maxPartSize, maxParts, expiresAt, partUrl, completeUrl, abortUrl}; (2) PUT each part ' +
          'to partUrl with its number 1-10000, in any order and in parallel (sending a number again replaces ' +
          'it), each answering its size and SHA-256; (3) POST completeUrl {parts: [{partNumber, checksum}]} in ' +
          'ascending order: the listed parts are checked (present, same SHA-256, all but the last at least ' +
          'minPartSize, sizes adding up to size) and concatenated into a new version, then processed like a ' +
          `single PUT; unlisted parts are dropped. DELETE abortUrl aborts; GET abortUrl lists the parts. ${UPLOADS}`,
        params: DatasetParams,
        body: InitiateMultipartBody,
        response: { 201: MultipartUpload, ...flatErrors(400, 401, 403, 404, 413) },
      },
    },
    async (request, reply) => {
      const dataset = datasetOf(request);
      return reply.code(201).send(await multipart.initiate(dataset, request.body));
    },
  );

  app.get(
    `${base}/multipart/:upload_id`,
    {
      config,
      onRequest,
      schema: {
        tags,
        security,
        summary: 'A multipart upload and its parts so far',
        description: `${UPLOAD_AUTH} 404 UPLOAD_NOT_FOUND once completed, aborted or expired.`,
        params: UploadParams,
        response: { 200: MultipartUpload, ...flatErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const dataset = datasetOf(request);
      return multipart.get(dataset, request.params.upload_id);
    },
  );

  app.put(
    `${base}/multipart/:upload_id/parts/:part_number`,
    {
      config,
      onRequest,
      schema: {
        tags,
        security,
        summary: 'Upload one part',
        description:
          `${UPLOAD_AUTH} ${BYTES_NOTE} A part holds at most maxPartSize bytes and at most the declared size. ` +
          'Answers {uploadId, partNumber, size, checksum}: keep the checksum for completion.',
        params: PartParams,
        response: { 200: UploadedPart, ...flatErrors(400, 401, 403, 404, 413, 415) },
      },
    },
    async (request) => {
      const { upload_id, part_number } = request.params;
      const dataset = datasetOf(request);
      const body = bodyStream(request);
      return multipart.putPart(dataset, upload_id, part_number, body, contentLengthOf(request));
    },
  );

  app.post(
    `${base}/multipart/:upload_id/complete`,
    {
      config,
      // 10,000 listed parts take about 1 MB of JSON, the app-wide default limit.
      bodyLimit: 4 * 1024 * 1024,
      onRequest,
      preValidation: jsonOnly,
      schema: {
        tags,
        security,
        summary: 'Complete a multipart upload',
        description:
          `${UPLOAD_AUTH} Checks the listed parts (400 VALIDATION_ERROR {field: parts, reason, partNumber} ` +
          'names the first problem; nothing changes then), assembles them in order and answers 202 like a ' +
          'single PUT, with the SHA-256 of the assembled file.',
        params: UploadParams,
        body: CompleteMultipartBody,
        response: { 202: UploadAccepted, ...flatErrors(400, 401, 403, 404, 413) },
      },
    },
    async (request, reply) => {
      const dataset = datasetOf(request);
      return reply
        .code(202)
        .send(await multipart.complete(dataset, request.params.upload_id, request.body.parts));
    },
  );

  app.delete(
    `${base}/multipart/:upload_id`,
    {
      config,
      onRequest,
      schema: {
        tags,
        security,
        summary: 'Abort a multipart upload',
        description: `${UPLOAD_AUTH} Removes its parts. Answers {uploadId, datasetId, status: aborted}.`,
        params: UploadParams,
        response: { 200: AbortedUpload, ...flatErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const dataset = datasetOf(request);
      return multipart.abort(dataset, request.params.upload_id);
    },
  );
};
