/**
 * The fleet budget against fakes below it: a bucket in memory (no Redis), or a fake shared store
 * that counts its leases and can be made to fail; the clock and timers are vitest's fake ones.
 * What is checked is who gets a token, in what order, who is refused and with what Retry-After,
 * and what the bucket was asked: never how long anything took.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createMetrics } from '../../src/ops/metrics.js';
import { LEASE_TTL_MS, MemoryBudgetStore, budgetShapeOf, type BudgetShape, type BudgetStore } from '../../src/upstream/budget-store.js';
import {
  BudgetSpentError,
  FleetBudget,
  LEARNING_MAX_LEASE_TOKENS,
  type BudgetEvents,
  type BudgetPriority,
  type FleetBudgetOptions,
} from '../../src/upstream/fleet-budget.js';

const MAX_PAUSE_MS = 600_000;
/** 10 req/s; the bucket holds 4 (the burst less LEASE_TTL_MS of the rate). */
const SHAPE = budgetShapeOf({ requestsPerSecond: 10, burst: 4 + (10 * LEASE_TTL_MS) / 1000 }, MAX_PAUSE_MS);

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

function makeBudget(over: Partial<FleetBudgetOptions> = {}): FleetBudget {
  return new FleetBudget({
    shape: SHAPE,
    fallbackShare: 0.25,
    maxWaitMs: 10_000,
    defaultPauseMs: 60_000,
    maxQueue: 100,
    maxPerCaller: 50,
    now: () => Date.now(),
    ...over,
  });
}

/** Records the order in which requests get their token, and how the others are refused. */
function recorder(budget: FleetBudget) {
  const granted: string[] = [];
  const refused: Array<{ name: string; error: BudgetSpentError }> = [];
  const ask = (name: string, priority: BudgetPriority, caller: number | undefined, maxWaitMs?: number): void => {
    const waiting = budget.acquire(priority, caller, maxWaitMs);
    if (waiting === undefined) return void granted.push(name);
    waiting.then(
      () => granted.push(name),
      (error: unknown) => {
        expect(error).toBeInstanceOf(BudgetSpentError);
        refused.push({ name, error: error as BudgetSpentError });
      },
    );
  };
  return { granted, refused, ask };
}

/** A shared store over a memory bucket that counts leases, answers later, and can be taken down. */
function fakeShared(shape: BudgetShape) {
  const bucket = new MemoryBudgetStore(shape, () => Date.now());
  const counts = { leases: 0, pauses: 0 };
  const wants: number[] = [];
  let down = false;
  const store: BudgetStore = {
    lease: async (request) => {
      counts.leases++;
      wants.push(request.want);
      return down ? undefined : bucket.lease(request);
    },
    rateLimited: async (pauseMs) => {
      counts.pauses++;
      return down ? undefined : bucket.rateLimited(pauseMs);
    },
  };
  return {
    store,
    counts,
    wants,
    takeDown: () => void (down = true),
    bringUp: () => void (down = false),
    /** Another replica's 429, straight into the shared bucket. */
    pauseFromElsewhere: (pauseMs: number) => bucket.rateLimited(pauseMs),
  };
}

