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
  FORGET_CEILING_MS,
  GROWTH_FACTOR,
  INCREASE_INTERVAL_MS,
  LEARN_BURST_TOKENS,
  LEARN_START_RPS,
  LEASE_TTL_MS,
  MAX_GROWTH_STEP_RPS,
  PROBE_STEP_SHARE,
  REGROW_MS,
  REGROW_SHARE,
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

/**
 * One step on the test's clock: `lease` asks once (constrained: demand exceeded the bucket);
 * `use` asks every 100 ms for `ms`, unconstrained (the rate in use, without growth); `idle`
 * only moves the clock; `429` reports one.
 */
type Step = ['lease', number, boolean?] | ['use', number] | ['idle', number] | ['429', number];

interface Rule {
  readonly rule: string;
  readonly steps: readonly Step[];
  /** What the last step answers. */
  readonly then: { readonly granted?: number; readonly rateRps?: number; readonly pausedMs?: number };
}

/** In use at the start rate for two whole windows, then a 429: the ceiling is LEARN_START_RPS. */
const PUNISHED: readonly Step[] = [
  ['use', 2_000],
  ['429', 1_000],
];
const CEILING = LEARN_START_RPS;
const TARGET = CEILING * REGROW_SHARE;
const FROM = CEILING * DECREASE_FACTOR;
/** The regrowth curve at `t` ms from the pause's end. */
const curveAt = (t: number): number => TARGET - (TARGET - FROM) * (1 - t / REGROW_MS) ** 3;
/** Before any 429: one interval of growth. */
const grow = (rps: number): number => rps + Math.min(rps * (GROWTH_FACTOR - 1), MAX_GROWTH_STEP_RPS);

/** The learned budget's rules (budget-store.ts), one row each; both stores must give the same answers. */
const LEARNED_RULES: readonly Rule[] = [
  {
    rule: 'a cold start hands out LEARN_BURST_TOKENS at once, at LEARN_START_RPS',
    steps: [['lease', 100]],
    then: { granted: LEARN_BURST_TOKENS, rateRps: LEARN_START_RPS },
  },
  {
    rule: 'a cold start holds LEARN_BURST_TOKENS again after a quiet spell, not more',
    steps: [
      ['lease', 100],
      ['idle', 10_000],
      ['lease', 100],
    ],
    then: { granted: LEARN_BURST_TOKENS },
  },
  {
    rule: 'before any 429, an interval of unmet demand multiplies the rate by GROWTH_FACTOR',
    steps: [
      ['lease', 100],
      ['idle', INCREASE_INTERVAL_MS],
      ['lease', 100, true],
    ],
    then: { rateRps: grow(LEARN_START_RPS) },
  },
  {
    rule: 'before any 429, growth is at most MAX_GROWTH_STEP_RPS an interval',
    steps: [
      ['lease', 100],
      ...[1, 2, 3].flatMap((): Step[] => [
        ['idle', INCREASE_INTERVAL_MS],
        ['lease', 100, true],
      ]),
    ],
    then: { rateRps: grow(grow(grow(LEARN_START_RPS))) }, // 15, 18, 21
  },
  {
    rule: 'the rate grows at most once per interval',
    steps: [
      ['lease', 100],
      ['idle', INCREASE_INTERVAL_MS],
      ['lease', 100, true],
      ['idle', INCREASE_INTERVAL_MS / 2],
      ['lease', 100, true],
    ],
    then: { rateRps: grow(LEARN_START_RPS) },
  },
  {
    rule: 'the rate does not grow while demand is met',
    steps: [
      ['lease', 100],
      ['idle', INCREASE_INTERVAL_MS],
      ['lease', 100, false],
    ],
    then: { rateRps: LEARN_START_RPS },
  },
  { rule: 'a 429 while the rate is in use pauses, and cuts the rate to DECREASE_FACTOR of it', steps: PUNISHED, then: { pausedMs: 1_000, rateRps: FROM } },
  {
    rule: 'a 429 in the first burst (no whole window in use yet) pauses, and cuts nothing',
    steps: [
      ['lease', 100],
      ['429', 1_000],
    ],
    then: { pausedMs: 1_000, rateRps: LEARN_START_RPS },
  },
  {
    rule: 'a 429 at low use (a lockout in progress, someone else’s load) pauses, and cuts nothing',
    steps: [
      ['lease', 1],
      ['idle', 1_000],
      ['lease', 1],
      ['idle', 500],
      ['429', 30_000],
    ],
    then: { pausedMs: 30_000, rateRps: LEARN_START_RPS },
  },
  {
    rule: 'after a 429 that cut nothing, the rate is the one before it at once',
    steps: [
      ['lease', 1],
      ['idle', 1_000],
      ['lease', 1],
      ['429', 30_000],
      ['idle', 31_000],
      ['lease', 100, true],
    ],
    then: { rateRps: grow(LEARN_START_RPS) },
  },
  {
    rule: 'regrowth after a 429 follows a concave cubic toward REGROW_SHARE of the ceiling: most of it early',
    steps: [...PUNISHED, ['idle', 1_000 + REGROW_MS / 4], ['lease', 100, true]],
    then: { rateRps: curveAt(REGROW_MS / 4) },
  },
  {
    rule: 'regrowth stays under its target until REGROW_MS',
    steps: [...PUNISHED, ['idle', 1_000 + REGROW_MS / 2], ['lease', 100, true]],
    then: { rateRps: curveAt(REGROW_MS / 2) },
  },
  {
    rule: 'past REGROW_MS each interval of unmet demand probes by PROBE_STEP_SHARE of the ceiling',
    steps: [...PUNISHED, ['idle', 1_000 + REGROW_MS], ['lease', 100, true], ['idle', INCREASE_INTERVAL_MS], ['lease', 100, true]],
    then: { rateRps: TARGET + 2 * CEILING * PROBE_STEP_SHARE },
  },
  {
    rule: 'a ceiling is forgotten FORGET_CEILING_MS after its 429: growth is as at a start again, from the start rate',
    steps: [...PUNISHED, ['idle', 1_000 + FORGET_CEILING_MS], ['lease', 100, true]],
    then: { rateRps: grow(LEARN_START_RPS) },
  },
  {
    rule: 'a ceiling just under FORGET_CEILING_MS old still holds: probing, not growing',
    steps: [...PUNISHED, ['idle', FORGET_CEILING_MS - 1_000], ['lease', 100, true]],
    then: { rateRps: TARGET + CEILING * PROBE_STEP_SHARE },
  },
];

