import type { IncomingMessage } from 'node:http';
import { ApiError } from '@anvil/shared';
import { isPrivateUrlHost, outboundRequest } from '../util/outbound-guard.ts';

/** A URL the control plane refuses to fetch, or a fetch that failed; the message says which. */
export class FetchError extends Error {}

const MAX_REDIRECTS = 5;
const TIMEOUT_MS = 30_000;

/**
 * Checks a dataset URL before it is accepted: http or https only, no credentials, and (unless the
 * operator allows private targets) no literal loopback/private/reserved address. Names and the connected address are checked
 * when the socket connects (outboundRequest), so a name cannot rebind past this check.
 */
export function checkDatasetUrl(raw: string, allowPrivate: boolean): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ApiError('VALIDATION_ERROR', 'dataUrl is not a URL', { field: 'dataUrl', reason: 'not a URL' });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ApiError('VALIDATION_ERROR', 'dataUrl must be an http or https URL', {
      field: 'dataUrl',
      reason: `scheme ${url.protocol.replace(/:$/, '')} is not allowed`,
    });
  }
  if (url.username || url.password) {
    throw new ApiError('VALIDATION_ERROR', 'dataUrl must not carry credentials', {
      field: 'dataUrl',
      reason: 'user information in the URL',
    });
  }
  if (!allowPrivate && isPrivateUrlHost(url)) {
    throw new ApiError('VALIDATION_ERROR', 'dataUrl points at a private or loopback address', {
      field: 'dataUrl',
      reason: 'private network targets are refused (ANVIL_OUTBOUND_ALLOW_PRIVATE=true allows them)',
    });
  }
  return url;
}

function get(url: URL, allowPrivate: boolean): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = outboundRequest(
      url,
      { method: 'GET', headers: { 'user-agent': 'Anvil-Datasets/1', accept: '*/*' }, timeout: TIMEOUT_MS },
      allowPrivate,
      resolve,
    );
    req.on('timeout', () =>
      req.destroy(new FetchError(`no answer from ${url.host} within ${TIMEOUT_MS} ms`)),
    );
    req.on('error', (error) => reject(error instanceof FetchError ? error : new FetchError(error.message)));
    req.end();
  });
}

/**
 * GETs a dataset URL and returns the response body as a stream (the caller stores it, with its own
 * size limit). Redirects are followed up to 5 times, each target checked like the first.
 */
export async function openDatasetUrl(raw: string, allowPrivate: boolean): Promise<IncomingMessage> {
  let url = checkDatasetUrl(raw, allowPrivate);
  for (let hop = 0; ; hop++) {
    const response = await get(url, allowPrivate);
    const status = response.statusCode ?? 0;
    if (status >= 300 && status < 400 && response.headers.location) {
      response.resume();
      if (hop >= MAX_REDIRECTS) throw new FetchError(`more than ${MAX_REDIRECTS} redirects`);
      try {
        url = checkDatasetUrl(new URL(response.headers.location, url).toString(), allowPrivate);
      } catch (error) {
        throw new FetchError(`redirect refused: ${(error as Error).message}`);
      }
      continue;
    }
    if (status < 200 || status >= 300) {
      response.resume();
      throw new FetchError(`${url.host} answered HTTP ${status}`);
    }
    return response;
  }
}
