/**
 * The way to the instance for the cache's own requests (fills and GET /user): an undici Pool
 * with keep-alive and timeouts, and a bound on concurrent upstream requests with a bounded queue.
 * (Passthrough requests go through @fastify/http-proxy instead; the per-caller Retry-After gate
 * is the read-through's, in proxy/retry-after.ts.)
 *
 * It returns every upstream answer as it is (status, headers, body bytes); deciding what is
 * cacheable is the read-through's job. Transport failures become an UpstreamError carrying a code
 * and the HTTP status the proxy answers with: 504 for a timeout, 502 for a refused or reset
 * connection (RFC 9110 §15.6.5 and §15.6.3: the gateway's statuses), 503 when tm-cache's own
 * queue is full.
 *
 * Bounds, so that no caller and no upstream can make tm-cache hold unbounded state: no answer is read past `upstream.maxBodyBytes`: one
 * announced larger, or growing larger, is aborted (the connection closed) and becomes a 502
 * `too-large`. Each lane (`withLane`) has its own concurrency and queue over the one pool, so
 * identity look-ups for unknown tokens cannot take the slots of cache fills. Within the fills'
 * lane each user has a share (`upstream.maxPerUser`) and slots go round-robin between users
 * (fair-lane.ts), so one member's flood of cold questions cannot starve the others' misses.
 *
 * The fleet's budget (fleet-budget.ts), when given, comes before the lanes: every request takes a
 * token first, at its priority (`client` by default; `background` for stale-while-revalidate
 * refreshes; `ahead` for refresh-ahead, last, taking only tokens nobody else waits for), and
 * every 429 the instance answers, to any caller, pauses the whole fleet for its Retry-After.
 * No token within `upstream.budget.maxWaitMs`: an UpstreamError `budget-spent` (a 429 to the client).
 */
import { Pool, errors as undiciErrors, type Dispatcher } from 'undici';
import type { IncomingHttpHeaders } from 'node:http';
import type { Config } from '../config/schema.js';
import { FairLane, type LaneCaller, type LaneLimits } from './fair-lane.js';
import { BudgetSpentError, type BudgetPriority, type FleetBudget } from './fleet-budget.js';
import { UpstreamError } from './upstream-error.js';
import { tracing, type Span } from '../trace/tracing.js';

export { UpstreamError, type UpstreamErrorCode } from './upstream-error.js';
export type { LaneCaller, LaneLimits } from './fair-lane.js';
export type { BudgetPriority } from './fleet-budget.js';

export interface UpstreamResponse {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

/** What every upstream request asks for: JSON, as identity bytes the cache can store and encode itself. */
export const UPSTREAM_HEADERS = { accept: 'application/json', 'accept-encoding': 'identity' } as const;

/** The `upstream` section of the config, less what the proxy itself handles (Retry-After, passthrough, the fleet budget: fleet-budget.ts). */
export type UpstreamOptions = Omit<Config['upstream'], 'defaultRetryAfterMs' | 'maxRetryAfterMs' | 'forwardPrefixes' | 'budget'>;

/** What the read-through needs from upstream; tests may substitute it, production uses UpstreamClient. */
export interface Upstream {
  /**
   * `caller`: the user on whose behalf the request is made, whose share of the lane and of the
   * budget it takes (fair-lane.ts, fleet-budget.ts); `priority`: the budget's (default `client`).
   */
  get(path: string, headers: Readonly<Record<string, string>>, caller?: LaneCaller, priority?: BudgetPriority): Promise<UpstreamResponse>;
  close(): Promise<void>;
}

/** An Upstream with its own budget over a shared pool (see UpstreamClient.withLane). */
export interface UpstreamLane extends Upstream {
  readonly load: { active: number; queued: number };
}

export class UpstreamClient implements UpstreamLane {
  private readonly pool: Pool;
  private readonly basePath: string;
  private readonly origin: URL;
  private readonly lane: FairLane;
  private readonly lanes: FairLane[] = [];

  /** `budget`: the fleet's upstream budget every request takes a token from (absent: none, as in unit tests). */
  constructor(
    private readonly options: UpstreamOptions,
    private readonly budget?: FleetBudget,
  ) {
    const url = new URL(options.url);
    this.origin = url;
    this.basePath = url.pathname.replace(/\/$/, '');
    this.pool = new Pool(url.origin, {
      connections: options.connections,
      connect: { timeout: options.connectTimeoutMs },
      headersTimeout: options.headersTimeoutMs,
      bodyTimeout: options.bodyTimeoutMs,
      keepAliveTimeout: 30_000,
    });
    this.lane = this.addLane({ maxConcurrent: options.maxConcurrent, maxQueue: options.maxQueue, maxPerCaller: options.maxPerUser });
  }

  /** Requests in flight upstream and waiting for a slot (this client's own lane). */
  get load(): { active: number; queued: number } {
    return this.lane.load;
  }

  get(path: string, headers: Readonly<Record<string, string>>, caller?: LaneCaller, priority?: BudgetPriority): Promise<UpstreamResponse> {
    return this.getIn(this.lane, path, headers, caller, priority);
  }

