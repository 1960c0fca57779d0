/**
 * A slow Redis costs a request at most one command timeout: after a timeout the request skips
 * Redis (its budget is spent), and after `breakerThreshold` consecutive timeouts every request
 * skips it for `breakerCooldownMs` while /readyz says `degraded`.
 *
 * A real redis-server (private, on a free port) is stalled with `CLIENT PAUSE <ms> ALL`: it
 * accepts commands and answers none until the pause ends. What is counted is the Redis commands
 * tm-cache gave up on (the connection's failure counts, by kind) and the ones it never sent
 * (`skipped`), not wall-clock time.
 */
import { Redis } from 'ioredis';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { RedisTier } from '../../src/cache/redis/tier.js';
import type { Config } from '../../src/config/schema.js';
import type { DeepPartial, TestProxy } from '../helpers/proxy.js';
import { readGauge } from '../helpers/metrics.js';
import { redisTierOf, replicasOverEmulatorAndRedis } from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

const COMMAND_TIMEOUT_MS = 100;
/** Longer than any test below needs Redis stalled; each test waits for its pause to end. */
const PAUSE_MS = 2_500;

const env = replicasOverEmulatorAndRedis();

async function replica(redisSettings: DeepPartial<Config['cache']['redis']>): Promise<TestProxy> {
  await env.client.ping(); // no pause of an earlier test still in effect
  return env.replica({ cache: { redis: { url: env.redis.url, commandTimeoutMs: COMMAND_TIMEOUT_MS, ...redisSettings } } });
}

function statsOf(p: TestProxy): ReturnType<RedisTier['connection']['stats']> {
  return redisTierOf(p).connection.stats();
}

/** A first request by `token`, then until its fill lock is released: nothing of it is left in flight. */
async function warmUp(p: TestProxy, token: string): Promise<void> {
  expect((await p.get('/api/v1/projects', token)).status).toBe(200);
  await until(async () => (await env.client.keys('*:lock')).length === 0);
}

/**
 * A replica whose caller `token` is known, then the server stalled: from now until `PAUSE_MS`
 * later it answers nothing. `ended` resolves when it answers again.
 */
async function stalledReplica(settings: DeepPartial<Config['cache']['redis']>, token: string): Promise<{ p: TestProxy; ended: Promise<void> }> {
  const p = await replica(settings);
  await warmUp(p, token);
  await env.client.call('CLIENT', 'PAUSE', String(PAUSE_MS), 'ALL');
  const probe = new Redis(env.redis.url);
  return { p, ended: probe.ping().then(() => probe.disconnect()) };
}

async function readiness(p: TestProxy): Promise<{ status: string; checks: { redis: { status: string; detail?: string } } }> {
  const res = await request(`${p.managementUrl}/readyz`);
  expect(res.statusCode).toBe(200);
  return (await res.body.json()) as { status: string; checks: { redis: { status: string; detail?: string } } };
}

/** Failures by kind that happened between two stats snapshots. */
function delta(before: ReturnType<typeof statsOf>, after: ReturnType<typeof statsOf>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [kind, n] of Object.entries(after.byKind)) if (n !== (before.byKind[kind] ?? 0)) out[kind] = n - (before.byKind[kind] ?? 0);
  return out;
}

