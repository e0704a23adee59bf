import { execFile } from 'node:child_process';
import { constants, X509Certificate } from 'node:crypto';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * TLS settings of the proxy's listener: TLS 1.2 and 1.3 with AEAD suites only (ECDHE key exchange on
 * 1.2). The server picks the suite: AES-128-GCM first, the cheapest per byte with AES-NI and as strong as
 * any browser needs, then AES-256-GCM and ChaCha20-Poly1305, which is preferred for the clients that list
 * it first (phones without AES instructions). Session tickets (Node's default) let returning clients
 * resume without a full handshake.
 */
export const PROXY_TLS_SERVER_OPTIONS = {
  minVersion: 'TLSv1.2',
  ciphers: [
    'TLS_AES_128_GCM_SHA256',
    'TLS_AES_256_GCM_SHA384',
    'TLS_CHACHA20_POLY1305_SHA256',
    'ECDHE-ECDSA-AES128-GCM-SHA256',
    'ECDHE-RSA-AES128-GCM-SHA256',
    'ECDHE-ECDSA-AES256-GCM-SHA384',
    'ECDHE-RSA-AES256-GCM-SHA384',
    'ECDHE-ECDSA-CHACHA20-POLY1305',
    'ECDHE-RSA-CHACHA20-POLY1305',
  ].join(':'),
  honorCipherOrder: true,
  secureOptions: constants.SSL_OP_PRIORITIZE_CHACHA,
} as const;

/** The certificate and key the proxy serves, and where they came from. */
export interface ProxyTls {
  cert: string;
  key: string;
  source: 'operator' | 'development_ca';
  /** PEM of the generated development CA (clients trust it once); null with an operator certificate. */
  caCert: string | null;
}

export interface CertificateInfo {
  issuer: string;
  valid_from: string;
  valid_until: string;
  /** valid, expired, not_yet_valid */
  status: 'valid' | 'expired' | 'not_yet_valid';
}

/** Where the development CA and the certificate it issues live: <dataDir>/proxy-tls, files mode 0600. */
export function tlsDir(dataDir: string): string {
  return join(dataDir, 'proxy-tls');
}

/**
 * Operator files when configured (ANVIL_PROXY_TLS_CERT/KEY, read at start-up); otherwise a development
 * CA generated once with the openssl CLI and kept in the data directory, issuing a wildcard certificate
 * for `*.<domain>` (and `<domain>`), re-issued when the domain changes or it expires within 30 days.
 */
export async function loadProxyTls(options: {
  dataDir: string;
  domain: string;
  certFile: string | null;
  keyFile: string | null;
  now?: Date;
}): Promise<ProxyTls> {
  if (options.certFile && options.keyFile) {
    const [cert, key] = await Promise.all([
      readFile(options.certFile, 'utf8'),
      readFile(options.keyFile, 'utf8'),
    ]);
    new X509Certificate(cert); // fails start-up on a file that is not a PEM certificate
    return { cert, key, source: 'operator', caCert: null };
  }
  const dir = tlsDir(options.dataDir);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const caKey = join(dir, 'ca.key');
  const caCrt = join(dir, 'ca.crt');
  const srvKey = join(dir, 'server.key');
  const srvCrt = join(dir, 'server.crt');
  if (!(await exists(caCrt)) || !(await exists(caKey))) {
    await run('openssl', [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      caKey,
      '-out',
      caCrt,
      '-days',
      '3650',
      '-subj',
      '/O=Anvil/CN=Anvil Development CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ]);
    await rm(srvCrt, { force: true });
  }
  const ca = await readFile(caCrt, 'utf8');
  if (!(await leafUsable(srvCrt, srvKey, ca, options.domain, options.now ?? new Date()))) {
    const csr = join(dir, 'server.csr');
    const ext = join(dir, 'server.ext');
    await writeFile(
      ext,
      `subjectAltName=DNS:*.${options.domain},DNS:${options.domain}\nbasicConstraints=CA:FALSE\n` +
        'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n',
      { mode: 0o600 },
    );
    await run('openssl', [
      'req',
      '-new',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      srvKey,
      '-out',
      csr,
      '-subj',
      `/O=Anvil/CN=*.${options.domain}`,
    ]);
    // 397 days: the longest validity browsers accept for a leaf certificate.
    await run('openssl', [
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      caCrt,
      '-CAkey',
      caKey,
      '-set_serial',
      `0x${Date.now().toString(16)}`,
      '-days',
      '397',
      '-extfile',
      ext,
      '-out',
      srvCrt,
    ]);
    await rm(csr, { force: true });
    await rm(ext, { force: true });
  }
  for (const file of [caKey, caCrt, srvKey, srvCrt]) await chmod(file, 0o600);
  const [cert, key] = await Promise.all([readFile(srvCrt, 'utf8'), readFile(srvKey, 'utf8')]);
  return { cert, key, source: 'development_ca', caCert: ca };
}

async function exists(path: string): Promise<boolean> {
  try {
    await readFile(path);
    return true;
  } catch {
    return false;
  }
}

async function leafUsable(crtPath: string, keyPath: string, ca: string, domain: string, now: Date) {
  if (!(await exists(crtPath)) || !(await exists(keyPath))) return false;
  try {
    const leaf = new X509Certificate(await readFile(crtPath, 'utf8'));
    const caCert = new X509Certificate(ca);
    const renewBy = new Date(leaf.validTo).getTime() - 30 * 86_400_000;
    return (
      leaf.verify(caCert.publicKey) && renewBy > now.getTime() && leaf.checkHost(`x.${domain}`) !== undefined
    );
  } catch {
    return false;
  }
}

/** issuer / validity / status of the certificate actually served (the first one of the PEM chain). */
export function certificateInfo(certPem: string, now: Date): CertificateInfo {
  const cert = new X509Certificate(certPem);
  const from = new Date(cert.validFrom);
  const until = new Date(cert.validTo);
  const issuer = cert.issuer.split('\n').find((line) => line.startsWith('CN=')) ?? cert.issuer.split('\n')[0];
  return {
    issuer: (issuer ?? '').replace(/^CN=/, ''),
    valid_from: from.toISOString(),
    valid_until: until.toISOString(),
    status: now < from ? 'not_yet_valid' : now > until ? 'expired' : 'valid',
  };
}
