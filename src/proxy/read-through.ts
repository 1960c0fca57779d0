/**
 * One decided request, read through the cache: hit, stale, coalesced or fill. The tiers are
 * asked in order (memory answers synchronously), `judge` (judge.ts) names the verdict on what
 * they hold, and `#act` carries it out, one case each:
 *
 *   fresh ─▶ hit (in its last part of freshness: its refresh scheduled to land before it expires)
 *   stale-while-revalidate ─▶ served, refreshed in the background (coalesced)
 *   confirm-access (access-confirmation.ts, async) ── confirmed ─▶ judged again
 *        └ refused ─▶ the user's entries of the project dropped; judged again with nothing held
 *   rate-limited (retry-after.ts) ─▶ stale if usable, else 429 with the remaining wait
 *   find-grants (access-grants.ts, the shared store) ─▶ judged again
 *   fill │ fill-from-instance │ fill-unconfirmed │ fill-own (a member without proof: own token, own coalescing)
 *        ▼ (fill.ts: coalesced per key, and across replicas through a short lock)
 *        ├ an entry another replica stored since the look-up ─▶ judged again, as a Redis hit
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
import { isUsableOnError, type CacheEntry } from '../cache/entry.js';
import type { CoalescedRun } from '../cache/coalesce.js';
import { Filler, type FillJob, type FillLock, type FillResult, type FillStore, type Fetched } from '../cache/fill.js';
import { HIT, type CacheOutcome, type OutcomeKind } from '../cache/outcome.js';
import type { FreshnessPolicy } from '../cache/policy.js';
import { answerFailure, classifyAnswer } from '../upstream/answer.js';
import { UPSTREAM_HEADERS, toUpstreamError, type BudgetPriority, type Upstream, type UpstreamError, type UpstreamResponse } from '../upstream/client.js';
import type { AccessRules, AnsweredRequest } from './callers/access.js';
import type { CallerProofs } from './callers/proofs.js';
import type { Credential } from './callers/refreshers.js';
import { decideOwn, decidePlaced, ownerOf, placedAfterFill, type Decision } from './decide.js';
import { judge, type Facts, type FillVerdict, type Found, type Occasion } from './judge.js';
import { RefreshAhead } from './refresh-ahead.js';
import type { DerivableOccasion, Deriver } from './derive/deriver.js';
import type { RetryAfterGate } from './callers/retry-after.js';
import { localAnswer, upstreamFailure, type Served } from './respond/served.js';
import { isStorable, makeEntry } from './storable.js';
import { ANY_ORIGIN_SEGMENT, type OriginKeying } from './origin-keying.js';

export type { Found } from './judge.js';

/** The cache as the read-through sees it (TieredCache implements it). */
export interface ReadCache extends FillStore {
  /** Synchronous when the first tier answers; a promise when a lower tier must be asked. */
  get(key: string, now?: number, budget?: SharedTierBudget): Found | undefined | Promise<Found | undefined>;
  /** What this replica's memory holds for `key`, not counted as a use (refresh-ahead: is it still the answer scheduled?). */
  peekMemory(key: string): CacheEntry | undefined;
  delete(key: string): Promise<void>;
}

/**
 * Whether the caller's access to what a held entry reveals is confirmed. An unconfirmed caller is
 * never served it stale for a rate limit, and for a failure only as `#unconfirmedOnFailure` allows;
 * an unproven one (a project's shared answer, without a grant) never.
 */
type Standing = 'confirmed' | 'unconfirmed' | 'unproven';

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
  /** What callers proved, and what answers prove: confirmations, grants, refreshers, placement (callers/proofs.ts). */
  readonly proofs: CallerProofs;
  /** `identity.staleOnOutage`: may a caller whose confirmation lapsed be served stale while the instance fails? */
  readonly staleOnOutage: boolean;
  readonly gate: RetryAfterGate;
  readonly lock?: FillLock | undefined;
  readonly lockTtlMs: number;
  readonly lockWaitMs: number;
  /** How long a replica follows another's fill of a key while that one holds its lock: lockWaitMs plus the longest wait for a budget token. */
  readonly followMs?: number | undefined;
  readonly maxEntryBytes: number;
  readonly now: () => number;
  readonly onBackgroundError: (err: unknown, key: string) => void;
  /** Learns from answers asked with an Origin whether an operation's answers vary on it (origin-keying.ts). */
  readonly originKeying?: OriginKeying | undefined;
  /**
   * Refresh-ahead (`cache.refreshAhead`, refresh-ahead.ts): the share of freshness elapsed from
   * which a fresh hit marks the entry as polled and schedules its refresh; undefined: off.
   * `mayRefreshAhead`: false while the fleet's budget is paused, so that no refresh then even
   * claims a fill lock for a request that cannot be sent.
   */
  readonly refreshAheadStartAt?: number | undefined;
  readonly mayRefreshAhead?: (() => boolean) | undefined;
  /** Derived answers (derive/deriver.ts): tried where a question's lookup would be filled from the instance, never on a hit. */
  readonly deriver?: Deriver | undefined;
}

