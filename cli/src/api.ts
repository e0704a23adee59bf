import { ApiFailure, CliError, EXIT } from './exit-codes.ts';

export type Query = Record<string, string | number | boolean | undefined>;

export interface RequestOptions {
  query?: Query;
  body?: unknown;
  /** Raw bytes or a stream instead of JSON (dataset uploads). */
  raw?: { body: ReadableStream | string | Uint8Array; length?: number; contentType?: string };
  /** Another bearer token than the profile's key (dataset upload tokens). */
  token?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export const USER_AGENT = 'anvil-cli/0.1.0';

/**
 * The REST client: one method per HTTP call, bearer key, JSON in and out. /v1 cluster answers come
 * wrapped ({success, data, meta}); `call` hands back `data` so commands read one shape. Any error answer
 * becomes an ApiFailure carrying the API's code, message and request id; a transport failure a CliError
 * with exit code `unreachable`.
 */
export class ApiClient {
  constructor(
    readonly baseUrl: string,
    private readonly key: string,
    private readonly fetchImpl: typeof fetch = fetch,
  ) {}

  url(path: string, query: Query = {}): string {
    const url = new URL(path.startsWith('http') ? path : `${this.baseUrl}${path}`);
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined) url.searchParams.set(name, String(value));
    }
    return url.toString();
  }

  async call<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.send(method, path, options);
    const text = await response.text();
    const body = text === '' ? null : parseJson(text);
    if (body && typeof body === 'object' && (body as { success?: unknown }).success === true)
      return (body as { data: T }).data;
    return body as T;
  }

  /** The response itself (streams: logs, SSE), after the status was checked. */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${options.token ?? this.key}`,
      'user-agent': USER_AGENT,
      ...options.headers,
    };
    let body: ReadableStream | string | Uint8Array | undefined;
    if (options.raw) {
      body = options.raw.body;
      headers['content-type'] = options.raw.contentType ?? 'application/octet-stream';
      if (options.raw.length !== undefined) headers['content-length'] = String(options.raw.length);
    } else if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] = 'application/json';
    }
    const target = this.url(path, options.query);
    let response: Response;
    try {
      response = await this.fetchImpl(target, {
        method,
        headers,
        ...(body === undefined ? {} : { body }),
        // Node's fetch needs this to send a stream as the request body.
        ...(body instanceof ReadableStream ? { duplex: 'half' } : {}),
        ...(options.signal ? { signal: options.signal } : {}),
      } as RequestInit);
    } catch (error) {
      if ((error as Error).name === 'AbortError') throw error;
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      const reason = cause?.code ?? cause?.message ?? (error as Error).message;
      throw new CliError(`cannot reach ${new URL(target).origin}: ${reason}`, EXIT.unreachable);
    }
    if (!response.ok) throw await failureOf(response);
    return response;
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Reads every error shape the API answers: flat (/v2), wrapped (/v1) and Fastify's own (unknown route). */
export async function failureOf(response: Response): Promise<ApiFailure> {
  const text = await response.text().catch(() => '');
  const body = parseJson(text) as Record<string, unknown> | string | null;
  let code: string | null = null;
  let message = `${response.status} ${response.statusText}`.trim();
  let details: Record<string, unknown> | null = null;
  let requestId = response.headers.get('x-request-id');
  if (body && typeof body === 'object') {
    const wrapped = body['error'];
    if (wrapped && typeof wrapped === 'object') {
      const error = wrapped as Record<string, unknown>;
      code = typeof error['code'] === 'string' ? error['code'] : null;
      if (typeof error['message'] === 'string') message = error['message'];
      details = (error['details'] as Record<string, unknown>) ?? null;
      const meta = body['meta'] as { request_id?: string } | undefined;
      requestId = meta?.request_id ?? requestId;
    } else {
      if (typeof body['error'] === 'string' && typeof body['code'] === 'number') code = body['error'];
      if (typeof body['message'] === 'string') message = body['message'];
      details = (body['details'] as Record<string, unknown>) ?? null;
    }
  } else if (typeof body === 'string' && body.trim() !== '') {
    message = body.trim().slice(0, 500);
  }
  return new ApiFailure(response.status, code, message, requestId, details);
}
