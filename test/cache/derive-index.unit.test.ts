/**
 * The index of derived answers, kept in step with the memory tier it watches: a list page is
 * found by the resources it holds and by its list while memory holds it, and not after it left
 * (evicted, deleted, invalidated, replaced by another answer).
 */
import { describe, expect, it } from 'vitest';
import { getOperation } from '../../src/api/catalogue.js';
import { normalizeRequest } from '../../src/api/normalize.js';
import { DerivationIndex } from '../../src/cache/derive/index.js';
import { makeKey, makeKeySuffix, type Scope } from '../../src/cache/key.js';
import { ENTRY_OVERHEAD_BYTES, MemoryTier } from '../../src/cache/memory-tier.js';
import { makeEntry } from './fixtures.js';
import { makeClock } from './tier-contract.js';

const runs = getOperation('listRuns');

/** The key of `/projects/5/runs?<query>` in `scope`. */
function runsKey(scope: Scope, query: string): string {
  return makeKey(scope, makeKeySuffix(normalizeRequest(runs, { project_id: 5 }, query)));
}

/** A page of runs holding `ids`. */
function page(now: number, ids: readonly number[], extra = '') {
  const items = ids.map((id) => `{"id":${id},"project_id":5${extra}}`).join(',');
  const body = `{"page":1,"prev_page":null,"next_page":null,"last_page":1,"per_page":100,"total":${ids.length},"result":[${items}],"expands":{}}`;
  return makeEntry(now, { body: Buffer.from(body), tags: ['project:5'] });
}

/** The index takes what was stored in a tick just after it. */
const nextTick = () => new Promise<void>((resolve) => setImmediate(resolve));

function setUp(maxBytes = 1_000_000) {
  const clock = makeClock();
  const index = new DerivationIndex();
  const tier = new MemoryTier({ now: clock.now, maxBytes, maxEntryBytes: maxBytes, observer: index });
  return { clock, index, tier };
}

describe('DerivationIndex', () => {
  it('finds a page by a resource it holds and by its list, in its own scope only', async () => {
    const { clock, index, tier } = setUp();
    const key = runsKey('u:1', 'per_page=25&is_closed=0');
    tier.set(key, page(clock.now(), [7, 8]));
    await nextTick();
    expect(index.pagesHolding('u:1', 'run', 7).map((p) => p.key)).toEqual([key]);
    expect(index.pagesHolding('u:1', 'run', 9)).toEqual([]);
    expect(index.pagesHolding('u:2', 'run', 7)).toEqual([]);
    const sameList = normalizeRequest(runs, { project_id: 5 }, 'is_closed=0&page=3&per_page=15&expands=users');
    expect(index.pagesOf('u:1', sameList).map((p) => p.key)).toEqual([key]);
    expect(index.pagesOf('u:1', normalizeRequest(runs, { project_id: 5 }, 'is_closed=1'))).toEqual([]);
  });

  it('forgets a page deleted, invalidated or evicted, and the resources of a page replaced by another answer', async () => {
    const { clock, index, tier } = setUp(3 * (ENTRY_OVERHEAD_BYTES + 200));
    const a = runsKey('u:1', 'per_page=15');
    const b = runsKey('u:1', 'per_page=25');
    // Dropped before it was indexed: never indexed.
    tier.set(a, page(clock.now(), [1]));
    tier.delete(a);
    await nextTick();
    expect(index.size).toBe(0);
    tier.set(b, page(clock.now(), [2]));
    await nextTick();
    expect(index.size).toBe(1);
    tier.invalidateTag('project:5');
    expect(index.pagesHolding('u:1', 'run', 2)).toEqual([]);
    tier.set(a, page(clock.now(), [3]));
    await nextTick();
    tier.set(a, page(clock.now(), [4]));
    await nextTick();
    expect(index.pagesHolding('u:1', 'run', 3)).toEqual([]);
    expect(index.pagesHolding('u:1', 'run', 4).map((p) => p.key)).toEqual([a]);
    // Filling memory past its bound evicts the oldest page: it leaves the index with it.
    for (const size of [50, 100]) tier.set(runsKey('u:1', `per_page=${size}&order=asc`), page(clock.now(), [10 + size], ',"name":"' + 'x'.repeat(150) + '"'));
    tier.set(runsKey('u:1', 'order=asc&per_page=15'), page(clock.now(), [99], ',"name":"' + 'x'.repeat(150) + '"'));
    await nextTick();
    expect(tier.get(a)).toBeUndefined();
    expect(index.pagesHolding('u:1', 'run', 4)).toEqual([]);
    expect(index.size).toBe(tier.stats().entries);
  });

  it('keeps a page whose gzip variant is swapped in, pointing at the entry memory holds', async () => {
    const { clock, index, tier } = setUp();
    const key = runsKey('p:5', '');
    const entry = page(clock.now(), [5]);
    tier.set(key, entry);
    await nextTick();
    const withGzip = { ...entry, gzip: Buffer.alloc(10) };
    expect(tier.replace(key, entry, withGzip)).toBe(true);
    expect(index.pagesHolding('p:5', 'run', 5).map((p) => p.entry)).toEqual([withGzip]);
  });

  it('indexes nothing but a list envelope, under a key it can read back', async () => {
    const { clock, index, tier } = setUp();
    tier.set(runsKey('u:1', ''), makeEntry(clock.now(), { body: Buffer.from('{"result":{"id":1}}') }));
    tier.set(runsKey('u:1', 'per_page=15') + '|origin=https://dash.example', page(clock.now(), [1]));
    tier.set(makeKey('u:1', makeKeySuffix(normalizeRequest(getOperation('getRun'), { run_id: 1 }, ''))), page(clock.now(), [1]));
    await nextTick();
    expect(index.size).toBe(0);
  });
});
