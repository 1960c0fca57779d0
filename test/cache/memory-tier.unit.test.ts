import { describe, expect, it } from 'vitest';
import { expiresAt } from '../../src/cache/entry.js';
import { ENTRY_OVERHEAD_BYTES, MemoryTier } from '../../src/cache/memory-tier.js';
import { makeEntry } from './fixtures.js';
import { makeClock, tierContract } from './tier-contract.js';

tierContract('MemoryTier', async ({ clock, maxEntryBytes }) => new MemoryTier({ now: clock.now, maxEntryBytes }));

describe('MemoryTier', () => {
  it('swaps in a richer copy of an entry only while the key still holds it and the copy fits', () => {
    const clock = makeClock();
    const tier = new MemoryTier({ now: clock.now, maxEntryBytes: 4_000 + ENTRY_OVERHEAD_BYTES });
    const entry = makeEntry(clock.now(), { body: Buffer.alloc(3_000) });
    tier.set('k', entry);
    const withVariant = { ...entry, gzip: Buffer.alloc(500) };
    expect(tier.replace('k', entry, withVariant)).toBe(true);
    expect(tier.get('k')).toBe(withVariant);
    // Not the entry it holds any more: left alone.
    expect(tier.replace('k', entry, { ...entry, gzip: Buffer.alloc(10) })).toBe(false);
    expect(tier.get('k')).toBe(withVariant);
    // Too large with the variant: the entry it has is kept, not dropped.
    expect(tier.replace('k', withVariant, { ...entry, gzip: Buffer.alloc(2_000) })).toBe(false);
    expect(tier.get('k')).toBe(withVariant);
  });

  it('answers get synchronously with the very object stored', () => {
    const clock = makeClock();
    const tier = new MemoryTier({ now: clock.now });
    const entry = makeEntry(clock.now());
    expect(tier.set('k', entry)).toBe(true);
    expect(tier.get('k')).toBe(entry);
    expect(tier.get('other')).toBeUndefined();
  });

  it('stops answering get once the entry is past expiresAt', () => {
    const clock = makeClock();
    const tier = new MemoryTier({ now: clock.now });
    const entry = makeEntry(clock.now());
    tier.set('k', entry);
    clock.advance(expiresAt(entry) - clock.now() + 1);
    expect(tier.get('k')).toBeUndefined();
    expect(tier.stats().entries).toBe(0);
  });

  it('counts body bytes plus a fixed overhead per entry', () => {
    const clock = makeClock();
    const tier = new MemoryTier({ now: clock.now });
    tier.set('a', makeEntry(clock.now(), { body: Buffer.alloc(1000) }));
    tier.set('b', makeEntry(clock.now(), { body: Buffer.alloc(500) }));
    expect(tier.stats()).toEqual({ entries: 2, bytes: 1500 + 2 * ENTRY_OVERHEAD_BYTES });
  });

  it('evicts the least recently used entries to stay within maxBytes', () => {
    const clock = makeClock();
    const entryBytes = 10_000 + ENTRY_OVERHEAD_BYTES;
    const tier = new MemoryTier({ now: clock.now, maxBytes: entryBytes * 3 });
    for (const key of ['a', 'b', 'c']) tier.set(key, makeEntry(clock.now(), { body: Buffer.alloc(10_000) }));
    tier.get('a'); // a is now more recent than b (get counts as a use)
    tier.set('d', makeEntry(clock.now(), { body: Buffer.alloc(10_000) }));
    expect(tier.get('b')).toBeUndefined();
    expect(['a', 'c', 'd'].map((k) => tier.get(k) !== undefined)).toEqual([true, true, true]);
    expect(tier.stats().bytes).toBeLessThanOrEqual(entryBytes * 3);
  });

  it('peeks without counting a use: the entry peeked at is still the first evicted', () => {
    const clock = makeClock();
    const entryBytes = 10_000 + ENTRY_OVERHEAD_BYTES;
    const tier = new MemoryTier({ now: clock.now, maxBytes: entryBytes * 2 });
    const a = makeEntry(clock.now(), { body: Buffer.alloc(10_000) });
    tier.set('a', a);
    tier.set('b', makeEntry(clock.now(), { body: Buffer.alloc(10_000) }));
    expect(tier.peek('a')).toBe(a); // looked at, not used
    tier.set('c', makeEntry(clock.now(), { body: Buffer.alloc(10_000) }));
    expect(tier.peek('a')).toBeUndefined();
    expect(tier.peek('b')).toBeDefined();
  });

  it('forgets the tags of evicted and replaced entries, so invalidation drops only live ones', () => {
    const clock = makeClock();
    const entryBytes = 10_000 + ENTRY_OVERHEAD_BYTES;
    const tier = new MemoryTier({ now: clock.now, maxBytes: entryBytes * 2 });
    tier.set('a', makeEntry(clock.now(), { body: Buffer.alloc(10_000), tags: ['project:5'] }));
    tier.set('b', makeEntry(clock.now(), { body: Buffer.alloc(10_000), tags: ['project:6'] }));
    tier.set('c', makeEntry(clock.now(), { body: Buffer.alloc(10_000), tags: ['project:6'] })); // evicts a
    expect(tier.invalidateTag('project:5')).toBe(0);
    tier.set('b', makeEntry(clock.now(), { tags: ['project:7'] })); // replaces b's tags
    expect(tier.invalidateTag('project:6')).toBe(1);
    expect(tier.get('b')).toBeDefined();
    expect(tier.invalidateTag('project:7')).toBe(1);
  });

  it('replacing an entry with an oversized one drops the old one', () => {
    const clock = makeClock();
    const tier = new MemoryTier({ now: clock.now, maxEntryBytes: 4096 });
    tier.set('k', makeEntry(clock.now()));
    expect(tier.set('k', makeEntry(clock.now(), { body: Buffer.alloc(4096) }))).toBe(false);
    expect(tier.get('k')).toBeUndefined();
  });

  it('rejects a maxBytes too small to hold anything', () => {
    expect(() => new MemoryTier({ maxBytes: 100 })).toThrow(/maxBytes/);
  });
});
