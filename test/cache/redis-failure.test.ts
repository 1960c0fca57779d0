import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryTier } from '../../src/cache/memory-tier.js';
import { createRedisRoles, type RedisRoles } from '../../src/cache/redis/roles.js';
import { RedisConnection } from '../../src/cache/redis/connection.js';
import { TieredCache } from '../../src/cache/tiered.js';
import { findFreePort, startRedis, type RedisHandle } from '../helpers/redis.js';
import { makeEntry } from './fixtures.js';
import { closeRedisRoles, makeRedisRoles, rawClient, recordingLogger, uniquePrefix, waitUntil } from './redis-fixtures.js';

/** The cache as startProxy builds it: memory, then the roles' tier, listening on their bus. */
function tieredOver(roles: RedisRoles): TieredCache {
  return new TieredCache({ tiers: [new MemoryTier(), roles.tier], bus: roles.bus });
}

/**
 * Redis failing under a running tier. Wall-clock speed is not asserted (CONVENTIONS: speed is
 * for the bench); what is asserted is that every call resolves, as a miss, and is counted.
 */
let redis: RedisHandle;

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await closeRedisRoles();
  await redis?.stop();
});

describe('the Redis roles when Redis dies and comes back', () => {
  it('answers misses while Redis is dead, counts and logs them sparingly, and resumes by itself', async () => {
    const logger = recordingLogger();
    // The production command timeout: this is the configuration under test.
    const roles = await makeRedisRoles(redis.url, { commandTimeoutMs: 50, logger, logIntervalMs: 60_000 });
    const { tier, connection, sharedStore, fillLock } = roles;
    const cache = tieredOver(roles);
    await cache.set('k', makeEntry(Date.now()));
    cache.memory.clear();
    expect((await cache.get('k'))?.tier).toBe('redis');

    await redis.kill();
    await waitUntil(() => !connection.healthy(), 10_000, 'the connection notices Redis is gone');
    const burst = await Promise.all(Array.from({ length: 200 }, (_, i) => tier.get(`k${i % 3}`)));
    expect(burst.every((entry) => entry === undefined)).toBe(true);
    await expect(tier.set('k2', makeEntry(Date.now()))).resolves.toBeUndefined();
    await expect(tier.invalidateTag('project:5')).resolves.toBe(0);
    await expect(tier.delete('k')).resolves.toBeUndefined();
    expect(await sharedStore.getJson('ns', 'k')).toBeUndefined();
    await expect(sharedStore.setJson('ns', 'k', 1, 1_000)).resolves.toBeUndefined();
    expect(await fillLock.tryLock('k', 1_000)).toBeUndefined();
    expect(await fillLock.waitFor('k', 5_000)).toBeUndefined();
    await expect(fillLock.unlock('k', 'token')).resolves.toBeUndefined();
    await expect(roles.bus.publish({ kind: 'tag', tag: 'project:5' })).resolves.toBe(false);
    expect(await cache.invalidateTag('project:6')).toEqual({ memory: 0, redis: 0 });
    expect(tier.stats().errors).toBeGreaterThanOrEqual(200);
    expect(connection.stats().errors).toBe(tier.stats().errors);
    expect(connection.status()).toMatchObject({ healthy: false });
    expect(logger.lines.filter((l) => (l.obj as { kind?: string }).kind === 'get')).toHaveLength(1);

    // Memory keeps serving what it has (k, backfilled above); what it lacks is a miss, not an error.
    expect((await cache.get('k'))?.tier).toBe('memory');
    expect(await cache.get('not-in-memory')).toBeUndefined();

    await redis.restart();
    await waitUntil(() => connection.healthy(), 30_000, 'the connection reconnects');
    await tier.set('back', makeEntry(Date.now(), { body: Buffer.from('back') }));
    expect((await tier.get('back'))?.body.toString()).toBe('back');
    expect(logger.lines.some((l) => l.msg === 'redis connection restored')).toBe(true);
    await cache.close();
  });

  it('clears memory when the invalidation channel was interrupted, since messages were lost', async () => {
    const cache = tieredOver(await makeRedisRoles(redis.url));
    expect(await cache.ready(15_000)).toBe(true);
    cache.memory.set('k', makeEntry(Date.now()));
    await redis.kill();
    await redis.restart();
    await waitUntil(() => cache.memory.stats().entries === 0, 30_000, 'memory cleared after resubscribe');
    expect(await cache.ready(30_000)).toBe(true);
    await cache.close();
  });
});

describe('the invalidation subscription when Redis refuses it again', () => {
  it('records the refusal as a failure, leaves no promise unhandled, and listens again once allowed', async () => {
    const raw = rawClient(redis.url);
    const user = `sub-${uniquePrefix().replace(/\W/g, '')}`;
    await raw.acl('SETUSER', user, 'on', '>pw', '~*', '&*', '+@all');
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    const logger = recordingLogger();
    const keyPrefix = uniquePrefix();
    const roles = await makeRedisRoles(`redis://${user}:pw@${new URL(redis.url).host}`, { logger, keyPrefix });
    const other = await makeRedisRoles(redis.url, { keyPrefix });
    const cache = tieredOver(roles);
    const refusals = (): number =>
      logger.lines.filter((l) => (l.obj as { kind?: string }).kind === 'subscribe' && /NOPERM/.test(String((l.obj as { err?: unknown }).err))).length;
    try {
      expect(await cache.ready(15_000)).toBe(true);
      // Taking the channels away disconnects the subscriber (Redis 7); every subscription is then NOPERM.
      await raw.acl('SETUSER', user, 'resetchannels');
      await waitUntil(() => refusals() === 1, 15_000, 'the refused subscription recorded');
      // Allowed again: the next connection subscribes by itself, says messages were lost (memory is
      // cleared), and from then on another replica's invalidations arrive.
      cache.memory.set('before', makeEntry(Date.now()));
      await raw.acl('SETUSER', user, '&*');
      await raw.client('KILL', 'USER', user);
      await waitUntil(() => cache.memory.get('before') === undefined, 15_000, 'the subscription back, after a loss');
      cache.memory.set('k', makeEntry(Date.now(), { tags: ['project:9'] }));
      expect(await other.bus.publish({ kind: 'tag', tag: 'project:9' })).toBe(true);
      await waitUntil(() => cache.memory.get('k') === undefined, 5_000, 'an invalidation published by another replica arrives');
      expect(refusals()).toBe(1);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      await cache.close();
      raw.disconnect();
    }
  });
});

describe('the Redis roles without a Redis to talk to', () => {
  it('start, answer misses and never reject', async () => {
    const port = await findFreePort();
    const roles = createRedisRoles({ url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 200 });
    const cache = tieredOver(roles);
    expect(await cache.ready(300)).toBe(false);
    await expect(cache.set('k', makeEntry(Date.now()))).resolves.toBeUndefined();
    expect((await cache.get('k'))?.tier).toBe('memory');
    cache.memory.clear();
    expect(await cache.get('k')).toBeUndefined();
    expect(await cache.invalidateTag('project:5')).toEqual({ memory: 0, redis: 0 });
    expect(roles.connection.healthy()).toBe(false);
    expect(roles.tier.stats().errors).toBeGreaterThan(0);
    await cache.close();
    await roles.close();
  });

  it('refuses incomplete connection options at start, naming the field', () => {
    expect(() => new RedisConnection({})).toThrow(/redis.url/);
    expect(() => createRedisRoles({ mode: 'cluster' })).toThrow(/redis.nodes/);
    expect(() => createRedisRoles({ mode: 'sentinel', sentinels: [{ host: 'h', port: 1 }] })).toThrow(/redis.name/);
  });
});
