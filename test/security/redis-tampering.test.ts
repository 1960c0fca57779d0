/**
 * A value in Redis can only be used under the key it was written for. An attacker with write
 * access to Redis (but not the encryption keys nor the identity HMAC secret) copies values from
 * one key to another with an ordinary client, as `redis-cli COPY ... REPLACE` would; the victim,
 * served by a replica that has nothing in memory yet, must see only what upstream shows them.
 *
 * Both stored forms are attacked: sealed (AES-256-GCM, the key in the associated data) and
 * unencrypted (an HMAC over key and value, its key derived from `identity.hmacSecret`).
 */
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { hmacCredential, KEY_VERSION } from '../../src/cache/key.js';
import type { Config } from '../../src/config/schema.js';
import { normalizeAuthorization } from '../../src/proxy/callers/identity-memo.js';
import type { TokenInfo } from '../helpers/emulator.js';
import { httpGet, type DeepPartial, type TestProxy } from '../helpers/proxy.js';
import { redisTierOf, replicasOverEmulatorAndRedis } from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

const HMAC_SECRET = Buffer.alloc(32, 9);
const ENCRYPTION_KEY = Buffer.alloc(32, 3).toString('hex');

const env = replicasOverEmulatorAndRedis();

const FORMS: Array<[string, DeepPartial<Config['cache']['redis']>]> = [
  ['sealed', { encryptionKeys: { k1: ENCRYPTION_KEY }, encryptionKeyId: 'k1' }],
  ['unencrypted', {}],
];

describe.each(FORMS)('with %s values in Redis', (form, sealing) => {
  const prefix = `${form}:`;
  const entryKey = (scope: string, op: string, query = ''): string => `${prefix}{${scope}|${KEY_VERSION}|${op}||${query}}`;
  const identityKey = (token: string): string => `${prefix}json:identity:${hmacCredential(HMAC_SECRET, normalizeAuthorization(`Bearer ${token}`))}`;

  /** A replica with nothing in memory: whatever it serves comes from Redis or upstream. */
  async function replica(): Promise<TestProxy> {
    const overrides: DeepPartial<Config> = {
      identity: { hmacSecret: HMAC_SECRET.toString('hex') },
      // Derived answers off: a page past the last of a list held (in memory or recorded in Redis) would be derived, not filled under the lock.
      cache: { redis: { url: env.redis.url, keyPrefix: prefix, commandTimeoutMs: 1_000, ...sealing }, derive: { enabled: false } },
    };
    const p = await env.replica(overrides);
    // Serving may start before Redis is connected: wait, so that the test reads through it.
    expect(await redisTierOf(p).connection.ready(5_000)).toBe(true);
    return p;
  }

  const statsOf = (p: TestProxy) => redisTierOf(p).connection.stats();
  /** What the instance itself answers this token: what the victim must see. */
  const upstreamBody = async (path: string, who: TokenInfo): Promise<unknown> => (await httpGet(env.emulator.url + path, who.token)).json();

  let admin: TokenInfo;
  let member: TokenInfo;
  let filler: TestProxy;
  beforeAll(async () => {
    admin = env.emulator.tokens.admin();
    member = env.emulator.tokens.member(0);
    filler = await replica();
    // The admin's answers land in Redis: the user list (admin scope), their verification, their identity.
    expect((await filler.get('/api/v1/users', admin.token)).status).toBe(200);
    await until(async () => (await env.client.exists(entryKey('admin', 'listUsers'), `${prefix}json:admin:${admin.user_id}`, identityKey(admin.token))) === 3);
  });
  beforeEach(async () => {
    await env.emulator.resetStats();
  });

  it("serves a user none of an entry copied over their own key (COPY admin's user list → u:<id> listProjects)", async () => {
    const victimKey = entryKey(`u:${member.user_id}`, 'listProjects');
    expect(await env.client.copy(entryKey('admin', 'listUsers'), victimKey, 'REPLACE')).toBe(1);
    const victim = await replica();
    const res = await victim.get('/api/v1/projects', member.token);
    expect(res.status).toBe(200);
    expect(res.headers['cache-status']).not.toMatch(/hit/);
    expect(res.json()).toEqual(await upstreamBody('/api/v1/projects', member));
    // Counted on every read (the look-up, and the fill lock's look for an entry stored meanwhile),
    // never deleted, and overwritten by the member's own answer when the victim refills it.
    expect(statsOf(victim).byKind['tampered']).toBeGreaterThanOrEqual(1);
    await until(async () => (await victim.get('/api/v1/projects', member.token)).headers['cache-status']?.includes('hit') === true);
    const fresh = await replica();
    expect((await fresh.get('/api/v1/projects', member.token)).json()).toEqual(await upstreamBody('/api/v1/projects', member));
  });

  it('does not make a member a verified admin when the admin verification is copied over theirs', async () => {
    await env.client.copy(`${prefix}json:admin:${admin.user_id}`, `${prefix}json:admin:${member.user_id}`, 'REPLACE');
    const victim = await replica();
    const res = await victim.get('/api/v1/users', member.token);
    // The instance's own refusal, relayed; never the admins' shared user list.
    expect(res.status).toBe(403);
    expect(res.headers['cache-status']).not.toMatch(/hit/);
    expect(statsOf(victim).byKind['tampered']).toBe(1);
  });

  it("does not make a caller another user when an identity is copied over theirs (admin's → member's token)", async () => {
    await env.client.copy(identityKey(admin.token), identityKey(member.token), 'REPLACE');
    const victim = await replica();
    const path = `/api/v1/projects?page=2`;
    const res = await victim.get(path, member.token);
    // The member was identified by the instance, not by the planted mapping.
    expect((await env.emulator.stats()).by_route['GET /api/v1/user']).toBe(1);
    expect(res.status).toBe(200);
    expect(res.json()).toEqual(await upstreamBody(path, member));
    expect(statsOf(victim).byKind['tampered']).toBe(1);
  });

  it('does not let a replica waiting on the fill lock take an entry copied under the key it waits for', async () => {
    const victimKey = entryKey(`u:${member.user_id}`, 'listProjects', 'page=3');
    // The attacker holds the fill lock so the victim waits, then plants the entry and releases it.
    await env.client.set(`${victimKey}:lock`, 'attacker', 'PX', 5_000);
    const victim = await replica();
    const pending = victim.get('/api/v1/projects?page=3', member.token);
    await until(async () => statsOf(victim).total === 0 && (await env.client.pttl(`${victimKey}:lock`)) > 0);
    await new Promise((resolve) => setTimeout(resolve, 100)); // the victim is polling by now
    // Planted and released at once (one transaction): the victim's next poll sees both.
    await env.client.multi().copy(entryKey('admin', 'listUsers'), victimKey, 'REPLACE').del(`${victimKey}:lock`).exec();
    const res = await pending;
    expect(res.status).toBe(200);
    expect(res.json()).toEqual(await upstreamBody('/api/v1/projects?page=3', member));
    expect(statsOf(victim).byKind['tampered']).toBe(1);
  });
});
