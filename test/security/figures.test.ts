/**
 * Figures that add up: what tm-cache reports about the upstream (/admin/stats, /metrics, the
 * access log, Cache-Status) is what the instance received, over real HTTP in front of the real
 * emulator, with a private redis-server where replicas share one.
 *
 * - A request forwarded for an unknown parameter reached the instance: an upstream request, not
 *   an avoided one, in the offload, the metrics and the tables.
 * - Every upstream request (fills, identity look-ups, forwards) is attributed to an operation and
 *   a user, or counted in the tables' rest: each table adds up to the total.
 * - A replica that waited for another replica's fill is `collapsed` (RFC 9211), not a miss.
 * - A client sees one ETag per representation from its first answer: the gzip variant exists
 *   from the fill on, with or without Redis.
 * - A memory tier cleared because the invalidation subscription came back is logged, with why.
 */
import { Writable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import { startProxy, type RunningProxy } from '../../src/serve.js';
import { httpGet, makeConfig, type DeepPartial, type TestProxy } from '../helpers/proxy.js';
import { replicasOverEmulatorAndRedis } from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

const ADMIN_TOKEN = 'figures-test-admin-token-0123456789';
const env = replicasOverEmulatorAndRedis();

type Line = Record<string, unknown>;

/** The replicas started here with their own logger (the fixture closes its own, after these). */
const closeAfter: RunningProxy[] = [];
afterAll(async () => {
  await Promise.all(closeAfter.map((p) => p.close()));
});

/** A replica whose log lines (info and up) are kept, parsed. */
async function loggedReplica(overrides: DeepPartial<Config>): Promise<{ p: RunningProxy; lines: Line[] }> {
  const lines: Line[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString()) as Line);
      done();
    },
  });
  const p = await startProxy(makeConfig(env.emulator.url, overrides), { logger: pino({ level: 'info' }, sink) });
  closeAfter.push(p);
  return { p, lines };
}

async function adminStats(managementUrl: string): Promise<any> {
  const res = await httpGet(`${managementUrl}/admin/stats`, ADMIN_TOKEN);
  expect(res.status).toBe(200);
  return res.json();
}

