/**
 * One decided request, read through the cache: hit, stale, coalesced or fill.
 *
 *   tiers, in order (memory answers synchronously)
 *        │ an entry of a project whose access by this user lapsed (access-confirmation.ts):
 *        │ confirm first (async) ── refused ─▶ the user's entries of the project dropped, filled
 *        │ an entry of projects not confirmable one by one, past projectConfirmMs from its fill ─▶ filled
 *        ▼ ──fresh──▶ hit (in its last part of freshness: refreshed ahead, in the background)
 *        │ stale within stale-while-revalidate ─▶ serve it, refresh in background (coalesced)
 *        ▼ missing, or the client asked to revalidate
 *   caller rate-limited? (retry-after.ts) ─▶ stale if usable, else 429 with the remaining wait
 *        ▼
 *   fill (fill.ts: coalesced per key, and across replicas through a short lock)
 *        ├ JSON 200 ─▶ stored (storable.ts), answered
 *        ├ 429 ─▶ the caller is gated; stale, else relayed with a Retry-After within the cap
 *        ├ 3xx ─▶ relayed whole, Location included, never stored (RFC 9110 §15.4)
 *        ├ 401/403/4xx ─▶ relayed verbatim, never stored; access rules applied (access.ts)
 *        ├ 5xx, not JSON, timeout, refused ─▶ stale within stale-if-error, else 502/504 JSON
 *        └ no budget token in time (fleet-budget.ts) ─▶ stale within stale-if-error (detail=budget), else 429 JSON
 *
 * `serve` answers synchronously whenever the first tier does (a fresh memory hit: no promise,
 * no I/O), asynchronously otherwise; one lookup path takes either (undici's cache interceptor
 * accepts a store's answer the same way).
 */
import { makePath } from '../api/catalogue.js';
import type { SharedTierBudget } from '../cache/budget.js';
import { isDueForRefreshAhead, isFresh, isUsableOnError, isUsableWhileRevalidating, type CacheEntry } from '../cache/entry.js';
import type { CoalescedRun } from '../cache/coalesce.js';
import { Filler, type FillJob, type FillLock, type FillResult, type FillStore, type Fetched } from '../cache/fill.js';
import { HIT, type CacheOutcome, type OutcomeKind } from '../cache/outcome.js';
import type { FreshnessPolicy } from '../cache/policy.js';
import type { TierName } from '../cache/tier.js';
import { UPSTREAM_HEADERS, UpstreamError, toUpstreamError, type BudgetPriority, type Upstream, type UpstreamResponse } from '../upstream/client.js';
import type { AccessRules, AnsweredRequest } from './access.js';
import { projectOf, revealsProjects, type ProjectAccess } from './access-confirmation.js';
import type { Decision } from './decide.js';
import type { RetryAfterGate } from './retry-after.js';
import { localAnswer, upstreamFailure, type Served } from './served.js';
import { describeAnswer, isApiAnswer, isStorable, makeEntry } from './storable.js';

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

/**
 * Whether the caller's access to what a held entry reveals is confirmed. An unconfirmed caller is
 * never served it stale for a rate limit, and for a failure only as `#unconfirmedOnFailure` allows.
 */
type Standing = 'confirmed' | 'unconfirmed';

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
  /** Per user and project, access confirmed within `access.projectConfirmMs`. */
  readonly projects: ProjectAccess;
  /** `identity.staleOnOutage`: may a caller whose confirmation lapsed be served stale while the instance fails? */
  readonly staleOnOutage: boolean;
  readonly gate: RetryAfterGate;
  readonly lock?: FillLock | undefined;
  readonly lockTtlMs: number;
  readonly lockWaitMs: number;
  readonly maxEntryBytes: number;
  readonly now: () => number;
  readonly onBackgroundError: (err: unknown, key: string) => void;
  /**
   * Refresh-ahead (`cache.refreshAhead`): the share of freshness elapsed after which a fresh hit
   * starts a background refresh; undefined: off. `mayRefreshAhead`: false while the fleet's budget
   * is paused, so that no read then even claims a fill lock for a refresh that cannot be sent.
   */
  readonly refreshAheadStartAt?: number | undefined;
  readonly mayRefreshAhead?: (() => boolean) | undefined;
}

export class ReadThrough {
  readonly #filler: Filler<Unstored>;
  /** Entries whose refresh-ahead was started: at most one upstream request per key per freshness period. */
  readonly #refreshedAhead = new WeakSet<CacheEntry>();

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

