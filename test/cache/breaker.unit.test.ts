import { describe, expect, it } from 'vitest';
import { CircuitBreaker } from '../../src/cache/redis/breaker.js';

describe('CircuitBreaker', () => {
  const make = () => {
    const clock = { t: 0 };
    return { clock, breaker: new CircuitBreaker({ threshold: 3, cooldownMs: 1_000, now: () => clock.t }) };
  };

  it('opens after threshold consecutive failures, and a success in between resets the count', () => {
    const { breaker } = make();
    breaker.failed('timeout');
    breaker.failed('timeout');
    breaker.succeeded();
    breaker.failed('timeout');
    breaker.failed('timeout');
    expect(breaker.allows()).toBe(true);
    breaker.failed('Command timed out');
    expect(breaker.allows()).toBe(false);
    expect(breaker.skipped).toBe(1);
    expect(breaker.openReason()).toBe('did not answer 3 commands in a row (timed out): skipped, trying it again in 1 s');
    expect(breaker.msUntilProbe()).toBe(1_000);
  });

  it('lets one probe through after the cool-down: its success closes, its failure reopens', () => {
    const { clock, breaker } = make();
    for (let i = 0; i < 3; i++) breaker.failed('timeout');
    clock.t = 1_000;
    expect(breaker.allows()).toBe(true); // the probe
    expect(breaker.allows()).toBe(false); // one at a time
    breaker.failed('timeout');
    expect(breaker.allows()).toBe(false);
    clock.t = 2_000;
    expect(breaker.allows()).toBe(true);
    breaker.succeeded();
    expect(breaker.openReason()).toBeUndefined();
    expect(breaker.allows()).toBe(true);
  });
});
