import { ApiError } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import type { Actor } from './access.ts';
import { DeliveryError, type Notifier } from './notifications.ts';
import { get, type SettingsService } from './settings.ts';
import { checkEmail, checkHttpUrl, validationError } from './validation.ts';

export interface NotificationTestInput {
  type: 'webhook' | 'slack' | 'email';
  webhook_url?: string | undefined;
  channel?: string | undefined;
  email?: string | undefined;
}

/**
 * "Send a test notification" of the notifications settings: delivers a test event to the webhook, chat
 * or e-mail address given or configured, and answers with what the receiver said. Apart from the
 * settings document (settings.ts), which it only reads.
 */
export class NotificationTests {
  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      notifier: Notifier;
      settings: Pick<SettingsService, 'requireWrite' | 'effective'>;
    },
  ) {}

  async send(actor: Actor, input: NotificationTestInput) {
    const member = await this.deps.settings.requireWrite(actor, 'notifications');
    const all = await this.deps.settings.effective(member.accountId);
    const n = all.notifications;
    const timestamp = this.deps.clock.now().toISOString();
    const fail = (error: unknown): never => {
      if (error instanceof DeliveryError) {
        throw new ApiError('NOTIFICATION_FAILED', `${input.type} test failed: ${error.message}`, {
          type: input.type,
          reason: error.message,
          statusCode: error.statusCode,
          body: error.body,
        });
      }
      throw error;
    };
    switch (input.type) {
      case 'webhook': {
        const url = input.webhook_url ?? (get(n, ['webhook', 'url']) as string | null);
        if (!url) throw validationError('webhook_url', 'is required: no webhook URL is configured');
        checkHttpUrl(url, 'webhook_url');
        const secret = (get(n, ['webhook', 'secret']) as string | null) ?? null;
        const result = await this.deps.notifier
          .webhook(url, secret, {
            type: 'test',
            accountId: member.accountId,
            data: { message: 'Test delivery from Anvil', requested_by: member.userId },
          })
          .catch(fail);
        return {
          type: 'webhook',
          status: 'success',
          message: secret
            ? 'signed test event delivered'
            : 'test event delivered unsigned (no secret configured)',
          timestamp,
          response: {
            status_code: result.statusCode,
            body: result.body.slice(0, 1000),
            delivery_id: result.id,
            signed: result.signature !== null,
          },
        };
      }
      case 'slack': {
        const url = input.webhook_url ?? (get(n, ['slack', 'webhook_url']) as string | null);
        if (!url) throw validationError('webhook_url', 'is required: no chat webhook URL is configured');
        checkHttpUrl(url, 'webhook_url');
        const channel = input.channel ?? (get(n, ['slack', 'channel']) as string | null);
        const result = await this.deps.notifier
          .chat(url, { text: ':white_check_mark: Test notification from Anvil', channel })
          .catch(fail);
        return {
          type: 'slack',
          status: 'success',
          message: `test message posted${channel ? ` to ${channel}` : ''}`,
          timestamp,
          response: { status_code: result.statusCode, slack_response: result.body.slice(0, 1000) },
        };
      }
      case 'email': {
        const given = input.email ? checkEmail(input.email) : null;
        if (!this.deps.notifier.emailConfigured) {
          throw new ApiError(
            'SERVICE_UNAVAILABLE',
            'e-mail is not configured on this server (ANVIL_SMTP_URL)',
            {
              type: 'email',
              variable: 'ANVIL_SMTP_URL',
            },
          );
        }
        const to = given ?? (get(n, ['email', 'email']) as string | null);
        if (!to) throw validationError('email', 'is required: the account has no notification address');
        // A test send is mail on the operator's behalf: only to the account's own people, never to any
        // address a caller names (the route would otherwise relay mail to strangers).
        if (!(await this.isMemberAddress(member.accountId, to))) {
          throw validationError(
            'email',
            `${to} is not the address of an active member of this account; test e-mails go only to members`,
          );
        }
        const result = await this.deps.notifier
          .email({
            to,
            subject: 'Anvil test notification',
            text: `This is a test notification from Anvil for account ${member.accountId}.`,
          })
          .catch(fail);
        return {
          type: 'email',
          status: 'success',
          message: `test e-mail accepted for ${to}`,
          timestamp,
          response: { smtp_response: result.response, message_id: result.messageId, to },
        };
      }
    }
  }

  private async isMemberAddress(accountId: string, address: string): Promise<boolean> {
    // Compared here rather than with ILIKE, where `_` and `%` in the given address would be wildcards.
    const wanted = address.trim().toLowerCase();
    const members = await this.deps.db.prisma.user.findMany({
      where: { accountId, status: 'active' },
      select: { email: true },
    });
    return members.some((m) => m.email.trim().toLowerCase() === wanted);
  }
}
