import { createHmac, randomBytes } from 'node:crypto';
import nodemailer, { type Transporter } from 'nodemailer';
import type { Clock } from '../auth/clock.ts';
import { isPrivateUrlHost, outboundRequest } from '../util/outbound-guard.ts';

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
    if (target.protocol !== 'https:' && target.protocol !== 'http:')
      return Promise.reject(new DeliveryError(`unsupported URL scheme ${target.protocol}`));
    const allowPrivate = this.options.allowPrivate;
    if (!allowPrivate && isPrivateUrlHost(target)) {
      return Promise.reject(
        new DeliveryError(
          `${target.hostname} is a private address (or another reserved range); set ANVIL_OUTBOUND_ALLOW_PRIVATE=true to allow`,
        ),
      );
    }
    return new Promise((resolve, reject) => {
      const req = outboundRequest(
        target,
        {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'content-length': String(Buffer.byteLength(body)),
            'user-agent': 'Anvil-Webhooks/1',
            ...headers,
          },
          timeout: this.options.timeoutMs ?? 10_000,
        },
        allowPrivate,
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
