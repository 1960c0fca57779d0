/**
 * The budget's bucket in memory: the shared contract (the Redis script keeps the same one), and
 * what only the memory store does: a share of the fleet's bucket, going on from what the shared
 * bucket last said.
 */
import { describe, expect, it } from 'vitest';
import { LEASE_TTL_MS, MemoryBudgetStore, budgetShapeOf, normalizeState } from '../../src/upstream/budget-store.js';
import { budgetStoreContract, makeClock } from './budget-store-contract.js';

budgetStoreContract('memory', (shape, clock) => {
  const store = new MemoryBudgetStore(shape, clock.now);
  return {
    lease: async (want, constrained = false) => store.lease({ want, constrained }),
    rateLimited: async (pauseMs) => store.rateLimited(pauseMs),
  };
});

const SHAPE = budgetShapeOf({ requestsPerSecond: 40, burst: 40 }, 600_000);
/** What the whole bucket holds: the burst less LEASE_TTL_MS of the rate (30). */
const HOLDS = 40 - (40 * LEASE_TTL_MS) / 1000;

describe('memory: a replica’s share of the budget', () => {
  it('hands out only its share of the rate and burst', () => {
    const clock = makeClock();
    const store = new MemoryBudgetStore(SHAPE, clock.now, 0.25);
    expect(store.lease({ want: 100, constrained: false }).granted).toBe(Math.floor(HOLDS * 0.25)); // 7.5
    clock.advance(1_000);
    expect(store.lease({ want: 100, constrained: false }).granted).toBe(7); // a quarter of 40 req/s, up to what it holds
  });

  it('goes on from the shared bucket’s pause and rate when told them', () => {
    const clock = makeClock();
    const store = new MemoryBudgetStore(SHAPE, clock.now, 0.5);
    store.adopt({ rateRps: 20, pausedMs: 30_000 });
    expect(store.lease({ want: 1, constrained: false })).toMatchObject({ granted: 0, pausedMs: 30_000 });
    clock.advance(30_000 + 500);
    const resumed = store.lease({ want: 100, constrained: false });
    expect(resumed.granted).toBe(5); // half of 20 req/s for 0.5 s, resuming empty
    expect(resumed.rateRps).toBeCloseTo(20);
  });

  it('is empty once told the shared bucket’s rate: falling back, it has no burst of its own', () => {
    const clock = makeClock();
    const store = new MemoryBudgetStore(SHAPE, clock.now, 0.5);
    store.adopt({ rateRps: 40, pausedMs: 0 });
    expect(store.lease({ want: 100, constrained: false }).granted).toBe(0);
    clock.advance(500);
    expect(store.lease({ want: 100, constrained: false }).granted).toBe(10); // half of 40 req/s for 0.5 s
  });

  it('bounds every field of a stored state, so garbage cannot lift or stop the budget for ever', () => {
    const now = 1_000_000;
    const state = normalizeState({ tokens: 1e12, rateRps: 1e9, pauseUntilMs: now + 1e12, atMs: Number.NaN, limitRps: -5, windowCount: -1 }, SHAPE, now);
    expect(state.rateRps).toBe(40);
    expect(state.tokens).toBe(HOLDS);
    expect(state.pauseUntilMs).toBe(now + 600_000);
    expect(state.atMs).toBe(now);
    expect(state.limitRps).toBe(0);
    expect(state.windowCount).toBe(0);
  });
});
