/**
 * One canonical request, read through the cache: hit, stale, coalesced or fill.
 *
 *   memory peek ──fresh──────────────────────────────────────────▶ hit
 *        │ stale within stale-while-revalidate ─▶ serve it, refresh in background (coalesced)
 *        ▼ missing
 *   lower tiers (Redis) ──fresh──▶ hit (promoted to memory)
 *        ▼
 *   caller rate-limited? ─▶ stale if usable, else 429 with the remaining Retry-After
 *        ▼
 *   fill, coalesced per key (and across replicas through a short Redis lock)
 *        ├ 200 ─▶ store, answer
 *        ├ 401/403/4xx ─▶ relayed verbatim, never stored
 *        └ 5xx, timeout, refused ─▶ stale within stale-if-error, else 502/504 JSON
 *
 * The outcome of every request is one CacheOutcome; the Cache-Status header, the log line and
 * the metric label all show it.
 */
import { createHash } from 'node:crypto';
import { makePath } from '../api/catalogue.js';
import type { CanonicalRequest } from '../api/normalize.js';
import type { Coalescer } from '../cache/coalesce.js';
import { isFresh, isUsableOnError, isUsableWhileRevalidating, type CacheEntry } from '../cache/entry.js';
import type { FreshnessPolicy } from '../cache/policy.js';
import type { MaybePromise, TierName } from '../cache/tier.js';
import { UPSTREAM_HEADERS, UpstreamError, parseRetryAfterMs, type Upstream, type UpstreamResponse } from '../upstream/client.js';
import type { Caller, IdentityResolver } from './identity.js';

export type OutcomeKind = 'hit' | 'stale' | 'miss' | 'coalesced' | 'bypass' | 'error';

export interface CacheOutcome {
  readonly kind: OutcomeKind;
  readonly tier?: TierName;
  /** Why: `stale-while-revalidate`, `stale-if-error`, `rate-limited`, `no-cache`, `unknown-param`, `timeout`... */
  readonly detail?: string;
  /** The fill's answer was stored. */
  readonly stored?: boolean;
  /** Status upstream answered with, when it was asked. */
  readonly upstreamStatus?: number;
}

export type Served =
  | { readonly kind: 'entry'; readonly entry: CacheEntry; readonly outcome: CacheOutcome }
  | { readonly kind: 'relay'; readonly response: UpstreamResponse; readonly outcome: CacheOutcome }
  | {
      readonly kind: 'local';
      readonly status: number;
      readonly body: { message: string; errors: Record<string, string[]> };
      readonly headers: Readonly<Record<string, string>>;
      readonly outcome: CacheOutcome;
    };

export type FillResult =
  | { readonly kind: 'entry'; readonly entry: CacheEntry; readonly stored: boolean }
  | { readonly kind: 'relay'; readonly response: UpstreamResponse; readonly credentialId: string };

/** The cache as the read-through sees it; TieredCache implements it. */
export interface ReadCache {
  /** Synchronous when memory answers (the hit path); a promise while lower tiers are asked. */
  get(key: string, now?: number): MaybePromise<{ entry: CacheEntry; tier: TierName } | undefined>;
  /** Stores in memory at once; the promise is the shared (Redis) write, which never rejects. */
  set(key: string, entry: CacheEntry): Promise<void> | void;
  /** Keeps in memory an entry that already is in the shared tier. */
  backfill(key: string, entry: CacheEntry): void;
  delete(key: string): Promise<void>;
  /** Makes the entry's gzip variant in the background, for clients that accept gzip. */
  ensureGzip(key: string, entry: CacheEntry): void;
}

/** Cross-replica fill lock (the Redis tier): one replica fills, the others wait for its result. */
export interface FillLock {
  tryLock(key: string, ttlMs: number): Promise<string | undefined>;
  unlock(key: string, token: string): Promise<void>;
  waitFor(key: string, timeoutMs: number): Promise<CacheEntry | undefined>;
}

