/**
 * Threat: requests with junk credentials starve real users (hardening issue, item 6).
 * What holds: identity look-ups have their own upstream budget (identity.maxConcurrent,
 * identity.maxQueue), so a flood of random tokens against a slow instance cannot fill the queue
 * of members' cache fills; a token the instance refused (401) is answered from memory for
 * identity.refusedTtlMs, without asking upstream again, in a memo bounded in bytes.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { readGauge } from '../helpers/metrics.js';
import { proxyOverEmulator } from '../helpers/setup.js';
import { until } from '../helpers/wait.js';

const USER_ROUTE = 'GET /api/v1/user';
const REFUSED_TTL_MS = 5_000;
const REFUSED_MAX_BYTES = 16 * 1024;

let clock = Date.now();
const now = () => clock;

const env = proxyOverEmulator(
  {
    upstream: { maxConcurrent: 4, maxQueue: 8 },
    identity: { maxConcurrent: 2, maxQueue: 16, refusedTtlMs: REFUSED_TTL_MS, refusedMaxBytes: REFUSED_MAX_BYTES },
  },
  now,
);
const junkToken = () => randomBytes(20).toString('hex');
const userLookups = async () => (await env.emulator.stats()).by_route[USER_ROUTE] ?? 0;

afterEach(async () => {
  await env.emulator.clearFaults();
});

describe('a refused token', () => {
  it('is answered the instance’s 401 again without asking upstream while identity.refusedTtlMs lasts', async () => {
    const token = junkToken();
    const path = `/api/v1/projects/${env.emulator.tokens.member(0).project_ids[0]}`;
    const first = await env.proxy.get(path, token);
    expect(first.status).toBe(401);
    for (let i = 0; i < 5; i++) {
      const again = await env.proxy.get(path, token);
      expect(again.status).toBe(401);
      expect(again.body.equals(first.body)).toBe(true);
      expect(again.headers['content-type']).toBe(first.headers['content-type']);
    }
    expect(await userLookups()).toBe(1);

    clock += REFUSED_TTL_MS + 1;
    expect((await env.proxy.get(path, token)).status).toBe(401);
    expect(await userLookups()).toBe(2);
  });

  it('is remembered within identity.refusedMaxBytes however many arrive', async () => {
    for (let i = 0; i < 60; i++) expect((await env.proxy.get('/api/v1/projects', junkToken())).status).toBe(401);
    expect(await readGauge(env.proxy.managementUrl, 'tm_cache_identity_refused_bytes')).toBeLessThanOrEqual(REFUSED_MAX_BYTES);
    expect(await readGauge(env.proxy.managementUrl, 'tm_cache_identity_refused_entries')).toBeGreaterThan(0);
  });
});

describe('a flood of random tokens against a slow instance', () => {
  it('leaves members’ misses served, and answers the flood 401 or a JSON 503', async () => {
    const member = env.emulator.tokens.member(0);
    const project = member.project_ids[0]!;
    // The member is known before the flood starts.
    expect((await env.proxy.get(`/api/v1/projects/${project}`, member.token)).status).toBe(200);
    await env.emulator.faults({ latency_ms: 300 });
    await env.emulator.resetStats();

    // Settled, never rejected: a failed assertion below must not leave the flood's promises unhandled.
    const flood = Promise.allSettled(Array.from({ length: 150 }, () => env.proxy.get(`/api/v1/projects/${project}/runs`, junkToken())));
    await until(async () => (await userLookups()) >= 2);
    const misses = await Promise.all(
      Array.from({ length: 6 }, (_, i) => env.proxy.get(`/api/v1/projects/${project}/runs?per_page=25&page=${i + 2}`, member.token)),
    );
    expect(misses.map((r) => r.status)).toEqual(misses.map(() => 200));

    for (const settled of await flood) {
      expect(settled.status).toBe('fulfilled');
      const res = (settled as PromiseFulfilledResult<Awaited<ReturnType<typeof env.proxy.get>>>).value;
      expect([401, 503]).toContain(res.status);
      expect(typeof res.json().message).toBe('string');
    }
    // The identity lane took a lane's worth (2 + 16, a few more as slots freed) and refused the rest.
    expect(await userLookups()).toBeLessThan(50);
  });
});