describe('a stalled Redis', () => {
  it('costs a miss exactly one timed-out command, and a first sight of a token one too', async () => {
    // The breaker out of the way: this is the per-request budget alone.
    const [m0, m1] = [env.emulator.tokens.member(0), env.emulator.tokens.member(1)];
    // m0's identity is in the process's memo; m1 is not known yet.
    const { p, ended } = await stalledReplica({ breakerThreshold: 1_000 }, m0.token);
    for (const page of [2, 3, 4]) {
      const before = statsOf(p);
      const res = await p.get(`/api/v1/projects/${m0.project_ids[0]}/runs?per_page=25&page=${page}`, m0.token);
      expect(res.status).toBe(200);
      // Before the budget: the entry lookup, the fill lock, the wait for another replica's fill
      // and the background write each timed out (4); now the lookup alone does.
      const { budget = 0, ...perRequest } = delta(before, statsOf(p));
      expect(perRequest).toEqual({ get: 1 });
      // The fleet budget's lease (fleet-budget.ts) is one command per few tokens, not per request,
      // and falls back to the replica's share when it times out: at most one here.
      expect(budget).toBeLessThanOrEqual(1);
    }
    const before = statsOf(p);
    expect((await p.get(`/api/v1/projects/${m1.project_ids[0]}/runs`, m1.token)).status).toBe(200);
    // A token not seen yet: the shared identity lookup times out, then nothing else is sent
    // (not the admin verification, the entry, the lock nor the identity write); the budget's
    // lease as above, at most one (its share after an unanswered lease starts empty, so the
    // request may be the one that asks again).
    const { budget = 0, ...firstSight } = delta(before, statsOf(p));
    expect(firstSight).toEqual({ json: 1 });
    expect(budget).toBeLessThanOrEqual(1);
    await ended;
  });

  it('is skipped by every request once breakerThreshold timeouts came in a row, and /readyz says why', async () => {
    const member = env.emulator.tokens.member(2);
    const { p, ended } = await stalledReplica({ breakerThreshold: 3, breakerCooldownMs: 60_000 }, member.token);
    const before = statsOf(p);
    const misses = 8;
    for (let page = 2; page < 2 + misses; page++) {
      expect((await p.get(`/api/v1/projects/${member.project_ids[0]}/milestones?page=${page}`, member.token)).status).toBe(200);
    }
    const after = statsOf(p);
    // Three timeouts open the breaker; the other five misses sent nothing to Redis.
    expect(after.total - before.total).toBe(3);
    expect(after.skipped - before.skipped).toBeGreaterThanOrEqual(misses - 3);
    const body = await readiness(p);
    expect(body.status).toBe('degraded');
    // In words, not the client library's: what happened, what is done meanwhile, when it is tried again.
    expect(body.checks.redis.detail).toMatch(
      /^Redis did not answer 3 commands in a row \(timed out\): skipped, trying it again in \d+ s: serving from memory and upstream$/,
    );
    await ended;
  });

  it('is probed on a timer once the breaker opened: an idle replica reports Redis up again without any request', async () => {
    const member = env.emulator.tokens.member(1);
    const { p, ended } = await stalledReplica({ breakerThreshold: 2, breakerCooldownMs: 300 }, member.token);
    for (const page of [2, 3]) await p.get(`/api/v1/projects?page=${page}`, member.token);
    expect((await readiness(p)).status).toBe('degraded');
    expect(await readGauge(p.managementUrl, 'tm_cache_redis_up')).toBe(0);
    await ended;
    // No request from now on: only the replica's own probe can find Redis back.
    await until(async () => (await readiness(p)).status === 'ok' && (await readGauge(p.managementUrl, 'tm_cache_redis_up')) === 1, 5_000);
  });

  it('is used again after the cool-down, once one probe command succeeds', async () => {
    const member = env.emulator.tokens.member(0);
    const { p, ended } = await stalledReplica({ breakerThreshold: 2, breakerCooldownMs: 300 }, member.token);
    for (const page of [2, 3]) await p.get(`/api/v1/projects?page=${page}`, member.token);
    const ready = async (): Promise<string> => (await readiness(p)).status;
    expect(await ready()).toBe('degraded');
    await ended;
    // Past the cool-down the next request's lookup is the probe: it succeeds, the breaker closes.
    await until(async () => (await p.get(`/api/v1/projects?page=9`, member.token)).status === 200 && (await ready()) === 'ok', 5_000);
    const before = statsOf(p);
    const res = await p.get(`/api/v1/projects/${member.project_ids[0]}/runs?page=7`, member.token);
    expect(res.headers['cache-status']).toMatch(/fwd=uri-miss/);
    expect(statsOf(p).total).toBe(before.total);
  });
});

