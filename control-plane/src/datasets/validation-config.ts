/** The `validation` configuration of a dataset, as given at creation (spec: Dataset). */
export interface ValidationConfig {
  required_fields?: string[];
  optional_fields?: string[];
  max_sequence_length?: number;
  min_sequence_length?: number;
  min_examples?: number;
  max_examples?: number;
  encoding?: string;
  language_detection?: boolean;
  supported_formats?: string[];
  min_resolution?: unknown;
  max_resolution?: unknown;
  max_file_size?: number;
  min_examples_per_class?: number;
  check_corruption?: boolean;
  color_space?: string;
}

export type CheckStatus = 'pass' | 'fail';

/** One check of a processing pass; `examples` names the first offending lines or entries. */
export interface Check {
  name: string;
  status: CheckStatus;
  message: string;
  failures?: number;
  examples?: Array<{ line?: number; entry?: string; reason: string }>;
}

export interface DatasetError {
  code: 'VALIDATION_FAILED' | 'UNSUPPORTED_FORMAT';
  message: string;
  details: Record<string, unknown>;
}

export interface SchemaField {
  name: string;
  type: string;
  nullable: boolean;
}

/** What a parser learned from the bytes. Null means "not known from this format", never a guess. */
export interface ParseResult {
  examples: number | null;
  compressedBytes: number | null;
  schema: { fields: SchemaField[] } | null;
  statistics: Record<string, unknown>;
  checks: Check[];
  warnings: string[];
  /** Set when the bytes are not the declared format at all. */
  formatError?: DatasetError;
}

/** Options a text parser cannot act on: named in a warning instead of silently ignored. */
export const IMAGE_ONLY_OPTIONS = [
  'supported_formats',
  'min_resolution',
  'max_resolution',
  'max_file_size',
  'min_examples_per_class',
  'check_corruption',
  'color_space',
] as const;

export const MAX_CHECK_EXAMPLES = 5;

/** Adds the count checks (min/max_examples) every parser that counts examples shares. */
export function countChecks(config: ValidationConfig, examples: number): Check[] {
  const checks: Check[] = [];
  if (config.min_examples !== undefined) {
    const ok = examples >= config.min_examples;
    checks.push({
      name: 'min_examples',
      status: ok ? 'pass' : 'fail',
      message: `${examples} examples; at least ${config.min_examples} required`,
    });
  }
  if (config.max_examples !== undefined) {
    const ok = examples <= config.max_examples;
    checks.push({
      name: 'max_examples',
      status: ok ? 'pass' : 'fail',
      message: `${examples} examples; at most ${config.max_examples} allowed`,
    });
  }
  return checks;
}
