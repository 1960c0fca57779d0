/**
 * The one record of every request, whichever path answered it (a cached answer from the pipeline,
 * or a forwarded one from the passthrough): the metrics, the figures behind /admin/stats, and the
 * access log line. Nothing else counts requests, so no path can be left out of them.
 *
 * The access log: one pino line per request at info (`log.access`: all, errors, off; non-error
 * lines sampled by `log.accessSample`), with the request id, method, operation, path (never the
 * query: it may carry secrets), status, duration, cache outcome and tier, upstream status and time,
 * user id (never a credential), body bytes, the client's address and User-Agent, and for a 400/422
 * the parameters refused (their names, never their values).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EntryGate } from '../proxy/decide.js';
import type { Logger } from 'pino';
import type { CacheOutcome } from '../cache/outcome.js';
import type { Config } from '../config/schema.js';
import { AccessLog, AccessRow } from './access-log.js';
import type { Metrics } from './metrics.js';
import type { RequestStats } from './stats.js';
import type { RequestTrace } from '../trace/tracing.js';

/** A forwarded request as the access log names it: the API passed through, or a cacheable one bypassed (unknown parameter). */
export type ForwardKind = 'passthrough' | 'bypass';

/** What the passthrough learned of a forwarded request's upstream answer (status, ms). */
export interface UpstreamTiming {
  /** The upstream's status; when `failed`, the one tm-cache answered instead (502, 504). */
  readonly status: number;
  readonly ms: number;
  /** No answer came (refused, reset, timed out). */
  readonly failed?: true;
}

/**
 * A request as the record reads it: the proxy's per-request exchange (proxy/exchange.ts), which
 * every stage filled in its own field. The record only reads it.
 */
interface Recorded {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly requestId: string;
  /** performance.now() at arrival. */
  readonly start: number;
  /** The clock reading the answer is dated with. */
  readonly t: number;
  readonly operation: string;
  /** Its server span, when tracing is on (trace/tracing.ts): ended here. */
  readonly trace: RequestTrace | undefined;
}

/** A request the pipeline answered. */
export interface RequestRecord extends Recorded {
  readonly userId: number | undefined;
  /** What gated the answer, once decided (the Decision that answered, decide.ts): the access log names its scope's kind. */
  readonly answeredGate: EntryGate | undefined;
  /** Body bytes written, and not written thanks to a 304. */
  readonly sent: number;
  readonly savedBy304: number;
  /** How long the fill this request led took upstream (ms). */
  readonly upstreamMs: number | undefined;
}

/** A forwarded request, once its response is done. */
export interface ForwardedRecord extends Recorded {
  readonly upstream: UpstreamTiming | undefined;
  /** The caller, for a cacheable request forwarded (bypass); none for a passthrough. */
  readonly userId: number | undefined;
}

export class Recorder {
  /** `log.access` and `log.accessSample`: replaced whole on reload. */
  access: Config['log'];
  readonly #log: AccessLog;
  /** The access line's fields, filled for each line and read by the access log at once: one row, reused. */
  readonly #row = new AccessRow();

  constructor(
    private readonly metrics: Metrics,
    private readonly stats: RequestStats,
    logger: Logger,
    access: Config['log'],
  ) {
    this.access = access;
    this.#log = new AccessLog(logger);
  }

  /** The caller was known to this process (the common case: no look-up at all). */
  identityMemoHit(): void {
    this.metrics.identityLookup('memo');
  }

