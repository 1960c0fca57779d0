/**
 * The request pipeline: every request is offered here first, on node's own request and response
 * objects, before fastify builds anything. What is not for the cache (another method or path, no
 * credential, a parameter the catalogue does not know) is handed to `forward` (fastify and
 * @fastify/http-proxy); everything else is answered here, by one path:
 *
 *   route memo (route-memo.ts: raw URL → operation + canonical query)
 *     → caller (callers/identity.ts: identity memo; else upstream GET /user, coalesced) ── refused ─▶ relayed
 *     → invalid parameters ─▶ 400/422 here
 *     → decide (decide.ts: scope, key, fill key, what gates it, may this caller read it)
 *     → judge (judge.ts: a named verdict) → read-through (read-through.ts: acts on it: tiers in
 *       order, access confirmations and grants in callers/, fill through cache/shared-fill.ts)
 *     → respond (respond/: writer, headers, encodings) and record (ops/recorder.ts: metrics, stats, access log line)
 *   anything else → passthrough/ (forwarding rules, @fastify/http-proxy)
 *
 * Every request gets one exchange (exchange.ts), made in `handle`: each stage fills its own field
 * of it (the decision, the bytes written, the upstream's time), and the record reads them there.
 * Every request gets an id (its own `X-Request-Id` when it sent a sane one, else a new one: `<process prefix>-<sequence>`),
 * echoed on the response and in its access log line; forwarded requests are recorded by the
 * same recorder once their response is done.
 * The common case (a URL and a caller seen before, a fresh entry in memory) runs synchronously
 * from start to end: three Map lookups and one write, no promise, no hashing, no I/O.
 * Memos are filled only for recognized callers (a routing once its caller is known).
 * A failure of the pipeline itself costs that request its cache, never the process: a request
 * with nothing written yet is forwarded upstream uncached, one with a head sent is closed.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { makeErrorBody, type ErrorBody } from '../api/errors.js';
import type { CacheEntry } from '../cache/entry.js';
import type { CacheOutcome } from '../cache/outcome.js';
import { pathOf } from '../ops/access-log.js';
import type { ForwardKind, Recorder } from '../ops/recorder.js';
import { toUpstreamError } from '../upstream/client.js';
import { decide, lapsedKey, type DecideOptions } from './decide.js';
import type { OriginKeying } from './origin-keying.js';
import { waitsForGzipVariant } from './respond/encoding.js';
import { carry, Exchange } from './exchange.js';
import { cacheStatus } from './respond/headers.js';
import type { IdentityResolver } from './callers/identity.js';
import type { ReadThrough } from './read-through.js';
import { resolveRoute, type RouteInfo, type RouteMemo } from './route-memo.js';
import { localAnswer, type Served } from './respond/served.js';
import { writeServed } from './respond/writer.js';
import type { Caller } from './callers/caller.js';
import { traced, tracing, type Tracing } from '../trace/tracing.js';

export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** A client's own request id is kept when it is printable ASCII of sane length; else a new one. */
const SANE_REQUEST_ID = /^[\x21-\x7e]{1,128}$/;

/**
 * A new request id: this process's random prefix (48 bits: replicas do not collide) and a
 * sequence number. Unique like a UUID for log correlation, at the cost of a counter rather than
 * random bytes per request.
 */
const ID_PREFIX = randomBytes(6).toString('hex');
let sequence = 0;

function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  if (typeof given === 'string' && SANE_REQUEST_ID.test(given)) return given;
  return `${ID_PREFIX}-${(++sequence).toString(36)}`;
}

export interface PipelineOptions {
  readonly routes: RouteMemo;
  readonly identity: IdentityResolver;
  readonly readThrough: ReadThrough;
  readonly cache: { gzipVariant(key: string, entry: CacheEntry): Promise<CacheEntry> };
  /** `cache.honorClientNoCache` */
  readonly honorNoCache: boolean;
  /** Entries keep the instance's Access-Control-Allow-Origin: a browser's Origin is part of their key as learned (origin-keying.ts); else undefined. */
  readonly originKeying: OriginKeying | undefined;
  /** `cache.sharing`, and what the instance said of resources' projects (decide.ts). */
  readonly sharing: DecideOptions['sharing'];
  readonly projectOfResource: DecideOptions['projectOfResource'];
  /** `cache.strict`: an unknown parameter is a local 422 instead of an uncached forward. */
  readonly strict: boolean;
  readonly now: () => number;
  readonly logger: Logger;
  /** The one record of every request: metrics, stats, access log. */
  readonly recorder: Recorder;
}

export class Pipeline {
  readonly #o: PipelineOptions;
  readonly #recorder: Recorder;
  readonly #decideOptions: DecideOptions;

