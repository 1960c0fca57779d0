/**
 * Coalesce here, one replica produces, the others wait: the one mechanism behind fills of cache
 * entries (fill.ts), identity look-ups (`GET /user`) and project access confirmations.
 *
 *   run(job) ── another run of job.key on this replica? ─▶ shares its promise (coalesced)
 *        ▼ leads (coalesce.ts)
 *   lookup: already shared by another replica? ─▶ that
 *        ▼ not there (or no lookup)
 *   a job with a waitKey: another replica's value produced there meanwhile? ─▶ adopt('waited')
 *        ▼ none (that lock is never taken)
 *   the lock role (Redis), for a job with a lockKey (the key's own lock, or its lockOwner's):
 *        ├ claim ─▶ the value another replica stored since the look-up ─▶ adopt('stored')
 *        ├ claim ─▶ another replica holds the lock ─▶ waitFor, while it is held ≤ followMs ─▶ adopt('waited')
 *        │                                                nothing usable ─▶ produce, unlocked
 *        └ claim ─▶ the lock, renewed while producing ─▶ produce ─▶ unlock once the share landed
 *   no lock role (memory only), no lockKey: produce
 *
 * It knows nothing of entries, callers, status codes or access rules: the job says how to look,
 * what another replica's value makes of it, and how to produce (and share) its own. Its lock
 * and its producer are fields, so fakes test it (prow's ghcache coalescer over a fake executor).
 *
 * Invariants:
 * - One `produce` per key in flight on this replica; its result or rejection is every waiter's.
 * - The lock follows the producer: it is renewed every half `lockTtlMs` while `produce` runs (a
 *   fill waiting for a budget token, or for a slow instance, is still the fleet's one fill), and
 *   the others wait while it is held, up to `followMs`. A replica that dies holding the lock stops
 *   renewing it: it expires within `lockTtlMs`, and the others produce then. A lock role that
 *   cannot answer grants nothing and waits for nothing, so every replica produces by itself.
 * - The lock is released only once the produced value's shared write has landed: a waiter that
 *   saw the lock gone before the value would produce again for nothing. The release never holds
 *   the result back unless the job asks (`answerAfterShare`).
 */
import type { SharedTierBudget } from './budget.js';
import { Coalescer, type CoalescedRun } from './coalesce.js';

/**
 * What a replica gets when it claims a key: the lock (`token`), or the value another replica
 * stored since this one looked (`entry`: nothing to produce), or neither (another replica holds
 * the lock, or the lock role cannot answer).
 */
export type LockClaim<V> = { readonly token: string } | { readonly entry: V } | undefined;

/** The lock role: one replica produces a key's value, the others wait for it. Redis implements it; memory-only has none. */
export interface SharedLock<V> {
  /**
   * `acceptStored` false: the lock or nothing, never a stored value (the job must produce).
   * `owner`: a lock of that owner's on `key` (the same value produced), apart from the key's own.
   */
  claim(key: string, ttlMs: number, acceptStored: boolean, budget?: SharedTierBudget, owner?: string): Promise<LockClaim<V>>;
  /** Releases the lock if it still holds `token`. */
  unlock(key: string, token: string, owner?: string): Promise<void>;
  /** Keeps the lock for another `ttlMs` if it still holds `token` (false: lost, or no answer). */
  extend(key: string, token: string, ttlMs: number, owner?: string): Promise<boolean>;
  /** The value another replica produced under its lock (`owner`'s, or the key's own); undefined at `timeoutMs`, once the lock is gone without one, or at once when the role cannot answer. */
  waitFor(key: string, timeoutMs: number, budget?: SharedTierBudget, owner?: string): Promise<V | undefined>;
}

/** Hands the mechanism the write that shares a produced value (the lock is released once it lands). */
export type ShareWrite = (write: Promise<void> | void) => void;

export interface SharedFillJob<V, R> {
  /** What concurrent identical runs on this replica coalesce on. */
  readonly key: string;
  /** What the cross-replica lock is taken on; undefined: this job neither locks nor waits (it may not share the value). */
  readonly lockKey?: string | undefined;
  /**
   * Whose lock of `lockKey` this job takes and waits on: undefined, the key's own, which every job
   * that may share the value waits on; a name, that owner's lock beside it, which only that
   * owner's jobs wait on (a caller who may not hold what the others wait on).
   */
  readonly lockOwner?: string | undefined;
  /**
   * A key whose own lock this job waits on first, once, without ever taking it: a value another
   * replica produces there meanwhile may answer the job (`adopt`); none, or not usable, and the
   * job goes on to its own lock (if any).
   */
  readonly waitKey?: string | undefined;
  /** May a value another replica stored since the look-up answer this job? (Default: no, the lock or nothing.) */
  readonly acceptStored?: boolean | undefined;
  /**
   * Is the result handed back only once its share landed and the lock is released? (An identity:
   * a request to another replica after this one's answer finds it.) Fills answer at once.
   */
  readonly answerAfterShare?: boolean | undefined;
  /** The request's allowance for the lock's round trips (budget.ts). */
  readonly budget?: SharedTierBudget | undefined;
  /** A look at what is already shared, before the lock: the result, or undefined to go on. */
  lookup?(): Promise<R | undefined>;
  /** What another replica's value makes of this job (stored before the claim, or waited for); undefined: not usable, produce. */
  adopt?(value: V, how: 'stored' | 'waited'): R | undefined | Promise<R | undefined>;
  /** Produces the result (asks upstream); hands `share` the write that makes it visible to the other replicas. */
  produce(share: ShareWrite): Promise<R>;
}

