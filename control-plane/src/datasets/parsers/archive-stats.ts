import { extname } from 'node:path';
import {
  type Check,
  countChecks,
  MAX_CHECK_EXAMPLES,
  type ParseResult,
  type ValidationConfig,
} from '../validation-config.ts';

/** Entries of an archive, counted as its directory (zip) or headers (tar) list them. */
export class ArchiveTally {
  files = 0;
  directories = 0;
  other = 0;
  uncompressedBytes = 0;
  private readonly extensions = new Map<string, number>();
  private readonly unsupported: NonNullable<Check['examples']> = [];
  private unsupportedCount = 0;
  private readonly tooLarge: NonNullable<Check['examples']> = [];
  private tooLargeCount = 0;
  private readonly supported: Set<string> | null;

  constructor(private readonly config: ValidationConfig) {
    this.supported = config.supported_formats?.length
      ? new Set(config.supported_formats.map((f) => f.toLowerCase().replace(/^\./, '')))
      : null;
  }

  file(name: string, size: number): void {
    this.files += 1;
    this.uncompressedBytes += size;
    const extension = extname(name).toLowerCase().replace(/^\./, '');
    this.extensions.set(extension, (this.extensions.get(extension) ?? 0) + 1);
    if (this.supported && !this.supported.has(extension)) {
      this.unsupportedCount += 1;
      if (this.unsupported.length < MAX_CHECK_EXAMPLES)
        this.unsupported.push({ entry: name, reason: `extension "${extension}" not in supported_formats` });
    }
    const max = this.config.max_file_size;
    if (max !== undefined && size > max) {
      this.tooLargeCount += 1;
      if (this.tooLarge.length < MAX_CHECK_EXAMPLES)
        this.tooLarge.push({ entry: name, reason: `${size} bytes > max_file_size ${max}` });
    }
  }

  finish(extra: { compressedBytes: number | null; statistics?: Record<string, unknown> }): ParseResult {
    const checks: Check[] = [];
    if (this.supported) {
      checks.push({
        name: 'supported_formats',
        status: this.unsupportedCount === 0 ? 'pass' : 'fail',
        message: `${this.unsupportedCount} files with an extension outside supported_formats`,
        failures: this.unsupportedCount,
        examples: this.unsupported,
      });
    }
    if (this.config.max_file_size !== undefined) {
      checks.push({
        name: 'max_file_size',
        status: this.tooLargeCount === 0 ? 'pass' : 'fail',
        message: `${this.tooLargeCount} files larger than ${this.config.max_file_size} bytes`,
        failures: this.tooLargeCount,
        examples: this.tooLarge,
      });
    }
    checks.push(...countChecks(this.config, this.files));
    const warnings: string[] = [];
    for (const option of [
      'min_resolution',
      'max_resolution',
      'check_corruption',
      'color_space',
      'min_examples_per_class',
      'required_fields',
      'max_sequence_length',
      'min_sequence_length',
    ] as const) {
      if (this.config[option] !== undefined)
        warnings.push(`${option} was not checked: archive entries are counted, not decoded`);
    }
    return {
      examples: this.files,
      compressedBytes: extra.compressedBytes,
      schema: null,
      statistics: {
        entries: this.files + this.directories + this.other,
        files: this.files,
        directories: this.directories,
        otherEntries: this.other,
        uncompressedBytes: this.uncompressedBytes,
        extensions: Object.fromEntries([...this.extensions].sort((a, b) => b[1] - a[1])),
        ...extra.statistics,
      },
      checks,
      warnings,
    };
  }
}

export function parseFailure(message: string): Check {
  return { name: 'parse', status: 'fail', message, failures: 1 };
}