export interface ReadThroughOptions {
  readonly cache: ReadCache;
  readonly upstream: Upstream;
  readonly coalescer: Coalescer<FillResult>;
  readonly policy: FreshnessPolicy;
  readonly identity: IdentityResolver;
  readonly lock?: FillLock | undefined;
  readonly lockWaitMs: number;
  readonly maxEntryBytes: number;
  readonly defaultRetryAfterMs: number;
  readonly now: () => number;
  readonly onBackgroundError: (err: unknown, key: string) => void;
}

export interface ReadRequest {
  /** Where the answer is stored: the caller's scope, or `admin` for admin-only operations. */
  readonly key: string;
  /** What concurrent identical requests coalesce on; differs from `key` for a not-yet-verified admin. */
  readonly fillKey: string;
  /** False for a caller not yet verified for `key`'s scope: no cache lookup, straight to a fill. */
  readonly mayRead: boolean;
  readonly req: CanonicalRequest;
  readonly authorization: string;
  readonly caller: Caller;
  readonly noCache: boolean;
  /** The tiers were already asked for `key` (the hit path's shared stage): what they held. */
  readonly prefetched?: { readonly found: { entry: CacheEntry; tier: TierName } | undefined } | undefined;
}

/** An entry held for the key, fresh or not, and the tier it came from. */
interface StaleCandidate {
  readonly entry: CacheEntry;
  readonly tier: TierName;
}

/** Answers that mean the caller may no longer see what is cached under the key. */
const REFUSALS = new Set([401, 403, 404]);

/** Headers of a relayed upstream error worth keeping; Set-Cookie and hop-by-hop never are. */
const RELAYED_HEADERS = ['content-type', 'content-encoding', 'www-authenticate', 'retry-after', 'cache-control'] as const;

/** What the cache answered at once (memory); a lookup still going on in lower tiers is no answer here. */
function synchronousAnswer<T>(answer: MaybePromise<T | undefined>): T | undefined {
  return answer instanceof Promise ? undefined : answer;
}

function isEncoded(res: UpstreamResponse): boolean {
  const coding = res.headers['content-encoding'];
  return coding !== undefined && coding !== 'identity';
}

export class ReadThrough {
  private readonly retryAfterUntil = new Map<number, number>();

  constructor(private readonly o: ReadThroughOptions) {}

  async serve(r: ReadRequest): Promise<Served> {
    const now = this.o.now();
    let stale: StaleCandidate | undefined;
    // The hit path's shared stage may already have asked every tier (memory first) for the key.
    if (r.mayRead) stale = r.prefetched !== undefined ? r.prefetched.found : await this.o.cache.get(r.key);

    if (stale !== undefined && !r.noCache) {
      if (isFresh(stale.entry, now)) return { kind: 'entry', entry: stale.entry, outcome: { kind: 'hit', tier: stale.tier } };
      if (isUsableWhileRevalidating(stale.entry, now)) {
        this.refreshInBackground(r);
        return { kind: 'entry', entry: stale.entry, outcome: { kind: 'stale', tier: stale.tier, detail: 'stale-while-revalidate' } };
      }
    }
    const blockedUntil = this.retryAfterUntil.get(r.caller.userId);
    if (blockedUntil !== undefined) {
      if (blockedUntil > now) return this.whileRateLimited(stale, now, blockedUntil - now);
      this.retryAfterUntil.delete(r.caller.userId);
    }
    return this.fillAndServe(r, stale, now);
  }

  /** Upstream is failing and the caller's identity could not be re-verified: serve stale or fail. */
  serveStaleOnly(key: string, err: UpstreamError): Served {
    const found = synchronousAnswer(this.o.cache.get(key));
    if (found !== undefined && isUsableOnError(found.entry, this.o.now())) {
      return { kind: 'entry', entry: found.entry, outcome: { kind: 'stale', tier: found.tier, detail: 'stale-if-error' } };
    }
    return upstreamFailure(err);
  }

