import type { TestApp } from './app.ts';

type Operation = { description?: string; responses: Record<string, unknown> };

/**
 * The operations of the served OpenAPI document under `prefixes` (`get /v2/…`), each with what its
 * documentation lacks: a 401 or 403 response, a description of more than 50 characters.
 */
export async function documentedOperations(
  t: TestApp,
  prefixes: string[],
): Promise<{ operation: string; lacking: string[] }[]> {
  const doc = (await t.app.inject({ url: '/openapi.json' })).json();
  const paths = Object.entries<Record<string, Operation>>(doc.paths).filter(([path]) =>
    prefixes.some((prefix) => path.startsWith(prefix)),
  );
  return paths.flatMap(([path, item]) =>
    Object.entries(item).map(([method, operation]) => ({
      operation: `${method} ${path}`,
      lacking: [
        ...['401', '403'].filter((status) => !(status in operation.responses)),
        ...((operation.description?.length ?? 0) > 50 ? [] : ['description']),
      ],
    })),
  );
}
