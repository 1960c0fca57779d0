/**
 * Many replicas, one cache: tm-cache proxies sharing a real redis-server (started on a free
 * port by the helper, never the machine's shared one) in front of the real emulator.
 */
import { Redis } from 'ioredis';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { until } from '../helpers/wait.js';
import { startTestProxy, type DeepPartial, type TestProxy } from '../helpers/proxy.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';

const KEY_1 = Buffer.alloc(32, 1).toString('hex');
const KEY_2 = Buffer.alloc(32, 2).toString('hex');

let emulator: TestEmulator;
let redis: RedisHandle;
const proxies: TestProxy[] = [];

function redisOverrides(extra: DeepPartial<Config['cache']['redis']> = {}): DeepPartial<Config> {
  return {
    cache: {
      redis: { url: redis.url, commandTimeoutMs: 200, encryptionKeys: { k1: KEY_1 }, encryptionKeyId: 'k1', ...extra },
    },
  };
}

async function replica(extra: DeepPartial<Config['cache']['redis']> = {}): Promise<TestProxy> {
  const p = await startTestProxy(emulator.url, redisOverrides(extra));
  proxies.push(p);
  return p;
}

beforeAll(async () => {
  emulator = await startTestEmulator();
  redis = await startRedis();
});
afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  await emulator?.close();
  await redis?.stop();
});
beforeEach(async () => {
  await emulator.resetStats();
});

describe('two replicas sharing one Redis', () => {
  it('answers on the second replica what the first filled, without reaching the instance', async () => {
    const a = await replica();
    const { token, project_ids } = emulator.tokens.member(0);
    const path = `/api/v1/projects/${project_ids[0]}/runs?expands=users`;
    const client = new Redis(redis.url);
    const before = await client.dbsize();
    const filled = await a.get(path, token);
    // The Redis write never delays the response: wait for it to land.
    await until(async () => (await client.dbsize()) >= before + 3); // identity, entry, its project tag
    client.disconnect();
    await emulator.resetStats();
    const c = await replica();
    const fromRedis = await c.get(path, token);
    expect(fromRedis.headers['cache-status']).toMatch(/^tm-cache; hit; ttl=\d+; detail=redis$/);
    expect(fromRedis.body.equals(filled.body)).toBe(true);
    expect((await c.get(path, token)).headers['cache-status']).toMatch(/detail=memory/);
    // Redis holds the body gzip-encoded: a gzip client of another fresh replica gets those bytes.
    const d = await replica();
    const gz = await d.get(path, token, { 'accept-encoding': 'gzip' });
    expect(gz.headers['cache-status']).toMatch(/detail=redis/);
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(gz.body).equals(filled.body)).toBe(true);
    // Neither the answer nor the caller's identity needed the instance: both came from Redis.
    expect((await emulator.stats()).total).toBe(0);
  });

  it('drops an entry on every replica when a write through one of them invalidates it', async () => {
    const [a, b] = [await replica(), await replica()];
    const { token, project_ids } = emulator.tokens.member(1);
    const path = `/api/v1/projects/${project_ids[0]}/milestones?per_page=25`;
    await a.get(path, token);
    await until(async () => /hit/.test(String((await b.get(path, token)).headers['cache-status'])));
    const write = await fetch(`${a.url}/api/v1/projects/${project_ids[0]}/milestones`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{}',
    });
    expect(write.status).toBeLessThan(300);
    await until(async () => /fwd=uri-miss/.test(String((await b.get(path, token)).headers['cache-status'])));
  });

  it('fills a key once when several replicas miss it at the same moment', async () => {
    const replicas = [await replica(), await replica(), await replica()];
    const { token, project_ids } = emulator.tokens.member(2);
    for (const r of replicas) await r.get('/api/v1/user', token);
    await emulator.resetStats();
    const path = `/api/v1/projects/${project_ids[0]}/sessions?per_page=50&expands=users`;
    await emulator.faults({ latency_ms: 150 });
    const answers = await Promise.all(replicas.flatMap((r) => Array.from({ length: 20 }, () => r.get(path, token))));
    await emulator.clearFaults();
    expect(answers.every((res) => res.status === 200)).toBe(true);
    expect(new Set(answers.map((res) => res.body.toString())).size).toBe(1);
    expect((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/sessions']).toBe(1);
  });
});

