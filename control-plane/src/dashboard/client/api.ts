/** A refused or failed API call, with the spec's error code when the server sent one. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

interface ErrorBody {
  // Flat /v2 errors: {error, message, code}; wrapped /v1 errors: {success: false, error: {code, message}}.
  error?: string | { code?: string; message?: string };
  message?: string;
  code?: string;
}

/** The admin API, called with the operator's key as a Bearer header (never a cookie). */
export class Api {
  constructor(private readonly key: string) {}

  get<T>(path: string): Promise<T> {
    return this.request<T>('GET', path);
  }

  post<T>(path: string, body: unknown = {}): Promise<T> {
    return this.request<T>('POST', path, body);
  }

  delete<T>(path: string): Promise<T> {
    return this.request<T>('DELETE', path);
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.key}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response: Response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? null : JSON.stringify(body),
        cache: 'no-store',
        credentials: 'omit',
      });
    } catch {
      throw new ApiFailure(0, 'NETWORK', 'the control plane cannot be reached');
    }
    const text = await response.text();
    const parsed = text ? (JSON.parse(text) as unknown) : null;
    if (!response.ok) throw failure(response.status, parsed as ErrorBody | null);
    return parsed as T;
  }
}

function failure(status: number, body: ErrorBody | null): ApiFailure {
  const nested = typeof body?.error === 'object' ? body.error : null;
  const code =
    nested?.code ?? body?.code ?? (typeof body?.error === 'string' ? body.error : `HTTP_${status}`);
  const message = nested?.message ?? body?.message ?? `request failed with status ${status}`;
  return new ApiFailure(status, code, message);
}
