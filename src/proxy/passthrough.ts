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
 * - one debug line per request (method, path without query, status, upstream ms), never the
 *   Authorization; reply-from's own two info lines and its warning per failure are silenced.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import httpProxy from '@fastify/http-proxy';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { toUpstreamError } from '../upstream/client.js';
import { capRetryAfter } from './retry-after.js';
import { upstreamFailureBody } from './served.js';

export interface PassthroughOptions {
  readonly logger: Logger;
  readonly now: () => number;
  /** Called with each upstream answer's status, before it is streamed to the client. */
  readonly onAnswer: (request: Forwarded, status: number) => void;
}

/** What of a forwarded request the passthrough reads. */
export interface Forwarded {
  readonly method: string;
  readonly url: string;
}

type LogLine = (request: Forwarded, reply: { readonly elapsedTime: number }, status: number, error?: string) => void;

export async function registerPassthrough(app: FastifyInstance, upstream: Config['upstream'], o: PassthroughOptions): Promise<void> {
  const logLine = makeLogLine(o.logger);
  // Set before the proxy's routes are registered, so that their context inherits it.
  app.setErrorHandler(answerRefusal(logLine));
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
      rewriteHeaders: (headers) => {
        const retryAfter = capRetryAfter(headers['retry-after'], o.now(), upstream.maxRetryAfterMs);
        return retryAfter === undefined ? headers : { ...headers, 'retry-after': retryAfter };
      },
      onResponse: (request, reply, res) => {
        logLine(request, reply, res.statusCode);
        o.onAnswer(request, res.statusCode);
        void reply.send(res.stream);
      },
      onError: (reply, { error }) => {
        const failure = toUpstreamError((error as { cause?: unknown }).cause ?? error);
        logLine(reply.request, reply, failure.status, failure.code);
        void reply.code(failure.status).type(JSON_TYPE).send(upstreamFailureBody(failure));
      },
    },
  });
}

const JSON_TYPE = 'application/json; charset=utf-8';

/** One debug line per forwarded request; the path without its query, no header at all. */
function makeLogLine(logger: Logger): LogLine {
  return (request, reply, status, error) => {
    if (!logger.isLevelEnabled('debug')) return;
    const upstreamMs = Math.round(reply.elapsedTime);
    logger.debug({ method: request.method, path: pathOf(request.url), status, upstreamMs, ...(error ? { error } : {}) }, 'passthrough');
  };
}

/**
 * What fastify or reply-from refuse before the upstream is asked (a request target reply-from
 * will not build, a body it cannot read): the house error body, never fastify's shape nor a 500.
 */
function answerRefusal(logLine: LogLine) {
  return (error: { statusCode?: number; message: string }, request: FastifyRequest, reply: FastifyReply) => {
    const status = error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 502;
    const body = status === 502 ? upstreamFailureBody(toUpstreamError(error)) : { message: `The request was refused: ${error.message}.`, errors: {} };
    logLine(request, reply, status, 'refused');
    void reply.code(status).type(JSON_TYPE).send(body);
  };
}

/**
 * The logger fastify hands each passthrough request (`childLoggerFactory`): the app's, quieted to
 * errors, because reply-from logs a warning per failed request (with the upstream address) that
 * a flood of failures turns into a flood of lines; the passthrough's own debug line says it.
 */
export function passthroughRequestLogger(logger: Logger): Logger {
  return logger.levelVal >= logger.levels.values['error']! ? logger : logger.child({}, { level: 'error' });
}

/** The path of a request target, without its query: queries may carry secrets, logs never do. */
export function pathOf(url: string | undefined): string {
  const u = url ?? '';
  const end = u.search(/[?#]/);
  return end === -1 ? u : u.slice(0, end);
}
