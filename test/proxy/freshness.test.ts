import { afterEach, describe, expect, it } from 'vitest';
import { until } from '../helpers/wait.js';
import { startTestProxy } from '../helpers/proxy.js';
import { proxyOverEmulator } from '../helpers/setup.js';

let clock = Date.now();
const now = () => clock;
const TTL_MS = 30_000;
const SWR_MS = 30_000;

const env = proxyOverEmulator(
  {
    upstream: { headersTimeoutMs: 500, bodyTimeoutMs: 500, connectTimeoutMs: 500 },
    identity: { ttlMs: 10 * 3_600_000 },
    // Project access is kept out of these freshness tests (test/security/revocation*.test.ts cover
    // it): a project list past access.projectConfirmMs from its fill is asked again, never served stale.
    access: { projectConfirmMs: 10 * 3_600_000 },
    // Derived answers are kept out too: the pages of the project list these tests ask would answer
    // each other (test/proxy/derived-*.test.ts cover derivation).
    cache: { staleIfErrorMs: 3_600_000, freshness: { default: { ttlMs: TTL_MS, staleWhileRevalidateMs: SWR_MS } }, derive: { enabled: false } },
  },
  now,
);
afterEach(async () => {
  await env.emulator.clearFaults();
});

let n = 0;
/** A path no other test has cached: a project list with a distinct page size / page. */
function freshPath(): string {
  n++;
  return `/api/v1/projects?per_page=${[15, 25, 50, 100][n % 4]}&page=${Math.floor(n / 4) + 1}`;
}

describe('freshness', () => {
  it('serves from memory while fresh and shows the remaining ttl and the Age', async () => {
    const { token } = env.emulator.tokens.member(0);
    const path = freshPath();
    await env.proxy.get(path, token);
    clock += 10_000;
    const hit = await env.proxy.get(path, token);
    expect(hit.headers['cache-status']).toBe('tm-cache; hit; ttl=20; detail=memory');
    expect(hit.headers['age']).toBe('10');
    expect((await env.emulator.stats()).by_route['GET /api/v1/projects']).toBe(1);
  });

  it('serves a stale entry at once within stale-while-revalidate and refreshes it in the background', async () => {
    const { token } = env.emulator.tokens.member(0);
    const path = freshPath();
    await env.proxy.get(path, token);
    clock += TTL_MS + 1_000;
    const stale = await env.proxy.get(path, token);
    expect(stale.status).toBe(200);
    expect(stale.headers['cache-status']).toMatch(/^tm-cache; fwd=stale; ttl=-1; detail=stale-while-revalidate$/);
    await until(async () => (await env.emulator.stats()).by_route['GET /api/v1/projects'] === 2);
    const after = await env.proxy.get(path, token);
    expect(after.headers['cache-status']).toMatch(/hit/);
    expect(after.headers['age']).toBe('0');
  });

  it('goes upstream once the stale-while-revalidate window has passed', async () => {
    const { token } = env.emulator.tokens.member(0);
    const path = freshPath();
    await env.proxy.get(path, token);
    clock += TTL_MS + SWR_MS + 1_000;
    const res = await env.proxy.get(path, token);
    expect(res.headers['cache-status']).toMatch(/fwd=uri-miss; fwd-status=200; stored/);
  });
});

describe('when the instance fails', () => {
  it.each([
    ['an error status', { error_rate: 1, error_status: 503 }],
    ['reset connections', { down: true }],
    ['slowness past the timeout', { latency_ms: 1_500 }],
  ])('serves stale within stale-if-error on %s, and never caches the failure', async (_name, fault) => {
    const { token } = env.emulator.tokens.member(1);
    const path = freshPath();
    const good = await env.proxy.get(path, token);
    clock += TTL_MS + SWR_MS + 1_000;
    await env.emulator.faults(fault);
    const res = await env.proxy.get(path, token);
    expect(res.status).toBe(200);
    expect(res.body.equals(good.body)).toBe(true);
    expect(res.headers['cache-status']).toMatch(/fwd=stale.*detail=stale-if-error/);
  });

  it.each([
    ['an error status', { error_rate: 1, error_status: 500 }, 502],
    ['reset connections', { down: true }, 502],
    ['slowness past the timeout', { latency_ms: 1_500 }, 504],
  ])('answers %s with a JSON 502/504 when nothing stale is held', async (_name, fault, status) => {
    const { token } = env.emulator.tokens.member(1);
    await env.proxy.get('/api/v1/user', token);
    await env.emulator.faults(fault);
    const res = await env.proxy.get(freshPath(), token);
    expect(res.status).toBe(status);
    expect(res.json()).toMatchObject({ message: expect.any(String), errors: {} });
    await env.emulator.clearFaults();
  });

  it('still serves a known caller stale answers when their identity has lapsed and the instance fails', async () => {
    const short = await startTestProxy(
      env.emulator.url,
      {
        identity: { ttlMs: 60_000 },
        cache: { staleIfErrorMs: 3_600_000, freshness: { default: { ttlMs: TTL_MS, staleWhileRevalidateMs: SWR_MS } }, derive: { enabled: false } },
      },
      now,
    );
    try {
      const { token } = env.emulator.tokens.member(0);
      const path = freshPath();
      const good = await short.get(path, token);
      clock += 120_000; // past the identity TTL and the stale-while-revalidate window
      await env.emulator.faults({ error_rate: 1, error_status: 500 });
      const res = await short.get(path, token);
      expect(res.status).toBe(200);
      expect(res.body.equals(good.body)).toBe(true);
      expect(res.headers['cache-status']).toMatch(/detail=stale-if-error/);
      // An unknown token gets no such favour.
      expect((await short.get(path, 'tmc_unknown')).status).toBe(502);
    } finally {
      await short.close();
    }
  });

  it('honours a 429 Retry-After for that caller: no new upstream request until it passes', async () => {
    const { token } = env.emulator.tokens.member(2);
    await env.proxy.get('/api/v1/user', token);
    await env.emulator.faults({ rate_limit: { after_n: 0, retry_after_s: 7 } });
    const first = await env.proxy.get(freshPath(), token);
    expect(first.status).toBe(429);
    expect(first.headers['retry-after']).toBe('7');
    await env.emulator.clearFaults();
    await env.emulator.resetStats();
    const second = await env.proxy.get(freshPath(), token);
    expect(second.status).toBe(429);
    expect(Number(second.headers['retry-after'])).toBeLessThanOrEqual(7);
    expect((await env.emulator.stats()).total).toBe(0);
    clock += 8_000;
    expect((await env.proxy.get(freshPath(), token)).status).toBe(200);
  });
});
