import type { Readable } from 'node:stream';
import type { ParseResult, ValidationConfig } from '../validation-config.ts';
import { lines, MAX_LINE_BYTES } from './lines.ts';
import { RecordAnalyzer } from './records.ts';

/**
 * JSON Lines: one JSON object per line (UTF-8). Blank lines are skipped (and counted in a warning);
 * a line that is not valid UTF-8, not JSON, or JSON but not an object fails the encoding or parse check.
 */
export async function parseJsonl(source: Readable, config: ValidationConfig): Promise<ParseResult> {
  const analyzer = new RecordAnalyzer(config);
  const decoder = new TextDecoder('utf-8', { fatal: true });
  let first = true;
  let jsonArray = false;
  for await (const line of lines(source)) {
    if ('tooLong' in line) {
      analyzer.addInvalid(line.number, `longer than ${MAX_LINE_BYTES} bytes`);
      continue;
    }
    let text: string;
    try {
      text = decoder.decode(line.bytes);
    } catch {
      analyzer.addEncodingError(line.number, 'not valid UTF-8');
      continue;
    }
    if (first) {
      text = text.replace(/^\uFEFF/, '');
      first = false;
      jsonArray = text.trimStart().startsWith('[');
    }
    if (text.trim() === '') {
      analyzer.addEmptyLine();
      continue;
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      analyzer.addInvalid(line.number, `not JSON: ${(error as Error).message}`);
      continue;
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      analyzer.addInvalid(
        line.number,
        `a JSON ${Array.isArray(value) ? 'array' : typeof value}, not an object`,
      );
      continue;
    }
    analyzer.addRecord(value as Record<string, unknown>, line.number);
  }
  const result = analyzer.finish('line');
  if (jsonArray)
    result.warnings.push('the file starts with "[": JSON arrays are not JSON Lines (one object per line)');
  return result;
}
