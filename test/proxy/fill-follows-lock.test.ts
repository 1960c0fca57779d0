/**
 * A fill that waits for a budget token is still the fleet's one fill (shared-fill.ts: the lock
 * follows its producer). Two replicas over one Redis, a budget of 1 req/s spent by another
 * question: replica A's fill of a cold question waits seconds for its token, far past
 * `cache.redis.lockWaitMs`; replica B, asked the same meanwhile, follows A's fill instead of
 * asking the instance again. Observed from outside: what reached the emulator, and Cache-Status.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { replicasOverEmulatorAndRedis } from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

const env = replicasOverEmulatorAndRedis();

describe('a fill waiting for a budget token', () => {
  it('keeps the other replicas waiting on it past lockWaitMs: the instance is asked once', async () => {
    const config = {
      upstream: { budget: { requestsPerSecond: 1, burst: 1, maxWaitMs: 8_000 } },
      // A generous command timeout: on a loaded machine a slow Redis reply must not make B skip Redis (budget.ts).
      cache: { redis: { url: env.redis.url, keyPrefix: 'follow:', lockWaitMs: 200, lockTtlMs: 1_000, commandTimeoutMs: 2_000 } },
    };
    const [a, b] = [await env.replica(config), await env.replica(config)];
    const member = env.emulator.tokens.member(0);
    const project = member.project_ids[0]!;
    // Both replicas know the member (their GET /user spent the budget's tokens meanwhile).
    expect((await a.get(`/api/v1/projects/${project}`, member.token)).status).toBe(200);
    expect((await b.get(`/api/v1/projects/${project}`, member.token)).status).toBe(200);
    const path = `/api/v1/projects/${project}/milestones?per_page=25&page=4`;
    await env.emulator.resetStats();
    // A spends the next token on another question, then fills `path`, waiting about a second for its token.
    const spending = a.get(`/api/v1/projects/${project}/runs?per_page=25&page=4`, member.token);
    const fromA = a.get(path, member.token);
    // A holds the lock and waits for its token; B asks once A's wait has outlasted B's lockWaitMs.
    await until(async () => (await env.client.keys('follow:*listMilestones*:lock')).length > 0);
    await sleep(400);
    const fromB = await b.get(path, member.token);
    const [answerA] = await Promise.all([fromA, spending]);
    expect(answerA.status).toBe(200);
    expect(fromB.status).toBe(200);
    expect(fromB.headers['cache-status']).toMatch(/collapsed|hit/);
    const stats = await env.emulator.stats();
    expect(stats.by_route['GET /api/v1/projects/{project_id}/milestones'] ?? 0).toBe(1);
  });
});
