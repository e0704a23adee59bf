import type { IncomingHttpHeaders } from 'node:http';
import { type ClientOptions, WebSocket } from 'ws';

export interface UpgradeAnswer {
  /** 101 when the WebSocket opened (it is closed at once), else the refusal's HTTP status. */
  status: number;
  body: string;
  headers: IncomingHttpHeaders;
}

/** Tries a WebSocket upgrade and answers how the server took it: opened, or refused with status and body. */
export function tryUpgrade(url: string, options: ClientOptions = {}): Promise<UpgradeAnswer> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, options);
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => {
        body += chunk.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    ws.on('open', () => {
      ws.terminate();
      resolve({ status: 101, body: '', headers: {} });
    });
    ws.on('error', (error) => {
      if (!/Unexpected server response/.test(error.message)) reject(error);
    });
  });
}
