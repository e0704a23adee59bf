import { MAX_PART_BYTES, MAX_PARTS, MIN_PART_BYTES, UPLOAD_LIFETIME_MS } from '../../datasets/multipart.ts';
import { MAX_SINGLE_UPLOAD_BYTES } from '../../datasets/service.ts';
import { UPLOAD_BASE_PATH } from '../../datasets/view.ts';

/** The design choices the spec leaves open, written once and shown in the OpenAPI descriptions. */

export const ACCESS =
  'Needs a key with the training scope (read for GET, write otherwise), held by a member whose role may read ' +
  '(GET) or write (otherwise) in the clusters scope, which covers training (a viewer reads datasets, a ' +
  'developer also creates them; else 403 INSUFFICIENT_PERMISSIONS). Datasets belong to the account: ' +
  "another account's dataset answers 404 DATASET_NOT_FOUND {datasetId}.";

export const UPLOAD_AUTH =
  'Authorization: `Bearer <uploadToken>` (the token returned once at creation, valid for this dataset only ' +
  'until uploadTokenExpiresAt, ANVIL_DATASET_UPLOAD_TOKEN_SECONDS after creation, default 24 h) or `Bearer ' +
  "<API key>` with write permission and the training scope, of the dataset's account, whose member's role " +
  'may write in the clusters scope (else 403 INSUFFICIENT_PERMISSIONS). A wrong, expired or ' +
  "other dataset's token answers 401 UNAUTHORIZED; a key of another account 404 DATASET_NOT_FOUND. These " +
  'routes check their credentials themselves and are not counted by the API rate limits.';

export const PROCESSING =
  'After an upload the dataset is `processing` while one pass reads the stored bytes: SHA-256 `checksum` and ' +
  '`size.bytes`; jsonl (one JSON object per line, UTF-8): `size.examples` = records, `schema.fields` ' +
  '[{name, type (string, integer, number, boolean, object, array, null; number when integers and decimals ' +
  'mix; mixed otherwise), nullable (null or missing in some record)}], `statistics` {records, emptyLines, ' +
  'invalidRecords, sequenceLength {min, max, mean}, fields {<name>: {present, nulls, missing, textLength ' +
  '{min, max, mean} of string values, value {min, max, mean} of numbers}}} where mean = sum / count and ' +
  "lengths count UTF-16 code units; a record's sequence length is the total length of its string values " +
  'over required_fields + optional_fields (all top-level fields when neither is set). csv: the header row ' +
  'names the fields; cells typed as empty → null, integer, decimal → number, true/false → boolean, else ' +
  'string; a row with another cell count than the header fails the parse check. zip: the central directory ' +
  '(zip64 too) gives entries, files (= examples), directories, uncompressedBytes and `size.compressed` = sum ' +
  "of the entries' compressed sizes. tar (plain or gzip): headers walked as the bytes stream; examples = " +
  'regular files; `size.compressed` = stored bytes when gzip. parquet/hdf5: the magic bytes are checked ' +
  '(PAR1 at both ends; the HDF5 signature at 0, 512, 1024, ...); examples, schema and statistics stay null. ' +
  '`validation` then holds the configuration plus {status passed|failed, checks [{name, status pass|fail, ' +
  'message, failures, examples [{line|entry, reason}] (first 5)}], warnings}: checksum, parse, encoding ' +
  '(utf-8), required_fields, min/max_examples, min/max_sequence_length (records); supported_formats ' +
  '(extensions) and max_file_size (archives). Options that cannot be checked (language_detection, image ' +
  'resolution, ...) are named in warnings. Any failed check: status `error` with `error` {code ' +
  'VALIDATION_FAILED, message, details {field (the check), reason, examples}}; bytes of another format ' +
  '(a zip sent as jsonl): `error` {code UNSUPPORTED_FORMAT, details {providedFormat, detectedFormat, ' +
  'supportedFormats}}. Otherwise `ready`. Datasets left in processing by a restart are processed again at ' +
  'start.';

export const UPLOADS =
  `Uploads go to uploadUrl = <ANVIL_PUBLIC_URL>${UPLOAD_BASE_PATH}. Single PUT: at most ` +
  `${MAX_SINGLE_UPLOAD_BYTES} bytes (5 GiB) and ANVIL_DATASET_MAX_BYTES (default 50 GiB), within the ` +
  "server's 120 s request timeout; use multipart above 100 MB. Each completed upload is a new version " +
  '{id, createdAt, size, checksum, source} (the bytes of every version are kept until the dataset is ' +
  `deleted). Multipart (as S3): parts of ${MIN_PART_BYTES} bytes (5 MiB) to ${MAX_PART_BYTES} bytes, the ` +
  `last may be smaller; at most ${MAX_PARTS} parts; an upload not completed within ` +
  `${UPLOAD_LIFETIME_MS / 86_400_000} days is aborted and its parts removed. With ANVIL_DATASET_QUOTA_BYTES set, an ` +
  "account's stored versions plus the declared sizes of its multipart uploads in progress may not exceed it: " +
  '403 QUOTA_EXCEEDED {currentUsage, quotaLimit, requestedSize}, checked before (Content-Length, declared ' +
  'size) and after the bytes arrive (chunked bodies, dataUrl downloads).';
