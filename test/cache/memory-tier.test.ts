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
    tier.store('k', entry);
    const withVariant = { ...entry, gzip: Buffer.alloc(500) };
    expect(tier.replace('k', entry, withVariant)).toBe(true);
    expect(tier.peek('k')).toBe(withVariant);
    // Not the entry it holds any more: left alone.
    expect(tier.replace('k', entry, { ...entry, gzip: Buffer.alloc(10) })).toBe(false);
    expect(tier.peek('k')).toBe(withVariant);
    // Too large with the variant: the entry it has is kept, not dropped.
    expect(tier.replace('k', withVariant, { ...entry, gzip: Buffer.alloc(2_000) })).toBe(false);
    expect(tier.peek('k')).toBe(withVariant);
  });

  it('answers peek synchronously with the very object stored', () => {
    const clock = makeClock();
    const tier = new MemoryTier({ now: clock.now });
    const entry = makeEntry(clock.now());
    expect(tier.store('k', entry)).toBe(true);
    expect(tier.peek('k')).toBe(entry);
    expect(tier.peek('other')).toBeUndefined();
  });

  it('stops answering peek once the entry is past expiresAt', () => {
    const clock = makeClock();
    const tier = new MemoryTier({ now: clock.now });
    const entry = makeEntry(clock.now());
    tier.store('k', entry);
    clock.advance(expiresAt(entry) - clock.now() + 1);
    expect(tier.peek('k')).toBeUndefined();
    expect(tier.stats().entries).toBe(0);
  });

  it('counts body bytes plus a fixed overhead per entry', () => {
    const clock = makeClock();
    const tier = new MemoryTier({ now: clock.now });
    tier.store('a', makeEntry(clock.now(), { body: Buffer.alloc(1000) }));
    tier.store('b', makeEntry(clock.now(), { body: Buffer.alloc(500) }));
    expect(tier.stats()).toEqual({ entries: 2, bytes: 1500 + 2 * ENTRY_OVERHEAD_BYTES });
  });

  it('evicts the least recently used entries to stay within maxBytes', () => {
    const clock = makeClock();
    const entryBytes = 10_000 + ENTRY_OVERHEAD_BYTES;
    const tier = new MemoryTier({ now: clock.now, maxBytes: entryBytes * 3 });
    for (const key of ['a', 'b', 'c']) tier.store(key, makeEntry(clock.now(), { body: Buffer.alloc(10_000) }));
    tier.peek('a'); // a is now more recent than b
    tier.store('d', makeEntry(clock.now(), { body: Buffer.alloc(10_000) }));
    expect(tier.peek('b')).toBeUndefined();
    expect(['a', 'c', 'd'].map((k) => tier.peek(k) !== undefined)).toEqual([true, true, true]);
    expect(tier.stats().bytes).toBeLessThanOrEqual(entryBytes * 3);
  });

  it('forgets the tags of evicted and replaced entries, so invalidation drops only live ones', () => {
    const clock = makeClock();
    const entryBytes = 10_000 + ENTRY_OVERHEAD_BYTES;
    const tier = new MemoryTier({ now: clock.now, maxBytes: entryBytes * 2 });
    tier.store('a', makeEntry(clock.now(), { body: Buffer.alloc(10_000), tags: ['project:5'] }));
    tier.store('b', makeEntry(clock.now(), { body: Buffer.alloc(10_000), tags: ['project:6'] }));
    tier.store('c', makeEntry(clock.now(), { body: Buffer.alloc(10_000), tags: ['project:6'] })); // evicts a
    expect(tier.dropTag('project:5')).toBe(0);
    tier.store('b', makeEntry(clock.now(), { tags: ['project:7'] })); // replaces b's tags
    expect(tier.dropTag('project:6')).toBe(1);
    expect(tier.peek('b')).toBeDefined();
    expect(tier.dropTag('project:7')).toBe(1);
  });

  it('replacing an entry with an oversized one drops the old one', () => {
    const clock = makeClock();
    const tier = new MemoryTier({ now: clock.now, maxEntryBytes: 4096 });
    tier.store('k', makeEntry(clock.now()));
    expect(tier.store('k', makeEntry(clock.now(), { body: Buffer.alloc(4096) }))).toBe(false);
    expect(tier.peek('k')).toBeUndefined();
  });

  it('rejects a maxBytes too small to hold anything', () => {
    expect(() => new MemoryTier({ maxBytes: 100 })).toThrow(/maxBytes/);
  });
});
