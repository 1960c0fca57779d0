/**
 * The contract every CacheTier keeps (after undici's `cacheStoreTests(Store)`): run it with
 * `tierContract(name, makeTier)` from each tier's test file. Tiers may answer synchronously
 * (memory) or with a promise (Redis): every answer is awaited, which takes both.
 */
import { gunzipSync } from 'node:zlib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { expiresAt, gzipEtagOf, type CacheEntry } from '../../src/cache/entry.js';
import type { CacheTier } from '../../src/cache/tier.js';
import { makeEntry, makeListPageBody } from './fixtures.js';

/** A clock the test moves by hand; starts at the real time so Redis's own TTLs stay sane. */
export interface ManualClock {
  now: () => number;
  advance(ms: number): void;
}

export function makeClock(start = Date.now()): ManualClock {
  let current = start;
  return { now: () => current, advance: (ms) => void (current += ms) };
}

export interface ContractContext {
  clock: ManualClock;
  /** Entries whose body (plus any fixed overhead) exceeds this must be skipped. */
  maxEntryBytes: number;
}

export interface ContractHooks {
  /**
   * Makes the tier fail for `key` in its own way (e.g. garbage where a value should be). Left
   * out for tiers that cannot fail (the memory tier has no I/O).
   */
  breakKey?: (tier: CacheTier, key: string) => Promise<void>;
}

const CONTRACT_MAX_ENTRY_BYTES = 256 * 1024;

