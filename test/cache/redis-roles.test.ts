/**
 * The Redis roles as separate objects over one connection (redis.ts), against a private
 * redis-server: what each role does on its own, and what they share (the connection, its
 * failure counts, its closing).
 */
import { describe, expect, it } from 'vitest';
import type { InvalidationMessage } from '../../src/cache/invalidation.js';
import { makeEntry } from './fixtures.js';
import { makeRedisRoles, uniquePrefix, useRedisServer, waitUntil } from './redis-fixtures.js';

const redis = useRedisServer();

/** Connections the server sees, by client name (`tm-cache:commands`, `tm-cache:subscriber`). */
async function connectionsNamed(name: string): Promise<number> {
  const list = (await redis.raw.client('LIST')) as string;
  return list.split('\n').filter((line) => line.includes(` name=${name} `)).length;
}

describe('createRedisRoles', () => {
  it('builds every role over one command connection, and opens the subscriber only once someone listens', async () => {
    const commandsBefore = await connectionsNamed('tm-cache:commands');
    const subscribersBefore = await connectionsNamed('tm-cache:subscriber');
    const roles = await makeRedisRoles(redis.url);
    await roles.tier.set('k', makeEntry(Date.now()));
    await roles.sharedStore.setJson('ns', 'k', 1, 60_000);
    await roles.fillLock.tryLock('k', 1_000);
    expect(await connectionsNamed('tm-cache:commands')).toBe(commandsBefore + 1);
    expect(await connectionsNamed('tm-cache:subscriber')).toBe(subscribersBefore);

    roles.bus.onInvalidate(() => undefined);
    expect(await roles.bus.ready(15_000)).toBe(true);
    expect(await connectionsNamed('tm-cache:subscriber')).toBe(subscribersBefore + 1);

    await roles.close();
    await waitUntil(async () => (await connectionsNamed('tm-cache:commands')) === commandsBefore, 10_000, 'commands connection closed');
    await waitUntil(async () => (await connectionsNamed('tm-cache:subscriber')) === subscribersBefore, 10_000, 'subscriber closed');
  });

  it("counts every role's failures on the one connection, and answers nothing once it is closed", async () => {
    const roles = await makeRedisRoles(redis.url);
    roles.connection.close();
    expect(roles.connection.healthy()).toBe(false);
    expect(await roles.connection.ready(50)).toBe(false);
    expect(await roles.tier.get('k')).toBeUndefined();
    expect(await roles.sharedStore.getJson('ns', 'k')).toBeUndefined();
    expect(await roles.fillLock.tryLock('k', 1_000)).toBeUndefined();
    await expect(roles.bus.publish({ kind: 'key', key: 'k' })).resolves.toBe(false);
    const { byKind, errors, lastError } = roles.connection.stats();
    expect(byKind).toMatchObject({ get: 1, json: 1, lock: 1, publish: 1 });
    expect(errors).toBe(4);
    expect(lastError?.message).toBe('connection closed');
  });
});

describe('RedisFillLock', () => {
  it("releases the lock only after this replica's pending write of the key landed", async () => {
    const { fillLock, tier, connection } = await makeRedisRoles(redis.url);
    const token = await fillLock.tryLock('k', 10_000);
    expect(token).toBeDefined();
    void tier.set('k', makeEntry(Date.now())); // fire-and-forget, as the read-through does
    expect(tier.pendingWrite('k')).toBeDefined();
    await fillLock.unlock('k', token!);
    expect(await redis.raw.exists(connection.entryKey('k'))).toBe(1);
    expect(await redis.raw.exists(connection.lockKey('k'))).toBe(0);
    expect(tier.pendingWrite('k')).toBeUndefined();
  });

  it('hands a waiter the entry the holder stored, decoded by the tier', async () => {
    const prefix = uniquePrefix();
    const [holder, waiter] = await Promise.all([makeRedisRoles(redis.url, { keyPrefix: prefix }), makeRedisRoles(redis.url, { keyPrefix: prefix })]);
    const token = await holder.fillLock.tryLock('k', 10_000);
    const waiting = waiter.fillLock.waitFor('k', 10_000);
    await holder.tier.set('k', makeEntry(Date.now(), { body: Buffer.from('filled') }));
    await holder.fillLock.unlock('k', token!);
    expect((await waiting)?.body.toString()).toBe('filled');
  });
});

