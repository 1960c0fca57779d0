/**
 * TieredCache as an ordered list of tiers, with scripted tiers and bus (no Redis): which tier
 * is asked when, what answers synchronously, what is backfilled where, and that a failing tier
 * is a miss. The same cache over a real Redis is tested in tiered.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { CacheEntry } from '../../src/cache/entry.js';
import type { InvalidationBus, InvalidationListener, InvalidationMessage } from '../../src/cache/invalidation.js';
import { MemoryTier } from '../../src/cache/memory-tier.js';
import type { CacheTier, MaybePromise } from '../../src/cache/tier.js';
import { TieredCache } from '../../src/cache/tiered.js';
import { makeEntry } from './fixtures.js';

type Mode = 'async' | 'sync' | 'rejects' | 'throws';

/** A map-backed tier named `redis` that logs every call as `<id>.<method>:<arg>`. */
class ScriptedTier implements CacheTier {
  readonly name = 'redis' as const;
  readonly maxEntryBytes = 1 << 20;
  readonly entries = new Map<string, CacheEntry>();

  constructor(
    readonly id: string,
    readonly log: string[],
    public mode: Mode = 'async',
  ) {}

  get(key: string): MaybePromise<CacheEntry | undefined> {
    return this.#answer(`get:${key}`, () => this.entries.get(key));
  }

  peek(key: string): MaybePromise<CacheEntry | undefined> {
    return this.#answer(`peek:${key}`, () => this.entries.get(key));
  }

  set(key: string, entry: CacheEntry): MaybePromise<void> {
    return this.#answer(`set:${key}`, () => void this.entries.set(key, entry));
  }

  delete(key: string): MaybePromise<void> {
    return this.#answer(`delete:${key}`, () => void this.entries.delete(key));
  }

  invalidateTag(tag: string): MaybePromise<number> {
    return this.#answer(`invalidateTag:${tag}`, () => {
      const keys = [...this.entries].filter(([, entry]) => entry.tags.includes(tag)).map(([key]) => key);
      for (const key of keys) this.entries.delete(key);
      return keys.length;
    });
  }

  close(): MaybePromise<void> {
    return this.#answer('close', () => undefined);
  }

  #answer<T>(call: string, act: () => T): MaybePromise<T> {
    this.log.push(`${this.id}.${call}`);
    if (this.mode === 'throws') throw new Error(`${this.id} broke`);
    if (this.mode === 'rejects') return Promise.reject(new Error(`${this.id} broke`));
    return this.mode === 'sync' ? act() : Promise.resolve().then(act);
  }
}

class ScriptedBus implements InvalidationBus {
  readonly published: InvalidationMessage[] = [];
  readonly #listeners = new Set<InvalidationListener>();

  async publish(message: InvalidationMessage): Promise<boolean> {
    this.published.push(message);
    return true;
  }

  onInvalidate(listener: InvalidationListener): () => void {
    this.#listeners.add(listener);
    return () => void this.#listeners.delete(listener);
  }

  async ready(): Promise<boolean> {
    return true;
  }

