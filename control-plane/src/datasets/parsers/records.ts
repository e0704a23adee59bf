import {
  type Check,
  countChecks,
  IMAGE_ONLY_OPTIONS,
  MAX_CHECK_EXAMPLES,
  type ParseResult,
  type SchemaField,
  type ValidationConfig,
} from '../validation-config.ts';

/** JSON value kinds as the schema reports them. */
export type ValueKind = 'string' | 'integer' | 'number' | 'boolean' | 'object' | 'array' | 'null';

export function kindOf(value: unknown): ValueKind {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return 'string';
  if (typeof value === 'boolean') return 'boolean';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  if (Array.isArray(value)) return 'array';
  return 'object';
}

interface Range {
  min: number;
  max: number;
  sum: number;
  count: number;
}

function add(range: Range | null, value: number): Range {
  if (!range) return { min: value, max: value, sum: value, count: 1 };
  if (value < range.min) range.min = value;
  if (value > range.max) range.max = value;
  range.sum += value;
  range.count += 1;
  return range;
}

function summary(range: Range | null) {
  return range ? { min: range.min, max: range.max, mean: range.sum / range.count } : null;
}

interface FieldStats {
  kinds: Set<ValueKind>;
  present: number;
  nulls: number;
  length: Range | null;
  value: Range | null;
}

/** Keeps memory bounded on files with unbounded key sets (every record its own keys). */
const MAX_FIELDS = 1000;

/**
 * Schema, statistics and checks of a stream of records (JSON Lines objects, CSV rows), one record at a
 * time, in memory proportional to the number of distinct fields, not to the file.
 *
 * Lengths are in characters as JavaScript counts them (UTF-16 code units). A record's sequence length
 * is the sum of the lengths of its string values over the fields considered: required_fields plus
 * optional_fields when either is configured, else every top-level field.
 */
export class RecordAnalyzer {
  private readonly fields = new Map<string, FieldStats>();
  private fieldsDropped = 0;
  private examples = 0;
  private emptyLines = 0;
  private sequence: Range | null = null;
  private readonly invalid: Check['examples'] = [];
  private invalidCount = 0;
  private readonly encoding: Check['examples'] = [];
  private encodingCount = 0;
  private readonly missingRequired: NonNullable<Check['examples']> = [];
  private missingRequiredCount = 0;
  private readonly tooShort: NonNullable<Check['examples']> = [];
  private tooShortCount = 0;
  private readonly tooLong: NonNullable<Check['examples']> = [];
  private tooLongCount = 0;
  private readonly considered: string[] | null;

  constructor(private readonly config: ValidationConfig) {
    const named = [...(config.required_fields ?? []), ...(config.optional_fields ?? [])];
    this.considered = named.length > 0 ? named : null;
  }

  addRecord(record: Record<string, unknown>, line: number): void {
    this.examples += 1;
    for (const [name, value] of Object.entries(record)) this.observe(name, value);
    for (const name of this.config.required_fields ?? []) {
      const value = record[name];
      if (value === undefined || value === null) {
        this.missingRequiredCount += 1;
        if (this.missingRequired.length < MAX_CHECK_EXAMPLES)
          this.missingRequired.push({ line, reason: `missing required field ${name}` });
        break;
      }
    }
    let length = 0;
    for (const name of this.considered ?? Object.keys(record)) {
      const value = record[name];
      if (typeof value === 'string') length += value.length;
    }
    this.sequence = add(this.sequence, length);
    const { min_sequence_length: min, max_sequence_length: max } = this.config;
    if (min !== undefined && length < min) {
      this.tooShortCount += 1;
      if (this.tooShort.length < MAX_CHECK_EXAMPLES)
        this.tooShort.push({ line, reason: `sequence length ${length} < ${min}` });
    }
    if (max !== undefined && length > max) {
      this.tooLongCount += 1;
      if (this.tooLong.length < MAX_CHECK_EXAMPLES)
        this.tooLong.push({ line, reason: `sequence length ${length} > ${max}` });
    }
  }

  addInvalid(line: number, reason: string): void {
    this.invalidCount += 1;
    if (this.invalid!.length < MAX_CHECK_EXAMPLES) this.invalid!.push({ line, reason });
  }

  addEncodingError(line: number, reason: string): void {
    this.encodingCount += 1;
    if (this.encoding!.length < MAX_CHECK_EXAMPLES) this.encoding!.push({ line, reason });
  }

  addEmptyLine(): void {
    this.emptyLines += 1;
  }

