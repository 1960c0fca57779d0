/**
 * Revocation promises across replicas: two tm-cache proxies sharing a private redis-server
 * (started by the helper on a free port, never the machine's), one fake clock, the real emulator.
 * Each test uses its own key prefix, so no test reads what another stored.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type DeepPartial, type TestProxy } from '../helpers/proxy.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { until } from '../helpers/wait.js';

let clock = Date.now();
const now = () => clock;
let emulator: TestEmulator;
let redis: RedisHandle;
let client: Redis;
const proxies: TestProxy[] = [];

beforeAll(async () => {
  emulator = await startTestEmulator();
  redis = await startRedis();
  client = new Redis(redis.url);
});
afterAll(async () => {
  client?.disconnect();
  await Promise.all(proxies.map((p) => p.close()));
  await emulator?.close();
  await redis?.stop();
});
beforeEach(async () => {
  await emulator.resetStats();
});

/** Two replicas sharing Redis under `prefix`. */
async function twoReplicas(prefix: string, overrides: DeepPartial<Config> = {}): Promise<[TestProxy, TestProxy]> {
  const config = { ...overrides, cache: { redis: { url: redis.url, keyPrefix: prefix, commandTimeoutMs: 200 } } };
  const pair: [TestProxy, TestProxy] = [await startTestProxy(emulator.url, config, now), await startTestProxy(emulator.url, config, now)];
  proxies.push(...pair);
  return pair;
}

async function freshToken(i: number): Promise<{ token: string; userId: number; projectId: number }> {
  const m = emulator.tokens.member(i);
  const issued = await emulator.mutate({ op: 'issue_token', user_id: m.user_id });
  return { token: issued.token as string, userId: m.user_id, projectId: m.project_ids[0]! };
}

const keysUnder = async (pattern: string): Promise<number> => (await client.keys(pattern)).length;

describe('identities shared between replicas', () => {
  it('keep the expiry the first replica stored: the second never trusts a token past it', async () => {
    const ttlMs = 10_000;
    const [a, b] = await twoReplicas('rv1:', { identity: { ttlMs } });
    const { token } = await freshToken(0);
    const path = '/api/v1/projects?per_page=15';
    expect((await a.get(path, token)).status).toBe(200);
    await until(async () => (await keysUnder('rv1:json:identity:*')) === 1);
    clock += ttlMs - 2_000;
    expect((await b.get(path, token)).status).toBe(200);
    // B took the identity from Redis: one GET /user in all.
    expect((await emulator.stats()).by_route['GET /api/v1/user']).toBe(1);
    await emulator.mutate({ op: 'revoke_token', token });
    clock += 4_000; // past A's expiry, within what B would have granted from its own read
    const refused = await b.get(path, token);
    expect(refused.status).toBe(401);
  });

  it('forget a token refused on one replica on every replica', async () => {
    const [a, b] = await twoReplicas('rv2:', { identity: { ttlMs: 10 * 3_600_000 } });
    const { token } = await freshToken(1);
    const cached = '/api/v1/projects?per_page=25';
    for (const p of [a, b]) expect((await p.get(cached, token)).status).toBe(200);
    expect((await b.get(cached, token)).headers['cache-status']).toMatch(/^tm-cache; hit;/);
    await emulator.mutate({ op: 'revoke_token', token });
    // A learns of the revocation from a fill (401); B holds the identity and a fresh hit in memory.
    // Another list than the one cached (another filter): a page of the same list would be derived from it, as a hit is served.
    expect((await a.get('/api/v1/projects?is_completed=0', token)).status).toBe(401);
    await until(async () => (await b.get(cached, token)).status === 401);
    // The bus carries the credential's HMAC, never the token: nothing in Redis holds the token either.
    for (const key of await client.keys('rv2:*')) expect(key).not.toContain(token);
  });
});

describe('project access revoked upstream, across replicas', () => {
  it('shares confirmations, and a refusal on one replica drops the user’s answers of the project on the other', async () => {
    const confirmMs = 30_000;
    const [a, b] = await twoReplicas('rv3:', { identity: { ttlMs: 10 * 3_600_000 }, access: { projectConfirmMs: confirmMs } });
    const { token, userId, projectId } = await freshToken(2);
    const closed = await httpGet(`${emulator.url}/api/v1/projects/${projectId}/runs?is_closed=1`, token);
    const runId = closed.json().result[0].id as number;
    const path = `/api/v1/runs/${runId}`;
    expect((await a.get(path, token)).status).toBe(200);
    // The entry reaches Redis after A's confirmation was sent there, on the same connection.
    await until(async () => (await keysUnder(`rv3:tag:run:${runId}`)) === 1);
    // B reads the entry from Redis and A's confirmation with it: no request reaches the instance.
    await emulator.resetStats();
    expect((await b.get(path, token)).headers['cache-status']).toMatch(/^tm-cache; hit;.*detail=redis$/);
    expect((await emulator.stats()).total).toBe(0);
    await emulator.mutate({ op: 'revoke_project', user_id: userId, project_id: projectId });
    try {
      clock += confirmMs + 1_000;
      expect((await a.get(path, token)).status).toBe(404);
      await emulator.mutate({ op: 'grant_project', user_id: userId, project_id: projectId });
      // B confirms again (access is back) but holds nothing of the project any more: A's refusal dropped it there too.
      await until(async () => /^tm-cache; fwd=uri-miss; fwd-status=200/.test(String((await b.get(path, token)).headers['cache-status'])));
    } finally {
      await emulator.mutate({ op: 'grant_project', user_id: userId, project_id: projectId });
    }
  });
});
