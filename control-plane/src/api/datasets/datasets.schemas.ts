import { Type } from '@sinclair/typebox';
import { DATASET_STATUSES, DATASET_TYPES } from '../../datasets/formats.ts';
import { MAX_PARTS } from '../../datasets/multipart.ts';
import { AnyObject, DateTime, Nullable } from '../accounts/common.ts';
import { MAX_INT32 } from '../bounds.ts';

const DatasetId = Type.String({ minLength: 1, maxLength: 64, pattern: '^ds_[a-z0-9]+$' });
const UploadId = Type.String({ minLength: 1, maxLength: 64, pattern: '^dsup_[a-z0-9]+$' });
const Sha256 = Type.String({ pattern: '^[0-9a-fA-F]{64}$', description: 'SHA-256 of the bytes, hex' });
const Name = Type.String({ minLength: 1, maxLength: 100 });
const Tags = Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 50 });
const FreeObject = Type.Object({}, { additionalProperties: true, maxProperties: 200 });
const Count = Type.Integer({ minimum: 0 });

export const DatasetParams = Type.Object({ dataset_id: DatasetId });
export const DownloadQuery = Type.Object(
  {
    version: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64,
        pattern: '^dsv_[a-z0-9]+$',
        description:
          'A version id (dsv_…, from versions[].id); the current version (currentVersionId) when absent',
      }),
    ),
  },
  { additionalProperties: false },
);
export const UploadParams = Type.Object({ dataset_id: DatasetId, upload_id: UploadId });
export const PartParams = Type.Object({
  dataset_id: DatasetId,
  upload_id: UploadId,
  part_number: Type.Integer({ minimum: 1, maximum: MAX_PARTS }),
});

const ValidationInput = Type.Object(
  {
    required_fields: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 100 }),
    ),
    optional_fields: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 100 }),
    ),
    max_sequence_length: Type.Optional(Count),
    min_sequence_length: Type.Optional(Count),
    min_examples: Type.Optional(Count),
    max_examples: Type.Optional(Count),
    encoding: Type.Optional(Type.String({ maxLength: 20, description: 'utf-8 only' })),
    language_detection: Type.Optional(Type.Boolean()),
    supported_formats: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 16 }), { maxItems: 50 }),
    ),
    min_resolution: Type.Optional(Type.Unknown()),
    max_resolution: Type.Optional(Type.Unknown()),
    max_file_size: Type.Optional(Count),
    min_examples_per_class: Type.Optional(Count),
    check_corruption: Type.Optional(Type.Boolean()),
    color_space: Type.Optional(Type.String({ maxLength: 20 })),
  },
  { additionalProperties: false },
);

export const CreateDatasetBody = Type.Object(
  {
    name: Name,
    type: Type.Optional(Type.Union(DATASET_TYPES.map((t) => Type.Literal(t)))),
    format: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 32,
        description:
          'jsonl, csv, parquet, hdf5, zip, tar; short form: json (JSON Lines). Others: 400 UNSUPPORTED_FORMAT',
      }),
    ),
    description: Type.Optional(Type.String({ maxLength: 2000 })),
    tags: Type.Optional(Tags),
    validation: Type.Optional(ValidationInput),
    preprocessing: Type.Optional(FreeObject),
    metadata: Type.Optional(FreeObject),
    dataUrl: Type.Optional(
      Type.String({ minLength: 1, maxLength: 2048, description: 'Short form: http(s) URL to download' }),
    ),
    splitRatio: Type.Optional(
      Type.Object(
        {
          train: Type.Number({ minimum: 0, maximum: 1 }),
          validation: Type.Number({ minimum: 0, maximum: 1 }),
          test: Type.Number({ minimum: 0, maximum: 1 }),
        },
        { additionalProperties: false, description: 'Short form: recorded as given; must add up to 1' },
      ),
    ),
  },
  { additionalProperties: false },
);

export const UpdateDatasetBody = Type.Object(
  {
    name: Type.Optional(Name),
    description: Type.Optional(Nullable(Type.String({ maxLength: 2000 }))),
    tags: Type.Optional(Tags),
    metadata: Type.Optional(FreeObject),
  },
  { additionalProperties: false, minProperties: 1 },
);