describe('fleet budget: taking tokens', () => {
  it('takes a token at hand at once, without a promise, up to the burst; then waits for the refill', async () => {
    const budget = makeBudget();
    const { granted, ask } = recorder(budget);
    for (let n = 1; n <= 6; n++) ask(`r${n}`, 'client', 1);
    expect(granted).toEqual(['r1', 'r2', 'r3', 'r4']);
    await vi.advanceTimersByTimeAsync(100);
    expect(granted).toEqual(['r1', 'r2', 'r3', 'r4', 'r5']);
    await vi.advanceTimersByTimeAsync(100);
    expect(granted).toHaveLength(6);
  });

  it('tryAcquire takes a token at hand, and never queues', () => {
    const budget = makeBudget();
    let taken = 0;
    while (budget.tryAcquire('background', 1)) taken++;
    expect(taken).toBe(4);
    expect(budget.snapshot().queued).toEqual({ client: 0, unverified: 0, background: 0, ahead: 0 });
  });

  it('refuses a wait that would outlast maxWaitMs, saying when a token may be had', async () => {
    const budget = makeBudget();
    const { granted, refused, ask } = recorder(budget);
    for (let n = 0; n < 4; n++) ask(`burst${n}`, 'client', 1);
    for (let n = 0; n < 5; n++) ask(`late${n}`, 'client', 1, 250);
    await vi.advanceTimersByTimeAsync(300);
    expect(granted).toEqual(['burst0', 'burst1', 'burst2', 'burst3', 'late0', 'late1']);
    expect(refused.map((r) => r.name)).toEqual(['late2', 'late3', 'late4']);
    expect(refused.every((r) => r.error.reason === 'timeout' && r.error.retryAfterMs > 0)).toBe(true);
  });

  it('refuses at once past the queue bound and past one caller’s share, while others still queue', async () => {
    const budget = makeBudget({ maxQueue: 5, maxPerCaller: 2 });
    const { granted, refused, ask } = recorder(budget);
    for (let n = 0; n < 4; n++) ask(`burst${n}`, 'client', 9);
    ask('flood1', 'client', 1);
    ask('flood2', 'client', 1);
    ask('flood3', 'client', 1); // past caller 1's share
    ask('other1', 'client', 2);
    ask('other2', 'client', 2);
    ask('third', 'client', 3);
    ask('fourth', 'client', 4); // past the queue bound
    await vi.advanceTimersByTimeAsync(0);
    expect(refused.map((r) => [r.name, r.error.reason])).toEqual([
      ['flood3', 'queue-full'],
      ['fourth', 'queue-full'],
    ]);
    await vi.advanceTimersByTimeAsync(500);
    expect(granted.slice(4).sort()).toEqual(['flood1', 'flood2', 'other1', 'other2', 'third']);
  });
});

describe('fleet budget: priorities and fairness', () => {
  it('gives tokens to clients first, background refreshes next, refresh-ahead last', async () => {
    const budget = makeBudget();
    const { granted, ask } = recorder(budget);
    for (let n = 0; n < 4; n++) ask(`burst${n}`, 'client', 9);
    ask('ahead1', 'ahead', 1);
    ask('background1', 'background', 1);
    ask('ahead2', 'ahead', 2);
    ask('client1', 'client', 1);
    ask('background2', 'background', 2);
    ask('client2', 'client', 2);
    await vi.advanceTimersByTimeAsync(600);
    expect(granted.slice(4)).toEqual(['client1', 'client2', 'background1', 'background2', 'ahead1', 'ahead2']);
  });

  it('lets refresh-ahead wait in room of its own: a full room skips it, and never refuses a client or a caller’s share', async () => {
    const skipped: BudgetPriority[] = [];
    const budget = makeBudget({ maxQueue: 8, maxPerCaller: 2, events: { skipped: (p) => void skipped.push(p) } });
    const { granted, refused, ask } = recorder(budget);
    for (let n = 0; n < 4; n++) ask(`burst${n}`, 'client', 9);
    ask('ahead1', 'ahead', 1);
    ask('ahead2', 'ahead', 1);
    ask('ahead3', 'ahead', 2); // past the ahead room (a quarter of 8)
    ask('client1', 'client', 1); // caller 1 has two refreshes waiting: its own request still has room
    ask('client1b', 'client', 1);
    for (let n = 0; n < 6; n++) ask(`other${n}`, 'client', 10 + n); // the rest of maxQueue, whatever waits ahead
    await vi.advanceTimersByTimeAsync(0);
    expect(refused.map((r) => [r.name, r.error.reason])).toEqual([['ahead3', 'queue-full']]);
    expect(skipped).toEqual(['ahead']);
    await vi.advanceTimersByTimeAsync(1_000);
    // Every client first (round-robin between callers), the refreshes ahead last.
    expect(granted.slice(4, 12).sort()).toEqual(['client1', 'client1b', 'other0', 'other1', 'other2', 'other3', 'other4', 'other5']);
    expect(granted.slice(12)).toEqual(['ahead1', 'ahead2']);
  });

  it('never lets a request take a token at once while one of its priority or higher waits', async () => {
    const budget = makeBudget();
    const { ask } = recorder(budget);
    for (let n = 0; n < 4; n++) ask(`burst${n}`, 'client', 9);
    ask('background-waiting', 'background', 1);
    await vi.advanceTimersByTimeAsync(50);
    expect(budget.tryAcquire('ahead', 2)).toBe(false);
    expect(budget.tryAcquire('background', 2)).toBe(false);
    // a client is not behind a background refresh: it waits for the next token, and gets it first
    const { granted, ask: askClient } = recorder(budget);
    askClient('client', 'client', 3);
    await vi.advanceTimersByTimeAsync(50);
    expect(granted).toEqual(['client']);
  });

  it('serves callers round-robin: one caller’s flood does not take the others’ turns', async () => {
    const budget = makeBudget();
    const { granted, ask } = recorder(budget);
    for (let n = 0; n < 4; n++) ask(`burst${n}`, 'client', 9);
    for (let n = 1; n <= 6; n++) ask(`flood${n}`, 'client', 1);
    ask('a1', 'client', 2);
    ask('b1', 'client', 3);
    ask('a2', 'client', 2);
    await vi.advanceTimersByTimeAsync(500);
    expect(granted.slice(4)).toEqual(['flood1', 'a1', 'b1', 'flood2', 'a2']);
  });
});

