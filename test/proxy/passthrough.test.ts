import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type TestProxy } from '../helpers/proxy.js';

let emulator: TestEmulator;
let proxy: TestProxy;

beforeAll(async () => {
  emulator = await startTestEmulator();
  proxy = await startTestProxy(emulator.url);
});
afterAll(async () => {
  await proxy?.close();
  await emulator?.close();
});
beforeEach(async () => {
  await emulator.resetStats();
});

describe('passthrough', () => {
  it('forwards a path outside the catalogue untouched, every time', async () => {
    const { token } = emulator.tokens.member(0);
    for (let i = 0; i < 2; i++) {
      const res = await proxy.get('/api/v1/projects/1/cases', token);
      const direct = await httpGet(`${emulator.url}/api/v1/projects/1/cases`, token);
      expect(res.status).toBe(direct.status);
      expect(res.body.equals(direct.body)).toBe(true);
      expect(res.headers['cache-status']).toBeUndefined();
    }
  });

  it('forwards a request with a parameter the catalogue does not know, uncached, and says so', async () => {
    const { token, project_ids } = emulator.tokens.member(0);
    const path = `/api/v1/projects/${project_ids[0]}/runs?per_page=15&shiny=1`;
    for (let i = 0; i < 2; i++) {
      const res = await proxy.get(path, token);
      expect(res.status).toBe(200);
      expect(res.headers['cache-status']).toBe('tm-cache; fwd=bypass; detail=unknown-param');
    }
    expect((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/runs']).toBe(2);
  });

  it('passes a write through and drops the cached entries of the project it names', async () => {
    const { token, project_ids } = emulator.tokens.member(0);
    const project = project_ids[0]!;
    const runs = `/api/v1/projects/${project}/runs?per_page=25`;
    await proxy.get(runs, token);
    expect((await proxy.get(runs, token)).headers['cache-status']).toMatch(/hit/);

    const write = await request(`${proxy.url}/api/v1/projects/${project}/runs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'new run' }),
    });
    await write.body.dump();
    expect(write.statusCode).toBeLessThan(300);
    const stats = await emulator.stats();
    expect(stats.by_route['POST /api/v1/projects/{project_id}/runs']).toBe(1);

    const after = await proxy.get(runs, token);
    expect(after.headers['cache-status']).toMatch(/fwd=uri-miss/);
  });

  it('does not invalidate after a write the instance refused', async () => {
    const { token, project_ids } = emulator.tokens.member(0);
    const path = `/api/v1/projects/${project_ids[0]}/runs?per_page=50`;
    await proxy.get(path, token);
    const write = await request(`${proxy.url}/api/v1/projects/${project_ids[0]}/runs`, { method: 'DELETE' });
    await write.body.dump();
    expect(write.statusCode).toBe(401);
    expect((await proxy.get(path, token)).headers['cache-status']).toMatch(/hit/);
  });
});

describe('strict mode', () => {
  it('rejects an unknown parameter with a 422 naming it, without asking upstream', async () => {
    const strict = await startTestProxy(emulator.url, { cache: { strict: true } });
    try {
      const { token, project_ids } = emulator.tokens.member(0);
      await strict.get('/api/v1/user', token);
      await emulator.resetStats();
      const res = await strict.get(`/api/v1/projects/${project_ids[0]}/runs?shiny=1`, token);
      expect(res.status).toBe(422);
      expect(res.json().errors).toHaveProperty('shiny');
      expect((await emulator.stats()).total).toBe(0);
    } finally {
      await strict.close();
    }
  });
});

describe('upstream protection', () => {
  it('answers 503 with a JSON body when the upstream queue is full', async () => {
    const small = await startTestProxy(emulator.url, { upstream: { maxConcurrent: 1, maxQueue: 1 } });
    try {
      const { token, project_ids } = emulator.tokens.member(0);
      await small.get('/api/v1/user', token);
      await emulator.faults({ latency_ms: 300 });
      const all = await Promise.all(
        [15, 25, 50, 100].map((pp) => small.get(`/api/v1/projects/${project_ids[0]}/milestones?per_page=${pp}`, token)),
      );
      const statuses = all.map((r) => r.status).sort();
      expect(statuses).toEqual([200, 200, 503, 503]);
      expect(all.find((r) => r.status === 503)!.json()).toMatchObject({ message: expect.any(String), errors: {} });
    } finally {
      await emulator.clearFaults();
      await small.close();
    }
  });
});
