/**
 * One decided request, read through the cache: hit, stale, coalesced or fill.
 *
 *   tiers, in order (memory answers synchronously) ──fresh──▶ hit
 *        │ stale within stale-while-revalidate ─▶ serve it, refresh in background (coalesced)
 *        ▼ missing, or the client asked to revalidate
 *   caller rate-limited? (retry-after.ts) ─▶ stale if usable, else 429 with the remaining wait
 *        ▼
 *   fill (fill.ts: coalesced per key, and across replicas through a short lock)
 *        ├ 200 ─▶ stored (storable.ts), answered
 *        ├ 401/403/4xx ─▶ relayed verbatim, never stored; access rules applied (access.ts)
 *        └ 5xx, timeout, refused ─▶ stale within stale-if-error, else 502/504 JSON
 *
 * `serve` answers synchronously whenever the first tier does (a fresh memory hit: no promise,
 * no I/O), asynchronously otherwise; one lookup path takes either (undici's cache interceptor
 * accepts a store's answer the same way).
 */
import { makePath } from '../api/catalogue.js';
import type { SharedTierBudget } from '../cache/budget.js';
import { isFresh, isUsableOnError, isUsableWhileRevalidating, type CacheEntry } from '../cache/entry.js';
import { Filler, type FillJob, type FillLock, type FillResult, type FillStore, type Fetched } from '../cache/fill.js';
import { HIT, type CacheOutcome, type OutcomeKind } from '../cache/outcome.js';
import type { FreshnessPolicy } from '../cache/policy.js';
import type { TierName } from '../cache/tier.js';
import { UPSTREAM_HEADERS, UpstreamError, type Upstream, type UpstreamResponse } from '../upstream/client.js';
import type { AccessRules, AnsweredRequest } from './access.js';
import type { Decision } from './decide.js';
import type { RetryAfterGate } from './retry-after.js';
import { localAnswer, upstreamFailure, type Served } from './served.js';
import { isStorable, makeEntry } from './storable.js';

/** An entry held for a key and the tier it came from. */
export interface Found {
  readonly entry: CacheEntry;
  readonly tier: TierName;
}

/** The cache as the read-through sees it (TieredCache implements it). */
export interface ReadCache extends FillStore {
  /** Synchronous when the first tier answers; a promise when a lower tier must be asked. */
  get(key: string, now?: number, budget?: SharedTierBudget): Found | undefined | Promise<Found | undefined>;
  delete(key: string): Promise<void>;
}

/** What a fill hands back when it stored nothing: the upstream answer, and whose credential got it. */
interface Unstored {
  readonly response: UpstreamResponse;
  readonly credentialId: string;
}

export interface ReadThroughOptions {
  readonly cache: ReadCache;
  readonly upstream: Upstream;
  readonly policy: FreshnessPolicy;
  readonly access: AccessRules;
  readonly gate: RetryAfterGate;
  readonly lock?: FillLock | undefined;
  readonly lockTtlMs: number;
  readonly lockWaitMs: number;
  readonly maxEntryBytes: number;
  readonly now: () => number;
  readonly onBackgroundError: (err: unknown, key: string) => void;
}

export class ReadThrough {
  readonly #filler: Filler<Unstored>;

