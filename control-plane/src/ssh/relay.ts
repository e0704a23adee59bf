import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { ApiError } from '@anvil/shared';
import ssh2, {
  type AuthContext,
  type Connection,
  type PseudoTtyInfo,
  type ServerChannel,
  type Session,
} from 'ssh2';
import type { LiveSessions } from '../access-revocation/live-sessions.ts';
import type { ExecSession, TunnelOpener } from '../fleet/tunnels/types.ts';
import type { Logger } from '../logger.ts';
import { ContainerExec, finished } from './container-exec.ts';
import { ContainerFs } from './container-fs.ts';
import { SHELL_PERMISSION, type SshGate } from './gate.ts';
import type { SshKeyService } from './keys.ts';
import { fingerprintOf } from './public-key.ts';
import { ScpServer } from './scp.ts';
import { parseScpCommand, type ScpCommand } from './scp-command.ts';
import { SftpBackend } from './sftp.ts';

/** Prefers bash when the image has it, as a login shell; busybox images get sh. */
export const LOGIN_SHELL = [
  '/bin/sh',
  '-c',
  'if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l',
];

/** Destinations of `ssh -L` that mean "the container itself". */
const CONTAINER_ALIASES = new Set(['localhost', '127.0.0.1', '::1', '0.0.0.0', 'ip6-localhost']);

/** After the process exited, how long its output may take to arrive before the exit status is sent. */
const OUTPUT_DRAIN_MS = 5_000;

/** How long a client told why its connection ends has to close its channels before it is cut off. */
const CLOSE_NOTICE_MS = 5_000;

/** How long a connection over the account's limit may stay without opening a session to be told why. */
const REFUSED_IDLE_MS = 10_000;

/** Client environment passed into sessions (as sshd's default AcceptEnv). */
const ACCEPTED_ENV = /^(LANG|LC_[A-Z_]+)$/;

export interface SshRelayOptions {
  hostKey: string;
  gate: SshGate;
  keys: SshKeyService;
  /** Counts connections against the account's limit; ends those whose member lost access. */
  liveSessions: LiveSessions;
  /** The tunnels into containers; null while none is configured (sessions are then refused with a message). */
  tunnels: () => TunnelOpener | null;
  logger: Logger;
}

interface Login {
  clusterId: string;
  accountId: string;
  userId: string;
  keyId: string;
  fingerprint: string;
  ip: string | null;
}

/**
 * The SSH relay: `ssh -p <port> <cluster_id>@<host>` lands in the cluster's container through the
 * agent's tunnels. Shell (with PTY, window changes, signals, exit status), exec, SFTP (served by the
 * relay itself over commands in the container, so scp and sftp work without sshd in the image) and
 * `ssh -L` forwards to container ports. Who may log in is decided by SshGate.
 */
export class SshRelay {
  readonly #server: ssh2.Server;
  readonly #connections = new Set<Connection>();
  #listening = false;