  /** What another replica's message looks like on arrival. */
  deliver(message: InvalidationMessage): void {
    for (const listener of this.#listeners) listener(message);
  }

  get listeners(): number {
    return this.#listeners.size;
  }
}

function stack(...modes: Mode[]): { cache: TieredCache; memory: MemoryTier; lower: ScriptedTier[]; log: string[]; bus: ScriptedBus } {
  const log: string[] = [];
  const memory = new MemoryTier();
  const lower = modes.map((mode, i) => new ScriptedTier(`t${i + 1}`, log, mode));
  const bus = new ScriptedBus();
  return { cache: new TieredCache({ tiers: [memory, ...lower], bus }), memory, lower, log, bus };
}

describe('TieredCache as a list of tiers', () => {
  it('answers a memory hit synchronously, without asking the tiers below', () => {
    const { cache, memory, log } = stack('async');
    const entry = makeEntry(Date.now());
    memory.set('k', entry);
    const result = cache.get('k');
    expect(result instanceof Promise).toBe(false);
    expect(result).toEqual({ entry, tier: 'memory' });
    expect(log).toEqual([]);
  });

  it('answers synchronously when every tier does, and backfills the hit above it', () => {
    const { cache, memory, lower, log } = stack('sync', 'sync');
    const entry = makeEntry(Date.now());
    lower[1]!.entries.set('k', entry);
    const result = cache.get('k');
    expect(result instanceof Promise).toBe(false);
    expect(result).toEqual({ entry, tier: 'redis' });
    expect(log).toEqual(['t1.get:k', 't2.get:k', 't1.set:k']);
    expect(memory.peek('k')).toBe(entry);
    expect(cache.get('never') instanceof Promise).toBe(false);
  });

  it('asks the lower tiers in order, stops at the first hit and backfills every tier above it', async () => {
    const { cache, memory, lower, log } = stack('async', 'async', 'async');
    const entry = makeEntry(Date.now());
    lower[1]!.entries.set('k', entry);
    lower[2]!.entries.set('k', makeEntry(Date.now(), { body: Buffer.from('deeper, never asked') }));
    const result = cache.get('k');
    expect(result instanceof Promise).toBe(true);
    expect(await result).toEqual({ entry, tier: 'redis' });
    await Promise.resolve(); // the backfill of t1 is fire-and-forget
    expect(log).toEqual(['t1.get:k', 't2.get:k', 't1.set:k']);
    expect(memory.peek('k')).toBe(entry);
    expect(lower[0]!.entries.get('k')).toBe(entry);
    expect(cache.get('k')).toEqual({ entry, tier: 'memory' });
  });

  it('answers undefined when no tier has the key', async () => {
    const { cache, log } = stack('async', 'sync');
    expect(await cache.get('k')).toBeUndefined();
    expect(log).toEqual(['t1.get:k', 't2.get:k']);
  });

  it('treats a lower tier that rejects or throws as a miss and asks the next one', async () => {
    for (const broken of ['rejects', 'throws'] as const) {
      const { cache, lower } = stack(broken, 'async');
      const entry = makeEntry(Date.now());
      lower[1]!.entries.set('k', entry);
      expect(await cache.get('k')).toEqual({ entry, tier: 'redis' });
      expect(await cache.get('other')).toBeUndefined();
    }
  });

  it('keeps a newer entry a fill stored in memory while a lower tier answered', async () => {
    const { cache, memory, lower } = stack('async');
    const now = Date.now();
    lower[0]!.entries.set('k', makeEntry(now - 1_000, { body: Buffer.from('older') }));
    const pending = cache.get('k');
    const newer = makeEntry(now, { body: Buffer.from('newer') });
    memory.set('k', newer);
    expect(await pending).toEqual({ entry: newer, tier: 'memory' });
    expect(memory.peek('k')).toBe(newer);
  });

  it('backfills only the memory tier when told an entry is already below', () => {
    const { cache, memory, log } = stack('async');
    const entry = makeEntry(Date.now());
    cache.backfill('k', entry);
    expect(memory.peek('k')).toBe(entry);
    expect(log).toEqual([]);
  });

  it('writes memory at once and the lower tiers in the background, with the gzip variant', async () => {
    const { cache, memory, lower } = stack('async', 'async');
    const entry = makeEntry(Date.now(), { body: Buffer.from('x'.repeat(4_000)) });
    const written = cache.set('k', entry);
    expect(memory.peek('k')).toBe(entry);
    expect(lower[0]!.entries.has('k')).toBe(false);
    await written;
    for (const tier of lower) expect(tier.entries.get('k')?.gzip).toBeDefined();
    expect(memory.peek('k')?.gzip).toBeDefined();
  });

  it('resolves a write even when a lower tier rejects it', async () => {
    const { cache, lower } = stack('rejects', 'async');
    await expect(cache.set('k', makeEntry(Date.now()))).resolves.toBeUndefined();
    expect(lower[1]!.entries.has('k')).toBe(true);
  });

  it('invalidates a tag and deletes a key in every tier, then tells the other replicas', async () => {
    const { cache, memory, lower, bus } = stack('async', 'sync');
    await cache.set('a', makeEntry(Date.now(), { tags: ['project:5'] }));
    await cache.set('b', makeEntry(Date.now(), { tags: ['project:6'] }));
    expect(await cache.invalidateTag('project:5')).toEqual({ memory: 1, redis: 2 });
    await cache.delete('b');
    expect(memory.stats().entries).toBe(0);
    for (const tier of lower) expect(tier.entries.size).toBe(0);
    expect(bus.published).toEqual([
      { kind: 'tag', tag: 'project:5' },
      { kind: 'key', key: 'b' },
    ]);
  });

  it("applies other replicas' invalidations to the private tiers only, and forgets everything when told messages were lost", async () => {
    const { cache, memory, lower, log, bus } = stack('async');
    await cache.set('a', makeEntry(Date.now(), { tags: ['project:5'] }));
    await cache.set('b', makeEntry(Date.now(), { tags: ['project:6'] }));
    await cache.set('c', makeEntry(Date.now(), { tags: ['project:7'] }));
    log.length = 0;
    bus.deliver({ kind: 'tag', tag: 'project:5' });
    bus.deliver({ kind: 'key', key: 'b' });
    expect([memory.peek('a'), memory.peek('b')]).toEqual([undefined, undefined]);
    expect(memory.peek('c')).toBeDefined();
    bus.deliver({ kind: 'all' });
    expect(memory.stats().entries).toBe(0);
    expect(log).toEqual([]); // the shared tier was already dropped by the replica that published
    expect(lower[0]!.entries.size).toBe(3);
    expect(bus.published).toEqual([]);
  });

  it('stops listening and closes every tier on close', async () => {
    const { cache, log, bus } = stack('async');
    expect(bus.listeners).toBe(1);
    await cache.close();
    expect(bus.listeners).toBe(0);
    expect(log).toEqual(['t1.close']);
  });

  it('is a memory cache by default, ready at once and synchronous throughout', async () => {
    const cache = new TieredCache();
    expect(cache.tiers).toHaveLength(1);
    expect(await cache.ready(0)).toBe(true);
    await cache.set('k', makeEntry(Date.now()));
    expect(cache.get('k') instanceof Promise).toBe(false);
    expect(cache.get('missing')).toBeUndefined();
    expect(await cache.invalidateTag('project:5')).toEqual({ memory: 1 });
  });
});
