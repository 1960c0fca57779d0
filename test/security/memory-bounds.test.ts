/**
 * Threat: hostile traffic grows the proxy's memory without bound (hardening issue, item 5).
 * What holds: the route memo fills only for known callers and is bounded in bytes; every spelling
 * of one token is one identity (one GET /user) in an identity memo bounded in bytes; an upstream
 * answer above upstream.maxBodyBytes is cut off and answered with a JSON 502, never cached.
 * Sizes are read from the proxy's own gauges; RSS figures belong to the bench (scenario-security).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHostileUpstream, type HostileUpstream } from '../helpers/hostile-upstream.js';
import { readGauge } from '../helpers/metrics.js';
import { httpGet, startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { proxyOverEmulator } from '../helpers/setup.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const USER_ROUTE = 'GET /api/v1/user';
const ROUTE_MEMO_MAX_BYTES = 64 * KiB;
const IDENTITY_MAX_BYTES = 8 * KiB;

const env = proxyOverEmulator({ server: { routeMemoMaxBytes: ROUTE_MEMO_MAX_BYTES }, identity: { maxBytes: IDENTITY_MAX_BYTES } });
const gauge = (name: string) => readGauge(env.proxy.managementUrl, name);

/** A distinct ~14 KB URL of a catalogued operation (an unknown parameter: memoized as a bypass). */
const longUrl = (project: number, i: number) => `/api/v1/projects/${project}/runs?x${i}=${'a'.repeat(14 * KiB)}`;

/** The i-th way of writing `Bearer <token>`: scheme case (RFC 9110 §11.1) and whitespace vary. */
function spelling(token: string, i: number): string {
  const schemes = ['Bearer', 'bearer', 'BEARER', 'bEARER', 'BeArEr', 'beareR'];
  const gap = i % 7 === 6 ? '\t ' : ' '.repeat(1 + Math.floor(i / schemes.length));
  return `${schemes[i % schemes.length]}${gap}${token}`;
}

describe('the route memo', () => {
  it('memoizes nothing for requests whose credential is not recognized, or that have none', async () => {
    const project = env.emulator.tokens.member(0).project_ids[0]!;
    for (let i = 0; i < 30; i++) {
      const res = await env.proxy.get(longUrl(project, i), i % 3 === 0 ? undefined : randomBytes(16).toString('hex'));
      expect(res.status).toBe(401);
    }
    expect(await gauge('tm_cache_route_memo_entries')).toBe(0);
    expect(await gauge('tm_cache_route_memo_bytes')).toBe(0);
  });

  it('stays within server.routeMemoMaxBytes for a known caller asking distinct 14 KB URLs', async () => {
    const member = env.emulator.tokens.member(0);
    for (let i = 0; i < 30; i++) expect((await env.proxy.get(longUrl(member.project_ids[0]!, 100 + i), member.token)).status).toBeLessThan(500);
    const entries = await gauge('tm_cache_route_memo_entries');
    expect(entries).toBeGreaterThan(0);
    expect(entries).toBeLessThan(30);
    expect(await gauge('tm_cache_route_memo_bytes')).toBeLessThanOrEqual(ROUTE_MEMO_MAX_BYTES);
  });
});

describe('identities', () => {
  it('are one GET /user for one token written many ways, one after another', async () => {
    const member = env.emulator.tokens.member(1);
    const path = `/api/v1/projects/${member.project_ids[0]}`;
    for (let i = 0; i < 60; i++) {
      const res = await httpGet(env.proxy.url + path, undefined, { authorization: spelling(member.token, i) });
      expect(res.status, spelling(member.token, i)).toBe(200);
    }
    expect((await env.emulator.stats()).by_route[USER_ROUTE]).toBe(1);
  });

  it('are one GET /user for one token written many ways at once', async () => {
    const member = env.emulator.tokens.member(2);
    const path = `/api/v1/projects/${member.project_ids[0]}`;
    const all = await Promise.all(Array.from({ length: 40 }, (_, i) => httpGet(env.proxy.url + path, undefined, { authorization: spelling(member.token, i) })));
    expect(all.map((r) => r.status)).toEqual(all.map(() => 200));
    expect((await env.emulator.stats()).by_route[USER_ROUTE]).toBe(1);
  });

  it('stay within identity.maxBytes however many spellings arrive', async () => {
    const member = env.emulator.tokens.member(1);
    const path = `/api/v1/projects/${member.project_ids[0]}`;
    for (let i = 0; i < 120; i++) await httpGet(env.proxy.url + path, undefined, { authorization: spelling(member.token, 200 + i) });
    expect(await gauge('tm_cache_identity_memo_bytes')).toBeLessThanOrEqual(IDENTITY_MAX_BYTES);
    expect(await gauge('tm_cache_identity_memo_entries')).toBeGreaterThan(0);
  });
});

describe('an upstream answer above upstream.maxBodyBytes', () => {
  const ANNOUNCED = '/api/v1/projects/1/runs';
  const CHUNKED = '/api/v1/projects/2/runs';
  const CHUNKED_BYTES = 64 * MiB;
  let hostile: HostileUpstream;
  let proxy: TestProxy;
  beforeAll(async () => {
    hostile = await startHostileUpstream((path) =>
      path === ANNOUNCED ? { bytes: 3 * MiB, announce: true } : path === CHUNKED ? { bytes: CHUNKED_BYTES, announce: false } : undefined,
    );
    proxy = await startTestProxy(hostile.url, { upstream: { maxBodyBytes: 1 * MiB } });
  });
  afterAll(async () => {
    await proxy?.close();
    await hostile?.close();
  });

  it.each([
    ['announced by Content-Length', ANNOUNCED],
    ['sent chunked, without a length', CHUNKED],
  ])('is a JSON 502 naming the setting, and never cached (%s)', async (_how, path) => {
    for (let round = 1; round <= 2; round++) {
      const res = await proxy.get(path, 'hostile-test-token');
      expect(res.status).toBe(502);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect(res.json()).toEqual({ message: `Upstream answer larger than upstream.maxBodyBytes (${MiB} bytes)`, errors: {} });
      expect(hostile.requests.get(path)).toBe(round);
    }
  });

  it('is cut off: the upstream stops sending long before its end', () => {
    const written = hostile.bytesWritten.get(CHUNKED) ?? 0;
    expect(written).toBeGreaterThan(0);
    expect(written).toBeLessThan(CHUNKED_BYTES);
  });
});
