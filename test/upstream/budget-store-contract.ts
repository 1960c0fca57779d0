/**
 * The contract every budget bucket keeps, in memory (budget-store.ts) and in Redis
 * (redis-budget-store.ts, the same arithmetic as a Lua script): run it with
 * `budgetStoreContract(name, makeStore)` from each store's test file. The clock is the test's:
 * the Redis script takes it as an argument here (in production it reads Redis' TIME). Every
 * answer is awaited, which takes both a store that answers at once and one that answers later.
 */
import { describe, expect, it } from 'vitest';
import {
  DECREASE_FACTOR,
  INCREASE_INTERVAL_MS,
  LEARN_START_RPS,
  LEASE_TTL_MS,
  MIN_RPS,
  PROBE_STEP_SHARE,
  budgetShapeOf,
  type BudgetShape,
  type LeaseReply,
  type PauseReply,
} from '../../src/upstream/budget-store.js';

export interface ManualClock {
  now: () => number;
  advance(ms: number): void;
}

/** Starts at the real time (Redis keeps the key's expiry in real time). */
export function makeClock(start = Date.now()): ManualClock {
  let current = start;
  return { now: () => current, advance: (ms) => void (current += ms) };
}

/** A bucket of one shape, on the test's clock; each call makes a new, empty one. */
export interface ContractStore {
  lease(want: number, constrained?: boolean): Promise<LeaseReply>;
  rateLimited(pauseMs: number): Promise<PauseReply>;
}

export type MakeContractStore = (shape: BudgetShape, clock: ManualClock) => ContractStore | Promise<ContractStore>;

const MAX_PAUSE_MS = 600_000;
/** A fixed budget of 10 req/s, burst 20. */
const FIXED = budgetShapeOf({ requestsPerSecond: 10, burst: 20 }, MAX_PAUSE_MS);
/** What it holds: the burst less LEASE_TTL_MS of the rate (17.5), which leases may still spend of tokens handed out before a window. */
const FIXED_HOLDS = 20 - (10 * LEASE_TTL_MS) / 1000;
const LEARNED = budgetShapeOf({ requestsPerSecond: 0, burst: 0 }, MAX_PAUSE_MS);

