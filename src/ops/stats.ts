/**
 * The figures behind /admin/stats and the status page that Prometheus counters cannot give a
 * browser: the last 15 minutes in 10-second buckets (requests by outcome, upstream requests), and
 * which operations and users cost the upstream most. Recording is a few integer increments per
 * request; users are counted by id (never a credential), in a bounded table.
 *
 * Every upstream request is counted once, where it is made (`upstream`: fills, refreshes,
 * identity look-ups, access confirmations, requests forwarded for an unknown parameter), and
 * attributed there to its operation and user: the tables and their `rest` add up to the total.
 */
import type { OutcomeKind } from '../cache/outcome.js';

export type RecordedOutcome = OutcomeKind | 'passthrough';

/** The row of identity look-ups (`GET /user` for a credential not known yet) in the operations table. */
export const IDENTITY_OPERATION = 'identity';

const BUCKET_MS = 10_000;
const BUCKETS = 90;
/** Users counted individually; the rest of a huge fleet is not listed (the top is what matters). */
const MAX_USERS = 10_000;

type ByOutcome = Record<RecordedOutcome, number>;

interface Bucket {
  t: number;
  requests: number;
  byOutcome: ByOutcome;
  upstream: number;
  budget: BudgetCounts;
}

/** What the fleet budget's lack of tokens did to requests: 429s (`refused`), stale answers (detail=budget), refresh-ahead skipped. */
export interface BudgetCounts {
  refused: number;
  stale: number;
  skipped: number;
}

/** The window of `budgetPerSecond`: the last minute. */
const BUDGET_WINDOW_MS = 60_000;

export interface Cost {
  requests: number;
  upstreamRequests: number;
}

const zeroOutcomes = (): ByOutcome => ({ hit: 0, stale: 0, miss: 0, coalesced: 0, bypass: 0, error: 0, passthrough: 0 });

export class RequestStats {
  readonly byOutcome = zeroOutcomes();
  readonly byTier = { memory: 0, redis: 0, none: 0 };
  total = 0;
  upstreamRequests = 0;
  readonly #series: Bucket[] = [];
  #current: Bucket;
  readonly #operations = new Map<string, Cost>();
  readonly #users = new Map<number, Cost>();

  constructor(private readonly now: () => number) {
    this.#current = this.#open(now());
  }

  /** One answered request (its upstream requests, if any, are counted by `upstream`). */
  request(outcome: RecordedOutcome, tier: 'memory' | 'redis' | undefined, operation: string, userId: number | undefined, t: number): void {
    if (t - this.#current.t >= BUCKET_MS) this.#roll(t);
    const bucket = this.#current;
    bucket.requests++;
    bucket.byOutcome[outcome]++;
    this.total++;
    this.byOutcome[outcome]++;
    this.byTier[tier ?? 'none']++;
    if (outcome === 'passthrough') return;
    this.#operationCost(operation).requests++;
    const user = this.#userCost(userId);
    if (user !== undefined) user.requests++;
  }

  /**
   * One upstream request of a cacheable request (a fill, a refresh, an identity look-up, an access
   * confirmation, a forward for an unknown parameter), attributed to `operation` and to the user
   * it was made for (none yet for an identity look-up).
   */
  upstream(t: number, operation: string, userId: number | undefined): void {
    if (t - this.#current.t >= BUCKET_MS) this.#roll(t);
    this.#current.upstream++;
    this.upstreamRequests++;
    this.#operationCost(operation).upstreamRequests++;
    const user = this.#userCost(userId);
    if (user !== undefined) user.upstreamRequests++;
  }

  /** A client's request the budget had no token for in time: answered stale (detail=budget) or refused (429). */
  budgetDeferred(to: 'stale' | 'refused', t: number): void {
    if (t - this.#current.t >= BUCKET_MS) this.#roll(t);
    this.#current.budget[to]++;
  }

  /** Refresh-ahead skipped: no budget token at hand (the budget's `skipped` event). */
  budgetSkipped(t: number): void {
    if (t - this.#current.t >= BUCKET_MS) this.#roll(t);
    this.#current.budget.skipped++;
  }

  /**
   * The budget's refusals, stale answers and skips per second over the last minute: the buckets
   * that began within it (the current one partial), over the time they cover, so a minute-old
   * process is not averaged over time it did not live.
   */
  budgetPerSecond(): BudgetCounts {
    const t = this.now();
    const recent = this.series().filter((b) => b.t > t - BUDGET_WINDOW_MS);
    const seconds = Math.max(1, (t - recent[0]!.t) / 1_000);
    const per = (k: keyof BudgetCounts): number => Math.round((recent.reduce((sum, b) => sum + b.budget[k], 0) / seconds) * 100) / 100;
    return { refused: per('refused'), stale: per('stale'), skipped: per('skipped') };
  }

  /** Oldest first; the last bucket is the current, partial one. */
  series(): readonly Bucket[] {
    const t = this.now();
    if (t - this.#current.t >= BUCKET_MS) this.#roll(t);
    return [...this.#series, this.#current];
  }

  topOperations(n = 10): { operation: string; upstreamRequests: number; requests: number }[] {
    return top(this.#operations, n).map(([operation, c]) => ({ operation, ...c }));
  }

  topUsers(n = 10): { userId: number; upstreamRequests: number; requests: number }[] {
    return top(this.#users, n).map(([userId, c]) => ({ userId, ...c }));
  }

  /**
   * What the listed rows leave out, so that rows and rest add up to the cacheable requests and
   * the upstream requests: the other operations or users, and for users what no user was known
   * for (identity look-ups, refused credentials, users past the table's bound).
   */
  restOf(rows: readonly Cost[]): Cost {
    const listed = rows.reduce((sum, r) => ({ requests: sum.requests + r.requests, upstreamRequests: sum.upstreamRequests + r.upstreamRequests }), {
      requests: 0,
      upstreamRequests: 0,
    });
    return { requests: this.total - this.byOutcome.passthrough - listed.requests, upstreamRequests: this.upstreamRequests - listed.upstreamRequests };
  }

  #operationCost(operation: string): Cost {
    return this.#operations.get(operation) ?? this.#add(this.#operations, operation);
  }

  /** The user's row; undefined without a user, or for a new user once the table is full. */
  #userCost(userId: number | undefined): Cost | undefined {
    if (userId === undefined) return undefined;
    return this.#users.get(userId) ?? (this.#users.size < MAX_USERS ? this.#add(this.#users, userId) : undefined);
  }

  #open(t: number): Bucket {
    return { t: t - (t % BUCKET_MS), requests: 0, byOutcome: zeroOutcomes(), upstream: 0, budget: { refused: 0, stale: 0, skipped: 0 } };
  }

  /** Closes the current bucket (and empty ones for a quiet gap) and opens the one holding `t`. */
  #roll(t: number): void {
    let next = this.#current;
    while (t - next.t >= BUCKET_MS) {
      this.#series.push(next);
      next = this.#open(next.t + BUCKET_MS);
      if (t - next.t >= BUCKET_MS * BUCKETS) next = this.#open(t);
    }
    this.#current = next;
    if (this.#series.length > BUCKETS - 1) this.#series.splice(0, this.#series.length - (BUCKETS - 1));
  }

  #add<K>(map: Map<K, Cost>, key: K): Cost {
    const cost = { requests: 0, upstreamRequests: 0 };
    map.set(key, cost);
    return cost;
  }
}

function top<K>(map: Map<K, Cost>, n: number): [K, Cost][] {
  return [...map].sort((a, b) => b[1].upstreamRequests - a[1].upstreamRequests || b[1].requests - a[1].requests).slice(0, n);
}
