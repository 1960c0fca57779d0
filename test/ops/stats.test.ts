/**
 * RequestStats' budget figures against a fake clock: what the budget's lack of tokens did, per
 * second over the last minute, never averaged over time the process did not live.
 */
import { describe, expect, it } from 'vitest';
import { RequestStats } from '../../src/ops/stats.js';

describe('request stats: the budget over the last minute', () => {
  it('counts refusals, stale answers and skips per second over the time they cover', () => {
    let t = 1_000_000;
    const stats = new RequestStats(() => t);
    expect(stats.budgetPerSecond()).toEqual({ refused: 0, stale: 0, skipped: 0 });
    for (let n = 0; n < 20; n++) stats.budgetDeferred('refused', t);
    stats.budgetDeferred('stale', t);
    stats.budgetSkipped(t);
    t += 10_000; // 10 s since the bucket began
    expect(stats.budgetPerSecond()).toEqual({ refused: 2, stale: 0.1, skipped: 0.1 });
  });

  it('forgets what is older than a minute', () => {
    let t = 1_000_000;
    const stats = new RequestStats(() => t);
    for (let n = 0; n < 60; n++) stats.budgetDeferred('refused', t);
    t += 30_000;
    stats.budgetDeferred('stale', t);
    expect(stats.budgetPerSecond().refused).toBe(2); // 60 over the 30 s covered
    t += 60_000;
    expect(stats.budgetPerSecond()).toEqual({ refused: 0, stale: 0, skipped: 0 });
  });
});
