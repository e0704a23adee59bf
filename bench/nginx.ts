// nginx (Debian's package `nginx`) as the peer of the HTTPS port proxy in bench/proxy.ts: a TLS-terminating
// reverse proxy in front of the same container backend, with the proxy's certificate and the same TLS
// versions and cipher order, HTTP/1.1 and keep-alive connections to the upstream (what a tuned nginx in
// front of an app does), everything else left at the package's defaults (proxy_buffering on, no access
// log so neither side writes a line per request). Runs in the foreground from a private prefix directory,
// so nothing of the system's nginx (its config, its service) is touched.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface NginxOptions {
  /** PEM files of the certificate to serve. */
  cert: string;
  key: string;
  /** host:port of the plain-HTTP backend. */
  upstream: string;
  /** worker_processes: one matches the control plane's single proxy thread. */
  workers: number;
}

export interface Nginx {
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

/** Upstream connections nginx keeps idle per worker: above the bench's client connections. */
const UPSTREAM_KEEPALIVE = 128;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function config(dir: string, port: number, o: NginxOptions): string {
  // As root the workers would switch to nobody and could not use the private temp directories.
  const user = process.getuid?.() === 0 ? 'user root;\n' : '';
  return `${user}worker_processes ${o.workers};
daemon off;
master_process on;
pid ${dir}/nginx.pid;
error_log stderr error;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_timeout 72s;
  keepalive_requests 1000000;
  upstream backend {
    server ${o.upstream};
    keepalive ${UPSTREAM_KEEPALIVE};
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:${port} ssl;
    ssl_certificate ${o.cert};
    ssl_certificate_key ${o.key};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;
    ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305;
    ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
    }
  }
}
`;
}

/** Starts nginx and resolves once it accepts TLS connections. */
export async function startNginx(o: NginxOptions): Promise<Nginx> {
  const dir = mkdtempSync(join(tmpdir(), 'anvil-bench-nginx-'));
  for (const sub of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, sub));
  const port = await freePort();
  writeFileSync(join(dir, 'nginx.conf'), config(dir, port, o));
  const child = spawn('nginx', ['-p', dir, '-c', join(dir, 'nginx.conf')], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = once(child, 'exit');
      // QUIT: graceful; the master takes its workers with it.
      child.kill('SIGQUIT');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) {
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`nginx exited with ${child.exitCode} (see its error log above)`);
    }
    const up = await fetch(`http://127.0.0.1:${port}/`).then(
      () => true,
      () => false,
    );
    // A plain request to a TLS port gets nginx's 400: listening is all this waits for.
    if (up) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error('nginx did not listen within 10 s');
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { url: `https://127.0.0.1:${port}`, child, stop };
}
