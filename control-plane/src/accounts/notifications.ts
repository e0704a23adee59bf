import { createHmac, randomBytes } from 'node:crypto';
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { BlockList, isIP } from 'node:net';
import nodemailer, { type Transporter } from 'nodemailer';
import type { Clock } from '../auth/clock.ts';

/**
 * Outbound notifications: signed webhooks, chat webhooks (Slack's incoming-webhook format, which
 * Mattermost and Rocket.Chat also accept) and e-mail over SMTP.
 *
 * Webhook deliveries are POSTs of a JSON event with these headers:
 *   Content-Type: application/json
 *   User-Agent: Anvil-Webhooks/1
 *   X-Anvil-Event: <event type>          X-Anvil-Delivery: <event id>
 *   X-Anvil-Timestamp: <unix seconds>    (also in the body as `timestamp`, so it is signed)
 *   X-Anvil-Signature: sha256=<hex HMAC-SHA256 of the raw body under the webhook secret>
 * The signature header is absent when no secret is configured. Receivers recompute the HMAC over the
 * exact bytes received, compare in constant time, and refuse timestamps older than 5 minutes.
 */

export const WEBHOOK_SIGNATURE_HEADER = 'x-anvil-signature';
export const WEBHOOK_TIMESTAMP_HEADER = 'x-anvil-timestamp';

export function signWebhookBody(body: string, secret: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

export interface NotifierOptions {
  smtpUrl: string | null;
  smtpFrom: string;
  /** Allow deliveries to loopback, private and link-local addresses (refused by default). */
  allowPrivate: boolean;
  clock: Clock;
  timeoutMs?: number;
}

export interface DeliveryResult {
  statusCode: number;
  body: string;
}

export class DeliveryError extends Error {
  constructor(
    message: string,
    readonly statusCode: number | null = null,
    readonly body: string | null = null,
  ) {
    super(message);
    this.name = 'DeliveryError';
  }
}

// Addresses a notification must not reach unless the operator allows it: the control plane's own
// network (SSRF). Loopback, RFC 1918, CGNAT, link-local (cloud metadata), unique-local, unspecified.
const PRIVATE = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  PRIVATE.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  PRIVATE.addSubnet(net, prefix, 'ipv6');
}

export function isPrivateAddress(address: string): boolean {
  const version = isIP(address);
  if (version === 0) return true;
  if (version === 6 && address.toLowerCase().startsWith('::ffff:')) {
    return PRIVATE.check(address.slice(7), 'ipv4');
  }
  return PRIVATE.check(address, version === 4 ? 'ipv4' : 'ipv6');
}

export class Notifier {
  private transport: Transporter | null = null;

  constructor(private readonly options: NotifierOptions) {}

  get emailConfigured(): boolean {
    return this.options.smtpUrl !== null;
  }

  /** A webhook event: JSON body, signed when a secret is given. */
  async webhook(
    url: string,
    secret: string | null,
    event: { type: string; accountId: string; data: Record<string, unknown> },
  ): Promise<DeliveryResult & { id: string; signature: string | null }> {
    const now = this.options.clock.now();
    const timestamp = Math.floor(now.getTime() / 1000);
    const id = `evt_${randomBytes(12).toString('hex')}`;
    const body = JSON.stringify({
      id,
      type: event.type,
      timestamp,
      created_at: now.toISOString(),
      account_id: event.accountId,
      data: event.data,
    });
    const signature = secret ? signWebhookBody(body, secret) : null;
    const result = await this.post(url, body, {
      'x-anvil-event': event.type,
      'x-anvil-delivery': id,
      [WEBHOOK_TIMESTAMP_HEADER]: String(timestamp),
      ...(signature ? { [WEBHOOK_SIGNATURE_HEADER]: signature } : {}),
    });
    return { ...result, id, signature };
  }

