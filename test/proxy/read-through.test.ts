import { describe, expect, it } from 'vitest';
import { OPERATIONS, makePath } from '../../src/api/catalogue.js';
import { httpGet } from '../helpers/proxy.js';
import { proxyOverEmulator } from '../helpers/setup.js';
import { until } from '../helpers/wait.js';
import { gunzipSync } from 'node:zlib';

const env = proxyOverEmulator();

/** One id of each kind the admin can reach, found through the API itself. */
async function sampleIds(): Promise<Record<string, number>> {
  const admin = env.emulator.tokens.admin().token;
  const first = async (path: string) => (await httpGet(env.emulator.url + path, admin)).json().result[0].id as number;
  const project_id = env.emulator.tokens.admin().project_ids[0] ?? (await first('/api/v1/projects'));
  const run_id = await first(`/api/v1/projects/${project_id}/runs`);
  return {
    project_id,
    run_id,
    user_id: await first('/api/v1/users'),
    milestone_id: await first(`/api/v1/projects/${project_id}/milestones`),
    session_id: await first(`/api/v1/projects/${project_id}/sessions`),
    automation_source_id: await first(`/api/v1/projects/${project_id}/automation/sources`),
    role_id: await first('/api/v1/roles'),
    group_id: await first('/api/v1/groups'),
  };
}

describe('every catalogued operation through the proxy', () => {
  it('answers byte for byte what the emulator answers, cold and then warm from memory', async () => {
    const ids = await sampleIds();
    const token = env.emulator.tokens.admin().token;
    for (const op of OPERATIONS) {
      const path = makePath(op, ids);
      const direct = await httpGet(env.emulator.url + path, token);
      expect(direct.status, path).toBe(200);
      const cold = await env.proxy.get(path, token);
      const warm = await env.proxy.get(path, token);
      expect(cold.status, path).toBe(200);
      expect(cold.body.equals(direct.body), path).toBe(true);
      expect(warm.body.equals(direct.body), path).toBe(true);
      // A resource asked after its list is derived from it (docs/how-it-works.md, "Derived answers"), every time: never stored.
      const derived = /; detail=derived(; key=project)?$/;
      if (!derived.test(String(cold.headers['cache-status']))) {
        expect(cold.headers['cache-status'], path).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored/);
        expect(warm.headers['cache-status'], path).toMatch(/^tm-cache; hit; ttl=\d+; detail=memory(; key=project)?$/);
      } else {
        expect(op.envelope, path).toBe('single');
        expect(warm.headers['cache-status'], path).toMatch(derived);
      }
      expect(warm.headers['content-type']).toBe(direct.headers['content-type']);
    }
  });
});

describe('normalization', () => {
  it('sends equal questions spelled differently upstream once', async () => {
    const { token, project_ids } = env.emulator.tokens.member(0);
    const base = `/api/v1/projects/${project_ids[0]}/runs`;
    const spellings = [
      '?expands=users,milestones&is_closed=true&per_page=15',
      '?per_page=15&is_closed=1&expands=milestones&expands=users',
      '?expands=%20users%20,milestones,users&is_closed=1&per_page=15&page=1&order=desc',
      '?is_closed=true&sort=runs:created_at&expands=milestones,users&per_page=15',
    ];
    const bodies: Buffer[] = [];
    for (const s of spellings) bodies.push((await env.proxy.get(base + s, token)).body);
    expect(bodies.every((b) => b.equals(bodies[0]!))).toBe(true);
    const stats = await env.emulator.stats();
    expect(stats.by_route['GET /api/v1/projects/{project_id}/runs']).toBe(1);
  });

  it('rejects an invalid parameter locally, after authenticating the caller, without asking upstream for it', async () => {
    const { token, project_ids } = env.emulator.tokens.member(0);
    await env.proxy.get('/api/v1/user', token); // caller now known
    await env.emulator.resetStats();
    for (const [query, status, param] of [
      ['per_page=17', 422, 'per_page'],
      ['order=sideways', 422, 'order'],
      ['expands=groups', 422, 'expands'],
      ['created_after=soon', 400, 'created_after'],
    ] as const) {
      const res = await env.proxy.get(`/api/v1/projects/${project_ids[0]}/runs?${query}`, token);
      expect(res.status).toBe(status);
      expect(Object.keys(res.json().errors)).toEqual([param]);
    }
    const bad = await env.proxy.get('/api/v1/runs/abc', token);
    expect(bad.status).toBe(400);
    expect(bad.json().errors).toHaveProperty('run_id');
    expect((await env.emulator.stats()).total).toBe(0);
  });

  it('answers an invalid request from an unknown token with the instance 401, not a 422', async () => {
    const res = await env.proxy.get('/api/v1/projects/1/runs?per_page=17', 'not-a-token');
    const direct = await httpGet(`${env.emulator.url}/api/v1/user`, 'not-a-token');
    expect(res.status).toBe(401);
    expect(res.body.equals(direct.body)).toBe(true);
  });
});

