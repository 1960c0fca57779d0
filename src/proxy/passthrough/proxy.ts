/**
 * The passthrough: what the cache does not answer (writes, other endpoints, requests without a
 * credential) is forwarded by @fastify/http-proxy, streamed, never cached. It is held to the
 * cached path's rules:
 *
 * - the `upstream.*` connect, headers and body timeouts bound it (not node's 300 s request timeout);
 * - a failure is the same JSON 502/504 as a failed fill (served.ts upstreamFailureBody), naming
 *   what failed and never where (no upstream address reaches a client); a request refused before
 *   it is sent gets the same `{"message", "errors"}` body;
 * - tm-cache never retries on a client's behalf (a write is not idempotent; @fastify/reply-from
 *   would otherwise retry a GET on 503 up to ten times, waiting what its Retry-After says);
 * - a Retry-After relayed promises no more than `upstream.maxRetryAfterMs` (RFC 9110 §10.2.3);
 * - the upstream's certificate is verified (reply-from turns that off by default);
 * - its upstream status and time reach the access log (the pipeline records every request once
 *   its response is done); reply-from's own two info lines and its warning per failure are silenced.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import httpProxy from '@fastify/http-proxy';
import type { Logger } from 'pino';
import type { Config } from '../../config/schema.js';
import { toUpstreamError } from '../../upstream/client.js';
import { capRetryAfter } from '../callers/retry-after.js';
import { upstreamFailureBody } from '../respond/served.js';

export interface PassthroughOptions {
  readonly now: () => number;
  /** `upstream.maxRetryAfterMs`, read per answer (reloadable). */
  readonly maxRetryAfterMs: () => number;
  /** Called with each upstream answer's status and time (ms), before it is streamed to the client. */
  /** `retryAfter`: the answer's Retry-After as the instance sent it (a 429 pauses the fleet's budget). */
  readonly onAnswer: (request: Forwarded, status: number, ms: number, retryAfter: string | string[] | undefined) => void;
  /** Called when the upstream gave no answer: the status answered instead, what failed, the time (ms). */
  readonly onFailure: (request: Forwarded, status: number, code: string, ms: number) => void;
}

/** What of a forwarded request the passthrough reads. */
export interface Forwarded {
  readonly method: string;
  readonly url: string;
  /** The node request (where the access log's upstream timing is kept). */
  readonly raw: object;
}

export async function registerPassthrough(app: FastifyInstance, upstream: Config['upstream'], o: PassthroughOptions): Promise<void> {
  // Set before the proxy's routes are registered, so that their context inherits it.
  app.setErrorHandler(answerRefusal);
  await app.register(httpProxy, {
    upstream: upstream.url,
    prefix: '/',
    disableRequestLogging: true,
    undici: {
      connections: upstream.connections,
      connect: { timeout: upstream.connectTimeoutMs, rejectUnauthorized: true },
      headersTimeout: upstream.headersTimeoutMs,
      bodyTimeout: upstream.bodyTimeoutMs,
      keepAliveTimeout: 30_000,
    },
    replyOptions: {
      retryDelay: () => null,
      // Node's server answers `Expect: 100-continue` with 100 Continue itself (no 'checkContinue'
      // listener), so the body comes to this hop: the expectation is met here (RFC 9110 §10.1.1).
      // Forwarded, it would be refused by undici before sending (a 502 for a write never sent).
      rewriteRequestHeaders: (_request, headers) => {
        delete headers['expect'];
        return headers;
      },
      rewriteHeaders: (headers) => {
        // Hop-by-hop (RFC 9110 §7.6.1): the instance's connection to tm-cache is not the client's,
        // whose own Connection (a `close` included) node answers for; reply-from drops them for HTTP/2 alone.
        const { connection: _connection, 'keep-alive': _keepAlive, ...endToEnd } = headers;
        const retryAfter = capRetryAfter(headers['retry-after'], o.now(), o.maxRetryAfterMs());
        return retryAfter === undefined ? endToEnd : { ...endToEnd, 'retry-after': retryAfter };
      },
      onResponse: (request, reply, res) => {
        o.onAnswer(request, res.statusCode, reply.elapsedTime, headersOf(res)['retry-after']);
        void reply.send(res.stream);
      },
      onError: (reply, { error }) => {
        const failure = toUpstreamError((error as { cause?: unknown }).cause ?? error);
        o.onFailure(reply.request, failure.status, failure.code, reply.elapsedTime);
        void reply.code(failure.status).type(JSON_TYPE).send(upstreamFailureBody(failure));
      },
    },
  });
}

const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * What fastify or reply-from refuse before the upstream is asked (a request target reply-from
 * will not build, a body it cannot read): the house error body, never fastify's shape nor a 500.
 */
function answerRefusal(error: { statusCode?: number; message: string }, _request: FastifyRequest, reply: FastifyReply): void {
  const status = error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 502;
  const body = status === 502 ? upstreamFailureBody(toUpstreamError(error)) : { message: `The request was refused: ${error.message}.`, errors: {} };
  void reply.code(status).type(JSON_TYPE).send(body);
}

/**
 * The logger fastify hands each passthrough request (`childLoggerFactory`): the app's, quieted to
 * errors, because reply-from logs a warning per failed request (with the upstream address) that
 * a flood of failures turns into a flood of lines; the passthrough's own debug line says it.
 */
export function passthroughRequestLogger(logger: Logger): Logger {
  return logger.levelVal >= logger.levels.values['error']! ? logger : logger.child({}, { level: 'error' });
}

/** The upstream answer's headers: @fastify/reply-from hands undici's { statusCode, headers, stream }, typed as a node response. */
function headersOf(res: object): Readonly<Record<string, string | string[] | undefined>> {
  return (res as { headers?: Record<string, string | string[] | undefined> }).headers ?? {};
}
