/**
 * A token's first look-up, coalesced across replicas: three replicas sharing one real
 * redis-server see the same new token at once and ask the real emulator `GET /user` once; the
 * others wait for the identity the first one shares. A refused token stays refused everywhere;
 * a lock left by a replica that died delays the others by at most `cache.redis.lockWaitMs`.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { hmacCredential } from '../../src/cache/key.js';
import { normalizeAuthorization } from '../../src/proxy/callers/identity-memo.js';
import { findFreePort } from '../helpers/ports.js';
import { replicasOverEmulatorAndRedis } from '../helpers/replicas.js';

const env = replicasOverEmulatorAndRedis();
const HMAC_SECRET = 'ab'.repeat(32);
const USER_ROUTE = 'GET /api/v1/user';

async function threeReplicas(prefix: string, lockWaitMs = 2_000) {
  const options = { identity: { hmacSecret: HMAC_SECRET }, cache: { redis: { url: env.redis.url, keyPrefix: prefix, commandTimeoutMs: 2_000, lockWaitMs } } };
  return Promise.all([env.replica(options), env.replica(options), env.replica(options)]);
}

describe('a new token seen by several replicas at once', () => {
  it('costs one GET /user: the other replicas wait for the identity the first one shares', async () => {
    const replicas = await threeReplicas('coalesce:');
    const m = env.emulator.tokens.member(0);
    const token = (await env.emulator.mutate({ op: 'issue_token', user_id: m.user_id })).token as string;
    await env.emulator.resetStats();
    const answers = await Promise.all(
      replicas.flatMap((p) => [1, 2, 3].map((i) => p.get(`/api/v1/projects/${m.project_ids[0]}/runs?per_page=15&page=${i}`, token))),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(9).fill(200));
    expect((await env.emulator.stats()).by_route[USER_ROUTE]).toBe(1);
  });

  it('a refused token is refused on every replica, each asking for itself once the first is done', async () => {
    const replicas = await threeReplicas('refused:');
    await env.emulator.resetStats();
    const answers = await Promise.all(replicas.map((p) => p.get('/api/v1/projects', 'no-such-token-0123456789')));
    expect(answers.map((a) => a.status)).toEqual([401, 401, 401]);
    const asked = (await env.emulator.stats()).by_route[USER_ROUTE] ?? 0;
    expect(asked).toBeGreaterThanOrEqual(1);
    expect(asked).toBeLessThanOrEqual(3);
  });

  it('a lock left by a replica that died delays the others by at most lockWaitMs, then they ask themselves', async () => {
    const [p] = await threeReplicas('dead:', 300);
    const m = env.emulator.tokens.member(1);
    const token = (await env.emulator.mutate({ op: 'issue_token', user_id: m.user_id })).token as string;
    // The lock as a replica would have taken it for this token, never released.
    const credentialId = hmacCredential(Buffer.from(HMAC_SECRET, 'hex'), normalizeAuthorization(`Bearer ${token}`));
    await env.client.set(`dead:json:identity-lock:${credentialId}`, 'a-dead-replica', 'PX', 60_000);
    await env.emulator.resetStats();
    const started = performance.now();
    const res = await p!.get('/api/v1/projects', token);
    expect(res.status).toBe(200);
    expect((await env.emulator.stats()).by_route[USER_ROUTE]).toBe(1);
    // It waited (the lock was seen), and not for the lock's 60 s: a bound, not a timing assertion.
    expect(performance.now() - started).toBeGreaterThanOrEqual(250);
    expect(performance.now() - started).toBeLessThan(30_000);
  });
});

describe('a replica starting with Redis configured', () => {
  async function redisCheck(managementUrl: string): Promise<{ status: string; detail?: string }> {
    const res = await request(`${managementUrl}/readyz`);
    return ((await res.body.json()) as { checks: { redis: { status: string; detail?: string } } }).checks.redis;
  }

  // With a configured secret nothing else at start needs Redis: before, such a replica listened
  // while still connecting, and its first requests each missed Redis (3 GET /user, not 1, above).
  it('listens only once connected, so its first request already shares the tier', async () => {
    const replicas = await threeReplicas('start:');
    const checks = await Promise.all(replicas.map((p) => redisCheck(p.managementUrl)));
    expect(checks).toEqual([{ status: 'ok' }, { status: 'ok' }, { status: 'ok' }]);
  });

  it('waits at most connectTimeoutMs for a Redis that is not there, then serves from memory and upstream', async () => {
    const port = await findFreePort();
    const started = performance.now();
    const p = await env.replica({ identity: { hmacSecret: HMAC_SECRET }, cache: { redis: { url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 300 } } });
    const tookMs = performance.now() - started;
    expect(tookMs).toBeGreaterThanOrEqual(250);
    expect(tookMs).toBeLessThan(30_000);
    expect((await redisCheck(p.managementUrl)).status).toBe('degraded');
    const m = env.emulator.tokens.member(2);
    expect((await p.get(`/api/v1/projects/${m.project_ids[0]}/runs`, m.token)).status).toBe(200);
  });
});