export const ListQuery = Type.Object(
  {
    type: Type.Optional(Type.Union(DATASET_TYPES.map((t) => Type.Literal(t)))),
    status: Type.Optional(Type.Union(DATASET_STATUSES.map((s) => Type.Literal(s)))),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50 })),
    offset: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_INT32, default: 0 })),
    sort: Type.Optional(
      Type.Union(
        [Type.Literal('created_at'), Type.Literal('updated_at'), Type.Literal('name'), Type.Literal('size')],
        {
          default: 'created_at',
        },
      ),
    ),
    order: Type.Optional(Type.Union([Type.Literal('asc'), Type.Literal('desc')], { default: 'desc' })),
  },
  { additionalProperties: false },
);

const Size = Type.Object({
  bytes: Nullable(Count),
  examples: Nullable(Count),
  compressed: Nullable(Count),
});

const Version = Type.Object({
  id: Type.String({ description: 'dsv_<id>' }),
  createdAt: DateTime,
  size: Count,
  checksum: Sha256,
  source: Type.String({ description: 'put, multipart or url' }),
});

const summaryFields = {
  id: Type.String({ description: 'ds_<id>' }),
  name: Type.String(),
  type: Type.String(),
  format: Type.String(),
  status: Type.String({ description: 'uploading, processing, ready, error' }),
  description: Nullable(Type.String()),
  tags: Type.Array(Type.String()),
  size: Size,
  createdAt: DateTime,
  updatedAt: DateTime,
};

export const DatasetSummary = Type.Object(summaryFields, { $id: 'DatasetSummary' });

const datasetFields = {
  ...summaryFields,
  validation: AnyObject,
  preprocessing: AnyObject,
  metadata: AnyObject,
  uploadUrl: Type.String(),
  uploadTokenExpiresAt: DateTime,
  schema: Nullable(AnyObject),
  statistics: Nullable(AnyObject),
  checksum: Nullable(Sha256),
  currentVersionId: Nullable(Type.String()),
  versions: Type.Array(Version),
  error: Nullable(AnyObject),
  sourceUrl: Nullable(Type.String()),
  splitRatio: Nullable(AnyObject),
  processedAt: Nullable(DateTime),
};

export const Dataset = Type.Object(datasetFields, { $id: 'Dataset' });

export const CreatedDataset = Type.Object({
  ...datasetFields,
  uploadToken: Type.Optional(Type.String({ description: 'dsu_<secret>; shown once' })),
  datasetId: Type.Optional(Type.String({ description: 'Short form: the dataset id' })),
});

export const DatasetList = Type.Object({
  datasets: Type.Array(Type.Ref('DatasetSummary')),
  pagination: Type.Object({ total: Count, limit: Count, offset: Count, hasMore: Type.Boolean() }),
});

export const DeletedDataset = Type.Object({
  id: Type.String(),
  deleted: Type.Boolean(),
  deletedAt: DateTime,
});

export const UploadAccepted = Type.Object({
  datasetId: Type.String(),
  status: Type.Literal('processing'),
  version: Version,
});

export const InitiateMultipartBody = Type.Object(
  {
    filename: Type.String({ minLength: 1, maxLength: 255 }),
    size: Type.Integer({ minimum: 1, description: 'Total bytes of the file' }),
  },
  { additionalProperties: false },
);

export const MultipartUpload = Type.Object({
  uploadId: Type.String({ description: 'dsup_<id>' }),
  datasetId: Type.String(),
  filename: Type.String(),
  size: Count,
  status: Type.String({ description: 'active' }),
  partSize: Count,
  partCount: Count,
  minPartSize: Count,
  maxPartSize: Count,
  maxParts: Count,
  createdAt: DateTime,
  expiresAt: DateTime,
  partUrl: Type.String(),
  completeUrl: Type.String(),
  abortUrl: Type.String(),
  parts: Type.Array(Type.Object({ partNumber: Count, size: Count, checksum: Sha256, uploadedAt: DateTime })),
});

export const UploadedPart = Type.Object({
  uploadId: Type.String(),
  partNumber: Count,
  size: Count,
  checksum: Sha256,
});

export const CompleteMultipartBody = Type.Object(
  {
    parts: Type.Array(
      Type.Object(
        { partNumber: Type.Integer({ minimum: 1, maximum: MAX_PARTS }), checksum: Sha256 },
        { additionalProperties: false },
      ),
      { minItems: 1, maxItems: MAX_PARTS },
    ),
  },
  { additionalProperties: false },
);

export const AbortedUpload = Type.Object({
  uploadId: Type.String(),
  datasetId: Type.String(),
  status: Type.Literal('aborted'),
});
