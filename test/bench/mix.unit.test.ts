/**
 * The logic of the bench's scenario helpers that decides what is measured: the capacity mix
 * (which requests, in which shares) and the dashboards' offload ceiling. No timing here.
 */
import { describe, expect, it } from 'vitest';
import { makeMixScript, makeMixSets, REALISTIC_MIX } from './scenario-capacity.js';
import { offloadCeiling } from './scenario-dashboards.js';
import type { TokenInfo } from './servers.js';

const tokens: TokenInfo[] = [
  { token: 'tmc_admin', user_id: 1, name: 'Ada Admin', is_admin: true, project_ids: [1, 2, 3, 4, 5, 6] },
  { token: 'tmc_two', user_id: 2, name: 'Two', is_admin: false, project_ids: [1, 2, 3] },
  { token: 'tmc_three', user_id: 3, name: 'Three', is_admin: false, project_ids: [2, 3, 4, 5, 6] },
  { token: 'tmc_none', user_id: 5, name: 'None', is_admin: false, project_ids: [] },
];

describe('makeMixSets', () => {
  const sets = makeMixSets(tokens, 500);

  it('uses only member tokens, each on projects it can see', () => {
    for (const r of [...sets.hits, ...sets.stale, ...sets.missBases]) {
      const owner = tokens.find((t) => t.token === r.token)!;
      expect(owner.is_admin).toBe(false);
      const project = Number(/\/projects\/(\d+)\//.exec(r.path)![1]);
      expect(owner.project_ids).toContain(project);
    }
  });

  it('makes every stale request a distinct question, so each is an entry of its own', () => {
    expect(sets.stale).toHaveLength(500);
    expect(new Set(sets.stale.map((r) => `${r.token} ${r.path}`)).size).toBe(500);
    expect(sets.stale.every((r) => r.path.includes('/milestones?'))).toBe(true);
  });

  it('keeps hits on runs lists and gives miss bases a query to extend', () => {
    expect(sets.hits.every((r) => r.path.includes('/runs?'))).toBe(true);
    expect(new Set(sets.hits.map((r) => `${r.token} ${r.path}`)).size).toBe(sets.hits.length);
    expect(sets.missBases.every((r) => r.path.includes('?') && !r.path.includes('created_before'))).toBe(true);
  });

  it('refuses a token list without a member who sees a project', () => {
    expect(() => makeMixSets([tokens[0]!, tokens[3]!], 10)).toThrow(/no member token/);
  });
});

describe('makeMixScript', () => {
  const sets = makeMixSets(tokens, 20);
  const script = makeMixScript(sets, REALISTIC_MIX, '2033-01-02');

  it('splits requests at the shares of the mix', () => {
    expect(Number(/local hitBelow = ([\d.]+)/.exec(script)![1])).toBeCloseTo(0.9, 10);
    expect(Number(/local staleBelow = ([\d.]+)/.exec(script)![1])).toBeCloseTo(0.99, 10);
    const scaled = makeMixScript(sets, { hit: 9, stale: 0.9, miss: 0.1 }, '2033-01-02');
    expect(Number(/local hitBelow = ([\d.]+)/.exec(scaled)![1])).toBeCloseTo(0.9, 10);
  });

  it('lists every request of every set with its bearer token', () => {
    for (const r of [...sets.hits, ...sets.stale, ...sets.missBases]) expect(script).toContain(`{${JSON.stringify(r.path)}, "Bearer ${r.token}"}`);
  });

  it('spells misses with the given day, so two servers given two days never share one', () => {
    expect(script).toContain('&created_before=2033-01-02T%02d:%02d:%02d.%03dZ');
    expect(() => makeMixScript(sets, REALISTIC_MIX, '2033-1-2')).toThrow(/missDay/);
  });

  it('refuses an empty set or no share at all', () => {
    expect(() => makeMixScript({ ...sets, stale: [] }, REALISTIC_MIX, '2033-01-02')).toThrow();
    expect(() => makeMixScript(sets, { hit: 0, stale: 0, miss: 0 }, '2033-01-02')).toThrow();
  });
});

describe('offloadCeiling (one entry per user and panel)', () => {
  it.each([
    // ttl, poll: polls per upstream request = ⌊ttl ÷ poll⌋ + 1
    [30_000, 10_000, 0.75], // fill, 3 fresh polls (ages < 30 s), the 4th serves stale and refreshes
    [30_000, 7_000, 0.8], //   ages 7, 14, 21, 28 fresh; 35 refreshes
    [3_000, 1_000, 0.75], //   the ×0.1 compression keeps the ratio
    [30_000, 40_000, 0], //    polled less often than the ttl: every poll goes upstream
  ])('ttl %i ms, poll every %i ms: at most %f', (ttl, poll, expected) => {
    expect(offloadCeiling(ttl, poll)).toBeCloseTo(expected, 10);
  });
});