/** The sum of a counter family's children in /metrics whose labels contain every `where` pair. */
async function metricSum(managementUrl: string, name: string, where: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${managementUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .filter((l) => Object.entries(where).every(([k, v]) => l.includes(`${k}="${v}"`)))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

const sumOf = (rows: { upstreamRequests: number }[]): number => rows.reduce((n, r) => n + r.upstreamRequests, 0);

describe('upstream requests, as the instance received them', () => {
  it('counts requests forwarded for an unknown parameter as upstream requests, and the offload, the metrics and both tables add up to what the instance received', async () => {
    const p = await env.replica({ admin: { token: ADMIN_TOKEN } });
    const m = env.emulator.tokens.member(0);
    const path = `/api/v1/projects/${m.project_ids[0]}/runs?per_page=15`;
    await env.emulator.resetStats();
    for (let i = 0; i < 5; i++) expect((await p.get(path, m.token)).status).toBe(200); // 1 miss, 4 hits
    for (let i = 0; i < 5; i++) {
      const busted = await p.get(`${path}&_=${1_700_000_000_000 + i}`, m.token); // a dashboard's cache-buster
      expect(busted.status).toBe(200);
      expect(busted.headers['cache-status']).toMatch(/fwd=bypass; detail=unknown-param/);
    }
    expect((await p.get(path, 'not-a-token-of-anyone')).status).toBe(401); // an identity look-up, refused
    await until(async () => (await adminStats(p.managementUrl)).requests.total === 11);

    const received = (await env.emulator.stats()).total;
    // GET /user for the member and for the junk token, the fill, the five forwards.
    expect(received).toBe(8);
    const stats = await adminStats(p.managementUrl);
    const cacheable = stats.requests.total - stats.requests.byOutcome.passthrough;
    expect(cacheable).toBe(11);
    expect(stats.upstream.requests).toBe(received);
    expect(stats.upstream.avoided).toBe(cacheable - received);
    expect(stats.upstream.offload).toBeCloseTo(1 - received / cacheable, 9);
    expect(stats.series.reduce((n: number, b: { upstream: number }) => n + b.upstream, 0)).toBe(received);
    // The metrics the dashboards' offload is computed from (ops/grafana-dashboard.json).
    expect(await metricSum(p.managementUrl, 'tm_cache_upstream_responses_total')).toBe(received);
    expect(
      (await metricSum(p.managementUrl, 'tm_cache_requests_total')) - (await metricSum(p.managementUrl, 'tm_cache_requests_total', { outcome: 'passthrough' })),
    ).toBe(cacheable);

    // Attributed: identity look-ups under their own name, the forwards to the caller's user.
    const byOperation = Object.fromEntries(stats.top.operations.map((r: { operation: string; upstreamRequests: number }) => [r.operation, r.upstreamRequests]));
    expect(byOperation).toEqual({ identity: 2, listRuns: 1, unknown: 5 });
    expect(sumOf(stats.top.operations) + stats.top.otherOperations.upstreamRequests).toBe(received);
    expect(stats.top.users).toEqual([{ userId: m.user_id, upstreamRequests: 6, requests: 10 }]);
    // The look-ups had no user yet; the refused request none at all.
    expect(stats.top.otherUsers).toEqual({ upstreamRequests: 2, requests: 1 });
    expect(sumOf(stats.top.users) + stats.top.otherUsers.upstreamRequests).toBe(received);
  });
});

describe("a replica that waited for another replica's fill", () => {
  it('says it was collapsed (RFC 9211) in Cache-Status, the access log, the metrics and /admin/stats, and made no upstream request', async () => {
    const redis = { url: env.redis.url, commandTimeoutMs: 2_000, lockWaitMs: 5_000, keyPrefix: 'collapsed:' };
    const a = await env.replica({ cache: { redis } });
    const { p: b, lines } = await loggedReplica({ cache: { redis }, admin: { token: ADMIN_TOKEN } });
    const m = env.emulator.tokens.member(1);
    // Both replicas know the caller: only the fill is left.
    expect((await a.get('/api/v1/user', m.token)).status).toBe(200);
    expect((await httpGet(`${b.url}/api/v1/user`, m.token)).status).toBe(200);
    const path = `/api/v1/projects/${m.project_ids[0]}/milestones?per_page=25`;
    const before = await adminStats(b.managementUrl);
    await env.emulator.resetStats();
    await env.emulator.faults({ latency_ms: 400 });
    try {
      const first = a.get(path, m.token);
      // A holds the fill's lock (its request is at the instance): B's miss must wait for it.
      await until(async () => (await env.client.keys('collapsed:*:lock')).length > 0);
      const second = await httpGet(`${b.url}${path}`, m.token);
      expect((await first).headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored; ttl=\d+(; key=project)?$/);
      expect(second.status).toBe(200);
      expect(second.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; collapsed; ttl=\d+; detail=redis(; key=project)?$/);
    } finally {
      await env.emulator.clearFaults();
    }
    expect((await env.emulator.stats()).total).toBe(1);
    const line = lines.find((l) => l['msg'] === 'access' && l['path'] === `/api/v1/projects/${m.project_ids[0]}/milestones`);
    expect(line).toMatchObject({ outcome: 'coalesced', tier: 'redis', status: 200 });
    expect(await metricSum(b.managementUrl, 'tm_cache_requests_total', { outcome: 'coalesced', tier: 'redis', operation: 'listMilestones' })).toBe(1);
    expect(await metricSum(b.managementUrl, 'tm_cache_requests_total', { outcome: 'miss', operation: 'listMilestones' })).toBe(0);
    const after = await adminStats(b.managementUrl);
    expect(after.requests.byOutcome.miss).toBe(before.requests.byOutcome.miss);
    expect(after.requests.byOutcome.coalesced).toBe(before.requests.byOutcome.coalesced + 1);
    expect(after.upstream.requests).toBe(before.upstream.requests);
  });
});

describe('compressed answers', () => {
  for (const [name, overrides] of [
    ['memory only', () => ({})],
    ['with Redis', () => ({ cache: { redis: { url: env.redis.url, commandTimeoutMs: 2_000, keyPrefix: 'gzip:' } } })],
  ] as const) {
    it(`${name}: a client that accepts gzip gets one ETag from the fill on, so its If-None-Match matches from the first hit`, async () => {
      const p: TestProxy = await env.replica(overrides());
      const m = env.emulator.tokens.member(2);
      const path = `/api/v1/projects/${m.project_ids[0]}/runs?per_page=100`;
      const gzip = { 'accept-encoding': 'gzip, deflate, br' };
      const filled = await p.get(path, m.token, gzip);
      expect(filled.headers['cache-status']).toMatch(/fwd=uri-miss/);
      expect(filled.headers['content-encoding']).toBe('gzip');
      const etag = String(filled.headers['etag']);
      expect(etag).toMatch(/-gz"$/);
      // What a browser does next: revalidate. Each is a 304 within the freshness period.
      for (let i = 0; i < 3; i++) {
        const again = await p.get(path, m.token, { ...gzip, 'if-none-match': etag });
        expect(again.headers['cache-status']).toMatch(/^tm-cache; hit/);
        expect(again.status).toBe(304);
      }
      const hit = await p.get(path, m.token, gzip);
      expect(hit.headers['etag']).toBe(etag);
      // The identity representation keeps its own ETag, for identity clients alike.
      const plain = await p.get(path, m.token);
      expect(plain.headers['content-encoding']).toBeUndefined();
      expect(plain.headers['etag']).toBe(etag.replace(/-gz"$/, '"'));
      expect(gunzipSync(filled.body).equals(plain.body)).toBe(true);
    });

    it(`${name}: filled by a client that does not accept gzip, the first gzip client still gets the variant and its one ETag`, async () => {
      const p: TestProxy = await env.replica(overrides());
      const m = env.emulator.tokens.member(1);
      const path = `/api/v1/projects/${m.project_ids[0]}/runs?per_page=100`;
      const gzip = { 'accept-encoding': 'gzip' };
      const filled = await p.get(path, m.token);
      expect(filled.headers['cache-status']).toMatch(/fwd=uri-miss/);
      expect(filled.headers['content-encoding']).toBeUndefined();
      const first = await p.get(path, m.token, gzip);
      expect(first.headers['cache-status']).toMatch(/^tm-cache; hit/);
      expect(first.headers['content-encoding']).toBe('gzip');
      expect(first.headers['etag']).toBe(String(filled.headers['etag']).replace(/"$/, '-gz"'));
      const again = await p.get(path, m.token, { ...gzip, 'if-none-match': String(first.headers['etag']) });
      expect(again.status).toBe(304);
      expect(gunzipSync(first.body).equals(filled.body)).toBe(true);
    });
  }
});

describe('the invalidation subscription', () => {
  it('logs that it cleared the memory tier when it came back after a loss, and why', async () => {
    const { p, lines } = await loggedReplica({ cache: { redis: { url: env.redis.url, commandTimeoutMs: 2_000, keyPrefix: 'resub:' } } });
    const m = env.emulator.tokens.member(0);
    expect((await httpGet(`${p.url}/api/v1/projects/${m.project_ids[0]}/milestones`, m.token)).status).toBe(200);
    expect(p.cache.memory.stats().entries).toBe(1);
    // The subscriber's connection dropped (a failover, a network blip): it reconnects and listens again.
    await env.client.client('KILL', 'TYPE', 'pubsub');
    await until(() => lines.some((l) => /memory tier cleared/.test(String(l['msg']))));
    const line = lines.find((l) => /memory tier cleared/.test(String(l['msg'])))!;
    expect(line).toMatchObject({ level: 40, reason: 'invalidations-missed', entries: 1 });
    expect(line['msg']).toMatch(/invalidation subscription was lost and is back/);
    expect(p.cache.memory.stats().entries).toBe(0);
  });
});