  private async fillAndServe(r: ReadRequest, stale: StaleCandidate | undefined, now: number): Promise<Served> {
    const { promise, leader } = this.o.coalescer.run(r.fillKey, () => this.fill(r));
    let result: FillResult;
    try {
      result = await promise;
      if (!leader && result.kind === 'relay' && result.credentialId !== r.caller.credentialId) {
        // Another token of the same user was refused: this one must be judged on its own.
        if (result.response.status === 401 || result.response.status === 403) result = await this.fill(r);
      }
    } catch (err) {
      const failure = err instanceof UpstreamError ? err : new UpstreamError('reset', String(err), { cause: err });
      if (stale !== undefined && isUsableOnError(stale.entry, now)) {
        return { kind: 'entry', entry: stale.entry, outcome: { kind: 'stale', tier: stale.tier, detail: 'stale-if-error' } };
      }
      return upstreamFailure(failure);
    }
    const missKind = leader ? 'miss' : 'coalesced';
    if (result.kind === 'entry') {
      const detail = r.noCache ? 'no-cache' : undefined;
      const outcome: CacheOutcome = { kind: missKind, stored: result.stored, upstreamStatus: 200, ...(detail ? { detail } : {}) };
      return { kind: 'entry', entry: result.entry, outcome };
    }
    return this.afterRefusal(r, result.response, stale, now, missKind);
  }

  private afterRefusal(r: ReadRequest, res: UpstreamResponse, candidate: StaleCandidate | undefined, now: number, kind: OutcomeKind): Served {
    const status = res.status;
    const stale = candidate !== undefined && isUsableOnError(candidate.entry, now) ? candidate : undefined;
    if (status === 429) {
      const waitMs = parseRetryAfterMs(res.headers['retry-after'], now, this.o.defaultRetryAfterMs);
      this.retryAfterUntil.set(r.caller.userId, now + waitMs);
      if (stale) return { kind: 'entry', entry: stale.entry, outcome: { kind: 'stale', tier: stale.tier, detail: 'rate-limited', upstreamStatus: 429 } };
      const headers: Record<string, string> =
        res.headers['retry-after'] === undefined ? { 'retry-after': String(Math.ceil(waitMs / 1000)) } : {};
      return { kind: 'relay', response: withHeaders(res, headers), outcome: { kind, upstreamStatus: 429 } };
    }
    if (status >= 500) {
      if (stale) return { kind: 'entry', entry: stale.entry, outcome: { kind: 'stale', tier: stale.tier, detail: 'stale-if-error', upstreamStatus: status } };
      return upstreamFailure(new UpstreamError('reset', `the upstream answered ${status}`), status);
    }
    if (status === 401) this.o.identity.forget(r.authorization);
    if (status === 403 && r.req.op.adminOnly) this.o.identity.clearAdmin(r.caller);
    return { kind: 'relay', response: res, outcome: { kind, upstreamStatus: status } };
  }

  private whileRateLimited(stale: StaleCandidate | undefined, now: number, blockedMs: number): Served {
    if (stale !== undefined && isUsableOnError(stale.entry, now)) {
      return { kind: 'entry', entry: stale.entry, outcome: { kind: 'stale', tier: stale.tier, detail: 'rate-limited' } };
    }
    const seconds = Math.ceil(blockedMs / 1000);
    return {
      kind: 'local',
      status: 429,
      headers: { 'retry-after': String(seconds) },
      body: { message: `The instance rate-limited this caller; retry after ${seconds} s.`, errors: {} },
      outcome: { kind: 'error', detail: 'rate-limited' },
    };
  }

  private refreshInBackground(r: ReadRequest): void {
    const { promise } = this.o.coalescer.run(r.fillKey, () => this.fill(r));
    promise.catch((err: unknown) => this.o.onBackgroundError(err, r.key));
  }