/** Without a lock role every replica produces by itself; with one, how long its lock holds and others wait. */
type SharedFillOptions<V> =
  | { readonly lock?: undefined }
  | {
      readonly lock: SharedLock<V> | undefined;
      /** How long a lock holds if its owner never releases it (`cache.redis.lockTtlMs`). */
      readonly lockTtlMs: number;
      /** How long a replica waits on a lock it did not claim (`waitKey`) before going on (`cache.redis.lockWaitMs`). */
      readonly lockWaitMs: number;
      /**
       * How long a replica follows another's fill while that one holds (and renews) its lock:
       * `lockWaitMs` plus the longest a fill may wait for a budget token; default `lockWaitMs`.
       */
      readonly followMs?: number | undefined;
    };

const IGNORE_SHARE: ShareWrite = () => undefined;

/**
 * Renews a held lock every half TTL until cleared: the others go on waiting for a producer that
 * is still at work (a failed renewal is no error: the lock expires, and they produce themselves).
 */
function renewWhileHeld<V>(lock: SharedLock<V>, key: string, token: string, ttlMs: number, owner: string | undefined): ReturnType<typeof setInterval> {
  const timer = setInterval(() => void lock.extend(key, token, ttlMs, owner).catch(() => false), Math.max(1, ttlMs / 2));
  timer.unref?.();
  return timer;
}

export class SharedFill<V, R> {
  readonly #coalescer = new Coalescer<R>();

  constructor(private readonly o: SharedFillOptions<V> = {}) {}

  /** Runs the job, or joins the run already in flight for its key. */
  run(job: SharedFillJob<V, R>): CoalescedRun<R> {
    return this.#coalescer.run(job.key, () => this.#fill(job));
  }

  /** Runs the job on its own, not coalesced (a caller that must be judged by its own answer). */
  runAlone(job: SharedFillJob<V, R>): Promise<R> {
    return this.#fill(job);
  }

  /** Is a run of `key` in flight on this replica? */
  isRunning(key: string): boolean {
    return this.#coalescer.isInFlight(key);
  }

  /** The run of `key` in flight on this replica, to wait on; undefined when none is. */
  running(key: string): Promise<R> | undefined {
    return this.#coalescer.running(key);
  }

  async #fill(job: SharedFillJob<V, R>): Promise<R> {
    if (job.lookup !== undefined) {
      const found = await job.lookup();
      if (found !== undefined) return found;
    }
    const o = this.o;
    if (o.lock === undefined) return job.produce(IGNORE_SHARE);
    const lock = o.lock;
    if (job.waitKey !== undefined) {
      const waited = await this.#adopt(job, await lock.waitFor(job.waitKey, o.lockWaitMs, job.budget), 'waited');
      if (waited !== undefined) return waited;
    }
    const [lockKey, owner] = [job.lockKey, job.lockOwner];
    if (lockKey === undefined) return job.produce(IGNORE_SHARE);
    const claim = await lock.claim(lockKey, o.lockTtlMs, job.acceptStored === true, job.budget, owner);
    // Stored by another replica since this one looked (no lock was taken): adopted if usable.
    if (claim !== undefined && 'entry' in claim) return this.#adoptOrProduce(job, claim.entry, 'stored');
    // Another replica holds the lock (or the role cannot answer): its value, else this one's own, unlocked.
    if (claim === undefined) return this.#adoptOrProduce(job, await lock.waitFor(lockKey, o.followMs ?? o.lockWaitMs, job.budget, owner), 'waited');
    let shared: Promise<void> | void = undefined;
    const renewal = renewWhileHeld(lock, lockKey, claim.token, o.lockTtlMs, owner);
    try {
      return await job.produce((write) => (shared = write));
    } finally {
      clearInterval(renewal);
      const released = Promise.resolve(shared).then(() => lock.unlock(lockKey, claim.token, owner));
      if (job.answerAfterShare === true) await released;
    }
  }

  async #adoptOrProduce(job: SharedFillJob<V, R>, theirs: V | undefined, how: 'stored' | 'waited'): Promise<R> {
    return (await this.#adopt(job, theirs, how)) ?? job.produce(IGNORE_SHARE);
  }

  async #adopt(job: SharedFillJob<V, R>, theirs: V | undefined, how: 'stored' | 'waited'): Promise<R | undefined> {
    return theirs === undefined || job.adopt === undefined ? undefined : job.adopt(theirs, how);
  }
}