describe('fleet budget: learned from the instance', () => {
  it('stops at once on a 429 and refuses, with the pause as Retry-After, a wait that would outlast maxWaitMs', async () => {
    const paused: number[] = [];
    const budget = makeBudget({ events: { paused: (ms) => paused.push(ms) } });
    expect(budget.tryAcquire('client', 1)).toBe(true);
    budget.onRateLimited(30_000);
    expect(paused).toEqual([30_000]);
    expect(budget.tryAcquire('client', 1)).toBe(false); // the tokens at hand are dropped
    const refusal = budget.acquire('client', 1);
    await expect(refusal).rejects.toMatchObject({ reason: 'paused', retryAfterMs: 30_000 });
    expect(budget.retryAfterMs()).toBe(30_000);
  });

  it('pauses for upstream.defaultRetryAfterMs when the 429 has no Retry-After, and never past the cap', () => {
    const budget = makeBudget({ defaultPauseMs: 60_000 });
    budget.onRateLimited(undefined);
    expect(budget.pausedForMs()).toBe(60_000);
    const capped = makeBudget({ shape: { ...SHAPE, maxPauseMs: 5_000 } });
    capped.onRateLimited(3_600_000);
    expect(capped.pausedForMs()).toBe(5_000);
  });

  it('tells, while paused, since when and why: the Retry-After of its own 429, or none without one', async () => {
    const budget = makeBudget({ defaultPauseMs: 60_000 });
    expect(budget.snapshot().pause).toBeUndefined();
    budget.onRateLimited(30_000);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(budget.snapshot().pause).toEqual({ from: 'this-replica', retryAfterMs: 30_000, sinceMsAgo: 5_000 });
    budget.onRateLimited(undefined); // lengthens it: the pause under way, its cause the latest 429's
    expect(budget.snapshot().pause).toEqual({ from: 'this-replica', retryAfterMs: null, sinceMsAgo: 5_000 });
    await vi.advanceTimersByTimeAsync(60_000);
    expect(budget.snapshot().pause).toBeUndefined();
  });

  it('refuses, when a pause comes, the waiters it outlasts, and keeps those who can wait it out', async () => {
    const budget = makeBudget();
    const { granted, refused, ask } = recorder(budget);
    for (let n = 0; n < 4; n++) ask(`burst${n}`, 'client', 9);
    ask('short', 'client', 1, 1_000);
    ask('long', 'client', 2, 10_000);
    budget.onRateLimited(2_000);
    await vi.advanceTimersByTimeAsync(0);
    expect(refused.map((r) => [r.name, r.error.reason, r.error.retryAfterMs])).toEqual([['short', 'paused', 2_000]]);
    await vi.advanceTimersByTimeAsync(2_000 + 1_000);
    expect(granted).toContain('long');
  });

  it('resumes after a pause at a reduced rate when it was using its rate', async () => {
    const budget = makeBudget();
    for (let n = 0; n < 12; n++, await vi.advanceTimersByTimeAsync(100)) while (budget.tryAcquire('client', 1));
    budget.onRateLimited(1_000);
    expect(budget.snapshot().rateRps).toBeLessThan(10);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(budget.pausedForMs()).toBe(0);
  });
});

