/**
 * The fleet budget through a real redis-server (a private one, test/helpers/redis.ts): the Lua
 * script keeps the memory bucket's contract, and replicas (FleetBudgets on connections of their
 * own, one key prefix) share one bucket: never more than it allows between them, a pause set by
 * one heard by the others at their next lease, Redis killed while paused, a replica joining
 * mid-pause. Bounds are counted (tokens taken), never timed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { RedisBudgetStore } from '../../src/cache/redis/budget-store.js';
import type { RedisRoles } from '../../src/cache/redis/roles.js';
import {
  DECREASE_FACTOR,
  LEARN_START_RPS,
  LEASE_TTL_MS,
  REGROW_MS,
  REGROW_SHARE,
  budgetShapeOf,
  type BudgetShape,
  type BudgetStore,
} from '../../src/upstream/budget-store.js';
import { PeakRate } from '../../src/emulator/peak-rate.js';
import { FleetBudget, type FleetBudgetOptions } from '../../src/upstream/fleet-budget.js';
import { pauseStored, startRedis, type RedisHandle } from '../helpers/redis.js';
import { budgetStoreContract, makeClock } from '../upstream/budget-store-contract.js';
import { closeRedisRoles, makeRedisRoles, rawClient, uniquePrefix, waitUntil } from './redis-fixtures.js';

let server: RedisHandle;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(async () => {
  await closeRedisRoles();
  await server?.stop();
});

const MAX_PAUSE_MS = 600_000;

budgetStoreContract('redis', async (shape, clock) => {
  const roles = await makeRedisRoles(server.url);
  const store = new RedisBudgetStore(roles.connection, { now: clock.now });
  const answer = <T>(reply: T | undefined): T => {
    if (reply === undefined) throw new Error('Redis did not answer');
    return reply;
  };
  return {
    lease: async (want, constrained = false) => answer(await store.lease(shape, { want, constrained })),
    rateLimited: async (pauseMs) => answer(await store.rateLimited(shape, pauseMs)),
  };
});

describe('redis: the stored bucket', () => {
  it('bounds what it reads: a tampered key cannot pause past the cap, nor lift the rate or burst', async () => {
    const roles = await makeRedisRoles(server.url);
    const clock = makeClock();
    const store = new RedisBudgetStore(roles.connection, { now: clock.now });
    const shape = budgetShapeOf({ requestsPerSecond: 10, burst: 20 }, 5_000);
    const raw = rawClient(server.url);
    await raw.hset(roles.connection.budgetKey('fleet'), { tokens: '1e12', rate: '1e9', pauseUntil: String(clock.now() + 1e12), at: 'junk' });
    expect(await store.lease(shape, { want: 1, constrained: false })).toMatchObject({ granted: 0, pausedMs: 5_000 });
    await raw.hset(roles.connection.budgetKey('fleet'), { pauseUntil: '0' });
    const reply = await store.lease(shape, { want: 1_000, constrained: false });
    expect(reply?.granted).toBe(17); // the burst less LEASE_TTL_MS of the rate: 17.5
    expect(reply?.rateRps).toBeCloseTo(10);
    raw.disconnect();
  });

  it('keys the bucket under the prefix, and lets an idle one expire', async () => {
    const roles = await makeRedisRoles(server.url);
    const store = new RedisBudgetStore(roles.connection);
    await store.lease(budgetShapeOf({ requestsPerSecond: 10, burst: 0 }, MAX_PAUSE_MS), { want: 1, constrained: false });
    const raw = rawClient(server.url);
    const key = `${roles.connection.keyPrefix}budget:fleet`;
    expect(await raw.exists(key)).toBe(1);
    expect(await raw.pttl(key)).toBeGreaterThan(0);
    raw.disconnect();
  });
});

/** Replicas: each its own connection, all on one key prefix (one fleet). */
async function fleetOf(count: number, shape: BudgetShape, over: Partial<FleetBudgetOptions> = {}): Promise<{ budgets: FleetBudget[]; roles: RedisRoles[] }> {
  const keyPrefix = uniquePrefix();
  const roles = await Promise.all(Array.from({ length: count }, () => makeRedisRoles(server.url, { keyPrefix, commandTimeoutMs: 500 })));
  return { roles, budgets: roles.map((r) => replica(r, shape, over)) };
}

function replica(roles: RedisRoles, shape: BudgetShape, over: Partial<FleetBudgetOptions> = {}): FleetBudget {
  return new FleetBudget({
    shape,
    shared: roles.budget.forShape(shape),
    fallbackShare: 0.25,
    maxWaitMs: 10_000,
    defaultPauseMs: 60_000,
    maxQueue: 10_000,
    ...over,
  });
}

