import type { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';

/**
 * Answers a Server-Sent Events stream: unbuffered by proxies on the way, destroyed when the client goes,
 * and `ended` called when either side closes (it releases what the stream held; it may run twice).
 */
export function sendEventStream(reply: FastifyReply, stream: Readable, ended: () => void): FastifyReply {
  stream.on('close', ended);
  reply.raw.on('close', () => {
    ended();
    stream.destroy();
  });
  return reply
    .header('content-type', 'text/event-stream; charset=utf-8')
    .header('cache-control', 'no-cache, no-transform')
    .header('x-accel-buffering', 'no')
    .send(stream as never);
}