  /**
   * Another budget over the same pool and settings. Closing the lane only releases its waiters;
   * the pool closes with this client.
   */
  withLane(limits: LaneLimits): UpstreamLane {
    const lane = this.addLane(limits);
    return {
      get: (path, headers, caller, priority) => this.getIn(lane, path, headers, caller, priority),
      close: async () => lane.wakeAll(),
      get load() {
        return lane.load;
      },
    };
  }

  async close(): Promise<void> {
    for (const lane of this.lanes) lane.wakeAll();
    await this.pool.close();
  }

  /** A 429 from the instance, to any caller, is the account's limit: the whole fleet pauses (fleet-budget.ts). */
  private learnFrom(res: UpstreamResponse): void {
    if (res.status === 429) this.budget?.onRateLimited(retryAfterMsOf(res.headers['retry-after']));
  }

  private addLane(limits: LaneLimits): FairLane {
    const lane = new FairLane(limits);
    this.lanes.push(lane);
    return lane;
  }

  /**
   * A budget token first (at hand: taken synchronously, no promise), then a slot of `lane`.
   * `ahead` (refresh-ahead) waits last, in room of its own (fleet-budget.ts).
   */
  private getIn(
    lane: FairLane,
    path: string,
    headers: Readonly<Record<string, string>>,
    caller: LaneCaller,
    priority: BudgetPriority = 'client',
  ): Promise<UpstreamResponse> {
    const budget = this.budget;
    if (budget === undefined) return this.inLane(lane, path, headers, caller);
    const waiting = budget.acquire(priority, caller);
    if (tracing !== undefined) return this.tracedToken(waiting, priority).then(() => this.inLane(lane, path, headers, caller));
    if (waiting === undefined) return this.inLane(lane, path, headers, caller);
    return waiting.then(
      () => this.inLane(lane, path, headers, caller),
      (err: unknown) => Promise.reject(toUpstreamError(err)),
    );
  }

  /** Tracing on: the wait for a budget token as a span (`waited` false: one was at hand). */
  private async tracedToken(waiting: Promise<void> | undefined, priority: BudgetPriority): Promise<void> {
    const span = tracing?.child('upstream budget token', 'internal', { 'tm_cache.budget.priority': priority, 'tm_cache.budget.waited': waiting !== undefined });
    try {
      await waiting;
    } catch (err) {
      const failure = toUpstreamError(err);
      if (span !== undefined) tracing?.end(span, failure);
      throw failure;
    }
    if (span !== undefined) tracing?.end(span);
  }

  /** With a free slot (the common case) the request is dispatched at once: no promise waits for the lane. */
  private inLane(lane: FairLane, path: string, headers: Readonly<Record<string, string>>, caller: LaneCaller): Promise<UpstreamResponse> {
    const waiting = lane.acquire(caller);
    if (waiting === undefined) return this.dispatch(lane, path, headers, caller);
    return waiting.then(
      () => this.dispatch(lane, path, headers, caller),
      (err: unknown) => Promise.reject(toUpstreamError(err)),
    );
  }

  /** One request on a slot of `lane` already taken for `caller`; the slot is released when the answer settles, once. */
  private dispatch(lane: FairLane, path: string, headers: Readonly<Record<string, string>>, caller: LaneCaller): Promise<UpstreamResponse> {
    const span = tracing?.child('GET', 'client', this.spanAttributes(path));
    return new Promise<UpstreamResponse>((resolve, reject) => {
      const collector = new BodyCollector(
        (res) => (lane.release(caller), this.learnFrom(res), span && endUpstreamSpan(span, res.status), resolve(res)),
        (err) => (lane.release(caller), reject(span ? failUpstreamSpan(span, toUpstreamError(err)) : toUpstreamError(err))),
        this.options.maxBodyBytes,
      );
      try {
        // Traced: the instance is told the request's place in the trace (W3C Trace Context).
        const sent = span === undefined ? headers : { ...headers, traceparent: tracing?.traceparent(span) ?? '' };
        this.pool.dispatch({ path: this.basePath + path, method: 'GET', headers: sent }, collector);
      } catch (err) {
        collector.fail(err);
      }
    });
  }

  /** The upstream request's span attributes: never its query (it may name what a trace must not keep). */
  private spanAttributes(path: string): Record<string, string | number> {
    const q = path.indexOf('?');
    return {
      'http.request.method': 'GET',
      'url.path': this.basePath + (q < 0 ? path : path.slice(0, q)),
      'server.address': this.origin.hostname,
      'server.port': Number(this.origin.port) || (this.origin.protocol === 'https:' ? 443 : 80),
    };
  }
}

/** Ends an upstream request's span with the status answered (a 4xx or 5xx marks it failed, as the HTTP conventions ask of a client span). */
function endUpstreamSpan(span: Span, status: number): void {
  span.setAttribute('http.response.status_code', status);
  tracing?.end(span, status >= 400 ? new UpstreamStatus(status) : undefined);
}

/** A failed upstream request's span ends with its error; the error is handed back to be thrown. */
function failUpstreamSpan(span: Span, failure: UpstreamError): UpstreamError {
  tracing?.end(span, failure);
  return failure;
}

/** How a 4xx or 5xx answer reads on its span: `error.type` the status. */
class UpstreamStatus extends Error {
  readonly code: string;
  constructor(status: number) {
    super(`HTTP ${status}`);
    this.code = String(status);
  }
}

/**
 * Collects one response for `get`: a dispatch handler, not a stream. With a Content-Length the body
 * is copied once into a buffer of that size as chunks arrive (no stream, no async iteration per
 * chunk, no concatenation); without one, the chunks are joined at the end. Never more than
 * `maxBytes`: a larger length announced, or received, aborts the request: memory stays bounded whatever the upstream sends.
 */
class BodyCollector implements Dispatcher.DispatchHandler {
  private status = 0;
  private headers: IncomingHttpHeaders = {};
  private body: Buffer | undefined;
  private filled = 0;
  private received = 0;
  private settled = false;
  private readonly chunks: Buffer[] = [];