  constructor(private readonly options: SshRelayOptions) {
    this.#server = new ssh2.Server({ hostKeys: [options.hostKey], ident: 'Anvil_relay' }, (client, info) =>
      this.#accept(client, info.ip ?? null),
    );
    this.#server.on('error', (error: Error) => options.logger.error({ err: error }, 'ssh relay error'));
  }

  async listen(port: number, host: string): Promise<AddressInfo> {
    await new Promise<void>((resolve, reject) => {
      const onError = (error: Error) => reject(error);
      this.#server.once('error', onError);
      this.#server.listen(port, host, () => {
        this.#server.off('error', onError);
        resolve();
      });
    });
    this.#listening = true;
    return this.address()!;
  }

  /** The bound address while listening, else null. */
  address(): AddressInfo | null {
    if (!this.#listening) return null;
    const address = this.#server.address();
    return typeof address === 'object' && address ? (address as AddressInfo) : null;
  }

  get listening(): boolean {
    return this.#listening;
  }

  /** Stops accepting and ends every connection (their container processes are torn down). */
  async close(): Promise<void> {
    if (!this.#listening) return;
    this.#listening = false;
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    for (const client of this.#connections) client.end();
    await closed;
  }

  #accept(client: Connection, ip: string | null): void {
    this.#connections.add(client);
    const log = this.options.logger.child({ remote: ip });
    let login: Login | null = null;
    /** The connection's place in the account's limit, once logged in. */
    let release: (() => void) | null = null;
    /** Why the connection may not go on (over the account's limit): told on its first session, then closed. */
    let refusal: string | null = null;
    /** Shell, exec, scp and sftp channels: where a disconnect notice can be written. */
    const channels = new Set<ServerChannel>();
    const track = (channel: ServerChannel) => {
      channels.add(channel);
      channel.once('close', () => channels.delete(channel));
      return channel;
    };
    const disconnect = (message: string) => {
      const open = [...channels];
      for (const channel of open) tellAndClose(channel, `\r\n${message}`);
      endAfter(client, open);
    };
    client.on('error', (error: Error) => log.debug({ err: error }, 'ssh client error'));
    let gone = false;
    client.on('close', () => {
      gone = true;
      release?.();
      this.#connections.delete(client);
      if (login) log.info({ cluster_id: login.clusterId, user_id: login.userId }, 'ssh connection closed');
    });
    client.on('authentication', (ctx) => {
      this.#authenticate(ctx, ip).then(
        (result) => {
          if (result === 'query-ok') {
            // PK_OK: the client may now sign with this key.
            ctx.accept();
          } else if (result) {
            login = result;
            // Counted once per connection, whatever the client does after (and not when it already left).
            if (release === null && refusal === null && !gone) {
              try {
                release = this.#hold(result, (reason) => {
                  log.info(
                    { cluster_id: result.clusterId, user_id: result.userId, reason },
                    'ssh access revoked',
                  );
                  disconnect(`anvil: access to ${result.clusterId} was revoked (${reason}); disconnecting`);
                });
              } catch (error) {
                refusal = `anvil: ${error instanceof ApiError ? error.message : 'the connection was refused'}`;
                log.info(
                  { cluster_id: result.clusterId, user_id: result.userId },
                  'ssh connection over the limit',
                );
              }
            }
            log.info(
              {
                cluster_id: result.clusterId,
                user_id: result.userId,
                key_id: result.keyId,
                fingerprint: result.fingerprint,
              },
              'ssh login',
            );
            ctx.accept();
          } else {
            ctx.reject(['publickey']);
          }
        },
        (error: unknown) => {
          log.error({ err: error }, 'ssh authentication failed');
          ctx.reject(['publickey']);
        },
      );
    });
    client.on('ready', () => {
      const session = login!;
      if (refusal !== null) {
        this.#refuse(client, refusal);
        return;
      }
      client.on('session', (accept) => this.#session(accept(), session, log, track));
      client.on('tcpip', (accept, reject, info) => {
        if (!CONTAINER_ALIASES.has(info.destIP) && info.destIP !== session.clusterId) {
          log.info(
            { cluster_id: session.clusterId, dest: info.destIP },
            'ssh forward to another address refused',
          );
          return reject();
        }
        this.#forward(accept, reject, session, info.destPort, log);
      });
      client.on('request', (_accept, reject, name) => {
        log.debug({ request: name }, 'ssh global request refused');
        reject?.();
      });
    });
  }

  #hold(login: Login, end: (reason: string) => void): () => void {
    return this.options.liveSessions.hold({
      kind: 'ssh',
      accountId: login.accountId,
      grant: {
        accountId: login.accountId,
        userId: login.userId,
        clusterId: login.clusterId,
        permission: SHELL_PERMISSION,
        sshKeyId: login.keyId,
      },
      end,
    });
  }

  /**
   * A connection that may not go on: its first shell, exec or subsystem gets the message on stderr and
   * exit status 255, then the connection ends (after REFUSED_IDLE_MS when the client opens none).
   */
  #refuse(client: Connection, message: string): void {
    const timer = setTimeout(() => client.end(), REFUSED_IDLE_MS);
    timer.unref();
    client.once('close', () => clearTimeout(timer));
    client.on('tcpip', (_accept, reject) => reject());
    client.on('request', (_accept, reject) => reject?.());
    client.on('session', (accept) => {
      const session = accept();
      session.on('pty', (ok) => ok?.());
      session.on('env', (ok) => ok?.());
      const tell = (channel: ServerChannel) => {
        tellAndClose(channel, message);
        endAfter(client, [channel]);
      };
      session.on('shell', (ok) => tell(ok()));
      session.on('exec', (ok) => tell(ok()));
      session.on('subsystem', (ok) => tell(ok()));
    });
  }

  /**
   * publickey only. A key query (no signature) is answered yes for every well-formed key, whatever the
   * login name: answering it from the database would tell anyone holding only a public key (they are
   * published, e.g. github.com/<user>.keys) whether a cluster id exists and whose keys reach it. Nothing
   * is looked up before the client proves it holds the private key; the full decision (registered key,
   * permission, ssh_enabled, running) is made on the signed request, and every refusal there looks the
   * same to the client. Refusals of proven members are audited.
   */
  async #authenticate(ctx: AuthContext, ip: string | null): Promise<Login | null | 'query-ok'> {
    if (ctx.method !== 'publickey') return null;
    const blob = ctx.key.data;
    const parsed = ssh2.utils.parseKey(blob);
    const key = Array.isArray(parsed) ? parsed[0] : parsed;
    if (!key || key instanceof Error) return null;
    if (!ctx.signature || !ctx.blob) return 'query-ok';
    if (key.verify(ctx.blob, ctx.signature, ctx.hashAlgo) !== true) {
      this.options.logger.warn({ cluster: ctx.username, remote: ip }, 'ssh signature did not verify');
      return null;
    }
    const verdict = await this.options.gate.check(ctx.username, blob, ip);
    if (!verdict.allowed) {
      this.options.logger.warn(
        { cluster: ctx.username, fingerprint: fingerprintOf(blob), remote: ip, reason: verdict.reason },
        'ssh login refused',
      );
      return null;
    }
    await this.options.keys.markUsed(verdict.key.id);
    return {
      clusterId: verdict.cluster.id,
      accountId: verdict.cluster.accountId,
      userId: verdict.userId,
      keyId: verdict.key.id,
      fingerprint: verdict.key.fingerprint,
      ip,
    };
  }

  #tunnels(): TunnelOpener {
    const tunnels = this.options.tunnels();
    if (!tunnels) throw new Error('the relay has no tunnels into containers configured');
    return tunnels;
  }

  #session(
    session: Session,
    login: Login,
    log: Logger,
    track: (channel: ServerChannel) => ServerChannel,
  ): void {
    let pty: PseudoTtyInfo | null = null;
    const env: Record<string, string> = {};
    let exec: ExecSession | null = null;
    const pendingSignals: string[] = [];

    session.on('pty', (accept, _reject, info) => {
      pty = info;
      accept?.();
    });
    session.on('env', (accept, reject, info) => {
      if (ACCEPTED_ENV.test(info.key)) {
        env[info.key] = info.val;
        accept?.();
      } else reject?.();
    });
    session.on('window-change', (accept, _reject, info) => {
      if (pty) pty = { ...pty, cols: info.cols, rows: info.rows };
      exec?.resize(info.cols, info.rows);
      accept?.();
    });
    session.on('signal', (accept, _reject, info) => {
      if (exec) exec.signal(info.name);
      else pendingSignals.push(info.name);
      accept?.();
    });

    const run = (channel: ServerChannel, command: string[], kind: string) => {
      const tty = pty !== null;
      log.info({ cluster_id: login.clusterId, user_id: login.userId, kind, tty }, 'ssh session');
      const options = {
        command,
        tty,
        env: { ...env, ...(pty ? { TERM: pty.term || 'xterm' } : {}) },
        ...(pty ? { cols: pty.cols || 80, rows: pty.rows || 24 } : {}),
      };
      let opened: Promise<ExecSession>;
      try {
        opened = this.#tunnels().openExec(login.clusterId, options);
      } catch (error) {
        opened = Promise.reject(error);
      }
      opened.then(
        (session) => {
          exec = session;
          for (const name of pendingSignals.splice(0)) session.signal(name);
          pipeExec(channel, session, tty);
        },
        (error: unknown) => {
          log.warn({ err: error, cluster_id: login.clusterId }, 'ssh session could not start');
          channel.stderr.write(
            `anvil: cannot reach the cluster's container: ${(error as Error).message}\r\n`,
          );
          channel.exit(255);
          channel.end();
        },
      );
    };

    session.on('shell', (accept) => run(track(accept()), LOGIN_SHELL, 'shell'));
    session.on('exec', (accept, _reject, info) => {
      const scp = parseScpCommand(info.command);
      if (scp) this.#scp(track(accept()), scp, login, log);
      else run(track(accept()), ['/bin/sh', '-c', info.command], 'exec');
    });
    // SFTP arrives as a plain subsystem channel (no 'sftp' listener, so ssh2 does not parse it): the
    // relay speaks the protocol itself (SftpChannel).
    session.on('subsystem', (accept, reject, info) => {
      if (info.name !== 'sftp') {
        log.info({ subsystem: info.name }, 'ssh subsystem refused');
        reject?.();
        return;
      }
      log.info({ cluster_id: login.clusterId, user_id: login.userId, kind: 'sftp' }, 'ssh session');
      const channel = track(accept());
      try {
        new SftpBackend(channel, this.#files(login, channel), log);
      } catch (error) {
        log.warn({ err: error }, 'sftp could not start');
        channel.end();
      }
    });
  }

  /**
   * The container's files for one channel. Its helper shell and spare exec start now, while the client
   * is still at its handshake (SFTP INIT, the scp protocol's first byte), and end with the channel.
   */
  #files(login: Login, channel: ServerChannel): ContainerFs {
    const exec = new ContainerExec(this.#tunnels(), login.clusterId);
    exec.prepare();
    channel.once('close', () => exec.close());
    return new ContainerFs(exec);
  }

  /** Legacy `scp -O`: the relay speaks the SCP protocol itself, over the container's files. */
  #scp(channel: ServerChannel, command: ScpCommand, login: Login, log: Logger): void {
    log.info(
      { cluster_id: login.clusterId, user_id: login.userId, kind: 'scp', role: command.role },
      'ssh session',
    );
    const finish = (code: number) => {
      channel.exit(code);
      channel.end();
    };
    let server: ScpServer;
    try {
      server = new ScpServer(channel, this.#files(login, channel), command, log);
    } catch (error) {
      channel.stderr.write(`anvil: cannot reach the cluster's container: ${(error as Error).message}\r\n`);
      finish(255);
      return;
    }
    server.run().then(finish, (error: unknown) => {
      log.warn({ err: error, cluster_id: login.clusterId }, 'scp transfer failed');
      channel.stderr.write(`anvil: scp failed: ${(error as Error).message}\n`);
      finish(1);
    });
  }

  #forward(accept: () => ServerChannel, reject: () => void, login: Login, port: number, log: Logger): void {
    let tunnels: TunnelOpener;
    try {
      tunnels = this.#tunnels();
    } catch {
      reject();
      return;
    }
    tunnels.openStream(login.clusterId, port).then(
      (stream: Duplex) => {
        log.info({ cluster_id: login.clusterId, user_id: login.userId, port }, 'ssh port forward');
        const channel = accept();
        stream.on('error', () => channel.destroy());
        channel.on('error', () => stream.destroy());
        stream.pipe(channel);
        channel.pipe(stream);
        channel.on('close', () => stream.destroy());
        stream.on('close', () => channel.end());
      },
      (error: unknown) => {
        log.info({ err: error, cluster_id: login.clusterId, port }, 'ssh port forward refused');
        reject();
      },
    );
  }
}