describe('an invalidation while Redis is stalled', () => {
  const ADMIN_TOKEN = 'slow-redis-admin-token-0123456789';
  /** Shorter than INVALIDATION_WAIT_MS (tiered.ts): an invalidation outlasts it by retrying. */
  const SHORT_PAUSE_MS = 400;
  /** Longer than INVALIDATION_WAIT_MS: a purge answers before Redis does. */
  const LONG_PAUSE_MS = 3_000;

  /** The entries' keys matching `pattern`, not the sets naming pages derived answers may come from (`derive:`: hints, each checked when read). */
  const entryKeys = async (pattern: string): Promise<string[]> => (await env.client.keys(pattern)).filter((key) => !key.includes('derive:'));

  /** Two replicas of one Redis; `token` asked `path` on A (filled, shared) then on B (Redis hit, now in B's memory). */
  async function twoReplicasHolding(path: string, token: string, redisSettings: DeepPartial<Config['cache']['redis']> = {}): Promise<[TestProxy, TestProxy]> {
    await env.client.ping();
    // Derived answers off: `path` must be filled on A and read from Redis on B, not derived from a list an earlier test left in Redis.
    const settings = {
      cache: { redis: { url: env.redis.url, commandTimeoutMs: COMMAND_TIMEOUT_MS, ...redisSettings }, derive: { enabled: false } },
      admin: { token: ADMIN_TOKEN },
    };
    const [a, b] = [await env.replica(settings), await env.replica(settings)];
    expect((await a.get(path, token)).status).toBe(200);
    await until(async () => (await env.client.keys('*:lock')).length === 0);
    expect((await b.get(path, token)).headers['cache-status']).toMatch(/hit; .*detail=redis/);
    expect((await b.get(path, token)).headers['cache-status']).toMatch(/hit; .*detail=memory/);
    return [a, b];
  }

  /** Stalls the server (`ALL`: every command; `WRITE`: writes and PUBLISH, reads go on); resolves when it answers again. */
  async function stall(ms: number, mode: 'ALL' | 'WRITE'): Promise<{ ended: Promise<void> }> {
    await env.client.call('CLIENT', 'PAUSE', String(ms), mode);
    const probe = new Redis(env.redis.url);
    return { ended: probe.set('probe', '1').then(() => probe.disconnect()) };
  }

  const isMiss = (res: { headers: Record<string, unknown> }): boolean => /fwd=uri-miss/.test(String(res.headers['cache-status']));
  const servedFromMemory = (res: { headers: Record<string, unknown> }): boolean => /hit;.*detail=memory/.test(String(res.headers['cache-status']));

  async function purge(p: TestProxy, body: object): Promise<{ status: number; json: any }> {
    const res = await request(`${p.managementUrl}/admin/purge`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.statusCode, json: await res.body.json() };
  }

  it('from a write is retried: the pre-write answer stops being served, from Redis and from the other replica’s memory', async () => {
    const member = env.emulator.tokens.member(0);
    const project = member.project_ids[0]!;
    const path = `/api/v1/projects/${project}`;
    const [a, b] = await twoReplicasHolding(path, member.token);
    const renamed = `Renamed during a stall ${project}`;
    const { ended } = await stall(SHORT_PAUSE_MS, 'ALL');
    // The instance changes, and the write that says so goes through A while Redis answers nothing.
    await env.emulator.mutate({ op: 'rename_project', project_id: project, name: renamed });
    const res = await request(`${a.url}${path}`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${member.token}`, 'content-type': 'application/json' },
      body: '{}',
    });
    await res.body.dump();
    expect(res.statusCode).toBeLessThan(300);
    await ended;
    const nameOn = async (p: TestProxy): Promise<string> => (await p.get(path, member.token)).json().result.name;
    // A no longer finds the old answer in Redis, and B learns of the write through the bus.
    await until(async () => (await nameOn(a)) === renamed);
    await until(async () => (await nameOn(b)) === renamed);
  });

  it('from an admin purge is retried, and answers what it dropped in Redis', async () => {
    const member = env.emulator.tokens.member(1);
    const project = member.project_ids[0]!;
    const path = `/api/v1/projects/${project}/milestones`;
    const [a, b] = await twoReplicasHolding(path, member.token);
    expect(await entryKeys(`*|listMilestones|${project}|*`)).toHaveLength(1);
    const { ended } = await stall(SHORT_PAUSE_MS, 'ALL');
    const purged = await purge(a, { tag: `project:${project}` });
    expect(purged.status).toBe(200);
    expect(purged.json).toMatchObject({ tag: `project:${project}`, tiers: { memory: 1, redis: expect.any(Number) } });
    await ended;
    expect(await entryKeys(`*|listMilestones|${project}|*`)).toEqual([]);
    expect(isMiss(await a.get(path, member.token))).toBe(true);
    // B hears it through the bus (and may then find A's new answer in Redis: never its old one in memory).
    await until(async () => !servedFromMemory(await b.get(path, member.token)));
  });

  it('that cannot reach Redis answers 503 naming it, is not served from Redis meanwhile, and still lands', async () => {
    const member = env.emulator.tokens.member(2);
    const project = member.project_ids[0]!;
    const path = `/api/v1/projects/${project}/sessions`;
    // The breaker out of the way: reads go on reaching Redis while its writes are stalled.
    const [a, b] = await twoReplicasHolding(path, member.token, { breakerThreshold: 1_000 });
    const { ended } = await stall(LONG_PAUSE_MS, 'WRITE');
    const purged = await purge(a, { tag: `project:${project}` });
    expect(purged.status).toBe(503);
    expect(purged.json).toMatchObject({ message: expect.stringContaining('redis'), errors: {}, unreached: ['redis'], tag: `project:${project}` });
    // Redis still holds the entry and answers reads, but A does not trust it: it asks the instance.
    expect(isMiss(await a.get(path, member.token))).toBe(true);
    await ended;
    // Once Redis takes writes again the purge lands there and reaches B.
    await until(async () => !servedFromMemory(await b.get(path, member.token)));
  });
});
