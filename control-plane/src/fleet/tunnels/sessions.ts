import { Duplex, Readable, Writable } from 'node:stream';
import {
  decodeExit,
  decodeFrame,
  encodeFrame,
  encodeFrames,
  encodeResize,
  FrameSender,
  type FrameSocket,
  TUNNEL_CHANNEL,
  TUNNEL_CLOSE,
  type TunnelFrame,
  tunnelSignal,
} from '@anvil/shared/protocol';
import { type RawData, WebSocket } from 'ws';
import type { ExecSession } from './types.ts';

/** Time the agent gets to answer our close before the socket is destroyed. */
const CLOSE_GRACE_MS = 2_000;

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

function closeSocket(ws: WebSocket): void {
  if (ws.readyState === WebSocket.CLOSED) return;
  try {
    ws.close(TUNNEL_CLOSE.normal);
  } catch {
    ws.terminate();
  }
  setTimeout(() => {
    if (ws.readyState !== WebSocket.CLOSED) ws.terminate();
  }, CLOSE_GRACE_MS).unref();
}

interface SocketEvents {
  frame(frame: TunnelFrame): void;
  /** The socket closed; `error` is set unless the agent ended the tunnel normally. */
  closed(error: Error | null): void;
}

/** Decodes the agent's frames; an undecodable one ends the tunnel with an error. */
function listen(ws: WebSocket, events: SocketEvents): void {
  let agentError: string | null = null;
  let done = false;
  const finish = (error: Error | null) => {
    if (done) return;
    done = true;
    events.closed(error);
  };
  ws.on('message', (data, isBinary) => {
    const frame = isBinary ? decodeFrame(toBuffer(data)) : null;
    if (!frame) {
      finish(new Error('tunnel: the agent sent an undecodable frame'));
      ws.terminate();
      return;
    }
    if (frame.channel === TUNNEL_CHANNEL.error) {
      agentError = frame.payload.toString('utf8').slice(0, 1024);
      return;
    }
    events.frame(frame);
  });
  // ws emits close after error; the error itself carries nothing the close does not.
  ws.on('error', () => {});
  ws.on('close', (code) => {
    if (agentError !== null) finish(new Error(`tunnel: ${agentError}`));
    else if (code === TUNNEL_CLOSE.normal) finish(null);
    else finish(new Error(`tunnel closed abnormally (${code})`));
  });
}

/**
 * Writes bytes as stdin frames, waiting for the socket to drain above the high-water mark. Pieces (the
 * writes a caller corked together) are joined into as few frames as fit, with one copy.
 */
function writeFrames(
  sender: FrameSender,
  chunk: Buffer | readonly Buffer[],
  callback: (error?: Error | null) => void,
): void {
  let below = true;
  for (const frame of encodeFrames(TUNNEL_CHANNEL.stdin, chunk)) below = sender.send(frame);
  if (sender.failed) callback(new Error(`tunnel closed: ${sender.failed.message}`));
  else if (below) callback();
  else sender.onDrain(() => callback(sender.failed ? new Error('tunnel closed') : null));
}

/**
 * A byte stream to a container port over the agent's tunnel socket. Half close works both ways
 * (end() sends eof; the container's FIN ends the readable side); destroy() closes the socket, and the
 * agent then closes the TCP connection.
 */
export function tunnelStream(ws: WebSocket): Duplex {
  const sender = new FrameSender(ws as unknown as FrameSocket);
  const stream = new Duplex({
    allowHalfOpen: true,
    read() {
      ws.resume();
    },
    write(chunk: Buffer, _encoding, callback) {
      writeFrames(sender, chunk, callback);
    },
    final(callback) {
      sender.send(encodeFrame(TUNNEL_CHANNEL.eof));
      callback();
    },
    destroy(error, callback) {
      closeSocket(ws);
      callback(error);
    },
  });
  let readEnded = false;
  const endRead = () => {
    if (readEnded) return;
    readEnded = true;
    stream.push(null);
  };
  listen(ws, {
    frame(frame) {
      if (frame.channel === TUNNEL_CHANNEL.stdout) {
        if (!readEnded && !stream.push(frame.payload)) ws.pause();
      } else if (frame.channel === TUNNEL_CHANNEL.eof) {
        endRead();
      }
    },
    closed(error) {
      if (error) {
        stream.destroy(error);
        return;
      }
      endRead();
      // Nothing more can be written: once the reader has everything, the stream is done.
      if (stream.writableFinished) return;
      stream.once('end', () => {
        if (!stream.destroyed) stream.destroy();
      });
    },
  });
  return stream;
}

/** A docker exec session over the agent's tunnel socket. */
export function tunnelExec(ws: WebSocket): ExecSession {
  const sender = new FrameSender(ws as unknown as FrameSocket);
  const stdout = new Readable({ read: () => ws.resume() });
  const stderr = new Readable({ read: () => ws.resume() });
  const stdin = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      writeFrames(sender, chunk, callback);
    },
    // Corked writes (FileWriter's batch of SFTP WRITEs) go out as one frame.
    writev(chunks, callback) {
      writeFrames(
        sender,
        chunks.map((c) => c.chunk as Buffer),
        callback,
      );
    },
    final(callback) {
      sender.send(encodeFrame(TUNNEL_CHANNEL.eof));
      callback();
    },
  });
  // A write after the process ended is not the caller's emergency.
  stdin.on('error', () => {});
  let exitCode: number | null | undefined;
  let resolveExit!: (exit: { code: number | null }) => void;
  const exit = new Promise<{ code: number | null }>((resolve) => {
    resolveExit = resolve;
  });
  let outputEnded = false;
  const endOutput = (error: Error | null) => {
    if (outputEnded) return;
    outputEnded = true;
    for (const readable of [stdout, stderr]) {
      if (error && readable.listenerCount('error') > 0) readable.destroy(error);
      else readable.push(null);
    }
  };
  listen(ws, {
    frame(frame) {
      switch (frame.channel) {
        case TUNNEL_CHANNEL.stdout:
          if (!outputEnded && !stdout.push(frame.payload)) ws.pause();
          return;
        case TUNNEL_CHANNEL.stderr:
          if (!outputEnded && !stderr.push(frame.payload)) ws.pause();
          return;
        case TUNNEL_CHANNEL.eof:
          endOutput(null);
          return;
        case TUNNEL_CHANNEL.exit:
          exitCode = decodeExit(frame.payload);
          return;
        default:
          return;
      }
    },
    closed(error) {
      endOutput(error);
      if (!stdin.destroyed) stdin.destroy();
      resolveExit({ code: exitCode ?? null });
    },
  });
  return {
    stdin,
    stdout,
    stderr,
    exit,
    resize(cols, rows) {
      sender.send(encodeResize(cols, rows));
    },
    signal(name) {
      const signal = tunnelSignal(name);
      if (!signal) throw new TypeError(`unknown or unsupported signal ${JSON.stringify(name)}`);
      sender.send(encodeFrame(TUNNEL_CHANNEL.signal, Buffer.from(signal, 'ascii')));
    },
    close() {
      closeSocket(ws);
    },
  };
}