  /** Asks upstream (or waits for another replica's fill) and stores a 200 under `r.key`. */
  private async fill(r: ReadRequest): Promise<FillResult> {
    const lock = this.o.lock;
    if (lock === undefined || r.key !== r.fillKey || !r.mayRead) return this.fetchAndStore(r);
    const token = await lock.tryLock(r.key, this.o.lockWaitMs);
    if (token === undefined) {
      const filled = await lock.waitFor(r.key, this.o.lockWaitMs);
      if (filled !== undefined) {
        this.o.cache.backfill(r.key, filled);
        return { kind: 'entry', entry: filled, stored: true };
      }
      return this.fetchAndStore(r);
    }
    let shared: Promise<void> | void = undefined;
    try {
      return await this.fetchAndStore(r, (write) => (shared = write));
    } finally {
      // Released once the entry is in Redis, so that a replica waiting on the lock finds it there.
      void Promise.resolve(shared).then(() => lock.unlock(r.key, token));
    }
  }

  private async fetchAndStore(r: ReadRequest, onShared?: (write: Promise<void> | void) => void): Promise<FillResult> {
    const path = makePath(r.req.op, r.req.ids) + (r.req.query === '' ? '' : `?${r.req.query}`);
    const res = await this.o.upstream.get(path, { authorization: r.authorization, ...UPSTREAM_HEADERS });
    // An answer encoded despite `accept-encoding: identity` is relayed as it is, never stored:
    // entries hold identity bytes (the gzip variant is made here).
    if (res.status === 200 && isEncoded(res)) return { kind: 'relay', response: res, credentialId: r.caller.credentialId };
    if (res.status !== 200) {
      // The instance now refuses what we hold (token revoked, access withdrawn, resource gone):
      // drop it everywhere rather than keep serving it stale.
      if (REFUSALS.has(res.status) && r.mayRead) void this.o.cache.delete(r.key);
      return { kind: 'relay', response: res, credentialId: r.caller.credentialId };
    }
    if (r.req.op.adminOnly) this.o.identity.markAdmin(r.caller);
    const entry = this.makeEntry(r.req, res);
    const storable = entry.body.length <= this.o.maxEntryBytes;
    if (storable) {
      const write = this.o.cache.set(r.key, entry);
      onShared?.(write);
    }
    return { kind: 'entry', entry, stored: storable };
  }

  private makeEntry(req: CanonicalRequest, res: UpstreamResponse): CacheEntry {
    const now = this.o.now();
    const policy = this.o.policy.decide(req, res.body);
    const etag = `"${createHash('sha256').update(res.body).digest('base64url').slice(0, 27)}"`;
    const contentType = res.headers['content-type'];
    const freshUntil = now + policy.ttlMs;
    return {
      status: 200,
      headers: {
        'content-type': typeof contentType === 'string' ? contentType : 'application/json',
        etag,
        // Answers are per caller: no shared cache downstream may store them (RFC 9111 §5.2.2.7).
        'cache-control': 'private',
        vary: 'Authorization, Accept-Encoding',
      },
      body: res.body,
      etag,
      storedAt: now,
      freshUntil,
      staleWhileRevalidateUntil: freshUntil + policy.staleWhileRevalidateMs,
      staleIfErrorUntil: freshUntil + policy.staleIfErrorMs,
      tags: policy.tags,
    };
  }
}

function withHeaders(res: UpstreamResponse, extra: Record<string, string>): UpstreamResponse {
  return { ...res, headers: { ...res.headers, ...extra } };
}

/** 502 for a refused/reset connection or an upstream 5xx, 504 for a timeout, 503 for a full queue. */
export function upstreamFailure(err: UpstreamError, upstreamStatus?: number): Served {
  return {
    kind: 'local',
    status: err.status,
    headers: {},
    body: { message: `Upstream unavailable: ${err.message}.`, errors: {} },
    outcome: { kind: 'error', detail: err.code, ...(upstreamStatus ? { upstreamStatus } : {}) },
  };
}

export function relayedHeaders(res: UpstreamResponse): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of RELAYED_HEADERS) {
    const v = res.headers[name];
    if (typeof v === 'string') out[name] = v;
  }
  return out;
}
