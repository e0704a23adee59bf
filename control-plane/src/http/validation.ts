import { Ajv, type Options } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifySchema, FastifySchemaCompiler } from 'fastify';

/**
 * Two validators: query strings, params and headers arrive as text and are coerced to the schema's
 * types; JSON bodies are validated as sent, so `"permissions": "read"` is an error rather than being
 * silently turned into `["read"]`. Unknown fields are refused, never stripped.
 * Passed to fastify as `schemaController.compilersFactory.buildValidator`.
 */
export function buildValidator(
  externalSchemas: Record<string, unknown>,
): FastifySchemaCompiler<FastifySchema> {
  const base: Options = { removeAdditional: false, useDefaults: true, allErrors: false, strict: false };
  const coercing = addFormats.default(new Ajv({ ...base, coerceTypes: 'array' }));
  const exact = addFormats.default(new Ajv({ ...base, coerceTypes: false }));
  for (const schema of Object.values(externalSchemas)) {
    coercing.addSchema(schema as object);
    exact.addSchema(schema as object);
  }
  return ({ schema, httpPart }) => (httpPart === 'body' ? exact : coercing).compile(schema as object);
}