  private observe(name: string, value: unknown): void {
    let stats = this.fields.get(name);
    if (!stats) {
      if (this.fields.size >= MAX_FIELDS) {
        this.fieldsDropped += 1;
        return;
      }
      stats = { kinds: new Set(), present: 0, nulls: 0, length: null, value: null };
      this.fields.set(name, stats);
    }
    const kind = kindOf(value);
    stats.kinds.add(kind);
    if (kind === 'null') {
      stats.nulls += 1;
      return;
    }
    stats.present += 1;
    if (kind === 'string') stats.length = add(stats.length, (value as string).length);
    else if (kind === 'integer' || kind === 'number') stats.value = add(stats.value, value as number);
  }

  finish(unit: 'line' | 'row'): ParseResult {
    const fields: SchemaField[] = [];
    const fieldStats: Record<string, unknown> = {};
    const warnings: string[] = [];
    for (const [name, stats] of this.fields) {
      const kinds = [...stats.kinds].filter((k) => k !== 'null');
      const missing = this.examples - stats.present - stats.nulls;
      let type: string;
      if (kinds.length === 0) type = 'null';
      else if (kinds.length === 1) type = kinds[0]!;
      else if (kinds.every((k) => k === 'integer' || k === 'number')) type = 'number';
      else {
        type = 'mixed';
        warnings.push(`field ${name} has values of several types: ${kinds.sort().join(', ')}`);
      }
      fields.push({ name, type, nullable: stats.nulls > 0 || missing > 0 });
      fieldStats[name] = {
        present: stats.present,
        nulls: stats.nulls,
        missing,
        textLength: summary(stats.length),
        value: summary(stats.value),
      };
    }
    if (this.fieldsDropped > 0)
      warnings.push(`more than ${MAX_FIELDS} distinct fields: only the first ${MAX_FIELDS} are described`);
    if (this.emptyLines > 0) warnings.push(`${this.emptyLines} empty ${unit}s skipped`);
    for (const name of this.config.optional_fields ?? []) {
      if (!this.fields.has(name)) warnings.push(`optional field ${name} appears in no record`);
    }
    if (this.config.language_detection)
      warnings.push('language_detection was requested but Anvil does not detect languages');
    for (const option of IMAGE_ONLY_OPTIONS) {
      if (this.config[option] !== undefined)
        warnings.push(`${option} applies to image datasets and was not checked on records`);
    }

    const checks: Check[] = [
      {
        name: 'parse',
        status: this.invalidCount === 0 ? 'pass' : 'fail',
        message:
          this.invalidCount === 0
            ? `every ${unit} is a record`
            : `${this.invalidCount} ${unit}s are not valid records`,
        failures: this.invalidCount,
        examples: this.invalid!,
      },
      {
        name: 'encoding',
        status: this.encodingCount === 0 ? 'pass' : 'fail',
        message:
          this.encodingCount === 0 ? 'valid UTF-8' : `${this.encodingCount} ${unit}s are not valid UTF-8`,
        failures: this.encodingCount,
        examples: this.encoding!,
      },
    ];
    if (this.config.required_fields?.length) {
      checks.push({
        name: 'required_fields',
        status: this.missingRequiredCount === 0 ? 'pass' : 'fail',
        message:
          this.missingRequiredCount === 0
            ? `every record has ${this.config.required_fields.join(', ')}`
            : `${this.missingRequiredCount} records lack a required field or have it null`,
        failures: this.missingRequiredCount,
        examples: this.missingRequired,
      });
    }
    checks.push(...countChecks(this.config, this.examples));
    if (this.config.min_sequence_length !== undefined) {
      checks.push({
        name: 'min_sequence_length',
        status: this.tooShortCount === 0 ? 'pass' : 'fail',
        message: `${this.tooShortCount} records shorter than ${this.config.min_sequence_length} characters`,
        failures: this.tooShortCount,
        examples: this.tooShort,
      });
    }
    if (this.config.max_sequence_length !== undefined) {
      checks.push({
        name: 'max_sequence_length',
        status: this.tooLongCount === 0 ? 'pass' : 'fail',
        message: `${this.tooLongCount} records longer than ${this.config.max_sequence_length} characters`,
        failures: this.tooLongCount,
        examples: this.tooLong,
      });
    }
    return {
      examples: this.examples,
      compressedBytes: null,
      schema: { fields },
      statistics: {
        records: this.examples,
        emptyLines: this.emptyLines,
        invalidRecords: this.invalidCount,
        sequenceLength: summary(this.sequence),
        fields: fieldStats,
      },
      checks,
      warnings,
    };
  }
}