  constructor(private readonly o: ReadThroughOptions) {
    this.#filler = new Filler<Unstored>({
      store: o.cache,
      lock: o.lock,
      lockTtlMs: o.lockTtlMs,
      lockWaitMs: o.lockWaitMs,
      maxEntryBytes: o.maxEntryBytes,
    });
  }

  serve(d: Decision, now: number): Served | Promise<Served> {
    if (!d.mayRead) return this.#afterLookup(d, undefined, now);
    // The Decision is the request's budget (budget.ts): no allocation on a memory hit.
    const found = this.o.cache.get(d.key, now, d);
    if (found instanceof Promise) return found.then((f) => this.#afterLookup(d, f, this.o.now()));
    return this.#afterLookup(d, found, now);
  }

  /** Upstream is failing and the caller's identity could not be re-verified: stale for `key`, or the failure. */
  async serveStaleOnly(key: string | undefined, err: UpstreamError, budget?: SharedTierBudget): Promise<Served> {
    const found = key === undefined ? undefined : await this.o.cache.get(key, undefined, budget);
    if (found !== undefined && isUsableOnError(found.entry, this.o.now())) {
      return { kind: 'entry', entry: found.entry, outcome: { kind: 'stale', tier: found.tier, detail: 'stale-if-error' } };
    }
    return upstreamFailure(err);
  }

  #afterLookup(d: Decision, found: Found | undefined, now: number): Served | Promise<Served> {
    if (found !== undefined && !d.noCache) {
      if (isFresh(found.entry, now)) return { kind: 'entry', entry: found.entry, outcome: HIT[found.tier] };
      if (isUsableWhileRevalidating(found.entry, now)) {
        const { promise } = this.#filler.run(this.#job(d));
        promise.catch((err: unknown) => this.o.onBackgroundError(err, d.key));
        return { kind: 'entry', entry: found.entry, outcome: { kind: 'stale', tier: found.tier, detail: 'stale-while-revalidate' } };
      }
    }
    const blockedMs = this.o.gate.blockedMs(d.caller.userId, now);
    if (blockedMs > 0) return whileRateLimited(found, now, blockedMs);
    return this.#fillAndServe(d, found, now);
  }

  async #fillAndServe(d: Decision, found: Found | undefined, now: number): Promise<Served> {
    const job = this.#job(d);
    const { promise, leader } = this.#filler.run(job);
    let result: FillResult<Unstored>;
    try {
      result = await promise;
      if (!leader && result.kind === 'other' && result.value.credentialId !== d.caller.credentialId) {
        // Another token of the same user was refused: this one must be judged on its own.
        const status = result.value.response.status;
        if (status === 401 || status === 403) result = await this.#filler.runAlone(job);
      }
    } catch (err) {
      const failure = err instanceof UpstreamError ? err : new UpstreamError('reset', String(err), { cause: err });
      if (found !== undefined && isUsableOnError(found.entry, now)) return staleOnError(found);
      return upstreamFailure(failure);
    }
    const kind: OutcomeKind = leader ? 'miss' : 'coalesced';
    if (result.kind === 'entry') {
      const outcome: CacheOutcome = { kind, stored: result.stored, upstreamStatus: 200, ...(d.noCache ? { detail: 'no-cache' } : {}) };
      return { kind: 'entry', entry: result.entry, outcome };
    }
    return this.#afterRefusal(d, result.value.response, found, now, kind);
  }

  /** The fill of one decided request: ask upstream with the caller's credential, keep what is storable. */
  #job(d: Decision): FillJob<Unstored> {
    const access = this.o.access;
    const answered = answeredRequest(d);
    return {
      key: d.key,
      fillKey: d.fillKey,
      shareable: d.mayRead,
      budget: d,
      fetch: async (): Promise<Fetched<Unstored>> => {
        const path = makePath(d.req.op, d.req.ids) + (d.req.query === '' ? '' : `?${d.req.query}`);
        const res = await this.o.upstream.get(path, { authorization: d.authorization, ...UPSTREAM_HEADERS });
        access.afterFill(answered, res.status);
        if (!isStorable(res)) return { kind: 'other', value: { response: res, credentialId: d.caller.credentialId } };
        return { kind: 'entry', entry: makeEntry(d.req, res, this.o.policy, this.o.now()) };
      },
    };
  }

  #afterRefusal(d: Decision, res: UpstreamResponse, found: Found | undefined, now: number, kind: OutcomeKind): Served {
    const status = res.status;
    const stale = found !== undefined && isUsableOnError(found.entry, now) ? found : undefined;
    if (status === 429) {
      const waitMs = this.o.gate.block(d.caller.userId, res.headers['retry-after'], now);
      if (stale) return { kind: 'entry', entry: stale.entry, outcome: { kind: 'stale', tier: stale.tier, detail: 'rate-limited', upstreamStatus: 429 } };
      const response = res.headers['retry-after'] === undefined ? withHeader(res, 'retry-after', String(Math.ceil(waitMs / 1000))) : res;
      return { kind: 'relay', response, outcome: { kind, upstreamStatus: 429 } };
    }
    if (status >= 500) {
      if (stale) return staleOnError(stale, status);
      return upstreamFailure(new UpstreamError('reset', `the upstream answered ${status}`), status);
    }
    this.o.access.afterRefusal(answeredRequest(d), status);
    return { kind: 'relay', response: res, outcome: { kind, upstreamStatus: status } };
  }
}

function answeredRequest(d: Decision): AnsweredRequest {
  return { key: d.key, mayRead: d.mayRead, adminOnly: d.req.op.adminOnly, caller: d.caller, authorization: d.authorization };
}

function staleOnError(found: Found, upstreamStatus?: number): Served {
  const outcome: CacheOutcome = { kind: 'stale', tier: found.tier, detail: 'stale-if-error', ...(upstreamStatus ? { upstreamStatus } : {}) };
  return { kind: 'entry', entry: found.entry, outcome };
}

function whileRateLimited(found: Found | undefined, now: number, blockedMs: number): Served {
  if (found !== undefined && isUsableOnError(found.entry, now)) {
    return { kind: 'entry', entry: found.entry, outcome: { kind: 'stale', tier: found.tier, detail: 'rate-limited' } };
  }
  const seconds = Math.ceil(blockedMs / 1000);
  const body = { message: `The instance rate-limited this caller; retry after ${seconds} s.`, errors: {} };
  return localAnswer(429, body, { kind: 'error', detail: 'rate-limited' }, { 'retry-after': String(seconds) });
}

function withHeader(res: UpstreamResponse, name: string, value: string): UpstreamResponse {
  return { ...res, headers: { ...res.headers, [name]: value } };
}