export function tierContract(name: string, makeTier: (context: ContractContext) => Promise<CacheTier>, hooks: ContractHooks = {}): void {
  describe(`${name} keeps the tier contract`, () => {
    let clock: ManualClock;
    let tier: CacheTier;

    beforeEach(async () => {
      clock = makeClock();
      tier = await makeTier({ clock, maxEntryBytes: CONTRACT_MAX_ENTRY_BYTES });
    });
    afterEach(async () => {
      await tier.close();
    });

    /**
     * Every stored field equal. A tier may add the derived ones (the gzip variant, its ETag, the
     * body length), and then they must be right: the variant decodes to the body.
     */
    const expectSameEntry = (actual: CacheEntry | undefined, expected: CacheEntry): void => {
      expect(actual).toBeDefined();
      const { body, gzip, gzipEtag, bodyLength, ...stored } = actual!;
      expect(body.equals(expected.body)).toBe(true);
      const { body: _b, gzip: _g, gzipEtag: _e, bodyLength: _l, ...expectedStored } = expected;
      expect(stored).toEqual(expectedStored);
      if (gzip !== undefined) {
        expect(gunzipSync(gzip).equals(expected.body)).toBe(true);
        expect(gzipEtag).toBe(gzipEtagOf(expected.etag));
      }
      if (bodyLength !== undefined) expect(bodyLength).toBe(expected.body.length);
    };

    it('returns what was stored, every field equal, for a small and an 90 KB body', async () => {
      const small = makeEntry(clock.now());
      const large = makeEntry(clock.now(), { body: makeListPageBody(100), tags: ['project:5', 'run:*', 'ü'] });
      await tier.set('small', small);
      await tier.set('large', large);
      expectSameEntry(await tier.get('small'), small);
      expectSameEntry(await tier.get('large'), large);
    });

    it('answers undefined for a key never stored', async () => {
      expect(await tier.get('never-stored')).toBeUndefined();
      expect(await tier.peek('never-stored')).toBeUndefined();
    });

    it('peeks at what get would answer, expiry included', async () => {
      const entry = makeEntry(clock.now());
      await tier.set('k', entry);
      expectSameEntry(await tier.peek('k'), entry);
      expectSameEntry(await tier.get('k'), entry);
      clock.advance(expiresAt(entry) - clock.now() + 1);
      expect(await tier.peek('k')).toBeUndefined();
      expect(await tier.get('k')).toBeUndefined();
    });

    it('replaces an entry stored again under the same key', async () => {
      await tier.set('k', makeEntry(clock.now(), { body: Buffer.from('first') }));
      const second = makeEntry(clock.now(), { body: Buffer.from('second') });
      await tier.set('k', second);
      expectSameEntry(await tier.get('k'), second);
    });

    it('keeps an entry until expiresAt and drops it after', async () => {
      const entry = makeEntry(clock.now());
      await tier.set('k', entry);
      clock.advance(expiresAt(entry) - clock.now() - 1);
      expectSameEntry(await tier.get('k'), entry);
      clock.advance(2);
      expect(await tier.get('k')).toBeUndefined();
    });

    it('does not store an entry that has already expired', async () => {
      const now = clock.now();
      await tier.set('k', makeEntry(now, { freshUntil: now - 3, staleWhileRevalidateUntil: now - 2, staleIfErrorUntil: now - 1 }));
      expect(await tier.get('k')).toBeUndefined();
    });

    it('deletes a key', async () => {
      await tier.set('k', makeEntry(clock.now()));
      await tier.delete('k');
      expect(await tier.get('k')).toBeUndefined();
      expect(await tier.delete('k')).toBeFalsy(); // nothing left to delete: no error either
    });

    it('drops exactly the entries carrying an invalidated tag', async () => {
      await tier.set('a', makeEntry(clock.now(), { tags: ['project:5'] }));
      await tier.set('b', makeEntry(clock.now(), { tags: ['project:5', 'run:1'] }));
      await tier.set('c', makeEntry(clock.now(), { tags: ['project:6'] }));
      expect(await tier.invalidateTag('project:5')).toBe(2);
      expect(await tier.get('a')).toBeUndefined();
      expect(await tier.get('b')).toBeUndefined();
      expect(await tier.get('c')).toBeDefined();
      expect(await tier.invalidateTag('project:5')).toBe(0);
      expect(await tier.invalidateTag('never-used')).toBe(0);
    });

    it('drops a replaced entry through the tags of its new version', async () => {
      // Old tags may over-invalidate (Redis keeps memberships until the tag set expires), which
      // costs a miss; the new tags must never under-invalidate.
      await tier.set('a', makeEntry(clock.now(), { tags: ['project:5'] }));
      await tier.set('a', makeEntry(clock.now(), { tags: ['project:6'] }));
      expect(await tier.invalidateTag('project:6')).toBe(1);
      expect(await tier.get('a')).toBeUndefined();
    });

    it('silently skips an entry larger than allowed', async () => {
      const oversized = makeEntry(clock.now(), { body: Buffer.alloc(CONTRACT_MAX_ENTRY_BYTES + 1, 'x') });
      expect(await tier.set('big', oversized)).not.toBe(true);
      expect(await tier.get('big')).toBeUndefined();
    });

    it('keeps 200 concurrent writes and reads apart', async () => {
      const keys = Array.from({ length: 200 }, (_, i) => `key-${i}`);
      await Promise.all(keys.map((key) => tier.set(key, makeEntry(clock.now(), { body: Buffer.from(key) }))));
      const bodies = await Promise.all(keys.map(async (key) => (await tier.get(key))?.body.toString()));
      expect(bodies).toEqual(keys);
    });

    it('forgets everything on clear, if it is a tier that offers clear (a private one)', async () => {
      if (tier.clear === undefined) return;
      await tier.set('a', makeEntry(clock.now(), { tags: ['project:5'] }));
      await tier.set('b', makeEntry(clock.now()));
      await tier.clear();
      expect(await tier.get('a')).toBeUndefined();
      expect(await tier.get('b')).toBeUndefined();
      expect(await tier.invalidateTag('project:5')).toBe(0);
    });

    const { breakKey } = hooks;
    if (breakKey) {
      it('answers a miss, not an error, when it fails for a key', async () => {
        await tier.set('k', makeEntry(clock.now()));
        await breakKey(tier, 'k');
        expect(await tier.get('k')).toBeUndefined();
        expect(await tier.peek('k')).toBeUndefined();
        expect(await tier.set('k', makeEntry(clock.now()))).not.toBe(true);
      });
    }
  });
}
