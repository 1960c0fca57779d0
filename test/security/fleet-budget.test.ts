/**
 * Threat: a fleet of replicas pushes the instance's account over its (unpublished) rate limit, and
 * the instance then locks out every user of the account, not only tm-cache's callers.
 * What holds (src/upstream/fleet-budget.ts, wired in src/upstream/client.ts):
 * - every upstream request takes a token from one budget shared by the replicas through Redis:
 *   a burst of cold questions through three replicas reaches the instance within the budget plus
 *   its burst, and no client gets a 5xx;
 * - a 429 from the instance, to any caller, pauses the whole fleet: another replica, one that joins
 *   mid-pause, and one whose Redis was killed during the pause all send nothing upstream;
 * - with no budget configured the fleet starts from a small burst and grows: a burst at start draws no 429;
 * - when the budget is spent a client gets a stale answer marked `detail=budget`, else a 429 with a
 *   Retry-After and a JSON body, never cached, never a 503;
 * - refresh-ahead keeps a polled entry fresh: every poll a hit, one upstream request per freshness
 *   period, and a key nobody reads is never refreshed.
 * All observed from outside: emulator stats, status codes, headers.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { TestResponse } from '../helpers/proxy.js';
import { pauseStored } from '../helpers/redis.js';
import { replicasOverEmulatorAndRedis } from '../helpers/replicas.js';
import { proxyOverEmulator } from '../helpers/setup.js';
import { until } from '../helpers/wait.js';

const cold = (project: number, page: number): string => `/api/v1/projects/${project}/runs?per_page=25&page=${page}`;

function expectBudgetRefusal(res: TestResponse, maxSeconds: number): void {
  expect(res.status).toBe(429);
  const retryAfter = Number(res.headers['retry-after']);
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(retryAfter).toBeLessThanOrEqual(maxSeconds);
  expect(String(res.headers['content-type'])).toContain('application/json');
  expect(res.json().message).toMatch(/budget/);
}

describe('the fleet budget across replicas sharing Redis', () => {
  const env = replicasOverEmulatorAndRedis();

  it('keeps a burst of cold questions through three replicas within the budget plus its burst, with no 5xx', async () => {
    const config = { upstream: { budget: { requestsPerSecond: 10, burst: 10 } }, cache: { redis: { url: env.redis.url, keyPrefix: 'burst:' } } };
    const replicas = [await env.replica(config), await env.replica(config), await env.replica(config)];
    const member = env.emulator.tokens.member(0);
    const project = member.project_ids[0]!;
    // Identities known on every replica first: the burst is of fills alone.
    for (const r of replicas) expect((await r.get(`/api/v1/projects/${project}`, member.token)).status).toBe(200);
    await sleep(1_100); // a quiet spell: the bucket full again
    await env.emulator.resetStats();
    const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => replicas[i % 3]!.get(cold(project, 5_000 + i), member.token)));
    for (const res of answers) expect(res.status).toBeLessThan(500);
    expect(answers.filter((r) => r.status === 200).length).toBeGreaterThan(0);
    const stats = await env.emulator.stats();
    // At most burst + rate × 1 s in any second (fleet-budget.ts, "Accounting").
    expect(stats.peak_per_s).toBeLessThanOrEqual(10 + 10);
  });

  it('pauses every replica after a 429 to one caller: another replica, one joining mid-pause, and one whose Redis was killed', async () => {
    const config = { upstream: { budget: { requestsPerSecond: 50 } }, cache: { redis: { url: env.redis.url, keyPrefix: 'pause:' } } };
    const a = await env.replica(config);
    const b = await env.replica(config);
    const limitedCaller = env.emulator.tokens.member(0);
    const other = env.emulator.tokens.member(1);
    expect((await a.get(`/api/v1/projects/${limitedCaller.project_ids[0]!}`, limitedCaller.token)).status).toBe(200);
    expect((await b.get(`/api/v1/projects/${other.project_ids[0]!}`, other.token)).status).toBe(200);

    await env.emulator.faults({ rate_limit: { after_n: 0, retry_after_s: 30 } });
    expect((await a.get(cold(limitedCaller.project_ids[0]!, 9_001), limitedCaller.token)).status).toBe(429);
    await env.emulator.clearFaults();
    await sleep(300); // tokens leased before the pause expire (LEASE_TTL_MS)
    await pauseStored(env.client, 'pause:'); // the pause reached Redis
    const sent = (await env.emulator.stats()).total;

    // Another caller, on another replica: the instance said no to the account, not to one caller.
    expectBudgetRefusal(await b.get(cold(other.project_ids[0]!, 9_002), other.token), 30);
    // A replica started during the pause learns it from the shared bucket before asking anything.
    const joined = await env.replica(config);
    const joinedAnswer = await joined.get(cold(other.project_ids[0]!, 9_003), other.token);
    expect(joinedAnswer.status).toBe(429);
    // Redis killed during the pause: the replica keeps the pause it learned (its fallback share is never unlimited).
    await env.redis.kill();
    expectBudgetRefusal(await b.get(cold(other.project_ids[0]!, 9_004), other.token), 30);
    expect((await env.emulator.stats()).total).toBe(sent);
    await env.redis.restart();
  });
});

describe('a fleet without a configured budget', () => {
  const env = proxyOverEmulator({ upstream: { budget: { requestsPerSecond: 0 } } });

  it('starts from a small burst and grows: a burst of cold questions at start draws no 429 from an instance limited to 20 req/s', async () => {
    const member = env.emulator.tokens.member(0);
    const project = member.project_ids[0]!;
    expect((await env.proxy.get(`/api/v1/projects/${project}`, member.token)).status).toBe(200);
    await env.emulator.faults({ rate_limit: { requests_per_s: 20, burst: 20, retry_after_s: 1 } });
    try {
      const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => env.proxy.get(cold(project, 7_000 + i), member.token)));
      for (const res of answers) expect(res.status).toBeLessThan(500);
      expect((await env.emulator.stats()).rate_limited).toBe(0);
    } finally {
      await env.emulator.clearFaults();
    }
  });
});

describe('a client when the budget is spent', () => {
  const env = proxyOverEmulator({
    upstream: { budget: { requestsPerSecond: 50, maxWaitMs: 200 } },
    cache: { freshness: { default: { ttlMs: 300, staleWhileRevalidateMs: 0 } } },
  });

  it('gets a stale answer marked detail=budget, else a 429 with Retry-After and a JSON body, never cached', async () => {
    const limitedCaller = env.emulator.tokens.member(0);
    const reader = env.emulator.tokens.member(1);
    const project = reader.project_ids[0]!;
    expect((await env.proxy.get(`/api/v1/projects/${limitedCaller.project_ids[0]!}`, limitedCaller.token)).status).toBe(200);
    const held = cold(project, 1);
    expect((await env.proxy.get(held, reader.token)).status).toBe(200);

    await env.emulator.faults({ rate_limit: { after_n: 0, retry_after_s: 30 } });
    expect((await env.proxy.get(cold(limitedCaller.project_ids[0]!, 2), limitedCaller.token)).status).toBe(429);
    await env.emulator.clearFaults();
    await sleep(400); // the held answer is stale now (ttl 300 ms, no stale-while-revalidate)
    const sent = (await env.emulator.stats()).total;

    const stale = await env.proxy.get(held, reader.token);
    expect(stale.status).toBe(200);
    expect(stale.headers['cache-status']).toMatch(/fwd=stale.*detail=budget/);
    for (let i = 0; i < 2; i++) expectBudgetRefusal(await env.proxy.get(cold(project, 3), reader.token), 30);
    expect((await env.emulator.stats()).total).toBe(sent);
  });
});

describe('refresh-ahead of a polled answer', () => {
  const TTL_MS = 4_000;
  const env = proxyOverEmulator({
    cache: { freshness: { default: { ttlMs: TTL_MS, staleWhileRevalidateMs: 0 } }, refreshAhead: { enabled: true, startAt: 0.75 } },
  });

  it('keeps every poll a hit past the first freshness, with one upstream request per period, and never refreshes a key nobody reads', async () => {
    const member = env.emulator.tokens.member(0);
    const project = member.project_ids[0]!;
    const polled = cold(project, 11);
    const forgotten = cold(project, 12);
    const filledAt = Date.now();
    expect((await env.proxy.get(polled, member.token)).status).toBe(200);
    expect((await env.proxy.get(forgotten, member.token)).status).toBe(200);
    await env.emulator.resetStats();

    const polls: TestResponse[] = [];
    const poll = async (): Promise<void> => void polls.push(await env.proxy.get(polled, member.token));
    // Polling until the refresh has been asked for: in the last quarter of the freshness.
    await until(async () => {
      await poll();
      await sleep(100);
      return (await env.emulator.stats()).total >= 1;
    }, TTL_MS * 2);
    // Past the first fill's freshness: still a hit, the refreshed answer.
    while (Date.now() < filledAt + TTL_MS + 500) {
      await poll();
      await sleep(200);
    }
    for (const res of polls) expect(res.headers['cache-status']).toMatch(/; hit/);
    expect((await env.emulator.stats()).total).toBe(1);
  });
});
