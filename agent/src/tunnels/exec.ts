import type { Duplex } from 'node:stream';
import {
  decodeResize,
  encodeExit,
  encodeFrame,
  TUNNEL_CHANNEL,
  type TunnelTarget,
  tunnelSignal,
} from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import type { Logger } from 'pino';
import type { WebSocket } from 'ws';
import { errorMessage } from '../errors.ts';
import { DockerDemuxer } from './demux.ts';
import { TunnelEnd } from './join.ts';
import { signalExec } from './signal.ts';

export type ExecTarget = Extract<TunnelTarget, { kind: 'exec' }>;

/** Creates the exec (not started): failures here (no such user, bad working dir) fail the command. */
export async function createExec(
  docker: Dockerode,
  containerId: string,
  target: ExecTarget,
): Promise<Dockerode.Exec> {
  return docker.getContainer(containerId).exec({
    Cmd: target.command,
    AttachStdin: true,
    AttachStdout: true,
    AttachStderr: true,
    Tty: target.tty,
    Env: Object.entries(target.env).map(([k, v]) => `${k}=${v}`),
    ...(target.user ? { User: target.user } : {}),
    ...(target.workingDir ? { WorkingDir: target.workingDir } : {}),
  });
}

/** Starts the exec attached (hijacked), with the PTY sized before anything is read. */
export async function startExec(exec: Dockerode.Exec, target: ExecTarget): Promise<Duplex> {
  const stream = (await exec.start({ hijack: true, stdin: true, Detach: false, Tty: target.tty })) as Duplex;
  if (target.tty && target.cols && target.rows) {
    await exec.resize({ h: target.rows, w: target.cols }).catch(() => {});
  }
  return stream;
}

/** The exit code once Docker has it: the attach stream can end a moment before inspect says so. */
async function exitCode(exec: Dockerode.Exec): Promise<number | null> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const info = await exec.inspect().catch(() => null);
    if (!info) return null;
    if (!info.Running) return info.ExitCode ?? null;
    await new Promise((resolve) => setTimeout(resolve, 20 * Math.min(attempt + 1, 10)));
  }
  return null;
}

/**
 * Joins a started exec and a tunnel socket: stdin/resize/signal frames in; stdout/stderr (demultiplexed
 * without a PTY), eof and the exit code out; then a normal close. The tunnel closing first kills the
 * process. Resolves when both are done.
 */
export function joinExec(
  ws: WebSocket,
  docker: Dockerode,
  containerId: string,
  exec: Dockerode.Exec,
  stream: Duplex,
  target: ExecTarget,
  logger: Logger,
): Promise<void> {
  return new Promise((resolve) => {
    let processDone = false;
    const end: TunnelEnd = new TunnelEnd(ws, {
      frame(frame) {
        switch (frame.channel) {
          case TUNNEL_CHANNEL.stdin:
            if (!stream.destroyed && !stream.write(frame.payload)) {
              ws.pause();
              stream.once('drain', () => ws.resume());
            }
            return;
          case TUNNEL_CHANNEL.eof:
            // Half close: Docker closes the process's stdin, output keeps flowing.
            stream.end();
            return;
          case TUNNEL_CHANNEL.resize: {
            const size = decodeResize(frame.payload);
            if (size && target.tty) {
              exec.resize({ h: size.rows, w: size.cols }).catch((error: unknown) => {
                logger.debug({ err: errorMessage(error) }, 'exec resize failed');
              });
            }
            return;
          }
          case TUNNEL_CHANNEL.signal: {
            const signal = tunnelSignal(frame.payload.toString('ascii'));
            if (!signal) return;
            signalExec(docker, containerId, exec, signal).catch((error: unknown) => {
              logger.warn({ err: errorMessage(error), signal }, 'could not signal an exec');
            });
            return;
          }
          default:
            return;
        }
      },
      closed() {
        if (!processDone) {
          // The other side went away: nothing will read the output, so the process goes too.
          signalExec(docker, containerId, exec, 'KILL').catch(() => {});
          stream.destroy();
        }
      },
    });
    const flow = { pause: () => stream.pause(), resume: () => stream.resume() };
    const demux = target.tty
      ? null
      : new DockerDemuxer((which, payloads) =>
          end.data(which === 'stderr' ? TUNNEL_CHANNEL.stderr : TUNNEL_CHANNEL.stdout, payloads, flow),
        );
    stream.on('data', (chunk: Buffer) => {
      if (demux) demux.push(chunk);
      else end.data(TUNNEL_CHANNEL.stdout, chunk, flow);
    });
    stream.on('error', (error) => logger.debug({ err: error.message }, 'exec stream error'));
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      if (end.ended) {
        resolve();
        return;
      }
      end.send(encodeFrame(TUNNEL_CHANNEL.eof));
      void exitCode(exec).then((code) => {
        processDone = true;
        end.send(encodeExit(code));
        end.close();
        resolve();
      });
    };
    stream.on('end', finish);
    stream.on('close', finish);
  });
}