  constructor(
    private readonly resolve: (res: UpstreamResponse) => void,
    private readonly reject: (err: unknown) => void,
    private readonly maxBytes: number,
  ) {}

  /** Present so undici treats this as a handler of its current API (it checks for this method). */
  onRequestStart(): void {}

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[]>): void {
    this.status = statusCode;
    this.headers = headers as IncomingHttpHeaders;
    const length = Number(headers['content-length']);
    if (Number.isSafeInteger(length) && length > this.maxBytes) return this.tooLarge(controller);
    if (Number.isSafeInteger(length) && length >= 0 && length <= MAX_PREALLOCATED_BYTES) this.body = Buffer.allocUnsafe(length);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled) return;
    this.received += chunk.length;
    if (this.received > this.maxBytes) return this.tooLarge(controller);
    if (this.body !== undefined && this.filled + chunk.length <= this.body.length) {
      chunk.copy(this.body, this.filled);
      this.filled += chunk.length;
    } else {
      this.chunks.push(chunk);
    }
  }

  onResponseEnd(): void {
    if (this.settled) return;
    this.settled = true;
    let body: Buffer;
    // The announced length, received whole: the buffer itself (no view, no copy).
    if (this.chunks.length === 0 && this.body !== undefined) body = this.filled === this.body.length ? this.body : this.body.subarray(0, this.filled);
    else body = Buffer.concat([...(this.body ? [this.body.subarray(0, this.filled)] : []), ...this.chunks]);
    this.resolve({ status: this.status, headers: this.headers, body });
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.fail(err);
  }

  /** Fails the request unless it already settled (a dispatch that threw, a transport error). */
  fail(err: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(err);
  }

  /** Drops what was read, closes the connection and fails the request as `too-large` (a 502). */
  private tooLarge(controller: Dispatcher.DispatchController): void {
    const err = new UpstreamError('too-large', `Upstream answer larger than upstream.maxBodyBytes (${this.maxBytes} bytes)`);
    this.settled = true;
    this.body = undefined;
    this.chunks.length = 0;
    this.reject(err);
    controller.abort(err);
  }
}

/** Bodies announced larger than this are collected chunk by chunk instead (no huge up-front allocation). */
const MAX_PREALLOCATED_BYTES = 64 * 1024 * 1024;

export function toUpstreamError(err: unknown): UpstreamError {
  if (err instanceof UpstreamError) return err;
  if (err instanceof BudgetSpentError) return budgetSpent(err);
  if (err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.BodyTimeoutError || err instanceof undiciErrors.ConnectTimeoutError) {
    return new UpstreamError('timeout', 'the upstream did not answer in time', { cause: err });
  }
  if (err instanceof undiciErrors.ClientClosedError || err instanceof undiciErrors.ClientDestroyedError) {
    return new UpstreamError('closed', 'the upstream client is closed', { cause: err });
  }
  const code = (err as { code?: string }).code;
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EHOSTUNREACH') {
    return new UpstreamError('connect', 'the upstream refused the connection', { cause: err });
  }
  return new UpstreamError('reset', 'the upstream connection failed', { cause: err });
}

function budgetSpent(err: BudgetSpentError): UpstreamError {
  const seconds = Math.max(1, Math.ceil(err.retryAfterMs / 1000));
  return new UpstreamError('budget-spent', `the upstream budget is spent; retry after ${seconds} s`, { cause: err, retryAfterMs: err.retryAfterMs });
}

/** A 429's Retry-After as a pause (ms); undefined when absent or unreadable (the budget's default pause applies). */
export function retryAfterMsOf(value: string | string[] | undefined): number | undefined {
  const ms = parseRetryAfterMs(value, Date.now(), -1);
  return ms < 0 ? undefined : ms;
}

/** Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date; `fallbackMs` when absent or unreadable. */
export function parseRetryAfterMs(value: string | string[] | undefined, now: number, fallbackMs: number): number {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined || v.trim() === '') return fallbackMs;
  if (/^\d+$/.test(v.trim())) return Number(v.trim()) * 1000;
  const date = Date.parse(v);
  return Number.isNaN(date) ? fallbackMs : Math.max(0, date - now);
}
