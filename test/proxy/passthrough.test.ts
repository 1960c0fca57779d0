import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { httpGet, startTestProxy } from '../helpers/proxy.js';
import { proxyOverEmulator } from '../helpers/setup.js';

const env = proxyOverEmulator();

describe('passthrough', () => {
  it('forwards a path outside the catalogue untouched, every time', async () => {
    const { token } = env.emulator.tokens.member(0);
    for (let i = 0; i < 2; i++) {
      const res = await env.proxy.get('/api/v1/projects/1/cases', token);
      const direct = await httpGet(`${env.emulator.url}/api/v1/projects/1/cases`, token);
      expect(res.status).toBe(direct.status);
      expect(res.body.equals(direct.body)).toBe(true);
      expect(res.headers['cache-status']).toBeUndefined();
    }
  });

  it('forwards a request with a parameter the catalogue does not know, uncached, and says so', async () => {
    const { token, project_ids } = env.emulator.tokens.member(0);
    const path = `/api/v1/projects/${project_ids[0]}/runs?per_page=15&shiny=1`;
    for (let i = 0; i < 2; i++) {
      const res = await env.proxy.get(path, token);
      expect(res.status).toBe(200);
      expect(res.headers['cache-status']).toBe('tm-cache; fwd=bypass; detail=unknown-param');
      // The query string arrived as sent: the page has 15 items, as the instance answers it.
      expect(res.json().per_page).toBe(15);
    }
    expect((await env.emulator.stats()).by_route['GET /api/v1/projects/{project_id}/runs']).toBe(2);
  });

  it('passes a write through and drops the cached entries of the project it names', async () => {
    const { token, project_ids } = env.emulator.tokens.member(0);
    const project = project_ids[0]!;
    const runs = `/api/v1/projects/${project}/runs?per_page=25`;
    await env.proxy.get(runs, token);
    expect((await env.proxy.get(runs, token)).headers['cache-status']).toMatch(/hit/);

    const write = await request(`${env.proxy.url}/api/v1/projects/${project}/runs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'new run' }),
    });
    await write.body.dump();
    expect(write.statusCode).toBeLessThan(300);
    const stats = await env.emulator.stats();
    expect(stats.by_route['POST /api/v1/projects/{project_id}/runs']).toBe(1);

    const after = await env.proxy.get(runs, token);
    expect(after.headers['cache-status']).toMatch(/fwd=uri-miss/);
  });

  it('does not invalidate after a write the instance refused', async () => {
    const { token, project_ids } = env.emulator.tokens.member(0);
    const path = `/api/v1/projects/${project_ids[0]}/runs?per_page=50`;
    await env.proxy.get(path, token);
    const write = await request(`${env.proxy.url}/api/v1/projects/${project_ids[0]}/runs`, { method: 'DELETE' });
    await write.body.dump();
    expect(write.statusCode).toBe(401);
    expect((await env.proxy.get(path, token)).headers['cache-status']).toMatch(/hit/);
  });
});

describe('strict mode', () => {
  it('rejects an unknown parameter with a 422 naming it, without asking upstream', async () => {
    const strict = await startTestProxy(env.emulator.url, { cache: { strict: true } });
    try {
      const { token, project_ids } = env.emulator.tokens.member(0);
      await strict.get('/api/v1/user', token);
      await env.emulator.resetStats();
      const res = await strict.get(`/api/v1/projects/${project_ids[0]}/runs?shiny=1`, token);
      expect(res.status).toBe(422);
      expect(res.json().errors).toHaveProperty('shiny');
      expect((await env.emulator.stats()).total).toBe(0);
    } finally {
      await strict.close();
    }
  });
});

describe('upstream protection', () => {
  it('answers 503 with a JSON body when the upstream queue is full', async () => {
    // Sharing by user: four fills of one caller at once (by project, a member's questions of one area wait for one proof first).
    const small = await startTestProxy(env.emulator.url, { upstream: { maxConcurrent: 1, maxQueue: 1 }, cache: { sharing: 'user' } });
    try {
      const { token, project_ids } = env.emulator.tokens.member(0);
      await small.get('/api/v1/user', token);
      await env.emulator.faults({ latency_ms: 300 });
      const all = await Promise.all([15, 25, 50, 100].map((pp) => small.get(`/api/v1/projects/${project_ids[0]}/milestones?per_page=${pp}`, token)));
      const statuses = all.map((r) => r.status).sort();
      expect(statuses).toEqual([200, 200, 503, 503]);
      expect(all.find((r) => r.status === 503)!.json()).toMatchObject({ message: expect.any(String), errors: {} });
    } finally {
      await env.emulator.clearFaults();
      await small.close();
    }
  });
});
