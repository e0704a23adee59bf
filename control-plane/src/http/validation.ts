import { Ajv, type Options, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import fastJsonStringify from 'fast-json-stringify';
import type { FastifySchema, FastifySchemaCompiler } from 'fastify';

// Compiled validators and serialisers are cached by the schema's JSON text: route schemas are the same
// in every app this process builds (fastify hands over copies, so object identity does not help), and
// compiling them again cost each app over a second — tests build hundreds of apps.
const compiled = new Map<string, ValidateFunction>();
const serializers = new Map<string, Serializer>();
type Serializer = (data: unknown) => string;

/**
 * Two validators: query strings, params and headers arrive as text and are coerced to the schema's
 * types; JSON bodies are validated as sent, so `"permissions": "read"` is an error rather than being
 * silently turned into `["read"]`. Unknown fields are refused, never stripped.
 * Passed to fastify as `schemaController.compilersFactory.buildValidator`.
 */
export function buildValidator(
  externalSchemas: Record<string, unknown>,
): FastifySchemaCompiler<FastifySchema> {
  const externalKey = JSON.stringify(externalSchemas);
  let pair = pairs.get(externalKey);
  if (!pair) {
    pair = createPair(Object.values(externalSchemas));
    pairs.set(externalKey, pair);
  }
  const { coercing, exact } = pair;
  return ({ schema, httpPart }) => {
    const body = httpPart === 'body';
    const key = `${body ? 'exact' : 'coercing'}:${externalKey}:${JSON.stringify(schema)}`;
    let validate = compiled.get(key);
    if (!validate) {
      validate = (body ? exact : coercing).compile(schema as object);
      compiled.set(key, validate);
    }
    return validate;
  };
}

const pairs = new Map<string, { coercing: Ajv; exact: Ajv }>();

function createPair(external: unknown[]): { coercing: Ajv; exact: Ajv } {
  const base: Options = { removeAdditional: false, useDefaults: true, allErrors: false, strict: false };
  const coercing = addFormats.default(new Ajv({ ...base, coerceTypes: 'array' }));
  const exact = addFormats.default(new Ajv({ ...base, coerceTypes: false }));
  for (const schema of external) {
    coercing.addSchema(schema as object);
    exact.addSchema(schema as object);
  }
  return { coercing, exact };
}

/** Response serialisers (fast-json-stringify), cached like the validators. */
export function buildSerializer(externalSchemas: Record<string, unknown>, options: Record<string, unknown>) {
  const externalKey = JSON.stringify(externalSchemas);
  return ({ schema }: { schema: object }): Serializer => {
    const key = `${externalKey}:${JSON.stringify(schema)}`;
    let serializer = serializers.get(key);
    if (!serializer) {
      // As fastify's own compiler does: a schema that is itself an external one must not be listed twice.
      const id = (schema as { $id?: string }).$id;
      const external = id && externalSchemas[id] ? { ...externalSchemas } : externalSchemas;
      if (id && external !== externalSchemas) delete external[id];
      serializer = fastJsonStringify(
        schema as never,
        { ...options, schema: external } as never,
      ) as unknown as Serializer;
      serializers.set(key, serializer);
    }
    return serializer;
  };
}
