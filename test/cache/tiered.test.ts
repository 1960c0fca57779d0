import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryTier } from '../../src/cache/memory-tier.js';
import type { RedisRoles } from '../../src/cache/redis/roles.js';
import type { CacheTier } from '../../src/cache/tier.js';
import { TieredCache } from '../../src/cache/tiered.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import type { CacheEntry } from '../../src/cache/entry.js';
import { makeEntry } from './fixtures.js';
import { closeRedisRoles, makeRedisRoles, makeRedisTier, uniquePrefix, waitUntil } from './redis-fixtures.js';
import { makeClock, tierContract, type ContractContext } from './tier-contract.js';

let redis: RedisHandle;

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await closeRedisRoles();
  await redis?.stop();
});

/** TieredCache seen through the CacheTier contract (its `get` also names the tier). */
function asTier(cache: TieredCache): CacheTier {
  const entryOf = async (key: string): Promise<CacheEntry | undefined> => (await cache.get(key))?.entry;
  return {
    name: 'memory',
    maxEntryBytes: cache.maxEntryBytes,
    get: entryOf,
    peek: entryOf,
    set: (key, entry) => cache.set(key, entry),
    delete: (key) => cache.delete(key),
    invalidateTag: async (tag) => {
      const dropped = await cache.invalidateTag(tag);
      return Math.max(dropped.memory ?? 0, dropped.redis ?? 0);
    },
    close: () => cache.close(),
  };
}

tierContract('TieredCache, memory only', async ({ clock, maxEntryBytes }: ContractContext) =>
  asTier(new TieredCache({ tiers: [new MemoryTier({ now: clock.now, maxEntryBytes })] })),
);

tierContract('TieredCache, memory + Redis', async ({ clock, maxEntryBytes }: ContractContext) => {
  const roles = await makeRedisRoles(redis.url, { now: clock.now, maxEntryBytes });
  return asTier(new TieredCache({ tiers: [new MemoryTier({ now: clock.now, maxEntryBytes }), roles.tier], bus: roles.bus }));
});

interface Replica {
  cache: TieredCache;
  roles: RedisRoles;
}

/** Two replicas sharing one Redis under one prefix. */
async function twoReplicas(): Promise<[Replica, Replica]> {
  const prefix = uniquePrefix();
  const make = async (): Promise<Replica> => {
    const roles = await makeRedisRoles(redis.url, { keyPrefix: prefix });
    const cache = new TieredCache({ tiers: [new MemoryTier(), roles.tier], bus: roles.bus });
    if (!(await cache.ready(15_000))) throw new Error('replica not ready');
    return { cache, roles };
  };
  return [await make(), await make()];
}

describe('TieredCache across replicas', () => {
  it('serves from memory synchronously, Redis second, and backfills Redis hits', async () => {
    const [{ cache: a }, { cache: b }] = await twoReplicas();
    const entry = makeEntry(Date.now());
    await a.set('k', entry);
    expect(a.memory.peek('k')?.etag).toBe(entry.etag);
    expect(b.memory.peek('k')).toBeUndefined();
    const first = await b.get('k');
    expect(first?.tier).toBe('redis');
    expect(first?.entry.body.equals(entry.body)).toBe(true);
    const second = b.get('k');
    expect(second instanceof Promise).toBe(false);
    expect((second as Awaited<typeof second>)?.tier).toBe('memory');
    expect(b.memory.peek('k')?.etag).toBe(entry.etag);
    await Promise.all([a.close(), b.close()]);
  });

  it("backfills for the remainder of the entry's life only", async () => {
    const clock = makeClock();
    const prefix = uniquePrefix();
    const a = await makeRedisTier(redis.url, { keyPrefix: prefix, now: clock.now });
    const b = new TieredCache({ tiers: [new MemoryTier({ now: clock.now }), await makeRedisTier(redis.url, { keyPrefix: prefix, now: clock.now })] });
    const now = clock.now();
    await a.set('k', makeEntry(now, { freshUntil: now + 1_000, staleWhileRevalidateUntil: now + 2_000, staleIfErrorUntil: now + 60_000 }));
    clock.advance(59_000);
    expect((await b.get('k'))?.tier).toBe('redis');
    clock.advance(1_001);
    expect(b.memory.peek('k')).toBeUndefined();
    await Promise.all([a.close(), b.close()]);
  });

  it("drops an invalidated tag from every replica's memory", async () => {
    const [{ cache: a }, { cache: b }] = await twoReplicas();
    await a.set('tagged', makeEntry(Date.now(), { tags: ['project:5'] }));
    await a.set('other', makeEntry(Date.now(), { tags: ['project:6'] }));
    await b.get('tagged');
    await b.get('other');
    expect(b.memory.peek('tagged')).toBeDefined();
    expect(await a.invalidateTag('project:5')).toEqual({ memory: 1, redis: 1 });
    await waitUntil(() => b.memory.peek('tagged') === undefined, 10_000, 'B drops the tag from memory');
    expect(b.memory.peek('other')).toBeDefined();
    expect(await b.get('tagged')).toBeUndefined();
    await Promise.all([a.close(), b.close()]);
  });

  it("drops a deleted key from every replica's memory", async () => {
    const [{ cache: a }, { cache: b }] = await twoReplicas();
    await a.set('k', makeEntry(Date.now()));
    await b.get('k');
    await a.delete('k');
    expect(a.memory.peek('k')).toBeUndefined();
    await waitUntil(() => b.memory.peek('k') === undefined, 10_000, 'B drops the key from memory');
    await Promise.all([a.close(), b.close()]);
  });

  it('lets one replica fill while the other waits for its result', async () => {
    const [a, b] = await twoReplicas();
    const token = await a.roles.fillLock.tryLock('k', 10_000);
    expect(token).toBeDefined();
    expect(await b.roles.fillLock.tryLock('k', 10_000)).toBeUndefined();
    const waiting = b.roles.fillLock.waitFor('k', 10_000);
    const entry = makeEntry(Date.now(), { body: Buffer.from('filled by A') });
    void a.cache.set('k', entry); // fire-and-forget, as the read-through does
    await a.roles.fillLock.unlock('k', token!);
    const filled = await waiting;
    expect(filled?.body.toString()).toBe('filled by A');
    b.cache.backfill('k', filled!);
    expect(b.cache.memory.peek('k')).toBe(filled);
    await Promise.all([a.cache.close(), b.cache.close()]);
  });

  it('gives up waiting at the timeout, and only the holder can unlock', async () => {
    const [{ roles: a }, { roles: b }] = await twoReplicas();
    const token = await a.fillLock.tryLock('k', 10_000);
    expect(await b.fillLock.waitFor('k', 150)).toBeUndefined();
    await b.fillLock.unlock('k', 'not-the-token');
    expect(await b.fillLock.tryLock('k', 10_000)).toBeUndefined();
    await a.fillLock.unlock('k', token!);
    expect(await b.fillLock.tryLock('k', 10_000)).toBeDefined();
  });

  it('waits for nothing when no one holds the lock and nothing was filled', async () => {
    const [, { roles: b }] = await twoReplicas();
    const startedAt = performance.now();
    expect(await b.fillLock.waitFor('never', 20_000)).toBeUndefined();
    expect(performance.now() - startedAt).toBeLessThan(10_000); // answered, not timed out
  });
});