async function run(store: ContractStore, clock: ManualClock, steps: readonly Step[]): Promise<Partial<LeaseReply & PauseReply>> {
  let last: Partial<LeaseReply & PauseReply> = {};
  for (const step of steps) {
    if (step[0] === 'idle') clock.advance(step[1]);
    else if (step[0] === '429') last = await store.rateLimited(step[1]);
    else if (step[0] === 'lease') last = await store.lease(step[1], step[2] ?? false);
    else for (let t = 0; t < step[1]; t += 100, clock.advance(100)) last = await store.lease(1_000, false);
  }
  return last;
}

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
  });

  describe(`${name}: learned from 429s`, () => {
    it('pauses for the Retry-After, then resumes empty at a reduced rate when it was using its rate', async () => {
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

    it('cuts a pause to the cap (upstream.maxRetryAfterMs)', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      expect((await store.rateLimited(10 * MAX_PAUSE_MS)).pausedMs).toBe(MAX_PAUSE_MS);
    });

    it('never climbs past a configured budget', async () => {
      const clock = makeClock();
      const store = await make(FIXED, clock);
      for (let n = 0; n < 5; n++, clock.advance(INCREASE_INTERVAL_MS)) expect((await store.lease(100, true)).rateRps).toBeCloseTo(10);
    });
  });

  describe(`${name}: the learned budget's rules`, () => {
    it.each(LEARNED_RULES)('$rule', async ({ steps, then }) => {
      const clock = makeClock();
      const last = await run(await make(LEARNED, clock), clock, steps);
      if (then.granted !== undefined) expect(last.granted).toBe(then.granted);
      if (then.pausedMs !== undefined) expect(last.pausedMs).toBe(then.pausedMs);
      if (then.rateRps !== undefined) expect(last.rateRps).toBeCloseTo(then.rateRps, 4);
    });
  });
}