describe('fleet budget: shared through a store', () => {
  it('leases a few tokens at a time: far fewer leases than requests', async () => {
    const shared = fakeShared(budgetShapeOf({ requestsPerSecond: 1_000, burst: 1_000 }, MAX_PAUSE_MS));
    const budget = makeBudget({ shape: budgetShapeOf({ requestsPerSecond: 1_000, burst: 1_000 }, MAX_PAUSE_MS), shared: shared.store, maxQueue: 1_000 });
    const { granted, ask } = recorder(budget);
    for (let n = 0; n < 200; n++) ask(`r${n}`, 'client', n % 5);
    await vi.advanceTimersByTimeAsync(50);
    expect(granted).toHaveLength(200);
    expect(shared.counts.leases).toBeLessThanOrEqual(20);
  });

  it('hears a pause another replica set at its next lease, and drops leased tokens after LEASE_TTL_MS', async () => {
    const shared = fakeShared(SHAPE);
    const budget = makeBudget({ shared: shared.store });
    expect(budget.tryAcquire('client', 1)).toBe(false); // nothing at hand yet: a lease starts
    await vi.advanceTimersByTimeAsync(0);
    expect(budget.tryAcquire('client', 1)).toBe(true);
    shared.pauseFromElsewhere(20_000);
    await vi.advanceTimersByTimeAsync(LEASE_TTL_MS);
    expect(budget.tryAcquire('client', 1)).toBe(false); // what was at hand expired; the next lease...
    await vi.advanceTimersByTimeAsync(0);
    expect(budget.pausedForMs()).toBeGreaterThan(19_000); // ...heard of the pause
    await expect(budget.acquire('client', 1)).rejects.toMatchObject({ reason: 'paused' });
  });

  it('tells the shared bucket of its 429s, so the others hear them', async () => {
    const shared = fakeShared(SHAPE);
    const budget = makeBudget({ shared: shared.store });
    budget.onRateLimited(5_000);
    await vi.advanceTimersByTimeAsync(0);
    expect(shared.counts.pauses).toBe(1);
    const other = makeBudget({ shared: shared.store });
    other.tryAcquire('client', 2);
    await vi.advanceTimersByTimeAsync(0);
    expect(other.pausedForMs()).toBeGreaterThan(4_000);
    expect(other.snapshot().pause).toMatchObject({ from: 'fleet', retryAfterMs: null });
    expect(budget.snapshot().pause).toMatchObject({ from: 'this-replica', retryAfterMs: 5_000 });
  });

  it('falls back to its share while the store cannot answer, never unlimited, and goes back to it', async () => {
    const modes: string[] = [];
    const shared = fakeShared(SHAPE);
    const budget = makeBudget({ shared: shared.store, fallbackShare: 0.5, events: { modeChanged: (mode) => modes.push(mode) } });
    shared.takeDown();
    let taken = 0;
    for (let step = 0; step < 100; step++) {
      while (budget.tryAcquire('client', 1)) taken++;
      await vi.advanceTimersByTimeAsync(20);
    }
    // 2 s at half of 10 req/s, burst half of 4 (+ leases in flight at the window's edge)
    expect(taken).toBeLessThanOrEqual(2 + 5 * 2 + 1);
    expect(taken).toBeGreaterThanOrEqual(5);
    expect(budget.snapshot().mode).toBe('fallback');
    shared.bringUp();
    budget.tryAcquire('client', 1);
    await vi.advanceTimersByTimeAsync(0);
    expect(budget.snapshot().mode).toBe('shared');
    expect(modes).toEqual(['fallback', 'shared']);
  });

  it('falls back with an empty share: no burst of its own on top of what the shared bucket handed out', async () => {
    const shared = fakeShared(SHAPE);
    const budget = makeBudget({ shared: shared.store, fallbackShare: 0.5 });
    for (let lease = 0; lease < 3; lease++) {
      while (budget.tryAcquire('client', 1));
      await vi.advanceTimersByTimeAsync(0); // the shared bucket's burst (4) leased and spent, the clock still
    }
    shared.takeDown();
    expect(budget.tryAcquire('client', 1)).toBe(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(budget.snapshot().mode).toBe('fallback');
    expect(budget.tryAcquire('client', 1)).toBe(false); // not half of the burst (2) at once: the share refills from empty
  });

  it('takes nothing extra when a lease goes unanswered: its share refills from the moment the shared bucket is lost, not from its last lease', async () => {
    const shared = fakeShared(SHAPE);
    const budget = makeBudget({ shared: shared.store, fallbackShare: 0.5 });
    for (let lease = 0; lease < 3; lease++) {
      while (budget.tryAcquire('client', 1));
      await vi.advanceTimersByTimeAsync(0); // the shared bucket's burst leased and spent
    }
    await vi.advanceTimersByTimeAsync(400); // quiet: the shared bucket refills 4 tokens, for whoever asks first
    shared.takeDown(); // this lease goes unanswered
    expect(budget.tryAcquire('client', 1)).toBe(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(budget.snapshot().mode).toBe('fallback');
    expect(budget.tryAcquire('client', 1)).toBe(false); // not the 2 its share would have gathered since its last lease
    await vi.advanceTimersByTimeAsync(200);
    expect(budget.tryAcquire('client', 1)).toBe(false); // asks its share: 5 req/s from the loss on
    await vi.advanceTimersByTimeAsync(0);
    expect(budget.tryAcquire('client', 1)).toBe(true);
  });

  it('leases at most LEARNING_MAX_LEASE_TOKENS at a time while the rate is learned, however many wait', async () => {
    const learned = budgetShapeOf({ requestsPerSecond: 0, burst: 0 }, MAX_PAUSE_MS);
    const shared = fakeShared(learned);
    const budget = makeBudget({ shape: learned, shared: shared.store });
    const { granted, ask } = recorder(budget);
    for (let n = 0; n < 40; n++) ask(`r${n}`, 'client', n % 5);
    await vi.advanceTimersByTimeAsync(3_000);
    expect(granted.length).toBeGreaterThan(5);
    expect(Math.max(...shared.wants)).toBeLessThanOrEqual(LEARNING_MAX_LEASE_TOKENS);
  });

  it('leases about 100 ms of the rate at a time from the shared bucket, however many wait', async () => {
    const shared = fakeShared(SHAPE);
    const budget = makeBudget({ shared: shared.store });
    const { granted, ask } = recorder(budget);
    for (let n = 0; n < 40; n++) ask(`r${n}`, 'client', n % 5);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(granted.length).toBeGreaterThan(10);
    expect(Math.max(...shared.wants)).toBeLessThanOrEqual(2); // 10 req/s: 1 token's worth, at least 2
  });

  it('drops the tokens of a lease answered more than LEASE_TTL_MS after it was asked for', async () => {
    const bucket = new MemoryBudgetStore(SHAPE, () => Date.now());
    const late: BudgetStore = {
      lease: (request) => new Promise((resolve) => setTimeout(() => resolve(bucket.lease(request)), LEASE_TTL_MS + 50)),
      rateLimited: async (pauseMs) => bucket.rateLimited(pauseMs),
    };
    const budget = makeBudget({ shared: late });
    expect(budget.tryAcquire('client', 1)).toBe(false);
    await vi.advanceTimersByTimeAsync(LEASE_TTL_MS + 50);
    expect(budget.tryAcquire('client', 1)).toBe(false); // granted long ago: spending it now would add to what others took since
  });

  it('keeps a pause it heard of when the store goes away', async () => {
    const shared = fakeShared(SHAPE);
    const budget = makeBudget({ shared: shared.store });
    shared.pauseFromElsewhere(10_000);
    budget.tryAcquire('client', 1);
    await vi.advanceTimersByTimeAsync(0);
    shared.takeDown();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(budget.tryAcquire('client', 1)).toBe(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(budget.snapshot().mode).toBe('fallback');
    expect(budget.pausedForMs()).toBeGreaterThan(4_000);
    await expect(budget.acquire('client', 1, 1_000)).rejects.toMatchObject({ reason: 'paused' });
  });
});

describe('fleet budget: reports', () => {
  it('counts tokens taken, waits and their result, skips and pauses by priority', async () => {
    const seen: string[] = [];
    const events: BudgetEvents = {
      taken: (p) => seen.push(`taken:${p}`),
      waited: (p, r) => seen.push(`waited:${p}:${r}`),
      skipped: (p) => seen.push(`skipped:${p}`),
      paused: () => seen.push('paused'),
      modeChanged: (m) => seen.push(`mode:${m}`),
    };
    const budget = makeBudget({ shape: budgetShapeOf({ requestsPerSecond: 10, burst: 1 }, MAX_PAUSE_MS), events });
    budget.tryAcquire('ahead', 1);
    budget.tryAcquire('ahead', 1);
    const waiting = budget.acquire('client', 1);
    await vi.advanceTimersByTimeAsync(100);
    await waiting;
    budget.onRateLimited(30_000);
    await budget.acquire('background', 1)?.catch(() => undefined);
    expect(seen).toEqual(['taken:ahead', 'skipped:ahead', 'taken:client', 'waited:client:granted', 'paused', 'waited:background:spent']);
  });

  it('feeds the Prometheus families: tokens by priority, waits, pauses, the learned rate', async () => {
    const metrics = createMetrics({ version: 'test', redis: false });
    const budget = makeBudget({ events: metrics.budget });
    metrics.watchBudget(() => budget.snapshot());
    while (budget.tryAcquire('client', 1));
    budget.onRateLimited(30_000);
    await budget.acquire('ahead', 1)?.catch(() => undefined);
    const text = await metrics.registry.metrics();
    expect(text).toContain('tm_cache_upstream_budget_tokens_total{priority="client"} 4');
    expect(text).toContain('tm_cache_upstream_budget_skipped_total{priority="client"} 1');
    expect(text).toContain('tm_cache_upstream_budget_waits_total{priority="ahead",result="spent"} 1');
    expect(text).toContain('tm_cache_upstream_budget_pauses_total 1');
    expect(text).toMatch(/tm_cache_upstream_budget_rate \d/);
    expect(text).toContain('tm_cache_upstream_budget_paused_seconds 30');
    expect(text).toContain('tm_cache_upstream_budget_shared 0');
    expect(text).toContain('tm_cache_upstream_budget_ceiling 10'); // upstream.budget.requestsPerSecond
  });

  it('reports no ceiling (0) for a learned rate: its ceiling is what a 429 taught the bucket', async () => {
    const metrics = createMetrics({ version: 'test', redis: false });
    const budget = makeBudget({ shape: budgetShapeOf({ requestsPerSecond: 0, burst: 0 }, MAX_PAUSE_MS) });
    metrics.watchBudget(() => budget.snapshot());
    expect(await metrics.registry.metrics()).toContain('tm_cache_upstream_budget_ceiling 0');
  });

  it('refuses every waiter on close', async () => {
    const budget = makeBudget();
    const { refused, ask } = recorder(budget);
    for (let n = 0; n < 5; n++) ask(`r${n}`, 'client', 1);
    budget.close();
    await vi.advanceTimersByTimeAsync(0);
    expect(refused.map((r) => r.error.reason)).toEqual(['closed']);
  });
});