/** Waits until the pause a replica was told of is in the fleet's bucket on the redis-server at `url`. */
async function pauseInRedis(url: string, keyPrefix: string): Promise<void> {
  const raw = rawClient(url);
  try {
    await pauseStored(raw, keyPrefix);
  } finally {
    raw.disconnect();
  }
}

/** Every token a replica can take now: what is at hand, and what one more lease brings. */
async function takeAll(budget: FleetBudget): Promise<number> {
  let taken = 0;
  for (let tries = 0; tries < 3; tries++) {
    while (budget.tryAcquire('client', 1)) taken++;
    await sleep(5);
  }
  return taken;
}

describe('redis: one budget for the fleet', () => {
  it('two replicas sharing one bucket never take more than burst + rate over a window, between them', async () => {
    const shape = budgetShapeOf({ requestsPerSecond: 20, burst: 10 }, MAX_PAUSE_MS);
    const { budgets } = await fleetOf(2, shape);
    const taken = [0, 0];
    const started = performance.now();
    const ask = async (index: number): Promise<void> => {
      while (performance.now() - started < 1_500) {
        try {
          await budgets[index]!.acquire('client', index);
          taken[index]!++;
        } catch {
          // spent: ask again
        }
      }
    };
    await Promise.all([ask(0), ask(1), ask(0), ask(1)]);
    const windowMs = performance.now() - started;
    const total = taken[0]! + taken[1]!;
    expect(total).toBeLessThanOrEqual(10 + (20 * windowMs) / 1_000);
    expect(total).toBeGreaterThan(10);
    for (const b of budgets) b.close();
  });

  it('three replicas send at most burst + rate × T in any window of T, leased tokens spent at the last moment included', async () => {
    // On one clock the test moves (the script's and the replicas'), every lease answered before it
    // moves: each replica leases a few tokens ahead and holds them as long as a lease lives, then
    // all three spend everything they can get. Sends are counted per sliding second of that clock.
    const shape = budgetShapeOf({ requestsPerSecond: 40, burst: 40 }, MAX_PAUSE_MS);
    const clock = makeClock();
    const keyPrefix = uniquePrefix();
    const answering = new Set<Promise<unknown>>();
    const tracked = (store: BudgetStore): BudgetStore => ({
      lease: (request) => track(store.lease(request)),
      rateLimited: (pauseMs) => track(store.rateLimited(pauseMs)),
    });
    const track = <T>(reply: T): T => {
      if (reply instanceof Promise) {
        answering.add(reply);
        void reply.then(() => answering.delete(reply));
      }
      return reply;
    };
    const settle = async (): Promise<void> => {
      while (answering.size > 0) {
        await Promise.all(answering);
        await new Promise((resolve) => setImmediate(resolve)); // the budget has read the answer
      }
    };
    const budgets = await Promise.all(
      [0, 1, 2].map(async () => {
        const roles = await makeRedisRoles(server.url, { keyPrefix, commandTimeoutMs: 10_000 });
        const shared = tracked(new RedisBudgetStore(roles.connection, { now: clock.now }).forShape(shape));
        return replica(roles, shape, { shared, now: clock.now });
      }),
    );
    const sends = new PeakRate();
    let sent = 0;
    const spendAll = (): void => {
      for (const budget of budgets) {
        while (budget.tryAcquire('client', 1)) {
          sends.record(clock.now());
          sent++;
        }
      }
    };
    spendAll(); // nothing at hand: each replica leases
    await settle();
    expect(budgets.map((b) => b.snapshot().tokensAtHand)).toEqual([4, 4, 4]);
    clock.advance(LEASE_TTL_MS - 1);
    for (let step = 0; step < 400; step++) {
      spendAll();
      await settle();
      spendAll();
      clock.advance(5);
    }
    expect(sends.peakPerSecond()).toBeLessThanOrEqual(40 + 40);
    expect(sends.peakPerSecond()).toBeGreaterThanOrEqual(70); // and the fleet does get its budget
    expect(sent).toBeGreaterThanOrEqual(40 * 2);
    for (const b of budgets) b.close();
  });

  it('a pause one replica sets is heard by the other at its next lease, not later', async () => {
    const shape = budgetShapeOf({ requestsPerSecond: 100, burst: 100 }, MAX_PAUSE_MS);
    const {
      budgets: [a, b],
      roles,
    } = await fleetOf(2, shape);
    expect(await takeAll(b!)).toBeGreaterThan(0); // b has leased before
    const atHand = b!.snapshot().tokensAtHand;
    a!.onRateLimited(30_000);
    await waitUntil(async () => (await sleep(10), a!.pausedForMs() > 0), 5_000, 'a paused');
    await pauseInRedis(server.url, roles[0]!.connection.keyPrefix);
    let spent = 0;
    while (b!.tryAcquire('client', 2)) spent++;
    expect(spent).toBeLessThanOrEqual(atHand); // only what it already held, nothing leased after the pause
    await expect(b!.acquire('client', 2)).rejects.toMatchObject({ reason: 'paused' });
    expect(b!.pausedForMs()).toBeGreaterThan(20_000);
    a!.close();
    b!.close();
  });

  it('what one replica learned (the rate a 429 cut, the ceiling it regrows toward) is where a replica started later begins', async () => {
    const shape = budgetShapeOf({ requestsPerSecond: 0, burst: 0 }, MAX_PAUSE_MS);
    const clock = makeClock();
    const keyPrefix = uniquePrefix();
    const first = new RedisBudgetStore((await makeRedisRoles(server.url, { keyPrefix })).connection, { now: clock.now });
    for (let t = 0; t < 2_000; t += 100, clock.advance(100)) await first.lease(shape, { want: 1_000, constrained: false }); // its rate in use
    const cut = await first.rateLimited(shape, 1_000);
    expect(cut?.rateRps).toBeCloseTo(LEARN_START_RPS * DECREASE_FACTOR);
    clock.advance(1_000 + REGROW_MS / 2);
    const later = new RedisBudgetStore((await makeRedisRoles(server.url, { keyPrefix })).connection, { now: clock.now });
    const grown = await later.lease(shape, { want: 1, constrained: true });
    // on the regrowth's curve toward 90 % of the ceiling, not a cold start's growth from 10 req/s
    expect(grown?.rateRps).toBeGreaterThan(LEARN_START_RPS * DECREASE_FACTOR);
    expect(grown?.rateRps).toBeLessThan(LEARN_START_RPS * REGROW_SHARE);
  });

  it('a replica joining mid-pause waits it out: its first lease says so', async () => {
    const shape = budgetShapeOf({ requestsPerSecond: 0, burst: 0 }, MAX_PAUSE_MS);
    const {
      budgets: [a],
      roles,
    } = await fleetOf(1, shape);
    a!.onRateLimited(45_000);
    await pauseInRedis(server.url, roles[0]!.connection.keyPrefix);
    const joining = replica(await makeRedisRoles(server.url, { keyPrefix: roles[0]!.connection.keyPrefix }), shape);
    expect(joining.tryAcquire('client', 1)).toBe(false);
    const refusal = await joining.acquire('client', 1, 1_000)!.catch((error: unknown) => error);
    expect(refusal).toMatchObject({ reason: 'paused' });
    expect((refusal as { retryAfterMs: number }).retryAfterMs).toBeGreaterThan(40_000);
    expect(await takeAll(joining)).toBe(0);
    a!.close();
    joining.close();
  });

  it('Redis killed while paused: each replica stays paused, then takes only its fallback share, never unlimited', async () => {
    const dying = await startRedis();
    try {
      const keyPrefix = uniquePrefix();
      const shape = budgetShapeOf({ requestsPerSecond: 40, burst: 40 }, MAX_PAUSE_MS);
      const clock = makeClock(performance.now());
      const replicas = await Promise.all(
        [0, 1].map(async () => replica(await makeRedisRoles(dying.url, { keyPrefix, commandTimeoutMs: 500 }), shape, { now: clock.now })),
      );
      const [a, b] = replicas as [FleetBudget, FleetBudget];
      await takeAll(b);
      a.onRateLimited(60_000);
      await pauseInRedis(dying.url, keyPrefix);
      expect(await takeAll(b)).toBeLessThanOrEqual(b.snapshot().tokensAtHand + 20); // b leases, hears the pause
      expect(b.pausedForMs()).toBeGreaterThan(0);
      await dying.kill();
      for (const budget of replicas) {
        expect(await takeAll(budget)).toBe(0);
        expect(budget.pausedForMs()).toBeGreaterThan(0);
      }
      await waitUntil(async () => (await takeAll(a), a.snapshot().mode === 'fallback'), 10_000, 'a in fallback');
      // The pause ends (on the replicas' clock), Redis still down: each takes a quarter of the budget.
      clock.advance(60_000);
      for (const budget of replicas) {
        let taken = 0;
        for (let second = 0; second < 5; second++) {
          taken += await takeAll(budget);
          clock.advance(1_000);
        }
        taken += await takeAll(budget);
        expect(budget.snapshot().mode).toBe('fallback');
        expect(taken).toBeGreaterThan(0);
        // a quarter of burst + rate × 5 s, at the reduced rate or below
        expect(taken).toBeLessThanOrEqual(0.25 * (40 + 40 * 5) + 1);
      }
    } finally {
      await dying.stop();
    }
  });
});
