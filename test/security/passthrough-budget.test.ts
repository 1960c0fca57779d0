/**
 * Threat: a client locks the instance's account out through what tm-cache passes through
 * (requests without credentials, cache-busters, writes), and the fleet then pauses for the
 * lockout; or floods identity look-ups with random tokens so that known callers wait behind them.
 * What holds (src/proxy/passthrough/budgeted.ts, src/proxy/callers/requester.ts):
 * - an API request without a credential is answered 401 by tm-cache: the instance is never asked;
 * - every request passed through takes a token of the fleet's budget: a flood of cache-busters and
 *   writes through one replica keeps the instance within the budget (no 429 from it, no lockout),
 *   and what the budget cannot serve in time is tm-cache's own 429 with a Retry-After and a JSON body;
 * - a credential seen before renews its identity at the known callers' priority: random tokens
 *   from one address never make a known member, nor a new member at another address, wait for them;
 * - one 429's Retry-After pauses the fleet at most `upstream.maxRetryAfterMs`.
 */
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import type { TestResponse } from '../helpers/proxy.js';
import { sendRawRequest } from '../helpers/raw-request.js';
import { replicasOverEmulatorAndRedis } from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

const env = replicasOverEmulatorAndRedis();

afterEach(async () => {
  await env.emulator.clearFaults();
});

/** `count` requests made by `send`, `atOnce` at a time. */
async function inWaves<T>(count: number, atOnce: number, send: (i: number) => Promise<T>): Promise<T[]> {
  const answers: T[] = [];
  for (let i = 0; i < count; i += atOnce) answers.push(...(await Promise.all(Array.from({ length: Math.min(atOnce, count - i) }, (_, j) => send(i + j)))));
  return answers;
}