export class ReadThrough {
  readonly #filler: Filler<Unstored>;
  /** Refresh-ahead, when on: at most one upstream request per key per freshness period. */
  readonly #ahead: RefreshAhead | undefined;
  /** What the judge reads (judge.ts): the callers' Retry-After gate and proofs. */
  readonly #facts: Facts;
  /** The fill of a key running on this replica, for a derived answer's source (derive/deriver.ts). */
  readonly #running = (key: string): Promise<unknown> | undefined => this.#filler.running(key);

  constructor(private readonly o: ReadThroughOptions) {
    this.#facts = { gate: o.gate, proofs: o.proofs };
    this.#filler = new Filler<Unstored>({
      store: o.cache,
      lock: o.lock,
      lockTtlMs: o.lockTtlMs,
      lockWaitMs: o.lockWaitMs,
      followMs: o.followMs,
      maxEntryBytes: o.maxEntryBytes,
    });
    this.#ahead = o.refreshAheadStartAt === undefined ? undefined : this.#refreshAhead(o.refreshAheadStartAt);
  }

  /** Cancels the refreshes scheduled ahead (the app is closing). */
  close(): void {
    this.#ahead?.close();
  }

  serve(d: Decision, now: number): Served | Promise<Served> {
    if (!d.mayRead) return this.#act(d, undefined, now, 'lookup');
    // The Decision is the request's exchange, and its request state its budget (budget.ts): no allocation on a memory hit.
    const found = this.o.cache.get(d.key, now, d.request);
    if (found instanceof Promise) return found.then((f) => this.#act(d, f, this.o.now(), 'lookup'));
    return this.#act(d, found, now, 'lookup');
  }

  /** Asking upstream failed and the caller's identity could not be re-verified: stale for `key` if `#servesStaleOnOutage`, else the failure. */
  async serveStaleOnly(key: string | undefined, err: UpstreamError, budget?: SharedTierBudget): Promise<Served> {
    // Checked before the lookup: a refusal costs no Redis read.
    if (key === undefined || !this.#servesStaleOnOutage(err)) return upstreamFailure(err);
    return this.#unconfirmedOnFailure(await this.o.cache.get(key, undefined, budget), err, this.o.now());
  }

  /** The verdict on what the request holds (judge.ts), acted on. */
  #act(d: Decision, found: Found | undefined, now: number, occasion: Occasion): Served | Promise<Served> {
    const verdict = judge(d, found, now, this.#facts, occasion);
    switch (verdict.kind) {
      case 'fresh': {
        // Refresh-ahead (refresh-ahead.ts hit): one comparison on the common hit, no allocation.
        this.#ahead?.hit(d, found!.entry, now);
        this.o.proofs.servedFresh(d, found!.entry, now);
        return { kind: 'entry', entry: found!.entry, outcome: HIT[found!.tier] };
      }
      case 'stale-while-revalidate': {
        // A fresh derived answer (derive/deriver.ts) rather than the stale one, and no refresh of it.
        const derived = this.o.deriver?.answer(d, now, this.#facts);
        if (derived !== undefined && derived.kind !== 'confirm-access') return derived;
        this.o.proofs.servedStale(d, now);
        // Every stale hit until the refresh lands comes here: the job is built only for the first.
        // None while a source it is derived from is being refreshed: the next read derives it.
        if (!this.#filler.isRunning(d.fillKey) && this.#sourceInFlight(d, now) === undefined)
          this.#filler.run(this.#job(d, 'fill', 'background')).promise.catch((err: unknown) => this.#backgroundFailed(err, d.key));
        return { kind: 'entry', entry: found!.entry, outcome: { kind: 'stale', tier: found!.tier, detail: 'stale-while-revalidate' } };
      }
      case 'confirm-access':
        return this.#confirmThenServe(d, found!, verdict.projectId);
      case 'rate-limited':
        return whileRateLimited(verdict.stale, verdict.blockedMs);
      case 'find-grants':
        return this.#findGrantsThenServe(d, found!);
      case 'fill-own':
        return this.#ownOrFill(d, found, now);
      case 'fill':
      case 'fill-from-instance':
      case 'fill-unconfirmed': {
        // Nothing fresh held: a derived answer (derive/deriver.ts) spares the instance, when one is
        // certain; else a source being filled or refreshed here is waited for (once), then derived
        // from; else one another replica stored in Redis, when one is recorded there.
        // So is a question whose own entry expired while its caller's access was due for
        // confirmation, once confirmed: a poll confirms the member and reads the team's fresh lists.
        const derivable = verdict.kind === 'fill' && (occasion === 'lookup' || occasion === 'access-confirmed') ? occasion : undefined;
        const step = derivable !== undefined ? this.o.deriver?.miss(d, now, this.#facts, this.#running, !d.request.sourceWaited, derivable) : undefined;
        if (step === undefined) return this.#placeOrFill(d, found, now, verdict.kind);
        if (step.kind === 'confirm-access') return this.#confirmThenDerive(d, found, step.projectId);
        if (step.kind === 'wait') return this.#afterSource(d, step.source);
        if (step.kind === 'ask-shared') return this.#deriveSharedOrFill(d, found, now, verdict.kind, derivable);
        return step;
      }
    }
  }

  /** A miss nothing derives: placed first when its project may be known elsewhere (sharing by project), then filled. */
  #placeOrFill(d: Decision, found: Found | undefined, now: number, how: FillVerdict): Served | Promise<Served> {
    if (d.unplaced !== undefined && this.o.proofs.findPlace !== undefined) return this.#placeThenFill(d, found, now, how);
    return this.#fillAndServe(d, found, now, how);
  }

  /** A derived answer from a source another replica stored (derive/deriver.ts `answerShared`), else the miss goes on as before. */
  async #deriveSharedOrFill(d: Decision, found: Found | undefined, now: number, how: FillVerdict, occasion: DerivableOccasion = 'lookup'): Promise<Served> {
    const derived = await this.o.deriver!.answerShared(d, now, this.#facts, occasion);
    if (derived !== undefined) return derived.kind === 'confirm-access' ? this.#confirmThenDerive(d, found, derived.projectId) : derived;
    return this.#placeOrFill(d, found, this.o.now(), how);
  }

  /**
   * Refresh-ahead (refresh-ahead.ts) over this read-through: a refresh is a fill at the budget's
   * lowest priority (`ahead`: only tokens nobody else waits for; skipped when none comes in time), coalesced with any
   * fill of the key. Filled from the instance (`fill-from-instance`): the entry held is still
   * fresh, so the cross-replica lock must not answer with it (fill.ts); another replica's refresh
   * under way is waited for all the same.
   */
  #refreshAhead(startAt: number): RefreshAhead {
    return new RefreshAhead({
      startAt,
      held: (key) => this.o.cache.peekMemory(key),
      // An answer derivable from a fresh source is not refreshed: once stale, it is derived (stale-while-revalidate above).
      mayStart: (d) =>
        !this.#filler.isRunning(d.fillKey) && this.o.mayRefreshAhead?.() !== false && this.o.deriver?.derivable(d, this.o.now(), this.#facts) !== true,
      refresh: (d) => this.#filler.run(this.#job(d, 'fill-from-instance', 'ahead')).promise,
      now: this.o.now,
      failed: (err, key) => {
        if (toUpstreamError(err).code === 'budget-spent') return true;
        this.o.onBackgroundError(err, key);
        return false;
      },
    });
  }

  /** A fill under way of a source `d` is derived from once fresh (derive/deriver.ts `sourceInFlight`); undefined when none is. */
  #sourceInFlight(d: Decision, now: number): Promise<unknown> | undefined {
    return this.o.deriver?.sourceInFlight(d, now, this.#facts, this.#running);
  }

  /** Judged again once the source's fill settled (derived from its answer, most often; else filled), without waiting again. */
  async #afterSource(d: Decision, source: Promise<unknown>): Promise<Served> {
    d.request.sourceWaited = true;
    await source.catch(() => undefined);
    return this.serve(d, this.o.now());
  }

  /** A background refresh that failed; one the budget had no token for is no error (the stale entry served meanwhile is marked). */
  #backgroundFailed(err: unknown, key: string): void {
    if (toUpstreamError(err).code !== 'budget-spent') this.o.onBackgroundError(err, key);
  }

  /**
   * A member without proof for a project's shared answer: filled under their own token, which
   * earns the operation's grant and refreshes the shared entry. But a question that expands an
   * area they hold no grant for can never be proven that way (a 200 to it is not taken as proof of
   * the expanded area): from here it is the caller's own request, as in `user` mode (their own
   * key, their access confirmed as any user's, their fills coalesced across replicas on that key),
   * and Cache-Status, the access log and the fill say so. The question's project and areas stay
   * the Decision's: a refusal of it drops the member's proof of the project on every replica, as
   * a refusal on the shared key would (access.ts).
   */
  #ownOrFill(d: Decision, found: Found | undefined, now: number): Served | Promise<Served> {
    const proofs = this.o.proofs;
    if (d.ownKey === d.key || !proofs.lacksExpandedGrant(d, now)) return this.#proveOrWait(d, found, now);
    const own = decideOwn(d);
    const held = this.o.cache.get(own.key, now, own.request);
    const served = held instanceof Promise ? held.then((f) => this.#act(own, f, this.o.now(), 'lookup')) : this.#act(own, held, now, 'lookup');
    // Its 200 proves the operation's own area (proofs.ts `answered`): the member's other questions
    // of that area wait for it rather than prove it again.
    if (served instanceof Promise && proofs.mayProve(d, now)) proofs.proving(d, served);
    return served;
  }

  /**
   * A member without proof of an area proves it once, not once per question: while another of
   * their questions of that area is proving it (their own fill, under their own token), this one
   * waits for it and is judged again (granted: the team's entry, or the team's fill; refused: their
   * own fill, without waiting twice). Else this fill is the proof the others wait on.
   */
  #proveOrWait(d: Decision, found: Found | undefined, now: number): Served | Promise<Served> {
    const proofs = this.o.proofs;
    const pending = d.request.proofWaited ? undefined : proofs.provingNow(d);
    if (pending !== undefined) return this.#afterWaitingOn(d, pending);
    // This request proves it: judged again later (another replica's fill waited for), it never waits on its own proof.
    d.request.proofWaited = true;
    proofs.fillingOwn();
    const proof = this.#fillAndServe(d, found, now, 'fill-own');
    proofs.proving(d, proof);
    return proof;
  }

  /**
   * Judged again once the proof it waited for settled. The entry that proof stored, served to it,
   * was collapsed into that fill (RFC 9211), not a hit; an entry the team held before is a hit.
   */
  async #afterProof(d: Decision, proven: unknown): Promise<Served> {
    const served = await this.serve(d, this.o.now());
    const proof = proven as Served | undefined;
    return proof?.kind === 'entry' ? collapsedInto(served, proof.entry, COLLAPSED_INTO_PROOF) : served;
  }

  /** A member's grants this replica lacks, looked up in the shared store (another replica earned them); then judged again. */
  async #findGrantsThenServe(d: Decision, found: Found): Promise<Served> {
    await this.o.proofs.findGrants(d);
    return this.#act(d, found, this.o.now(), 'grants-looked-up');
  }

  /**
   * A miss of an answer whose project is not known here yet: the shared store is asked once
   * whether another replica learned it. Learned, this very request is decided again in the
   * project's scope (decide.ts `decidePlaced`) and read through there, as a member's: the team's
   * entry another replica stored answers it, with the proofs the caller holds. Still unknown, it
   * is filled in the caller's own scope, as in `user` mode.
   */
  async #placeThenFill(d: Decision, found: Found | undefined, now: number, how: FillVerdict): Promise<Served> {
    await this.o.proofs.findPlace!(d);
    const placed = decidePlaced(d, (tag) => this.o.policy.projectOfResource(tag));
    if (placed !== undefined) return this.serve(placed, this.o.now());
    return this.#fillAndServe(d, found, now, how);
  }

  /** A fill, as the verdict named it (judge.ts): whether another replica's entry may answer it, whether the caller's access is confirmed. */
  async #fillAndServe(d: Decision, found: Found | undefined, now: number, how: FillVerdict): Promise<Served> {
    const standing: Standing = how === 'fill-own' ? 'unproven' : how === 'fill-unconfirmed' ? 'unconfirmed' : 'confirmed';
    const job = this.#job(d, how, 'client', found !== undefined);
    const run = this.#filler.run(job);
    if (run.leader && job.key === d.key) this.o.deriver?.filling(d, run.promise);
    let result: FillResult<Unstored>;
    try {
      result = await this.#resultFor(d, job, run);
    } catch (err) {
      return this.#onFailure(standing, found, toUpstreamError(err), now);
    }
    // Stored by another replica since the look-up: served as the Redis hit it is, access rules included.
    if (result.kind === 'entry' && result.storedEarlier) return this.#act(d, { entry: result.entry, tier: 'redis' }, this.o.now(), 'stored-earlier');
    const kind: OutcomeKind = run.leader ? 'miss' : 'coalesced';
    if (result.kind === 'entry') {
      // Another replica's fill, waited for through Redis: collapsed into it, not a miss of this one's.
      if (result.collapsed && how === 'fill-own') return this.#afterOwnWait(d, result.entry);
      if (result.collapsed) return { kind: 'entry', entry: result.entry, outcome: COLLAPSED_INTO_REDIS_FILL };
      const outcome: CacheOutcome = { kind, stored: result.stored, upstreamStatus: 200, ...(d.noCache ? { detail: 'no-cache' } : {}) };
      return { kind: 'entry', entry: result.entry, outcome };
    }
    return this.#afterRefusal(d, result.value.response, found, now, kind, standing);
  }

  /**
   * A member without proof whose fill waited on another replica's fill of the shared key: that
   * entry is theirs only if their proof holds now. It does when the other replica's fill was
   * their own (the same user on two replicas: its confirmation and grant went to Redis before the
   * entry, on the same connection); else the verdict is a fill under their own token, which no
   * longer waits. Served, it was collapsed into that fill (RFC 9211), not a hit.
   */
  async #afterOwnWait(d: Decision, entry: CacheEntry): Promise<Served> {
    d.request.ownWaited = true;
    return collapsedInto(await this.#act(d, { entry, tier: 'redis' }, this.o.now(), 'stored-earlier'), entry, COLLAPSED_INTO_REDIS_FILL);
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
    // Another origin's answer, coalesced on every origin's entry when the instance began to vary on the Origin: asked for this one.
    if (result.kind === 'entry' && d.origin !== undefined && namesAnotherOrigin(result.entry, d.origin)) return this.#filler.runAlone(job);
    if (result.kind === 'other' && result.value.credentialId !== d.caller.credentialId) {
      const status = result.value.response.status;
      // A project's shared answer refused to another member (404: they lost the project) says nothing of this one.
      if (status === 401 || status === 403 || (status === 404 && d.gate === 'member')) return this.#filler.runAlone(job);
    }
    return result;
  }

  /**
   * A derived answer whose source's project access by this caller is due for confirmation, as a
   * hit's would be: confirmed (coalesced, shared), then derived; anything else is filled, and the
   * instance's answer to the question itself applies the access rules.
   */
  async #confirmThenDerive(d: Decision, found: Found | undefined, projectId: number): Promise<Served> {
    const confirmed = (await this.o.proofs.confirm(d, projectId)).kind === 'confirmed';
    const deriver = this.o.deriver!;
    // A source read from Redis is in memory by now, though perhaps not indexed yet: then found in Redis again.
    const derived = confirmed
      ? (deriver.answer(d, this.o.now(), this.#facts, 'access-confirmed') ?? (await deriver.answerShared(d, this.o.now(), this.#facts, 'access-confirmed')))
      : undefined;
    return derived !== undefined && derived.kind !== 'confirm-access' ? derived : this.#fillAndServe(d, found, this.o.now(), 'fill');
  }

  /** A due confirmation of the caller's access to the entry's project: asked (coalesced, shared), then the entry is served, or dropped and the request filled. */
  #confirmThenServe(d: Decision, found: Found, projectId: number): Promise<Served> {
    if (d.gate !== 'member' || d.request.proofWaited) return this.#confirmAndServe(d, found, projectId);
    const proofs = this.o.proofs;
    const now = this.o.now();
    // Their proof of this area under way (another question's): waited for, then judged again.
    const sameArea = proofs.provingNow(d);
    if (sameArea !== undefined) return this.#afterWaitingOn(d, sameArea);
    d.request.proofWaited = true;
    // A member's fill of an area they hold no grant for proves the area and confirms the project
    // at once (proofs.ts `answered`): one request where a confirmation and then a proof were two.
    // Their other questions of the project wait for it (a due confirmation included).
    if (d.areas !== 0 && !proofs.isGranted(d.caller.userId, d.projectId, d.areas, now)) {
      const proof = this.#proveUnconfirmed(d, found, projectId);
      proofs.proving(d, proof);
      return proof;
    }
    return this.#confirmAfterProofs(d, found, projectId);
  }

  /** An unconfirmed member's question of an area they hold no grant for: confirmed and granted elsewhere (the shared store), judged as before; else their own fill proves both. */
  async #proveUnconfirmed(d: Decision, found: Found, projectId: number): Promise<Served> {
    if (await this.o.proofs.isConfirmedElsewhere(d)) return this.#confirmAndServe(d, found, projectId);
    this.o.proofs.fillingOwn();
    return this.#ownOrFill(d, found, this.o.now());
  }

  /**
   * A due confirmation with no area to prove (the project's own question): a proof of another of
   * the project's areas under way for this member, or begun by a request read in the same turn of
   * the event loop (a dashboard's panels arrive together), is waited for rather than a
   * confirmation asked of the instance.
   */
  async #confirmAfterProofs(d: Decision, found: Found, projectId: number): Promise<Served> {
    const pending = this.o.proofs.provingProject(d) ?? (await nextTurn(), this.o.proofs.provingProject(d));
    if (pending !== undefined) return this.#afterWaitingOn(d, pending);
    return this.#confirmAndServe(d, found, projectId);
  }

  /** A proof of this member's under way, waited for (once: `proofWaited`), then judged again (`#afterProof`); one refused or failed, judged again all the same. */
  async #afterWaitingOn(d: Decision, proof: Promise<unknown>): Promise<Served> {
    d.request.proofWaited = true;
    return this.#afterProof(d, await proof.catch(() => undefined));
  }

  async #confirmAndServe(d: Decision, found: Found, projectId: number): Promise<Served> {
    const confirmation = await this.o.proofs.confirm(d, projectId);
    const now = this.o.now();
    if (confirmation.kind === 'confirmed') return this.#act(d, found, now, 'access-confirmed');
    if (confirmation.kind === 'failed') {
      // A project's shared answer, while the instance fails: only to a member who holds grants for it.
      if (d.gate === 'member' && !this.o.proofs.isGranted(d.caller.userId, d.projectId, d.areas, now)) return upstreamFailure(confirmation.error);
      return this.#unconfirmedOnFailure(found, confirmation.error, now);
    }
    const res = confirmation.response;
    if (res.status === 429) this.o.gate.block(d.caller.userId, res.headers['retry-after'], now);
    this.o.access.afterConfirmation(answeredRequest(d), projectId, res.status);
    // Not confirmed: the entry is not served; the request is answered as a miss, by the instance.
    return this.#act(d, undefined, now, 'access-refused');
  }

  /**
   * May a caller whose identity or project access could not be confirmed get a stale entry?
   * Only when the instance itself failed (refused, reset, 5xx, timeout) and `identity.staleOnOutage`
   * allows it; never on tm-cache's own `queue-full`, which anyone can cause with junk tokens.
   */
  #servesStaleOnOutage(err: UpstreamError): boolean {
    return this.o.staleOnOutage && isInstanceFailure(err);
  }

  /**
   * What a fill that got nothing to store serves when the instance failed, tm-cache could not ask
   * it, or the fleet's budget had no token in time, by the caller's standing: one ladder for every
   * failure. A confirmed caller gets a stale entry within stale-if-error (marked `detail=budget`
   * when the budget deferred it), else the JSON failure (a 429 for the budget: served.ts).
   */
  #onFailure(standing: Standing, found: Found | undefined, failure: UpstreamError, now: number, upstreamStatus?: number): Served {
    if (standing === 'unproven') return upstreamFailure(failure, upstreamStatus);
    if (standing === 'unconfirmed') return this.#unconfirmedOnFailure(found, failure, now, upstreamStatus);
    if (found !== undefined && isUsableOnError(found.entry, now)) {
      return failure.code === 'budget-spent' ? staleForBudget(found) : staleOnError(found, upstreamStatus);
    }
    return upstreamFailure(failure, upstreamStatus);
  }

  /** What a caller that could not be confirmed gets when asking failed: stale within stale-if-error when allowed, else the failure. */
  #unconfirmedOnFailure(found: Found | undefined, err: UpstreamError, now: number, upstreamStatus?: number): Served {
    const usable = found !== undefined && this.#servesStaleOnOutage(err) && isUsableOnError(found.entry, now);
    return usable ? staleOnError(found, upstreamStatus) : upstreamFailure(err, upstreamStatus);
  }

  /**
   * The fill of one decided request: ask upstream, keep what is storable. A request's own fill is
   * asked under the caller's credential; a background refresh under the one `#refreshCredential`
   * chooses. A 200 renews the proofs of whoever's credential got it: their identity, their
   * confirmation of the project the answer reveals, their grant for the operation's area.
   */
  #job(d: Decision, how: FillVerdict, priority: BudgetPriority = 'client', held = false): FillJob<Unstored> {
    // A member without proof coalesces here only with their own requests, and across replicas on
    // a lock of their own beside the shared key's: never on the shared key's lock, which the team's
    // fills wait on (a caller the instance refuses would hold them back for a whole request).
    // When nothing is held it may wait on the team's fill once per request (`ownWaited`); what it
    // waited for, either fill's, is then judged (#afterOwnWait). With an entry held, the fill in
    // flight is a refresh, which proves nothing the grants just looked up did not.
    const own = how === 'fill-own';
    const mayWait = own && !d.request.ownWaited;
    return {
      key: d.key,
      fillKey: own ? d.ownKey : d.fillKey,
      lockKey: mayWait ? d.key : undefined,
      lockOwner: mayWait ? d.caller.scope : undefined,
      waitKey: mayWait && !held ? d.key : undefined,
      shareable: d.mayRead && !own,
      acceptStored: how === 'fill',
      budget: d.request,
      fetch: async (): Promise<Fetched<Unstored>> => {
        const askedAt = this.o.now();
        // A background refresh (stale-while-revalidate, refresh-ahead) of a project's shared entry:
        // under the credential of the member whose proof it renews (refreshers.ts), else the reader's.
        const who = priority === 'client' ? d : this.o.proofs.refresher(d, askedAt);
        try {
          return await this.#fetch(d, who, askedAt, priority);
        } finally {
          this.o.proofs.release(d, who);
        }
      },
    };
  }

  async #fetch(d: Decision, who: Credential, askedAt: number, priority: BudgetPriority): Promise<Fetched<Unstored>> {
    const access = this.o.access;
    const caller = who.caller;
    const answered = answeredRequest(d, who);
    const path = makePath(d.canonical.op, d.canonical.ids) + (d.canonical.query === '' ? '' : `?${d.canonical.query}`);
    const started = performance.now();
    // The caller's own share of the fill lanes (fair-lane.ts): a flood of theirs is refused to them alone.
    const headers =
      d.origin === undefined
        ? { authorization: who.authorization, ...UPSTREAM_HEADERS }
        : { authorization: who.authorization, origin: d.origin, ...UPSTREAM_HEADERS };
    // `GET /user` asked through tm-cache by a caller its own look-up just verified: that answer, not a second request.
    const prefetched = who === d && d.origin === undefined ? d.request.prefetched : undefined;
    if (prefetched !== undefined) d.request.prefetched = undefined;
    const res = prefetched ?? (await this.o.upstream.get(path, headers, caller.userId, priority));
    d.request.upstreamMs = performance.now() - started;
    // An answer that is not the API's (an SSO page) says nothing about the caller's rights.
    const answer = classifyAnswer(res);
    if (answer !== 'not-json') access.afterFill(answered, res.status);
    // The API's answer to a browser's request tells whether the operation varies on the Origin;
    // one asked for every origin's entry that turns out to vary is relayed, never stored there.
    const varied = d.origin !== undefined && answer === 'ok' && this.#variesOnOrigin(d, res);
    // A refresh nobody waits for: what the refusal says of the credential is applied all the same (a 401 forgets it).
    if (priority !== 'client' && (answer === 'unauthorized' || answer === 'forbidden' || answer === 'not-found')) access.afterRefusal(answered, res.status);
    if (!isStorable(res)) {
      if (answer === 'ok') this.o.proofs.answered(d, who, askedAt, undefined, false, this.o.now());
      return { kind: 'other', value: { response: res, credentialId: caller.credentialId } };
    }
    const entry = makeEntry(d.canonical, res, this.o.policy, this.o.now(), ownerOf(d), d.request);
    this.o.proofs.answered(d, who, askedAt, entry, !varied, this.o.now());
    if (d.unplaced !== undefined && who === d && !varied) this.#placeAnswer(d, res, askedAt);
    return varied ? { kind: 'entry', entry, keep: false } : { kind: 'entry', entry };
  }

  /**
   * The answer of a request that was not placed when decided (`/runs/7` before the run's project
   * was known here) and told its project: stored in that project's scope as well, where the
   * members' next requests (this one's included) are placed, and the user's grant of the
   * operation's area earned, as a member's own fill earns it.
   */
  #placeAnswer(d: Decision, res: UpstreamResponse, askedAt: number): void {
    const placement = placedAfterFill(d, (tag) => this.o.policy.projectOfResource(tag));
    if (placement === undefined) return;
    this.o.proofs.placed(d, placement.projectId, askedAt, this.o.now());
    void this.o.cache.set(placement.key, makeEntry(d.canonical, res, this.o.policy, this.o.now(), undefined, d.request), d.request);
  }

  /** Learns from a browser's answer; true when it was asked for every origin's entry (`|origin=*`) and varies after all. */
  #variesOnOrigin(d: Decision, res: UpstreamResponse): boolean {
    const keying = this.o.originKeying;
    if (keying === undefined) return false;
    keying.learn(d.canonical.op.id, res);
    return d.key.endsWith(ANY_ORIGIN_SEGMENT) && !keying.sharesOrigins(d.canonical.op.id);
  }

  // eslint-disable-next-line max-params -- the refusal's verdict inputs, each already a named value of the read-through's one `if` chain; kept positional while that chain is being reworked
  #afterRefusal(d: Decision, res: UpstreamResponse, found: Found | undefined, now: number, kind: OutcomeKind, standing: Standing): Served {
    const status = res.status;
    const stale = standing === 'confirmed' && found !== undefined && isUsableOnError(found.entry, now) ? found : undefined;
    if (status === 429) {
      const waitMs = this.o.gate.block(d.caller.userId, res.headers['retry-after'], now);
      if (stale) return { kind: 'entry', entry: stale.entry, outcome: { kind: 'stale', tier: stale.tier, detail: 'rate-limited', upstreamStatus: 429 } };
      const response =
        res.headers['retry-after'] === undefined ? withHeader(res, 'retry-after', String(Math.ceil(waitMs / 1000))) : this.o.gate.bounded(res, now);
      return { kind: 'relay', response, outcome: { kind, upstreamStatus: 429 } };
    }
    const failure = answerFailure(res);
    if (failure !== undefined) return this.#onFailure(standing, found, failure, now, status);
    this.o.access.afterRefusal(answeredRequest(d), status);
    return { kind: 'relay', response: this.o.gate.bounded(res, now), outcome: { kind, upstreamStatus: status } };
  }
}

