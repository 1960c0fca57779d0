import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { storedKeyId } from '../../src/cache/redis/codec.js';
import type { Keyring } from '../../src/cache/redis/keyring.js';
import type { RedisTier } from '../../src/cache/redis/tier.js';
import { makeEntry, makeListPageBody } from './fixtures.js';
import { makeRedisRoles, makeRedisTier, useRedisServer } from './redis-fixtures.js';
import { makeClock, tierContract } from './tier-contract.js';

const redis = useRedisServer();

tierContract('RedisTier', async ({ clock, maxEntryBytes }) => makeRedisTier(redis.url, { now: clock.now, maxEntryBytes }), {
  breakKey: async (tier, key) => void (await redis.raw.set((tier as RedisTier).connection.entryKey(key), randomBytes(64))),
});

const k1 = randomBytes(32);
const k2 = randomBytes(32);
const ring1: Keyring = { keys: { k1 }, current: 'k1' };
const ring12: Keyring = { keys: { k1, k2 }, current: 'k2' };

/** Every key under `prefix` with its value(s), as an operator scanning Redis would see them. */
async function dump(prefix: string): Promise<Buffer[]> {
  const keys = await redis.raw.keys(`${prefix}*`);
  const parts: Buffer[] = [];
  for (const key of keys) {
    parts.push(Buffer.from(key));
    const type = await redis.raw.type(key);
    if (type === 'string') parts.push((await redis.raw.getBuffer(key))!);
    if (type === 'set') parts.push(...(await redis.raw.smembersBuffer(key)));
  }
  return parts;
}

describe('RedisTier with a keyring', () => {
  const secretText = 'confidential-run-Zebra-4711';
  const body = Buffer.from(JSON.stringify({ runs: Array.from({ length: 50 }, (_, i) => ({ id: i, name: secretText })) }));

  it('leaves no plaintext body fragment anywhere in Redis', async () => {
    const { tier, sharedStore, connection } = await makeRedisRoles(redis.url, { keyring: ring1 });
    await tier.set('page', makeEntry(Date.now(), { body }));
    await tier.set('small', makeEntry(Date.now(), { body: Buffer.from(`{"name":"${secretText}"}`) }));
    await sharedStore.setJson('identity', 'hmac-of-token', { userId: 7, name: secretText }, 60_000);
    const everything = await dump(connection.keyPrefix);
    expect(everything.length).toBeGreaterThan(4);
    for (const part of everything) {
      expect(part.includes(Buffer.from(secretText))).toBe(false);
      expect(part.includes(Buffer.from('Zebra'))).toBe(false);
    }
    await tier.close();
  });

  it('is unreadable without the key, and with another key', async () => {
    const writer = await makeRedisRoles(redis.url, { keyring: ring1 });
    await writer.tier.set('page', makeEntry(Date.now(), { body }));
    await writer.sharedStore.setJson('ns', 'k', { a: 1 }, 60_000);
    for (const keyring of [undefined, { keys: { k1: k2 }, current: 'k1' }]) {
      const reader = await makeRedisRoles(redis.url, { keyPrefix: writer.connection.keyPrefix, keyring });
      expect(await reader.tier.get('page')).toBeUndefined();
      expect(await reader.sharedStore.getJson('ns', 'k')).toBeUndefined();
      // Another keyring entirely: foreign, left in place; another key under the same id: tampered.
      const { byKind } = reader.tier.stats();
      expect((byKind.decode ?? 0) + (byKind.tampered ?? 0)).toBe(2);
      await reader.close();
    }
    await writer.close();
  });

  it('reads old entries after rotation and writes new ones with the current key', async () => {
    const before = await makeRedisTier(redis.url, { keyring: ring1 });
    const oldEntry = makeEntry(Date.now(), { body: Buffer.from('old') });
    await before.set('old', oldEntry);
    const after = await makeRedisTier(redis.url, { keyPrefix: before.connection.keyPrefix, keyring: ring12 });
    expect((await after.get('old'))?.body.toString()).toBe('old');
    await after.set('new', makeEntry(Date.now(), { body: Buffer.from('new') }));
    expect(storedKeyId((await redis.raw.getBuffer(before.connection.entryKey('old')))!)).toBe('k1');
    expect(storedKeyId((await redis.raw.getBuffer(before.connection.entryKey('new')))!)).toBe('k2');
    expect(await before.get('new')).toBeUndefined(); // a replica not yet given k2 misses
    await Promise.all([before.close(), after.close()]);
  });
});

describe('RedisTier storage', () => {
  it('lets Redis expire entries at expiresAt and tag sets with their longest member', async () => {
    const clock = makeClock();
    const tier = await makeRedisTier(redis.url, { now: clock.now });
    const now = clock.now();
    const short = makeEntry(now, { freshUntil: now + 1_000, staleWhileRevalidateUntil: now + 2_000, staleIfErrorUntil: now + 3_000 });
    const long = makeEntry(now, { freshUntil: now + 5_000, staleWhileRevalidateUntil: now + 9_000, staleIfErrorUntil: now + 20_000 });
    await tier.set('long', long);
    await tier.set('short', short);
    const entryTtlMs = await redis.raw.pttl(tier.connection.entryKey('short'));
    const tagTtlMs = await redis.raw.pttl(tier.connection.tagKey('project:5'));
    expect(entryTtlMs).toBeGreaterThan(2_000);
    expect(entryTtlMs).toBeLessThanOrEqual(3_000);
    expect(tagTtlMs).toBeGreaterThan(19_000);
    expect(tagTtlMs).toBeLessThanOrEqual(20_000);
    await tier.close();
  });

  it('compresses a list page several times in Redis', async () => {
    const tier = await makeRedisTier(redis.url);
    const page = makeListPageBody(100);
    await tier.set('page', makeEntry(Date.now(), { body: page }));
    const storedBytes = await redis.raw.strlen(tier.connection.entryKey('page'));
    expect(page.length / storedBytes).toBeGreaterThan(5);
    await tier.close();
  });
});

describe('RedisSharedStore', () => {
  it('round-trips JSON values, null included, and expires them', async () => {
    const { sharedStore, connection } = await makeRedisRoles(redis.url, { keyring: ring1 });
    await sharedStore.setJson('identity', 'h1', { userId: 7 }, 60_000);
    await sharedStore.setJson('identity', 'h2', null, 60_000);
    expect(await sharedStore.getJson('identity', 'h1')).toEqual({ userId: 7 });
    expect(await sharedStore.getJson('identity', 'h2')).toBeNull();
    expect(await sharedStore.getJson('identity', 'h3')).toBeUndefined();
    expect(await redis.raw.pttl(connection.jsonKey('identity', 'h1'))).toBeLessThanOrEqual(60_000);
  });
});