describe('conditional requests and HEAD', () => {
  it('answers a matching If-None-Match with 304 and no body', async () => {
    const { token } = env.emulator.tokens.member(0);
    const first = await env.proxy.get('/api/v1/projects', token);
    const etag = first.headers['etag'] as string;
    expect(etag).toMatch(/^"[\w-]+"$/);
    const again = await env.proxy.get('/api/v1/projects', token, { 'if-none-match': etag });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
    expect(again.headers['etag']).toBe(etag);
    const other = await env.proxy.get('/api/v1/projects', token, { 'if-none-match': '"something-else"' });
    expect(other.status).toBe(200);
  });

  it('answers HEAD with the headers of GET and no body', async () => {
    const { token } = env.emulator.tokens.member(0);
    const get = await env.proxy.get('/api/v1/projects?per_page=25', token);
    const head = await httpGet(`${env.proxy.url}/api/v1/projects?per_page=25`, token, {}, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.body.length).toBe(0);
    expect(head.headers['etag']).toBe(get.headers['etag']);
    expect(head.headers['content-length']).toBe(String(get.body.length));
  });

  it('revalidates on Cache-Control: no-cache, once for many concurrent clients', async () => {
    const { token } = env.emulator.tokens.member(1);
    await env.proxy.get('/api/v1/projects?per_page=50', token);
    await env.emulator.resetStats();
    // A slow instance keeps the revalidation in flight while the 20 requests arrive.
    await env.emulator.faults({ latency_ms: 300 });
    const all = await Promise.all(Array.from({ length: 20 }, () => env.proxy.get('/api/v1/projects?per_page=50', token, { 'cache-control': 'no-cache' })));
    expect(all.every((r) => r.status === 200)).toBe(true);
    expect(all[0]!.headers['cache-status']).toMatch(/fwd=request/);
    expect((await env.emulator.stats()).by_route['GET /api/v1/projects']).toBe(1);
    await env.emulator.clearFaults();
  });
});

describe('content coding', () => {
  it('sends the stored gzip variant to clients that accept gzip, with its own ETag, and identity to the others', async () => {
    const { token, project_ids } = env.emulator.tokens.member(1);
    const path = `/api/v1/projects/${project_ids[0]}/runs?expands=users`;
    const identity = await env.proxy.get(path, token);
    expect(identity.headers['vary']).toBe('Authorization, Accept-Encoding');
    // The variant is made in the background after the fill.
    let gz = await env.proxy.get(path, token, { 'accept-encoding': 'gzip, deflate, br' });
    await until(async () => {
      gz = await env.proxy.get(path, token, { 'accept-encoding': 'gzip, deflate, br' });
      return gz.headers['content-encoding'] === 'gzip';
    });
    expect(gunzipSync(gz.body).equals(identity.body)).toBe(true);
    expect(gz.body.length * 4).toBeLessThan(identity.body.length);
    expect(gz.headers['content-length']).toBe(String(gz.body.length));
    expect(gz.headers['etag']).toBe(`${String(identity.headers['etag']).slice(0, -1)}-gz"`);
    expect((await env.proxy.get(path, token, { 'accept-encoding': 'gzip', 'if-none-match': String(gz.headers['etag']) })).status).toBe(304);

    for (const refusing of ['identity', 'br', 'gzip;q=0, *;q=0']) {
      const res = await env.proxy.get(path, token, { 'accept-encoding': refusing });
      expect(res.headers['content-encoding'], refusing).toBeUndefined();
      expect(res.body.equals(identity.body), refusing).toBe(true);
    }
    expect((await env.proxy.get(path, token)).headers['content-encoding']).toBeUndefined();
  });
});

describe('coalescing', () => {
  it('makes one upstream request for 1,000 concurrent identical cold requests, and answers them all', async () => {
    const { token, project_ids } = env.emulator.tokens.member(0);
    const path = `/api/v1/projects/${project_ids[0]}/runs?per_page=50&expands=users`;
    const all = await Promise.all(Array.from({ length: 1_000 }, () => env.proxy.get(path, token)));
    expect(all.every((r) => r.status === 200)).toBe(true);
    expect(new Set(all.map((r) => r.body.toString())).size).toBe(1);
    const stats = await env.emulator.stats();
    expect(stats.by_route['GET /api/v1/projects/{project_id}/runs']).toBe(1);
    expect(all.filter((r) => /collapsed/.test(String(r.headers['cache-status']))).length).toBeGreaterThan(0);
  });
});