describe('RedisFillLock.waitFor', () => {
  it("hands over the entry as soon as it is stored, even if the holder's unlock never comes", async () => {
    const prefix = uniquePrefix();
    const [holder, waiter] = await Promise.all([makeRedisRoles(redis.url, { keyPrefix: prefix }), makeRedisRoles(redis.url, { keyPrefix: prefix })]);
    await holder.fillLock.tryLock('k', 60_000);
    const started = performance.now();
    const waiting = waiter.fillLock.waitFor('k', 20_000);
    await holder.tier.set('k', makeEntry(Date.now(), { body: Buffer.from('filled') }));
    // No unlock (as when the holder's unlock command timed out): the lock stays for 60 s.
    expect((await waiting)?.body.toString()).toBe('filled');
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(await redis.raw.exists(holder.connection.lockKey('k'))).toBe(1);
  });

  it('does not take the stale entry a refresh replaces for a result: waits while the lock is held, then gives up when it is gone', async () => {
    const prefix = uniquePrefix();
    const [holder, waiter] = await Promise.all([makeRedisRoles(redis.url, { keyPrefix: prefix }), makeRedisRoles(redis.url, { keyPrefix: prefix })]);
    const now = Date.now();
    await holder.tier.set('k', makeEntry(now - 90_000, { freshUntil: now - 30_000, body: Buffer.from('stale') }));
    const token = await holder.fillLock.tryLock('k', 60_000);
    let settled = false;
    const waiting = waiter.fillLock.waitFor('k', 20_000).finally(() => (settled = true));
    await new Promise((r) => setTimeout(r, 200));
    expect(settled).toBe(false);
    // The holder's fill was refused (nothing stored): it releases the lock; the waiter fills itself.
    await holder.fillLock.unlock('k', token!);
    expect(await waiting).toBeUndefined();
  });
});

describe('RedisFillLock.claim: the lock, or the entry another replica stored meanwhile, in one round trip', () => {
  it('takes the lock when nothing is stored and nobody holds it; another replica then gets neither', async () => {
    const prefix = uniquePrefix();
    const [a, b] = await Promise.all([makeRedisRoles(redis.url, { keyPrefix: prefix }), makeRedisRoles(redis.url, { keyPrefix: prefix })]);
    const claim = await a.fillLock.claim('k', 10_000, true);
    expect(claim).toEqual({ token: expect.any(String) });
    expect(await redis.raw.pttl(a.connection.lockKey('k'))).toBeGreaterThan(9_000);
    expect(await b.fillLock.claim('k', 10_000, true)).toBeUndefined();
  });

  it('answers the fresh entry the holder stored and released, taking no lock', async () => {
    const prefix = uniquePrefix();
    const [holder, late] = await Promise.all([makeRedisRoles(redis.url, { keyPrefix: prefix }), makeRedisRoles(redis.url, { keyPrefix: prefix })]);
    const claim = await holder.fillLock.claim('k', 10_000, true);
    await holder.tier.set('k', makeEntry(Date.now(), { body: Buffer.from('filled') }));
    await holder.fillLock.unlock('k', (claim as { token: string }).token);
    const lateClaim = await late.fillLock.claim('k', 10_000, true);
    expect(lateClaim !== undefined && 'entry' in lateClaim ? lateClaim.entry.body.toString() : lateClaim).toBe('filled');
    expect(await redis.raw.exists(late.connection.lockKey('k'))).toBe(0);
  });

  it('takes the lock, or answers nothing, without looking at the entry when the fill must ask upstream', async () => {
    const prefix = uniquePrefix();
    const [a, b] = await Promise.all([makeRedisRoles(redis.url, { keyPrefix: prefix }), makeRedisRoles(redis.url, { keyPrefix: prefix })]);
    await a.tier.set('k', makeEntry(Date.now()));
    expect(await a.fillLock.claim('k', 10_000, false)).toEqual({ token: expect.any(String) });
    expect(await b.fillLock.claim('k', 10_000, false)).toBeUndefined();
  });

  it('takes the lock over a stored entry that is no longer fresh: a refresh must fill', async () => {
    const prefix = uniquePrefix();
    const roles = await makeRedisRoles(redis.url, { keyPrefix: prefix });
    const now = Date.now();
    await roles.tier.set('k', makeEntry(now - 90_000, { freshUntil: now - 30_000 }));
    expect(await roles.fillLock.claim('k', 10_000, true)).toEqual({ token: expect.any(String) });
    expect(await redis.raw.exists(roles.connection.lockKey('k'))).toBe(1);
  });
});