describe('what Redis holds', () => {
  it('holds no token and, encrypted, no fragment of any body', async () => {
    const p = await replica();
    const admin = emulator.tokens.admin();
    const member = emulator.tokens.member(0);
    const bodies = [await p.get('/api/v1/users?expands=roles', admin.token), await p.get(`/api/v1/projects/${member.project_ids[0]}/runs`, member.token)];
    const client = new Redis(redis.url);
    try {
      await until(async () => (await client.dbsize()) > 4);
      const keys = await client.keys('*');
      const values = await Promise.all(keys.map(async (k) => ((await client.type(k)) === 'string' ? client.getBuffer(k) : null)));
      const everything = Buffer.concat([Buffer.from(keys.join('\n')), ...values.filter((v): v is Buffer => v !== null)]);
      for (const t of [admin.token, member.token]) expect(everything.includes(t)).toBe(false);
      for (const b of bodies) {
        const json = b.json();
        const name = (json.result[0] as { name: string }).name;
        expect(name.length).toBeGreaterThan(3);
        expect(everything.includes(name)).toBe(false);
        expect(everything.includes('"created_at"')).toBe(false);
      }
    } finally {
      client.disconnect();
    }
  });

  it('reads entries sealed with a rotated-out key and seals new ones with the new key', async () => {
    const old = await replica();
    const { token, project_ids } = emulator.tokens.member(0);
    const path = `/api/v1/projects/${project_ids[0]}/automation/sources`;
    // Redis writes never delay a response: each step waits for the previous one's entry to land.
    const client = new Redis(redis.url);
    const landed = (query: string) => until(async () => (await client.keys(`*listAutomationSources|${project_ids[0]}|${query}}`)).length === 1);
    await old.get(path, token);
    await landed('');
    const rotated = await replica({ encryptionKeys: { k1: KEY_1, k2: KEY_2 }, encryptionKeyId: 'k2' });
    expect((await rotated.get(path, token)).headers['cache-status']).toMatch(/detail=redis/);
    // Other lists than the first (other filters): a page of the first list would be derived from it, never stored.
    await rotated.get(`/api/v1/projects/${project_ids[0]}/automation/sources?is_retired=0&per_page=15`, token);
    await landed('is_retired=0&per_page=15');
    client.disconnect();
    const onlyNew = await replica({ encryptionKeys: { k2: KEY_2 }, encryptionKeyId: 'k2' });
    // With `cache.sharing: project`, the member's proofs (confirmation, grant) in Redis are sealed
    // with k1 as well: unreadable here, so a request of their own proves them again first.
    expect((await onlyNew.get(`/api/v1/projects/${project_ids[0]}/automation/sources?is_retired=1&per_page=50`, token)).status).toBe(200);
    await emulator.resetStats();
    expect((await onlyNew.get(`/api/v1/projects/${project_ids[0]}/automation/sources?is_retired=0&per_page=15`, token)).headers['cache-status']).toMatch(
      /detail=redis/,
    );
    // The old entry is sealed with k1, which this replica does not have: a miss, never an error.
    const res = await onlyNew.get(path, token);
    expect(res.status).toBe(200);
    expect(res.headers['cache-status']).toMatch(/fwd=uri-miss/);
  });
});

describe('when Redis fails', () => {
  it('keeps answering while Redis is killed under load, reports degraded readiness, and resumes sharing when it returns', async () => {
    const [a, b] = [await replica(), await replica()];
    const { token, project_ids } = emulator.tokens.member(0);
    const paths = [15, 25, 50, 100].map((pp) => `/api/v1/projects/${project_ids[0]}/runs?per_page=${pp}&is_closed=1`);
    let stop = false;
    const failures: number[] = [];
    let served = 0;
    const load = (async () => {
      while (!stop) {
        const all = await Promise.all(paths.flatMap((p) => [a.get(p, token), b.get(p, token)]));
        for (const r of all) if (r.status !== 200) failures.push(r.status);
        served += all.length;
      }
    })();
    await until(() => served > 50);
    await redis.kill();
    const killedAt = served;
    await until(() => served > killedAt + 100);
    const ready = await fetch(`${a.managementUrl}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'degraded', checks: { redis: { status: 'degraded' } } });
    await redis.restart();
    await until(async () => ((await (await fetch(`${a.managementUrl}/readyz`)).json()) as { status: string }).status === 'ok');
    stop = true;
    await load;
    expect(failures).toEqual([]);

    // Sharing resumes: a fresh replica reads what `a` fills now.
    const path = `/api/v1/projects/${project_ids[0]}/runs?per_page=15&is_closed=0`;
    await a.get(path, token);
    const c = await replica();
    // With `cache.sharing: project`, the member's proofs shared while Redis was down were lost
    // with it: one request of their own on the new replica proves them again (another list: a page
    // of the same list covering the question's would answer it derived, not from Redis).
    expect((await c.get(`/api/v1/projects/${project_ids[0]}/runs?per_page=25&is_closed=1`, token)).status).toBe(200);
    await until(async () => /detail=redis/.test(String((await c.get(path, token)).headers['cache-status'])));
  });
});