export function budgetStoreContract(name: string, make: MakeContractStore): void {
  describe(`${name}: the bucket`, () => {
    it('hands out its burst less a lease’s life of the rate at once after a quiet spell, then nothing, and says when the next token comes', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      expect((await store.lease(15)).granted).toBe(15);
      expect((await store.lease(15)).granted).toBe(2); // 17.5 in all: whole tokens only
      const empty = await store.lease(1);
      expect(empty).toMatchObject({ granted: 0, pausedMs: 0, waitMs: 50 }); // half a token left, at 10 req/s
      expect(empty.rateRps).toBeCloseTo(10);
    });

    it('refills at the rate, and never beyond what it holds however long it rested', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      expect((await store.lease(20)).granted).toBe(17);
      clock.advance(1_000);
      expect((await store.lease(100)).granted).toBe(10);
      clock.advance(3_600_000);
      expect((await store.lease(100)).granted).toBe(Math.floor(FIXED_HOLDS));
    });

    it('never hands out more than burst + rate × T over a window of T, however it is asked', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      let granted = 0;
      for (let step = 0; step < 200; step++) {
        granted += (await store.lease(1 + (step % 7))).granted;
        clock.advance(10 + (step % 3) * 5);
      }
      const windowS = (200 * 15) / 1000; // 200 steps of 15 ms on average
      expect(granted).toBeLessThanOrEqual(FIXED_HOLDS + 10 * windowS);
      expect(granted).toBeGreaterThanOrEqual(10 * windowS); // and it does hand out the rate
    });

    it('without a configured budget, starts at the conservative rate with one second of it as its burst (less a lease’s life)', async () => {
      const clock = makeClock();
      const store = await make(LEARNED, clock);
      const holds = LEARN_START_RPS * (1 - LEASE_TTL_MS / 1000); // 3.75
      const first = await store.lease(200);
      expect(first.granted).toBe(Math.floor(holds));
      expect(first.rateRps).toBeCloseTo(LEARN_START_RPS);
      clock.advance(1_000);
      expect((await store.lease(200)).granted).toBe(Math.floor(holds));
    });
  });

  describe(`${name}: learned from 429s`, () => {
    it('pauses for the Retry-After, then resumes empty at a reduced rate', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      for (let s = 0; s < 3; s++, clock.advance(1_000)) await store.lease(100); // 10 req/s in use
      const pause = await store.rateLimited(5_000);
      expect(pause.pausedMs).toBe(5_000);
      expect(pause.rateRps).toBeCloseTo(10 * DECREASE_FACTOR);
      clock.advance(4_999);
      expect(await store.lease(5)).toMatchObject({ granted: 0, pausedMs: 1, waitMs: 1 });
      clock.advance(1);
      expect((await store.lease(5)).granted).toBe(0); // resumes with an empty bucket: no burst after a pause
      clock.advance(1_000);
      const resumed = await store.lease(100);
      expect(resumed.granted).toBe(Math.floor(10 * DECREASE_FACTOR));
      expect(resumed.rateRps).toBeCloseTo(10 * DECREASE_FACTOR);
    });

    it('counts one decrease per pause: 429s during it only lengthen it', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      await store.lease(100);
      clock.advance(500);
      await store.lease(100);
      const first = await store.rateLimited(2_000);
      clock.advance(100);
      const echo = await store.rateLimited(10_000);
      expect(echo.rateRps).toBeCloseTo(first.rateRps);
      expect(echo.pausedMs).toBe(10_000);
      clock.advance(100);
      expect((await store.rateLimited(1_000)).pausedMs).toBe(9_900); // a shorter one does not cut it
    });

    it('lowers the rate from what was in use, not from a budget nobody used', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      for (let s = 0; s < 4; s++) {
        await store.lease(2); // 2 req/s of a 10 req/s budget
        clock.advance(1_000);
      }
      expect((await store.rateLimited(1_000)).rateRps).toBeCloseTo(2 * DECREASE_FACTOR);
    });

    it('never goes below its floor, however many pauses', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      let reply: PauseReply | undefined;
      for (let n = 0; n < 30; n++) {
        reply = await store.rateLimited(1_000);
        clock.advance(1_001);
      }
      expect(reply!.rateRps).toBeCloseTo(MIN_RPS);
    });

    it('cuts a pause to the cap (upstream.maxRetryAfterMs)', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      expect((await store.rateLimited(10 * MAX_PAUSE_MS)).pausedMs).toBe(MAX_PAUSE_MS);
    });

    it('climbs one step per interval while demand exceeds it, and only then', async () => {
      const clock = makeClock();
      const store = await make(LEARNED, clock);
      await store.lease(100);
      clock.advance(INCREASE_INTERVAL_MS);
      expect((await store.lease(100, false)).rateRps).toBeCloseTo(LEARN_START_RPS); // demand met: no climb
      clock.advance(INCREASE_INTERVAL_MS);
      expect((await store.lease(100, true)).rateRps).toBeCloseTo(LEARN_START_RPS + 1);
      clock.advance(INCREASE_INTERVAL_MS / 2);
      expect((await store.lease(100, true)).rateRps).toBeCloseTo(LEARN_START_RPS + 1); // once per interval
      clock.advance(INCREASE_INTERVAL_MS / 2);
      expect((await store.lease(100, true)).rateRps).toBeCloseTo(LEARN_START_RPS + 2);
    });

    it('never climbs past a configured budget', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      for (let n = 0; n < 5; n++, clock.advance(INCREASE_INTERVAL_MS)) expect((await store.lease(100, true)).rateRps).toBeCloseTo(10);
    });

    it('climbs fast until the first 429, then only probes: the next crossing of the limit is minutes away', async () => {
      const clock = makeClock();
      const store = await make(LEARNED, clock);
      let rate = (await store.lease(1_000)).rateRps;
      for (let n = 0; n < 15; n++) {
        clock.advance(INCREASE_INTERVAL_MS);
        rate = (await store.lease(1_000, true)).rateRps; // 6, 7, ... 20 req/s, all of it in use
      }
      expect(rate).toBeCloseTo(20);
      clock.advance(500);
      await store.lease(1_000, true);
      const pause = await store.rateLimited(1_000); // every token of the last second was handed out: 20 req/s in use
      expect(pause.rateRps).toBeCloseTo(20 * DECREASE_FACTOR); // 14
      clock.advance(1_000 + INCREASE_INTERVAL_MS);
      expect((await store.lease(1_000, true)).rateRps).toBeCloseTo(14 + 20 * PROBE_STEP_SHARE);
      for (let n = 0; n < 59; n++) {
        clock.advance(INCREASE_INTERVAL_MS);
        rate = (await store.lease(1_000, true)).rateRps;
      }
      expect(rate).toBeCloseTo(14 + 2); // a minute of probing: 10 % of the limit seen, still under it
    });
  });
}