describe('RedisInvalidationBus', () => {
  it('delivers to the other replicas, not back to the publisher, until unsubscribed', async () => {
    const prefix = uniquePrefix();
    const [a, b] = await Promise.all([makeRedisRoles(redis.url, { keyPrefix: prefix }), makeRedisRoles(redis.url, { keyPrefix: prefix })]);
    const heardByA: InvalidationMessage[] = [];
    const heardByB: InvalidationMessage[] = [];
    a.bus.onInvalidate((message) => heardByA.push(message));
    const stop = b.bus.onInvalidate((message) => heardByB.push(message));
    expect(await a.bus.ready(15_000)).toBe(true);
    expect(await b.bus.ready(15_000)).toBe(true);

    await a.bus.publish({ kind: 'tag', tag: 'project:5' });
    await a.bus.publish({ kind: 'key', key: 'k' });
    await waitUntil(() => heardByB.length === 2, 10_000, 'B hears both messages');
    expect(heardByB).toEqual([
      { kind: 'tag', tag: 'project:5', origin: a.bus.origin },
      { kind: 'key', key: 'k', origin: a.bus.origin },
    ]);

    stop();
    await a.bus.publish({ kind: 'key', key: 'later' });
    await b.bus.publish({ kind: 'key', key: 'from-b' });
    await waitUntil(() => heardByA.length === 1, 10_000, 'A hears B');
    expect(heardByA).toEqual([{ kind: 'key', key: 'from-b', origin: b.bus.origin }]);
    expect(heardByB).toHaveLength(2);
  });

  it('ignores what is not an invalidation on its channel', async () => {
    const roles = await makeRedisRoles(redis.url);
    const heard: InvalidationMessage[] = [];
    roles.bus.onInvalidate((message) => heard.push(message));
    expect(await roles.bus.ready(15_000)).toBe(true);
    const channel = `${roles.connection.keyPrefix}invalidate`;
    await redis.raw.publish(channel, 'not json');
    await redis.raw.publish(channel, JSON.stringify({ kind: 'flush-everything' }));
    await redis.raw.publish(channel, JSON.stringify({ kind: 'key', key: 'k', origin: 'elsewhere' }));
    await waitUntil(() => heard.length === 1, 10_000, 'the valid message arrives');
    expect(heard[0]).toMatchObject({ kind: 'key', key: 'k' });
    expect(roles.connection.stats().byKind.subscribe).toBe(1);
  });
});

describe('RedisSharedStore', () => {
  it('stores nothing for a non-positive TTL', async () => {
    const { sharedStore, connection } = await makeRedisRoles(redis.url);
    await sharedStore.setJson('ns', 'k', { a: 1 }, 0);
    expect(await redis.raw.exists(connection.jsonKey('ns', 'k'))).toBe(0);
    expect(await sharedStore.getJson('ns', 'k')).toBeUndefined();
  });
});

