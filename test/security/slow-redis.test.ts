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
import type { RedisTier } from '../../src/cache/redis-tier.js';
import type { Config } from '../../src/config/schema.js';
import type { DeepPartial, TestProxy } from '../helpers/proxy.js';
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
      expect(delta(before, statsOf(p))).toEqual({ get: 1 });
    }
    const before = statsOf(p);
    expect((await p.get(`/api/v1/projects/${m1.project_ids[0]}/runs`, m1.token)).status).toBe(200);
    // A token not seen yet: the shared identity lookup times out, then nothing else is sent
    // (not the admin verification, the entry, the lock nor the identity write).
    expect(delta(before, statsOf(p))).toEqual({ json: 1 });
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
    expect(body.checks.redis.detail).toMatch(/circuit open after 3 consecutive failures \(last: Command timed out\)/);
    await ended;
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