  /** Asking upstream failed and the caller's identity could not be re-verified: stale for `key` if `#servesStaleOnOutage`, else the failure. */
  async serveStaleOnly(key: string | undefined, err: UpstreamError, budget?: SharedTierBudget): Promise<Served> {
    // Checked before the lookup: a refusal costs no Redis read.
    if (key === undefined || !this.#servesStaleOnOutage(err)) return upstreamFailure(err);
    return this.#unconfirmedOnFailure(await this.o.cache.get(key, undefined, budget), err, this.o.now());
  }

  /**
   * `confirmed`: this request's access to the entry's project was just confirmed upstream, so
   * the check is not repeated (with `access.projectConfirmMs: 0` it would never pass).
   * `acceptStored`: may a fill of this request be answered by an entry another replica stored
   * since the look-up? Not for no-cache, nor once the instance refused this caller's access.
   */
  #afterLookup(d: Decision, found: Found | undefined, now: number, confirmed = false, acceptStored = !d.noCache): Served | Promise<Served> {
    if (found !== undefined && !confirmed && this.#needsConfirmation(d, found.entry, now)) return this.#confirmThenServe(d, found);
    if (found !== undefined && !d.noCache) {
      if (isFresh(found.entry, now)) {
        // Refresh-ahead: one comparison on the common hit, no allocation (entry.ts isDueForRefreshAhead).
        const startAt = this.o.refreshAheadStartAt;
        if (startAt !== undefined && isDueForRefreshAhead(found.entry, now, startAt)) this.#refreshAhead(d, found.entry);
        return { kind: 'entry', entry: found.entry, outcome: HIT[found.tier] };
      }
      if (isUsableWhileRevalidating(found.entry, now)) {
        // Every stale hit until the refresh lands comes here: the job is built only for the first.
        if (!this.#filler.isRunning(d.fillKey)) this.#filler.run(this.#job(d, !d.noCache, 'background')).promise.catch((err: unknown) => this.#backgroundFailed(err, d.key));
        return { kind: 'entry', entry: found.entry, outcome: { kind: 'stale', tier: found.tier, detail: 'stale-while-revalidate' } };
      }
    }
    const blockedMs = this.o.gate.blockedMs(d.caller.userId, now);
    if (blockedMs > 0) return whileRateLimited(found, now, blockedMs);
    return this.#fillAndServe(d, found, now, acceptStored);
  }

  /**
   * A fresh entry read in its last part of freshness (being polled): refreshed now, in the
   * background, at the budget's lowest priority (`ahead`: skipped, never queued, without a token
   * at hand), coalesced with any fill of the key. Once per entry: a refresh that got its token
   * replaces the entry (a new freshness period); one skipped for want of a token may be tried
   * again by a later read. A key nobody reads is never refreshed.
   * acceptStored false: the entry held is still fresh, so the cross-replica lock must not answer
   * with it (fill.ts); another replica's refresh under way is waited for all the same.
   */
  #refreshAhead(d: Decision, entry: CacheEntry): void {
    if (this.#refreshedAhead.has(entry) || this.#filler.isRunning(d.fillKey)) return;
    if (this.o.mayRefreshAhead?.() === false) return;
    this.#refreshedAhead.add(entry);
    this.#filler.run(this.#job(d, false, 'ahead')).promise.catch((err: unknown) => {
      if (toUpstreamError(err).code === 'budget-spent') this.#refreshedAhead.delete(entry);
      else this.o.onBackgroundError(err, d.key);
    });
  }