async function put(url: string, token: string): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  const res = await request(url, { method: 'PUT', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{}' });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

/** The instance's own answer, or tm-cache's 429 for a spent budget (a fill's own): truthful Retry-After, JSON body naming the budget. */
function expectServedOrBudgetRefusal(res: { status: number; headers: Record<string, unknown>; text: string }, ok: number): void {
  if (res.status === ok) return;
  expect(res.status).toBe(429);
  expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  expect(String(res.headers['content-type'])).toContain('application/json');
  expect(JSON.parse(res.text).message).toMatch(/budget is spent/);
}

const asRaw = (r: TestResponse) => ({ status: r.status, headers: r.headers, text: r.body.toString() });

describe('requests passed through spend the fleet’s budget', () => {
  it('answers API requests without a credential 401 itself: none reaches the instance', async () => {
    const replica = await env.replica({ cache: { redis: { url: env.redis.url, keyPrefix: 'anon:' } } });
    await env.emulator.resetStats();
    const answers = await inWaves(60, 10, () => replica.get('/api/v1/projects/1/runs'));
    for (const res of answers) {
      expect(res.status).toBe(401);
      expect(res.json().errors).toHaveProperty('authorization');
    }
    expect((await env.emulator.stats()).total).toBe(0);
  });

  it('keeps cache-busters and writes through one replica within the budget: no 429 from the instance, no lockout, the other replica serves', async () => {
    const config = {
      upstream: { budget: { requestsPerSecond: 10, burst: 5 } },
      cache: { redis: { url: env.redis.url, keyPrefix: 'busters:' } },
    };
    const [one, two] = [await env.replica(config), await env.replica(config)];
    const member = env.emulator.tokens.member(0);
    const other = env.emulator.tokens.member(1);
    const project = member.project_ids[0]!;
    // Both callers known (verified) before the flood: it is fills and passthrough alone.
    expect((await one.get(`/api/v1/projects/${project}`, member.token)).status).toBe(200);
    expect((await two.get(`/api/v1/projects/${other.project_ids[0]!}`, other.token)).status).toBe(200);
    await env.emulator.faults({ rate_limit: { requests_per_s: 20, burst: 10, retry_after_s: 1, escalate_after: 3, lockout_s: 600 } });
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // the instance's bucket full again
    await env.emulator.resetStats();

    const [reads, writes] = await Promise.all([
      inWaves(60, 10, (i) => one.get(`/api/v1/projects/${project}/runs?_=${i}`, member.token)),
      inWaves(20, 10, () => put(`${one.url}/api/v1/runs/1`, member.token)),
    ]);
    for (const res of reads) expectServedOrBudgetRefusal(asRaw(res), 200);
    for (const res of writes) expectServedOrBudgetRefusal(res, 204);
    expect(reads.filter((r) => r.status === 200).length).toBeGreaterThan(0);

    const stats = await env.emulator.stats();
    expect(stats.rate_limited).toBe(0);
    expect(stats.lockouts).toBe(0);
    // At most the budget's burst + its rate in any second (fleet-budget.ts, "Accounting").
    expect(stats.peak_per_s).toBeLessThanOrEqual(5 + 10);
    // The fleet is not paused: a member's cold question on the other replica is answered.
    expect((await two.get(`/api/v1/projects/${other.project_ids[0]!}/milestones?per_page=25&page=2`, other.token)).status).toBe(200);
  });

  it('pauses the fleet at most upstream.maxRetryAfterMs for one 429, however long its Retry-After', async () => {
    const config = {
      upstream: { maxRetryAfterMs: 2_000, budget: { requestsPerSecond: 50 } },
      cache: { redis: { url: env.redis.url, keyPrefix: 'cap:' } },
    };
    const [one, two] = [await env.replica(config), await env.replica(config)];
    const member = env.emulator.tokens.member(0);
    const project = member.project_ids[0]!;
    expect((await one.get(`/api/v1/projects/${project}`, member.token)).status).toBe(200);
    expect((await two.get(`/api/v1/projects/${project}`, member.token)).status).toBe(200);
    // One 429 (Retry-After: 600) to a write passed through.
    await env.emulator.faults({ rate_limit: { after_n: 0, retry_after_s: 600 } });
    const limited = await put(`${one.url}/api/v1/runs/1`, member.token);
    expect(limited.status).toBe(429);
    expect(limited.headers['retry-after']).toBe('2');
    await env.emulator.clearFaults();
    // Paused: the other replica's cold question waits or is refused, never sent…
    const started = Date.now();
    const answer = await two.get(`/api/v1/projects/${project}/runs?per_page=25&page=3`, member.token);
    expect([200, 429]).toContain(answer.status);
    // …and within the cap the fleet asks the instance again.
    await until(async () => (await two.get(`/api/v1/projects/${project}/runs?per_page=25&page=3`, member.token)).status === 200, 5_000);
    expect(Date.now() - started).toBeLessThan(4_000);
  });
});

describe('random tokens never delay a known credential', () => {
  it('renews a known member’s identity, and verifies a new member at another address, while random tokens flood the budget', async () => {
    const replica = await env.replica({
      upstream: { budget: { requestsPerSecond: 20 } },
      identity: { ttlMs: 2_000 },
      cache: { redis: { url: env.redis.url, keyPrefix: 'junk:' } },
    });
    const known = env.emulator.tokens.member(0);
    const newcomer = env.emulator.tokens.member(2);
    const cached = `/api/v1/projects/${known.project_ids[0]!}`;
    expect((await replica.get(cached, known.token)).status).toBe(200);
    await env.emulator.faults({ latency_ms: 300 });
    await new Promise((resolve) => setTimeout(resolve, 2_100)); // the member's identity has lapsed

    const junk = () => `Bearer ${randomBytes(20).toString('hex')}`;
    const flood = Promise.allSettled(Array.from({ length: 300 }, () => replica.get('/api/v1/projects', undefined, { authorization: junk() })));
    await until(async () => ((await env.emulator.stats()).by_route['GET /api/v1/user'] ?? 0) >= 5);
    // The known member, four times over the flood: their answer, never tm-cache's 429.
    for (let i = 0; i < 4; i++) {
      const res = await replica.get(cached, known.token);
      expect(res.status, res.body.toString()).toBe(200);
    }
    // A member never seen, from another address: their turn comes after one of the flood's, not all.
    const fresh = await sendRawRequest(
      replica.url,
      'GET',
      `/api/v1/projects/${newcomer.project_ids[0]!}`,
      { authorization: `Bearer ${newcomer.token}` },
      undefined,
      '127.0.0.2',
    );
    expect(fresh.status, fresh.text).toBe(200);
    for (const settled of await flood) expect(settled.status).toBe('fulfilled');
  });
});