  constructor(
    options: PipelineOptions,
    private readonly forward: Handler,
  ) {
    this.#o = options;
    this.#recorder = options.recorder;
    this.#decideOptions = {
      honorNoCache: options.honorNoCache,
      originKeying: options.originKeying,
      isVerifiedAdmin: (c, t) => options.identity.isVerifiedAdmin(c, t),
      sharing: options.sharing,
      projectOfResource: options.projectOfResource,
    };
  }

  /** One request: its exchange (exchange.ts) is made here, and every stage fills its own field of it. */
  handle(req: IncomingMessage, res: ServerResponse): void {
    const x = new Exchange(req, res, performance.now(), requestIdOf(req));
    // Tracing off (the default): this one read is all a request pays for it (trace/tracing.ts).
    if (tracing !== undefined) return this.#traced(tracing, x);
    this.#routeSafely(x);
  }

  /** The request's server span, active while its stages run; the record ends it. */
  #traced(t: Tracing, x: Exchange): void {
    const trace = t.request(x.req);
    x.trace = trace;
    t.within(trace, () => this.#routeSafely(x));
  }

  #routeSafely(x: Exchange): void {
    try {
      this.#route(x);
    } catch (err) {
      this.#fail(x, err);
    }
  }

  #route(x: Exchange): void {
    const method = x.req.method;
    const authorization = x.req.headers.authorization;
    if ((method !== 'GET' && method !== 'HEAD') || authorization === undefined) return this.#forward(x, 'passthrough', 'passthrough');
    const url = x.req.url!;
    const memoized = this.#o.routes.get(url);
    const route = memoized ?? resolveRoute(url);
    if (route.kind === 'passthrough') return this.#forward(x, 'passthrough', 'passthrough');
    x.t = this.#o.now();
    const caller = this.#o.identity.peek(authorization, x.t);
    // A routing is remembered only once its caller is known: junk credentials fill nothing.
    const unmemoized = memoized === undefined ? url : undefined;
    if (caller !== undefined) {
      this.#recorder.identityMemoHit();
      return this.#withCaller(x, route, caller, authorization, unmemoized);
    }
    this.#identify(x, route, authorization, unmemoized).catch((err: unknown) => this.#fail(x, err));
  }

  /** Hands a request to fastify (passthrough), to be recorded once its response is done. */
  #forward(x: Exchange, kind: ForwardKind, operation: string): void {
    x.operation = operation;
    x.res.setHeader('x-request-id', x.requestId);
    // The passthrough fills the exchange's `upstream` (app.ts): the request carries it through fastify.
    carry(x);
    // Read now: once the response is done, the request may no longer hold its socket.
    const client = x.req.socket.remoteAddress;
    x.res.once('close', () => {
      x.t = this.#o.now();
      this.#recorder.forwarded(x, kind, client);
    });
    this.forward(x.req, x.res);
  }

  #withCaller(x: Exchange, route: Exclude<RouteInfo, { kind: 'passthrough' }>, caller: Caller, authorization: string, unmemoized?: string): void {
    if (unmemoized !== undefined) this.#o.routes.set(unmemoized, route);
    x.userId = caller.userId;
    if (route.kind === 'invalid') {
      x.operation = 'invalid';
      return this.#finish(x, localAnswer(route.error.status, route.error.toBody(), INVALID));
    }
    if (route.kind === 'bypass') {
      const operation = 'unknown';
      if (this.#o.strict) {
        x.operation = operation;
        return this.#finish(x, localAnswer(422, unknownParamsBody(route.unknown), INVALID));
      }
      x.res.setHeader('cache-status', cacheStatus(UNKNOWN_PARAM, undefined, x.t));
      return this.#forward(x, 'bypass', operation);
    }
    const d = decide(route, caller, authorization, x.req.headers, x.t, this.#decideOptions, x);
    x.operation = d.canonical.op.id;
    const served = this.#o.readThrough.serve(d, x.t);
    if (!(served instanceof Promise)) return this.#finish(x, served, d.key);
    // A throw while writing (a stored value node refuses) must reach #fail too: so .catch after
    // .then, never .then's second argument, which would leave the request unanswered.
    served
      .then((s) => {
        x.t = this.#o.now();
        this.#finish(x, s, d.key);
      })
      .catch((err: unknown) => this.#fail(x, err));
  }

  /** A caller not in the memo: resolved (shared store, else upstream), then the request goes on. */
  async #identify(x: Exchange, route: Exclude<RouteInfo, { kind: 'passthrough' }>, authorization: string, unmemoized: string | undefined): Promise<void> {
    const identity = this.#o.identity;
    x.operation = route.kind === 'cacheable' ? route.req.op.id : 'invalid';
    try {
      // The exchange is this request's allowance for waiting on Redis (budget.ts), from the identity lookup to the fill lock.
      const result = await traced('identity', 'internal', {}, async (span) => {
        const resolved = await identity.resolve(authorization, x, x.req.socket.remoteAddress);
        span?.setAttributes({ 'tm_cache.identity': resolved.kind, 'tm_cache.identity_via': resolved.kind === 'caller' ? resolved.via : 'upstream' });
        return resolved;
      });
      x.t = this.#o.now();
      if (result.kind === 'caller') {
        // `GET /user` itself, asked plainly (no parameter, no Origin): the look-up's 200 is its answer.
        if (result.answer !== undefined && route.kind === 'cacheable' && isPlainCurrentUser(route) && x.req.headers.origin === undefined) {
          x.prefetched = result.answer;
        }
        return this.#withCaller(x, route, result.caller, authorization, unmemoized);
      }
      const refused: Served = {
        kind: 'relay',
        response: result.response,
        outcome: { kind: 'bypass', detail: 'identity', upstreamStatus: result.response.status },
      };
      return this.#finish(x, refused);
    } catch (err) {
      const failure = toUpstreamError(err);
      // The instance is failing: a caller we knew may still get what we hold for them, if
      // identity.staleOnOutage allows and the instance itself failed, never on tm-cache's own
      // queue-full (read-through.ts serveStaleOnly; docs/how-it-works.md "Revocation").
      const lapsed = identity.peekLapsed(authorization);
      const key = lapsedKey(route, lapsed);
      const served = await this.#o.readThrough.serveStaleOnly(key, failure, x);
      x.userId = lapsed?.userId;
      x.t = this.#o.now();
      return this.#finish(x, served, key);
    }
  }

  /**
   * Every answered request ends here once: written, and recorded (metrics, stats, access log;
   * the caller named by user id only, never the credential). `key`: where a served entry is
   * stored, so that its gzip variant is found (or made) for a client that accepts gzip.
   */
  #finish(x: Exchange, served: Served, key?: string): void {
    if (served.kind === 'entry' && key !== undefined && waitsForGzipVariant(served.entry, x.req.headers['accept-encoding'])) {
      // Rare (a fill's answer, a hit before its compression landed): written once the variant is there, never identity with another ETag.
      this.#o.cache
        .gzipVariant(key, served.entry)
        .then((entry) => {
          x.t = this.#o.now();
          this.#write(x, { ...served, entry });
        })
        .catch((err: unknown) => this.#fail(x, err));
      return;
    }
    this.#write(x, served);
  }

  #write(x: Exchange, served: Served): void {
    writeServed(x, served);
    this.#recorder.cached(x, served.outcome, served.kind === 'local' ? refusedParams(served.body) : undefined);
  }

  #fail(x: Exchange, err: unknown): void {
    const res = x.res;
    this.#o.logger.error(
      { err: err instanceof Error ? `${err.name}: ${err.message}` : String(err), reqId: x.requestId, path: pathOf(x.req.url) },
      'request pipeline failed',
    );
    if (res.headersSent || res.writableEnded) return void res.destroy();
    // Nothing written yet: the instance can still answer it, uncached. A writeHead that threw
    // half-way may have left its status and headers on `res`: start the response afresh.
    try {
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      res.statusCode = 200;
      this.#forward(x, 'passthrough', 'passthrough');
    } catch (again) {
      this.#o.logger.error({ err: again instanceof Error ? again.message : String(again), path: pathOf(x.req.url) }, 'request could not be forwarded');
      res.destroy();
    }
  }
}

const INVALID: CacheOutcome = Object.freeze({ kind: 'error', detail: 'invalid-request' });
const UNKNOWN_PARAM: CacheOutcome = Object.freeze({ kind: 'bypass', detail: 'unknown-param' });

/** The parameters an error body names (`errors` keys), for the access log: undefined when none. */
function refusedParams(body: ErrorBody): string | undefined {
  const names = Object.keys(body.errors);
  return names.length === 0 ? undefined : names.join(',');
}

function unknownParamsBody(unknown: readonly string[]): ReturnType<typeof makeErrorBody> {
  const errors: Record<string, string[]> = {};
  for (const name of unknown) errors[name] = [`The ${name} parameter is not defined for this operation.`];
  return makeErrorBody('The given data was invalid.', errors);
}

/** `GET /user` with no parameter: exactly what the identity look-up asks the instance. */
function isPlainCurrentUser(route: Extract<RouteInfo, { kind: 'cacheable' }>): boolean {
  return route.req.op.resource === 'current_user' && route.req.query === '';
}
