import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryTier } from '../../src/cache/memory-tier.js';
import type { CacheTier } from '../../src/cache/tier.js';
import { TieredCache } from '../../src/cache/tiered.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { makeEntry } from './fixtures.js';
import { makeRedisTier, uniquePrefix, waitUntil } from './redis-fixtures.js';
import { makeClock, tierContract, type ContractContext } from './tier-contract.js';

let redis: RedisHandle;

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

/** TieredCache seen through the CacheTier contract (its `get` also names the tier). */
function asTier(cache: TieredCache): CacheTier {
  return {
    name: 'memory',
    get: async (key) => (await cache.get(key))?.entry,
    peek: async (key) => (await cache.get(key))?.entry,
    set: (key, entry) => cache.set(key, entry),
    delete: (key) => cache.delete(key),
    invalidateTag: async (tag) => {
      const dropped = await cache.invalidateTag(tag);
      return Math.max(dropped.memory, dropped.redis);
    },
    close: () => cache.close(),
  };
}

tierContract('TieredCache, memory only', async ({ clock, maxEntryBytes }: ContractContext) =>
  asTier(new TieredCache({ memory: new MemoryTier({ now: clock.now, maxEntryBytes }) })),
);

tierContract('TieredCache, memory + Redis', async ({ clock, maxEntryBytes }: ContractContext) =>
  asTier(
    new TieredCache({
      memory: new MemoryTier({ now: clock.now, maxEntryBytes }),
      redis: await makeRedisTier(redis.url, { now: clock.now, maxEntryBytes }),
    }),
  ),
);

/** Two replicas sharing one Redis under one prefix. */
async function twoReplicas(): Promise<[TieredCache, TieredCache]> {
  const prefix = uniquePrefix();
  const make = async (): Promise<TieredCache> => {
    const cache = new TieredCache({ memory: new MemoryTier(), redis: await makeRedisTier(redis.url, { keyPrefix: prefix }) });
    if (!(await cache.ready(15_000))) throw new Error('replica not ready');
    return cache;
  };
  return [await make(), await make()];
}

describe('TieredCache across replicas', () => {
  it('serves from memory synchronously, Redis second, and promotes Redis hits', async () => {
    const [a, b] = await twoReplicas();
    const entry = makeEntry(Date.now());
    await a.set('k', entry);
    expect(a.peek('k')).toBe(entry);
    expect(b.peek('k')).toBeUndefined();
    const first = await b.get('k');
    expect(first?.tier).toBe('redis');
    expect(first?.entry.body.equals(entry.body)).toBe(true);
    expect((await b.get('k'))?.tier).toBe('memory');
    expect(b.peek('k')?.etag).toBe(entry.etag);
    await Promise.all([a.close(), b.close()]);
  });

  it('promotes for the remainder of the entry\'s life only', async () => {
    const clock = makeClock();
    const prefix = uniquePrefix();
    const a = await makeRedisTier(redis.url, { keyPrefix: prefix, now: clock.now });
    const b = new TieredCache({ memory: new MemoryTier({ now: clock.now }), redis: await makeRedisTier(redis.url, { keyPrefix: prefix, now: clock.now }) });
    const now = clock.now();
    await a.set('k', makeEntry(now, { freshUntil: now + 1_000, staleWhileRevalidateUntil: now + 2_000, staleIfErrorUntil: now + 60_000 }));
    clock.advance(59_000);
    expect((await b.get('k'))?.tier).toBe('redis');
    clock.advance(1_001);
    expect(b.peek('k')).toBeUndefined();
    await Promise.all([a.close(), b.close()]);
  });

  it('drops an invalidated tag from every replica\'s memory', async () => {
    const [a, b] = await twoReplicas();
    await a.set('tagged', makeEntry(Date.now(), { tags: ['project:5'] }));
    await a.set('other', makeEntry(Date.now(), { tags: ['project:6'] }));
    await b.get('tagged');
    await b.get('other');
    expect(b.peek('tagged')).toBeDefined();
    expect(await a.invalidateTag('project:5')).toEqual({ memory: 1, redis: 1 });
    await waitUntil(() => b.peek('tagged') === undefined, 10_000, 'B drops the tag from memory');
    expect(b.peek('other')).toBeDefined();
    expect(await b.get('tagged')).toBeUndefined();
    await Promise.all([a.close(), b.close()]);
  });

  it('drops a deleted key from every replica\'s memory', async () => {
    const [a, b] = await twoReplicas();
    await a.set('k', makeEntry(Date.now()));
    await b.get('k');
    await a.delete('k');
    expect(a.peek('k')).toBeUndefined();
    await waitUntil(() => b.peek('k') === undefined, 10_000, 'B drops the key from memory');
    await Promise.all([a.close(), b.close()]);
  });

  it('lets one replica fill while the other waits for its result', async () => {
    const [a, b] = await twoReplicas();
    const token = await a.redis!.tryLock('k', 10_000);
    expect(token).toBeDefined();
    expect(await b.redis!.tryLock('k', 10_000)).toBeUndefined();
    const waiting = b.redis!.waitFor('k', 10_000);
    const entry = makeEntry(Date.now(), { body: Buffer.from('filled by A') });
    void a.set('k', entry); // fire-and-forget, as the read-through does
    await a.redis!.unlock('k', token!);
    expect((await waiting)?.body.toString()).toBe('filled by A');
    await Promise.all([a.close(), b.close()]);
  });

  it('gives up waiting at the timeout, and only the holder can unlock', async () => {
    const [a, b] = await twoReplicas();
    const token = await a.redis!.tryLock('k', 10_000);
    expect(await b.redis!.waitFor('k', 150)).toBeUndefined();
    await b.redis!.unlock('k', 'not-the-token');
    expect(await b.redis!.tryLock('k', 10_000)).toBeUndefined();
    await a.redis!.unlock('k', token!);
    expect(await b.redis!.tryLock('k', 10_000)).toBeDefined();
    await Promise.all([a.close(), b.close()]);
  });

  it('waits for nothing when no one holds the lock and nothing was filled', async () => {
    const [a, b] = await twoReplicas();
    const startedAt = performance.now();
    expect(await b.redis!.waitFor('never', 20_000)).toBeUndefined();
    expect(performance.now() - startedAt).toBeLessThan(10_000); // answered, not timed out
    await Promise.all([a.close(), b.close()]);
  });
});