  /** A request the pipeline answered (cached, relayed, or made here), with `outcome`. */
  cached(r: RequestRecord, outcome: CacheOutcome, refused?: string): void {
    const { req, res, operation, userId, t, sent, upstreamMs } = r;
    const seconds = (performance.now() - r.start) / 1_000;
    const kind = outcome.kind;
    this.metrics.request(kind, outcome.tier ?? 'none', operation, res.statusCode, seconds);
    this.metrics.bytesSent(sent);
    if (r.savedBy304 > 0) this.metrics.notModifiedSaved(r.savedBy304);
    // The fleet's budget had no token in time: a stale answer (detail=budget) or a 429 (budget-spent).
    const deferred = kind === 'stale' && outcome.detail === 'budget' ? 'stale' : kind === 'error' && outcome.detail === 'budget-spent' ? 'refused' : undefined;
    if (deferred !== undefined) {
      this.metrics.budgetDeferred(deferred);
      this.stats.budgetDeferred(deferred, t);
    }
    this.stats.request(kind, outcome.tier, operation, userId, t);
    if (r.trace !== undefined) this.#traceAnswered(r, r.trace, outcome);
    if (!this.#logs(kind === 'error' || res.statusCode >= 500)) return;
    // The recorder's own row, filled field by field (no object per line): with `tm-cache serve`'s
    // sink its values are kept in columns and the line is formatted later, in a batch (access-log.ts).
    const row = this.#row;
    row.reqId = r.requestId;
    row.method = req.method!;
    row.op = operation;
    row.target = req.url ?? '';
    row.status = res.statusCode;
    row.ms = seconds * 1_000;
    row.outcome = kind;
    row.tier = outcome.tier;
    row.scope = scopeOfGate(r.answeredGate);
    row.detail = outcome.detail;
    row.upstreamStatus = outcome.upstreamStatus;
    row.upstreamMs = upstreamMs;
    row.user = userId;
    row.bytes = sent;
    row.aborted = false;
    row.refused = refused;
    row.client = req.socket.remoteAddress;
    row.userAgent = req.headers['user-agent'];
    row.time = t;
    this.#log.request(row);
  }

  /** A forwarded request, once its response is done (or the client went away). */
  forwarded(r: ForwardedRecord, kind: ForwardKind, client: string | undefined): void {
    const { req, res, operation, t, upstream } = r;
    const seconds = (performance.now() - r.start) / 1_000;
    const outcome = kind === 'bypass' ? 'bypass' : 'passthrough';
    // A client that went away before the answer was done: nginx's 499.
    const status = res.writableFinished ? res.statusCode : 499;
    this.metrics.request(outcome, 'none', operation, status, seconds);
    this.stats.request(outcome, undefined, operation, r.userId, t);
    // A cacheable request forwarded (an unknown parameter) reached the instance: an upstream
    // request like a fill, or the offload would count it as avoided.
    if (kind === 'bypass' && upstream !== undefined) {
      this.metrics.upstream(operation, upstream.failed ? undefined : upstream.status, upstream.ms / 1_000);
      this.stats.upstream(t, operation, r.userId);
    }
    r.trace?.forwarded(operation, outcome, status);
    if (!this.#logs(status >= 500)) return;
    const length = res.getHeader('content-length');
    const row = this.#row;
    row.reqId = r.requestId;
    row.method = req.method!;
    row.op = operation;
    row.target = req.url ?? '';
    row.status = status;
    row.ms = seconds * 1_000;
    row.outcome = outcome;
    row.tier = undefined;
    row.scope = undefined;
    row.detail = undefined;
    row.upstreamStatus = upstream?.status;
    row.upstreamMs = upstream?.ms;
    row.user = undefined;
    row.bytes = length === undefined ? undefined : Number(length);
    row.aborted = !res.writableFinished;
    row.refused = undefined;
    row.client = client;
    row.userAgent = req.headers['user-agent'];
    row.time = t;
    this.#log.request(row);
  }

  /** The request's span ends with what its log line says: outcome, tier, detail, scope. */
  #traceAnswered(r: RequestRecord, trace: RequestTrace, outcome: CacheOutcome): void {
    trace.answered({ operation: r.operation, status: r.res.statusCode, outcome, scope: scopeOfGate(r.answeredGate), userId: r.userId });
  }

  #logs(error: boolean): boolean {
    const { access, accessSample } = this.access;
    if (access === 'off' || (access === 'errors' && !error) || !this.#log.enabled) return false;
    return error || accessSample >= 1 || Math.random() < accessSample;
  }
}

/** The kind of scope a gate reads (decide.ts), as the access log names it. */
function scopeOfGate(gate: EntryGate | undefined): string | undefined {
  if (gate === undefined) return undefined;
  return gate === 'member' ? 'project' : gate === 'admin' ? 'admin' : 'user';
}