  /** A background refresh that failed; one the budget had no token for is no error (the stale entry served meanwhile is marked). */
  #backgroundFailed(err: unknown, key: string): void {
    if (toUpstreamError(err).code !== 'budget-spent') this.o.onBackgroundError(err, key);
  }

  async #fillAndServe(d: Decision, found: Found | undefined, now: number, acceptStored: boolean, standing: Standing = 'confirmed'): Promise<Served> {
    const job = this.#job(d, acceptStored);
    const run = this.#filler.run(job);
    let result: FillResult<Unstored>;
    try {
      result = await this.#resultFor(d, job, run);
    } catch (err) {
      const failure = toUpstreamError(err);
      if (standing === 'unconfirmed') return this.#unconfirmedOnFailure(found, failure, now);
      // The fleet's budget is spent: stale within stale-if-error, marked `detail=budget`; else a 429 (served.ts).
      if (failure.code === 'budget-spent' && found !== undefined && isUsableOnError(found.entry, now)) return staleForBudget(found);
      if (found !== undefined && isUsableOnError(found.entry, now)) return staleOnError(found);
      return upstreamFailure(failure);
    }
    // Stored by another replica since the look-up: served as the Redis hit it is, access rules included.
    if (result.kind === 'entry' && result.storedEarlier) return this.#afterLookup(d, { entry: result.entry, tier: 'redis' }, this.o.now(), false, false);
    const kind: OutcomeKind = run.leader ? 'miss' : 'coalesced';
    if (result.kind === 'entry') {
      const outcome: CacheOutcome = { kind, stored: result.stored, upstreamStatus: 200, ...(d.noCache ? { detail: 'no-cache' } : {}) };
      return { kind: 'entry', entry: result.entry, outcome };
    }
    return this.#afterRefusal(d, result.value.response, found, now, kind, standing);
  }

  /**
   * The fill's result for this caller. A follower refused on the leader's account asks on its own:
   * another token of the same user refused (401/403), or the leader's share of the fill lanes full
   * (`queue-full`: fair-lane.ts; verified admins share admin-scope fills), which says nothing of this
   * caller's share.
   */
  async #resultFor(d: Decision, job: FillJob<Unstored>, run: CoalescedRun<FillResult<Unstored>>): Promise<FillResult<Unstored>> {
    if (run.leader) return run.promise;
    let result: FillResult<Unstored>;
    try {
      result = await run.promise;
    } catch (err) {
      if (toUpstreamError(err).code === 'queue-full') return this.#filler.runAlone(job);
      throw err;
    }
    if (result.kind === 'other' && result.value.credentialId !== d.caller.credentialId) {
      const status = result.value.response.status;
      if (status === 401 || status === 403) return this.#filler.runAlone(job);
    }
    return result;
  }

  /**
   * The hit path's access check: a user's entry of a project, whose access by that user was not
   * confirmed within `access.projectConfirmMs`; or an entry of projects that cannot be confirmed
   * one by one, stored longer ago than that. A WeakMap and two Map lookups, a comparison.
   */
  #needsConfirmation(d: Decision, entry: CacheEntry, now: number): boolean {
    const op = d.req.op;
    if (!revealsProjects(op)) return false; // shared admin answers are verified by access.ttlMs; GET /user names no project
    const projectId = projectOf(entry);
    if (projectId !== undefined) return !this.o.projects.isConfirmed(d.caller.userId, projectId, now);
    return !this.o.projects.isConfirmedByFill(entry.storedAt, now);
  }

  /** A due confirmation: asked (coalesced, shared), then the entry is served, or dropped and the request filled. */
  async #confirmThenServe(d: Decision, found: Found): Promise<Served> {
    const projectId = projectOf(found.entry);
    if (projectId === undefined) return this.#refillUnconfirmed(d, found);
    // A rate-limited caller is not asked about upstream: unconfirmed, they get the 429 (never the entry).
    if (this.o.gate.blockedMs(d.caller.userId, this.o.now()) > 0) return this.#afterLookup(d, undefined, this.o.now(), true, false);
    const confirmation = await this.o.projects.confirm(d.caller, d.authorization, projectId, d);
    const now = this.o.now();
    if (confirmation.kind === 'confirmed') return this.#afterLookup(d, found, now, true);
    if (confirmation.kind === 'failed') return this.#unconfirmedOnFailure(found, confirmation.error, now);
    const res = confirmation.response;
    if (res.status === 429) this.o.gate.block(d.caller.userId, res.headers['retry-after'], now);
    this.o.access.afterConfirmation(answeredRequest(d), projectId, res.status);
    // Not confirmed: the entry is not served; the request is answered as a miss, by the instance.
    return this.#afterLookup(d, undefined, now, true, false);
  }

  /**
   * An entry whose projects cannot be confirmed one by one (`GET /projects`; the results of a run
   * whose project this replica never learned), past `access.projectConfirmMs` from its fill: the
   * instance's answer to the request itself is the confirmation. Filled as a miss, never taken
   * from another replica's store; while the instance fails, the held entry is served only as to
   * any caller whose access could not be confirmed.
   */
  #refillUnconfirmed(d: Decision, found: Found): Served | Promise<Served> {
    const now = this.o.now();
    // A rate-limited caller is not asked about upstream: unconfirmed, they get the 429 (never the entry).
    if (this.o.gate.blockedMs(d.caller.userId, now) > 0) return this.#afterLookup(d, undefined, now, true, false);
    return this.#fillAndServe(d, found, now, false, 'unconfirmed');
  }

  /**
   * May a caller whose identity or project access could not be confirmed get a stale entry?
   * Only when the instance itself failed (refused, reset, 5xx, timeout) and `identity.staleOnOutage`
   * allows it; never on tm-cache's own `queue-full`, which anyone can cause with junk tokens.
   */
  #servesStaleOnOutage(err: UpstreamError): boolean {
    return this.o.staleOnOutage && isInstanceFailure(err);
  }

  /** What a caller that could not be confirmed gets when asking failed: stale within stale-if-error when allowed, else the failure. */
  #unconfirmedOnFailure(found: Found | undefined, err: UpstreamError, now: number, upstreamStatus?: number): Served {
    const usable = found !== undefined && this.#servesStaleOnOutage(err) && isUsableOnError(found.entry, now);
    return usable ? staleOnError(found, upstreamStatus) : upstreamFailure(err, upstreamStatus);
  }

  /** The fill of one decided request: ask upstream with the caller's credential, keep what is storable. */
  #job(d: Decision, acceptStored = !d.noCache, priority: BudgetPriority = 'client'): FillJob<Unstored> {
    const access = this.o.access;
    const answered = answeredRequest(d);
    return {
      key: d.key,
      fillKey: d.fillKey,
      shareable: d.mayRead,
      acceptStored,
      budget: d,
      fetch: async (): Promise<Fetched<Unstored>> => {
        const path = makePath(d.req.op, d.req.ids) + (d.req.query === '' ? '' : `?${d.req.query}`);
        const askedAt = this.o.now();
        const started = performance.now();
        // The caller's own share of the fill lanes (fair-lane.ts): a flood of theirs is refused to them alone.
        const res = await this.o.upstream.get(path, { authorization: d.authorization, ...UPSTREAM_HEADERS }, d.caller.userId, priority);
        d.upstreamMs = performance.now() - started;
        // An answer that is not the API's (an SSO page) says nothing about the caller's rights.
        if (isApiAnswer(res)) access.afterFill(answered, res.status);
        if (!isStorable(res)) return { kind: 'other', value: { response: res, credentialId: d.caller.credentialId } };
        const entry = makeEntry(d.req, res, this.o.policy, this.o.now(), d.req.op.adminOnly ? undefined : d.caller.scope);
        // A fresh 200 of a project for this user confirms their access to it (access-confirmation.ts).
        const projectId = d.req.op.adminOnly ? undefined : projectOf(entry);
        if (projectId !== undefined) this.o.projects.renew(d.caller.userId, projectId, askedAt, d);
        return { kind: 'entry', entry };
      },
    };
  }

  #afterRefusal(d: Decision, res: UpstreamResponse, found: Found | undefined, now: number, kind: OutcomeKind, standing: Standing): Served {
    const status = res.status;
    const stale = standing === 'confirmed' && found !== undefined && isUsableOnError(found.entry, now) ? found : undefined;
    if (status === 429) {
      const waitMs = this.o.gate.block(d.caller.userId, res.headers['retry-after'], now);
      if (stale) return { kind: 'entry', entry: stale.entry, outcome: { kind: 'stale', tier: stale.tier, detail: 'rate-limited', upstreamStatus: 429 } };
      const response = res.headers['retry-after'] === undefined ? withHeader(res, 'retry-after', String(Math.ceil(waitMs / 1000))) : this.o.gate.bounded(res, now);
      return { kind: 'relay', response, outcome: { kind, upstreamStatus: 429 } };
    }
    const failure = failureOf(res);
    if (failure !== undefined) {
      if (standing === 'unconfirmed') return this.#unconfirmedOnFailure(found, failure, now, status);
      if (stale) return staleOnError(stale, status);
      return upstreamFailure(failure, status);
    }
    this.o.access.afterRefusal(answeredRequest(d), status);
    return { kind: 'relay', response: this.o.gate.bounded(res, now), outcome: { kind, upstreamStatus: status } };
  }
}

