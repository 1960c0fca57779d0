import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryTier } from '../../src/cache/memory-tier.js';
import { RedisTier } from '../../src/cache/redis-tier.js';
import { TieredCache } from '../../src/cache/tiered.js';
import { findFreePort, startRedis, type RedisHandle } from '../helpers/redis.js';
import { makeEntry } from './fixtures.js';
import { makeRedisTier, recordingLogger, waitUntil } from './redis-fixtures.js';

/**
 * Redis failing under a running tier. Wall-clock speed is not asserted (CONVENTIONS: speed is
 * for the bench); what is asserted is that every call resolves, as a miss, and is counted.
 */
let redis: RedisHandle;

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

describe('RedisTier when Redis dies and comes back', () => {
  it('answers misses while Redis is dead, counts and logs them sparingly, and resumes by itself', async () => {
    const logger = recordingLogger();
    // The production command timeout: this is the configuration under test.
    const tier = await makeRedisTier(redis.url, { commandTimeoutMs: 50, logger, logIntervalMs: 60_000 });
    const cache = new TieredCache({ memory: new MemoryTier(), redis: tier });
    await cache.set('k', makeEntry(Date.now()));
    cache.memory.clear();
    expect((await cache.get('k'))?.tier).toBe('redis');

    await redis.kill();
    await waitUntil(() => !tier.healthy(), 10_000, 'tier notices Redis is gone');
    const burst = await Promise.all(Array.from({ length: 200 }, (_, i) => tier.get(`k${i % 3}`)));
    expect(burst.every((entry) => entry === undefined)).toBe(true);
    await expect(tier.set('k2', makeEntry(Date.now()))).resolves.toBeUndefined();
    await expect(tier.invalidateTag('project:5')).resolves.toBe(0);
    await expect(tier.delete('k')).resolves.toBeUndefined();
    expect(await tier.getJson('ns', 'k')).toBeUndefined();
    await expect(tier.setJson('ns', 'k', 1, 1_000)).resolves.toBeUndefined();
    expect(await tier.tryLock('k', 1_000)).toBeUndefined();
    expect(await tier.waitFor('k', 5_000)).toBeUndefined();
    expect(await tier.getOrCreateSecret('s')).toBeUndefined();
    expect(tier.stats().errors).toBeGreaterThanOrEqual(200);
    expect(tier.status()).toMatchObject({ healthy: false });
    expect(logger.lines.filter((l) => (l.obj as { kind?: string }).kind === 'get')).toHaveLength(1);

    // Memory keeps serving what it has (k, promoted above); what it lacks is a miss, not an error.
    expect((await cache.get('k'))?.tier).toBe('memory');
    expect(await cache.get('not-in-memory')).toBeUndefined();

    await redis.restart();
    await waitUntil(() => tier.healthy(), 30_000, 'tier reconnects');
    await tier.set('back', makeEntry(Date.now(), { body: Buffer.from('back') }));
    expect((await tier.get('back'))?.body.toString()).toBe('back');
    expect(logger.lines.some((l) => l.msg === 'redis connection restored')).toBe(true);
    await cache.close();
  });

  it('clears memory when the invalidation channel was interrupted, since messages were lost', async () => {
    const cache = new TieredCache({ memory: new MemoryTier(), redis: await makeRedisTier(redis.url) });
    expect(await cache.ready(15_000)).toBe(true);
    cache.memory.set('k', makeEntry(Date.now()));
    await redis.kill();
    await redis.restart();
    await waitUntil(() => cache.memory.stats().entries === 0, 30_000, 'memory cleared after resubscribe');
    expect(await cache.ready(30_000)).toBe(true);
    await cache.close();
  });
});

describe('RedisTier without a Redis to talk to', () => {
  it('starts, answers misses and never rejects', async () => {
    const port = await findFreePort();
    const tier = new RedisTier({ url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 200 });
    const cache = new TieredCache({ redis: tier });
    expect(await cache.ready(300)).toBe(false);
    await expect(cache.set('k', makeEntry(Date.now()))).resolves.toBeUndefined();
    expect((await cache.get('k'))?.tier).toBe('memory');
    cache.memory.clear();
    expect(await cache.get('k')).toBeUndefined();
    expect(await cache.invalidateTag('project:5')).toEqual({ memory: 0, redis: 0 });
    expect(tier.healthy()).toBe(false);
    expect(tier.stats().errors).toBeGreaterThan(0);
    await cache.close();
  });

  it('refuses incomplete connection options at start, naming the field', () => {
    expect(() => new RedisTier({})).toThrow(/redis.url/);
    expect(() => new RedisTier({ mode: 'cluster' })).toThrow(/redis.nodes/);
    expect(() => new RedisTier({ mode: 'sentinel', sentinels: [{ host: 'h', port: 1 }] })).toThrow(/redis.name/);
  });
});