/** RFC 9211: collapsed into another request of the same member, which proved the area and stored the entry served. */
const COLLAPSED_INTO_PROOF: CacheOutcome = Object.freeze({ kind: 'coalesced', upstreamStatus: 200 });

/** RFC 9211: forwarded, collapsed with another replica's request, its entry read from Redis (stored there by that replica, not this one). */
const COLLAPSED_INTO_REDIS_FILL: CacheOutcome = Object.freeze({ kind: 'coalesced', tier: 'redis', upstreamStatus: 200 });

/** The instance itself failed, as opposed to tm-cache declining to ask it (`queue-full`, `closed`). */
function isInstanceFailure(err: UpstreamError): boolean {
  return err.code === 'timeout' || err.code === 'connect' || err.code === 'reset';
}

/** The request an answer was for, as the access rules see it: asked under `who`'s credential (the caller's own, unless a refresh chose another's). */
function answeredRequest(d: Decision, who: Credential = d): AnsweredRequest {
  return { key: d.key, mayRead: d.mayRead, gate: d.gate, caller: who.caller, authorization: who.authorization, projectId: d.projectId };
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
const BUDGET_DETAIL = 'budget';

/** A rate-limited caller (retry-after.ts): `stale` if the verdict found one usable, else a 429 with the remaining wait. */
function whileRateLimited(stale: Found | undefined, blockedMs: number): Served {
  if (stale !== undefined) return { kind: 'entry', entry: stale.entry, outcome: { kind: 'stale', tier: stale.tier, detail: 'rate-limited' } };
  const seconds = Math.ceil(blockedMs / 1000);
  const body = { message: `The instance rate-limited this caller; retry after ${seconds} s.`, errors: {} };
  return localAnswer(429, body, { kind: 'error', detail: 'rate-limited' }, { 'retry-after': String(seconds) });
}

function withHeader(res: UpstreamResponse, name: string, value: string): UpstreamResponse {
  return { ...res, headers: { ...res.headers, [name]: value } };
}

/** An entry whose Access-Control-Allow-Origin names an origin other than `origin`: never served to it. */
function namesAnotherOrigin(entry: CacheEntry, origin: string): boolean {
  const allowed = entry.headers['access-control-allow-origin'];
  return allowed !== undefined && allowed !== '*' && allowed !== origin;
}

/**
 * A request judged again after waiting for another's fill: served as a hit the entry that fill
 * produced (whichever tier handed it back: a Redis read is a copy, with the same store time and
 * validator), it was collapsed into that fill (RFC 9211), not a hit.
 */
/** The next turn of the event loop: after every request read in this one (setImmediate runs after the poll phase). */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function collapsedInto(served: Served, produced: CacheEntry, outcome: CacheOutcome): Served {
  if (served.kind !== 'entry' || served.outcome.kind !== 'hit') return served;
  const same = served.entry === produced || (served.entry.storedAt === produced.storedAt && served.entry.etag === produced.etag);
  return same ? { kind: 'entry', entry: served.entry, outcome } : served;
}