describe('RedisSharedStore.setJsonMany', () => {
  it('stores each value under its own key, as setJson would, for the TTL', async () => {
    const { sharedStore, connection } = await makeRedisRoles(redis.url);
    await sharedStore.setJsonMany(
      'places',
      [
        ['run:1', 4],
        ['run:2', 5],
      ],
      60_000,
    );
    expect(await sharedStore.getJson('places', 'run:1')).toBe(4);
    expect(await sharedStore.getJson('places', 'run:2')).toBe(5);
    expect(await redis.raw.pttl(connection.jsonKey('places', 'run:2'))).toBeGreaterThan(59_000);
  });

  it('sends nothing once the request’s budget is spent, and counts a closed connection once however many values', async () => {
    const roles = await makeRedisRoles(redis.url);
    await roles.sharedStore.setJsonMany('places', [['run:1', 4]], 60_000, { sharedTierSpent: true });
    expect(await roles.sharedStore.getJson('places', 'run:1')).toBeUndefined();
    roles.connection.close();
    await roles.sharedStore.setJsonMany(
      'places',
      [
        ['run:1', 4],
        ['run:2', 4],
        ['run:3', 4],
      ],
      60_000,
    );
    expect(roles.connection.stats().byKind).toEqual({ json: 1 });
  });
});

describe('RedisSharedStore.lockFor: the lock role over a namespace of shared values', () => {
  it('grants one replica the lock, never a stored value, and hands a waiter the value the holder shares', async () => {
    const prefix = uniquePrefix();
    const [holder, waiter] = await Promise.all([makeRedisRoles(redis.url, { keyPrefix: prefix }), makeRedisRoles(redis.url, { keyPrefix: prefix })]);
    await holder.sharedStore.setJson('ns', 'other', { n: 0 }, 60_000);
    const [mine, theirs] = [holder.sharedStore.lockFor<{ n: number }>('ns'), waiter.sharedStore.lockFor<{ n: number }>('ns')];
    expect(await mine.claim('other', 10_000, true)).toEqual({ token: expect.any(String) });
    const claim = await mine.claim('k', 10_000, true);
    expect(claim).toEqual({ token: expect.any(String) });
    expect(await redis.raw.pttl(holder.connection.jsonKey('ns-lock', 'k'))).toBeGreaterThan(9_000);
    expect(await theirs.claim('k', 10_000, true)).toBeUndefined();
    const waiting = theirs.waitFor('k', 10_000);
    await holder.sharedStore.setJson('ns', 'k', { n: 1 }, 60_000);
    await mine.unlock('k', (claim as { token: string }).token);
    expect(await waiting).toEqual({ n: 1 });
    expect(await redis.raw.exists(holder.connection.jsonKey('ns-lock', 'k'))).toBe(0);
  });

  it('gives up waiting once the lock is gone without a value, refusing (and counting) what the reader does not accept', async () => {
    const prefix = uniquePrefix();
    const [holder, waiter] = await Promise.all([makeRedisRoles(redis.url, { keyPrefix: prefix }), makeRedisRoles(redis.url, { keyPrefix: prefix })]);
    const claim = await holder.sharedStore.lockFor('ns').claim('k', 60_000, false);
    await holder.sharedStore.setJson('ns', 'k', 'not a number', 60_000);
    let settled = false;
    const waiting = waiter.sharedStore
      .lockFor<number>('ns', (v) => typeof v === 'number')
      .waitFor('k', 20_000)
      .finally(() => (settled = true));
    await new Promise((r) => setTimeout(r, 200));
    expect(settled).toBe(false);
    await holder.sharedStore.lockFor('ns').unlock('k', (claim as { token: string }).token);
    expect(await waiting).toBeUndefined();
    expect(waiter.connection.stats().byKind['invalid']).toBeGreaterThanOrEqual(1);
  });
});
