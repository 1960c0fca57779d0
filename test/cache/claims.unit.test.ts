import { describe, expect, it } from 'vitest';
import { boundClaims, MAX_CLOCK_SKEW_MS } from '../../src/cache/redis/claims.js';
import type { StoredMeta } from '../../src/cache/entry.js';
import { claimLimitsOf } from '../../src/cache/policy.js';
import { DEFAULT_CONFIG } from '../../src/config/schema.js';

const NOW = 1_700_000_000_000;
const limitsFor = claimLimitsOf(DEFAULT_CONFIG.cache.freshness, DEFAULT_CONFIG.cache.staleIfErrorMs);
const meta = (times: Partial<StoredMeta>, tags: string[] = []): StoredMeta => ({
  status: 200,
  headers: {},
  etag: '"e"',
  storedAt: NOW,
  freshUntil: NOW + 10_000,
  staleWhileRevalidateUntil: NOW + 20_000,
  staleIfErrorUntil: NOW + 30_000,
  tags,
  ...times,
});

describe('what an entry read back may claim', () => {
  it('limits each operation by the rules that can apply to it: a list by its own rule, a single settled resource by settled', () => {
    expect(limitsFor('u:1|v1|listProjects||page=2')).toMatchObject({ maxTtlMs: 30_000, maxStaleWhileRevalidateMs: 30_000 });
    expect(limitsFor('u:1|v1|getRun|7|')).toMatchObject({ maxTtlMs: 3_600_000, maxStaleWhileRevalidateMs: 3_600_000 });
    expect(limitsFor('u:1|v1|nonsense||')).toMatchObject({ maxTtlMs: 3_600_000 });
  });

  it('bounds freshness from storedAt and the stale windows from the bounded freshness', () => {
    const claimed = meta({ freshUntil: NOW + 30_000_000_000, staleWhileRevalidateUntil: NOW + 30_000_000_000, staleIfErrorUntil: NOW + 30_000_000_000 });
    const bounded = boundClaims(claimed, limitsFor('u:1|v1|listProjects||'), NOW) as StoredMeta;
    expect(bounded.freshUntil).toBe(NOW + 30_000);
    expect(bounded.staleWhileRevalidateUntil).toBe(NOW + 60_000);
    expect(bounded.staleIfErrorUntil).toBe(NOW + 30_000 + DEFAULT_CONFIG.cache.staleIfErrorMs);
  });

  it('adds the tags its key implies, and keeps an entry within its limits as it is', () => {
    const within = meta({}, ['project:5']);
    expect(boundClaims(within, limitsFor('u:1|v1|listRuns|5|'), NOW)).toBe(within);
    expect((boundClaims(meta({}), limitsFor('u:1|v1|listRuns|5|'), NOW) as StoredMeta).tags).toEqual(['project:5']);
    expect((boundClaims(meta({}), limitsFor('admin|v1|listUsers||'), NOW) as StoredMeta).tags).toEqual(['user']);
  });

  it('refuses an entry stored in the future beyond the clock skew', () => {
    expect(boundClaims(meta({ storedAt: NOW + MAX_CLOCK_SKEW_MS + 1, freshUntil: NOW + MAX_CLOCK_SKEW_MS + 2 }), limitsFor('u:1|v1|listProjects||'), NOW)).toBe(
      'stored in the future',
    );
  });
});