/** An answer that is the upstream failing, not a verdict on the request: a 5xx, or not the API's kind of answer. */
function failureOf(res: UpstreamResponse): UpstreamError | undefined {
  if (res.status >= 500) return new UpstreamError('reset', `the upstream answered ${res.status}`);
  if (!isApiAnswer(res)) return new UpstreamError('bad-answer', `the upstream answered ${describeAnswer(res)}, not JSON`);
  return undefined;
}

/** The instance itself failed, as opposed to tm-cache declining to ask it (`queue-full`, `closed`). */
export function isInstanceFailure(err: UpstreamError): boolean {
  return err.code === 'timeout' || err.code === 'connect' || err.code === 'reset';
}

function answeredRequest(d: Decision): AnsweredRequest {
  return { key: d.key, mayRead: d.mayRead, adminOnly: d.req.op.adminOnly, caller: d.caller, authorization: d.authorization };
}

function staleOnError(found: Found, upstreamStatus?: number): Served {
  const outcome: CacheOutcome = { kind: 'stale', tier: found.tier, detail: 'stale-if-error', ...(upstreamStatus ? { upstreamStatus } : {}) };
  return { kind: 'entry', entry: found.entry, outcome };
}

/** The stale entry served because the fleet's upstream budget had no token in time. */
function staleForBudget(found: Found): Served {
  return { kind: 'entry', entry: found.entry, outcome: { kind: 'stale', tier: found.tier, detail: BUDGET_DETAIL } };
}

/** `Cache-Status: ...; detail=budget`: a stale answer the budget deferred to (metrics count it). */
export const BUDGET_DETAIL = 'budget';

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