  /** A chat message in the incoming-webhook format: {text, channel?}. */
  async chat(url: string, message: { text: string; channel?: string | null | undefined }) {
    const body = JSON.stringify({
      text: message.text,
      ...(message.channel ? { channel: message.channel } : {}),
    });
    return this.post(url, body, {});
  }

  async email(message: {
    to: string;
    subject: string;
    text: string;
  }): Promise<{ messageId: string; response: string }> {
    if (!this.options.smtpUrl) throw new DeliveryError('e-mail is not configured (ANVIL_SMTP_URL)');
    this.transport ??= nodemailer.createTransport({
      url: this.options.smtpUrl,
      connectionTimeout: this.options.timeoutMs ?? 10_000,
      greetingTimeout: this.options.timeoutMs ?? 10_000,
      socketTimeout: this.options.timeoutMs ?? 10_000,
    });
    try {
      const info = await this.transport.sendMail({
        from: this.options.smtpFrom,
        to: message.to,
        subject: message.subject,
        text: message.text,
      });
      return { messageId: String(info.messageId), response: String(info.response) };
    } catch (error) {
      throw new DeliveryError(`SMTP delivery failed: ${(error as Error).message}`);
    }
  }

  close(): void {
    this.transport?.close();
    this.transport = null;
  }

  private post(url: string, body: string, headers: Record<string, string>): Promise<DeliveryResult> {
    const target = new URL(url);
    const send =
      target.protocol === 'https:' ? httpsRequest : target.protocol === 'http:' ? httpRequest : null;
    if (!send) return Promise.reject(new DeliveryError(`unsupported URL scheme ${target.protocol}`));
    const allowPrivate = this.options.allowPrivate;
    // Sockets skip the lookup below for literal addresses, so those are checked here.
    const literal = target.hostname.replace(/^\[|\]$/g, '');
    if (!allowPrivate && isIP(literal) !== 0 && isPrivateAddress(literal)) {
      return Promise.reject(
        new DeliveryError(`${literal} is a private address; set ANVIL_OUTBOUND_ALLOW_PRIVATE=true to allow`),
      );
    }
    // The address is checked when the socket connects, after DNS: a name that resolves to a private
    // address is refused even if it looked public (no DNS-rebinding bypass).
    const lookup = (
      hostname: string,
      options: object,
      callback: (
        error: NodeJS.ErrnoException | null,
        address: string | LookupAddress[],
        family?: number,
      ) => void,
    ) => {
      dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
        if (error) return callback(error, '');
        const list = addresses as LookupAddress[];
        const refused = !allowPrivate && list.some((a) => isPrivateAddress(a.address));
        if (refused) {
          const blocked = new Error(
            `${hostname} resolves to a private address; set ANVIL_OUTBOUND_ALLOW_PRIVATE=true to allow`,
          ) as NodeJS.ErrnoException;
          blocked.code = 'EPRIVATE';
          return callback(blocked, '');
        }
        if ((options as { all?: boolean }).all) return callback(null, list);
        return callback(null, list[0]!.address, list[0]!.family);
      });
    };
    return new Promise((resolve, reject) => {
      const req = send(
        target,
        {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'content-length': String(Buffer.byteLength(body)),
            'user-agent': 'Anvil-Webhooks/1',
            ...headers,
          },
          lookup: lookup as never,
          timeout: this.options.timeoutMs ?? 10_000,
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size <= 64 * 1024) chunks.push(chunk);
          });
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            const statusCode = res.statusCode ?? 0;
            if (statusCode >= 200 && statusCode < 300) resolve({ statusCode, body: text });
            else
              reject(
                new DeliveryError(`receiver answered HTTP ${statusCode}`, statusCode, text.slice(0, 1000)),
              );
          });
          res.on('error', (error) =>
            reject(new DeliveryError(`reading the response failed: ${error.message}`)),
          );
        },
      );
      req.on('timeout', () => req.destroy(new Error('timed out')));
      req.on('error', (error) =>
        reject(new DeliveryError(`delivery to ${target.host} failed: ${error.message}`)),
      );
      req.end(body);
    });
  }
}
