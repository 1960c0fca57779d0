/**
 * Invalidations the shared tiers (Redis) and the other replicas have not been told of yet.
 *
 * A write's invalidation, a revoked access or an admin purge drops memory at once, but the
 * shared tier and the bus can stall (a Redis `CLIENT PAUSE`, a failover) longer than one
 * command timeout. Such an invalidation is not lost: it stays pending and is retried with
 * backoff until Redis takes it, and meanwhile this replica does not trust what Redis holds for
 * it: a Redis hit stored no later than a pending invalidation that covers it (its key, one of
 * its tags, or everything) is a miss, so what was to be dropped is never served or backfilled
 * from Redis here.
 *
 * Every invalidation is marked pending BEFORE its first attempt: a lookup racing the attempt
 * cannot read back what is being dropped.
 *
 * Bounded: at most MAX_PENDING invalidations wait; one more turns them all into one pending
 * "everything" (a purge of Redis's entries once it answers): more misses, never a wrong answer.
 */
import type { CacheEntry } from './entry.js';
import type { InvalidationMessage } from './invalidation.js';
import type { TierCounts } from './tier.js';

/** What TieredCache drops below memory and publishes: everything but identities. */
export type SharedInvalidation = Exclude<InvalidationMessage, { kind: 'forget' } | { kind: 'access-refused' }>;

/** One try at telling every shared tier and the bus: the counts, or what could not be told. */
export type Attempt = { readonly counts: TierCounts } | { readonly unreached: readonly string[] };

export interface PendingOptions {
  readonly attempt: (message: SharedInvalidation) => Promise<Attempt>;
  /** The clock entries' `storedAt` is read on. */
  readonly now: () => number;
}

/** Invalidations waiting at most; beyond, they become one pending purge of everything. */
const MAX_PENDING = 1_000;
/** The first retry comes this soon after a failed attempt, then twice as late each round... */
const RETRY_FIRST_MS = 25;
/** ...up to this: a Redis that is down costs one round of attempts per 5 s. */
const RETRY_MAX_MS = 5_000;

interface Pending {
  readonly id: string;
  readonly message: SharedInvalidation;
  /** Entries stored at or before this time (ms since epoch) are not trusted from Redis. */
  readonly markedAt: number;
  /** What the last failed attempt could not tell. */
  unreached: readonly string[];
  readonly done: Promise<TierCounts>;
  readonly resolve: (counts: TierCounts) => void;
}

export class PendingInvalidations {
  readonly #pending = new Map<string, Pending>();
  #retrying = false;
  #closed = false;

  constructor(private readonly o: PendingOptions) {}

  get size(): number {
    return this.#pending.size;
  }

  /**
   * Marks `message` pending and tries it at once; answers once it reached every shared tier and
   * the bus, or after `waitMs` with what it could not reach (it is retried in the background).
   */
  async send(message: SharedInvalidation, waitMs: number): Promise<Attempt> {
    const pending = this.#mark(message);
    void this.#try(pending);
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), waitMs)));
    const counts = await Promise.race([pending.done, gaveUp]);
    clearTimeout(timer);
    return counts !== undefined ? { counts } : { unreached: pending.unreached };
  }

  /** May `entry`, found under `key` in a shared tier, be served? Not while an invalidation of it that was stored after it is pending. */
  trusts(key: string, entry: CacheEntry): boolean {
    if (this.#pending.size === 0) return true;
    const covers = (id: string): boolean => {
      const pending = this.#pending.get(id);
      return pending !== undefined && pending.markedAt >= entry.storedAt;
    };
    return !covers(ALL) && !covers(keyId(key)) && !entry.tags.some((tag) => covers(tagId(tag)));
  }

  /** Stops retrying (shutdown); what is pending is not told. */
  close(): void {
    this.#closed = true;
  }

  #mark(message: SharedInvalidation): Pending {
    const id = idOf(message);
    // A pending "everything" covers any later tag or key (they are still tried: they may succeed first).
    if (this.#pending.size >= MAX_PENDING && !this.#pending.has(id)) return this.#mark({ kind: 'all' });
    let resolve!: (counts: TierCounts) => void;
    const done = new Promise<TierCounts>((r) => (resolve = r));
    const pending: Pending = { id, message, markedAt: this.o.now(), unreached: [], done, resolve };
    const earlier = this.#pending.get(id);
    // Who waits on the earlier mark of the same thing is answered by this one.
    if (earlier !== undefined) void done.then(earlier.resolve);
    if (id === ALL) this.#pending.clear();
    this.#pending.set(id, pending);
    return pending;
  }

  /** One attempt; a failure starts the retries. */
  async #try(pending: Pending): Promise<void> {
    if (!(await this.#attempt(pending))) void this.#retry();
  }

  /** Retries everything pending, round after round, backing off while nothing gets through. */
  async #retry(): Promise<void> {
    if (this.#retrying) return;
    this.#retrying = true;
    try {
      for (let delayMs = RETRY_FIRST_MS; this.#pending.size > 0 && !this.#closed;) {
        await sleep(delayMs);
        const round = await Promise.all([...this.#pending.values()].map((pending) => this.#attempt(pending)));
        delayMs = round.some(Boolean) ? RETRY_FIRST_MS : Math.min(delayMs * 2, RETRY_MAX_MS);
      }
    } finally {
      this.#retrying = false;
    }
  }

  /** Tells the shared tiers and the bus; true once they took it (and it is no longer pending). */
  async #attempt(pending: Pending): Promise<boolean> {
    const attempt = await this.o.attempt(pending.message);
    if (!('counts' in attempt)) {
      pending.unreached = attempt.unreached;
      return false;
    }
    if (this.#pending.get(pending.id) === pending) this.#pending.delete(pending.id);
    pending.resolve(attempt.counts);
    return true;
  }
}

const ALL = 'all';
const keyId = (key: string): string => `key:${key}`;
const tagId = (tag: string): string => `tag:${tag}`;

function idOf(message: SharedInvalidation): string {
  return message.kind === 'all' ? ALL : message.kind === 'key' ? keyId(message.key) : tagId(message.tag);
}

function sleep(ms: number): Promise<void> {
  // unref: a pending retry never keeps a process alive that is otherwise done.
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
