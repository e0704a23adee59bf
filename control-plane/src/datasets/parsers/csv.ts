import { type Readable, Transform, type TransformCallback } from 'node:stream';
import { type CsvError, parse } from 'csv-parse';
import type { ParseResult, ValidationConfig } from '../validation-config.ts';
import { RecordAnalyzer } from './records.ts';

const INTEGER = /^[+-]?\d+$/;
const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/**
 * A CSV cell as a typed value: empty → null, integers and decimals → numbers, true/false (any case) →
 * booleans, everything else a string. CSV has no types; this is what the schema reports.
 */
export function cellValue(cell: string): unknown {
  if (cell === '') return null;
  if (INTEGER.test(cell)) {
    const value = Number(cell);
    return Number.isSafeInteger(value) ? value : cell;
  }
  if (NUMBER.test(cell)) return Number(cell);
  const lower = cell.toLowerCase();
  if (lower === 'true') return true;
  if (lower === 'false') return false;
  return cell;
}

/** Header names made unique (x, x → x, x_2), so no column hides another in the records. */
function uniqueNames(names: string[]): string[] {
  const seen = new Set<string>();
  return names.map((name) => {
    let unique = name;
    for (let n = 2; seen.has(unique); n++) unique = `${name}_${n}`;
    seen.add(unique);
    return unique;
  });
}

/** Checks UTF-8 on the byte stream as it passes (the CSV parser itself would replace bad bytes). */
class Utf8Check extends Transform {
  private readonly decoder = new TextDecoder('utf-8', { fatal: true });
  invalidAtByte: number | null = null;
  private offset = 0;
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (this.invalidAtByte === null) {
      try {
        this.decoder.decode(chunk, { stream: true });
      } catch {
        this.invalidAtByte = this.offset;
      }
    }
    this.offset += chunk.length;
    callback(null, chunk);
  }
  override _flush(callback: TransformCallback): void {
    if (this.invalidAtByte === null) {
      try {
        this.decoder.decode();
      } catch {
        this.invalidAtByte = this.offset;
      }
    }
    callback();
  }
}

/**
 * CSV (RFC 4180, comma-separated, first row the header naming the fields). A row whose number of cells
 * differs from the header's, or that the parser cannot read (an unclosed quote), fails the parse check.
 */
export async function parseCsv(source: Readable, config: ValidationConfig): Promise<ParseResult> {
  const analyzer = new RecordAnalyzer(config);
  const utf8 = new Utf8Check();
  const parser = parse({
    bom: true,
    info: true,
    relax_column_count: true,
    skip_empty_lines: false,
    skip_records_with_error: true,
    on_skip: (error: CsvError | undefined) => {
      if (error) analyzer.addInvalid((error as CsvError & { lines?: number }).lines ?? 0, error.message);
      return undefined;
    },
  });
  let header: string[] | null = null;
  source.on('error', (error) => parser.destroy(error));
  source.pipe(utf8).pipe(parser);
  for await (const item of parser as AsyncIterable<{ record: string[]; info: { lines: number } }>) {
    const { record, info } = item;
    if (record.length === 1 && record[0] === '') {
      analyzer.addEmptyLine();
      continue;
    }
    if (!header) {
      header = uniqueNames(record.map((name, i) => name.trim() || `column_${i + 1}`));
      continue;
    }
    if (record.length !== header.length) {
      analyzer.addInvalid(info.lines, `${record.length} cells, the header has ${header.length}`);
      continue;
    }
    const row: Record<string, unknown> = {};
    for (let i = 0; i < header.length; i++) row[header[i]!] = cellValue(record[i]!);
    analyzer.addRecord(row, info.lines);
  }
  if (utf8.invalidAtByte !== null)
    analyzer.addEncodingError(0, `not valid UTF-8 (first bad byte near offset ${utf8.invalidAtByte})`);
  const result = analyzer.finish('row');
  if (!header) result.warnings.push('the file has no header row');
  if (result.schema && header) {
    // Columns keep the header's order even when early rows leave some empty.
    const byName = new Map(result.schema.fields.map((f) => [f.name, f]));
    result.schema.fields = header.map((name) => byName.get(name) ?? { name, type: 'null', nullable: true });
  }
  return result;
}