/** Ends a session channel with a message on stderr and exit status 255. */
function tellAndClose(channel: ServerChannel, message: string): void {
  channel.stderr.write(`${message}\r\n`);
  channel.exit(255);
  channel.end();
}

/**
 * Ends the connection once the client closed these channels (OpenSSH writes a channel's stderr out
 * only in its main loop: a disconnect arriving first would lose the message), or after a bound.
 */
function endAfter(client: Connection, channels: ServerChannel[]): void {
  const timer = setTimeout(() => client.end(), CLOSE_NOTICE_MS);
  timer.unref();
  let open = channels.length;
  const closed = () => {
    open -= 1;
    if (open > 0) return;
    clearTimeout(timer);
    client.end();
  };
  if (open === 0) closed();
  for (const channel of channels) channel.once('close', closed);
}

/**
 * Joins a channel to a container process: stdin from the channel (EOF ends it), stdout and stderr
 * apart, and the exit status once both outputs are drained; a closed channel tears the process down.
 */
function pipeExec(channel: ServerChannel, exec: ExecSession, tty: boolean): void {
  if (tty) {
    // A terminal has no half-close: the client's EOF is typed as ^D (VEOF), as on a real terminal, and
    // the PTY stays open so output still flows back (`echo ls | ssh -tt` behaves as with sshd).
    channel.on('data', (chunk: Buffer) => exec.stdin.write(chunk));
    channel.on('end', () => exec.stdin.write('\x04'));
  } else {
    channel.pipe(exec.stdin);
  }
  exec.stdin.on('error', () => {});
  exec.stdout.pipe(channel, { end: false });
  exec.stderr.pipe(channel.stderr, { end: false });
  let done = false;
  channel.on('close', () => {
    if (!done) exec.close();
  });
  const drained = Promise.all([finished(exec.stdout), finished(exec.stderr)]);
  exec.exit.then(async ({ code }) => {
    // Outputs end with the process; one a tunnel keeps open must not hold the exit status back for long.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([drained, new Promise((resolve) => (timer = setTimeout(resolve, OUTPUT_DRAIN_MS)))]);
    clearTimeout(timer);
    done = true;
    if (code !== null) channel.exit(code);
    channel.end();
  });
}
