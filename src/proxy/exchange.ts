/**
 * One request's exchange: made once in `Pipeline.handle`, owned by the pipeline, and filled by
 * each stage in its own field (lru-cache's `Status` object: the caller owns it, each operation
 * fills what it learned). What one stage tells a later one travels here, never in a long
 * parameter list or a module-level variable:
 *
 * | field                         | filled by                                                   |
 * |-------------------------------|-------------------------------------------------------------|
 * | req, res, start, requestId    | `Pipeline.handle`, at arrival                                |
 * | t, operation, userId          | the pipeline: the clock reading the answer is dated with, and what the record names |
 * | sharedTierSpent               | any Redis role this request waits on (budget.ts)             |
 * | canonical … request           | `decide` (decide.ts): the Decision, never written after      |
 * | ownWaited                     | the fill of a member without proof (read-through.ts)         |
 * | upstreamMs                    | the fill this request leads (read-through.ts)                |
 * | sent, savedBy304              | the writer (writer.ts)                                       |
 * | upstream                      | the passthrough, for a forwarded request (app.ts)            |
 * | trace                         | `Pipeline.handle`, only when tracing is on (trace/tracing.ts) |
 *
 * It is the Decision and the request's budget for waiting on Redis too: a memory hit allocates
 * this one object, as it allocated the Decision before. Every field is set in the constructor,
 * so every exchange has one shape and later stages only write fields that exist. The Decision's
 * fields are set by `decide` and read through the Decision it returns, never before.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CanonicalRequest } from '../api/normalize.js';
import type { Scope } from '../cache/key.js';
import type { ForwardedRecord, RequestRecord, UpstreamTiming } from '../ops/recorder.js';
import type { Decision, EntryGate, RequestState } from './decide.js';
import type { Caller } from './callers/caller.js';
import type { UpstreamResponse } from '../upstream/client.js';
import type { CacheableRoute } from './route-memo.js';
import type { RequestTrace } from '../trace/tracing.js';

export class Exchange implements Decision, RequestState, RequestRecord, ForwardedRecord {
  /**
   * The clock reading the answer is dated with (ms since epoch), set by the pipeline before any
   * stage reads it. Declared without a value on purpose: a field that first holds a number is
   * kept unboxed by V8 and every read of it passed on boxes it again (an allocation per hit).
   */
  t!: number;
  /** The operation as the record names it: a catalogue id, `invalid`, `unknown` or `passthrough`. */
  operation = 'passthrough';
  /** The caller, by user id only (never a credential), once known. */
  userId: number | undefined = undefined;
  sharedTierSpent = false;

  route!: CacheableRoute;
  canonical!: CanonicalRequest;
  caller!: Caller;
  authorization = '';
  scope!: Scope;
  gate!: EntryGate;
  key = '';
  fillKey = '';
  mayRead = false;
  noCache = false;
  origin: string | undefined = undefined;
  ownKey = '';
  projectId = 0;
  areas = 0;
  unplaced: string | undefined = undefined;
  /** Itself, once decided (decide.ts): the request the Decision is of. */
  request: RequestState = this;
  ownWaited = false;
  proofWaited = false;
  sourceWaited = false;
  answeredGate: EntryGate | undefined = undefined;
  prefetched: UpstreamResponse | undefined = undefined;

  upstreamMs: number | undefined = undefined;
  sent = 0;
  savedBy304 = 0;
  upstream: UpstreamTiming | undefined = undefined;
  /** The request's server span, when tracing is on; the record ends it. */
  trace: RequestTrace | undefined = undefined;

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    /** performance.now() at arrival. */
    readonly start: number,
    readonly requestId: string,
  ) {}
}

const EXCHANGE = Symbol('tm-cache exchange');
type Carrying = IncomingMessage & { [EXCHANGE]?: Exchange };

/** A forwarded request carries its exchange through fastify, for the passthrough to fill its field. */
export function carry(x: Exchange): void {
  (x.req as Carrying)[EXCHANGE] = x;
}

/** The exchange a forwarded request carries (none for what fastify answered without the pipeline). */
export function exchangeOf(raw: object): Exchange | undefined {
  return (raw as Carrying)[EXCHANGE];
}
