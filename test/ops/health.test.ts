/**
 * /readyz tells the truth about the upstream: its last known state is in the body either way;
 * with health.requireUpstream a replica whose upstream refuses connections is not ready, and is
 * ready again once the upstream answers. Real sockets: a port nothing listens on, then the
 * real emulator.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { startTestEmulator } from '../helpers/emulator.js';
import { findFreePort } from '../helpers/ports.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { until } from '../helpers/wait.js';

async function readyz(p: TestProxy): Promise<{ status: number; body: any }> {
  const res = await request(`${p.managementUrl}/readyz`);
  return { status: res.statusCode, body: await res.body.json() };
}

describe('/readyz and the upstream', () => {
  it('stays ready by default while the upstream refuses connections, and says so in the body', async () => {
    const p = await startTestProxy(`http://127.0.0.1:${await findFreePort()}`, { health: { upstreamProbeMs: 100 } });
    try {
      // The first /readyz goes and looks; the answer after it knows.
      await readyz(p);
      await until(async () => (await readyz(p)).body.checks.upstream.detail.startsWith('unreachable'));
      const r = await readyz(p);
      expect(r.status).toBe(200);
      expect(r.body.status).toBe('degraded');
      expect(r.body.checks.upstream).toMatchObject({ status: 'degraded', detail: expect.stringMatching(/^unreachable: connect/) });
      const metrics = await (await request(`${p.managementUrl}/metrics`)).body.text();
      expect(metrics).toMatch(/^tm_cache_upstream_up 0$/m);
      expect(metrics).toMatch(/^tm_cache_ready 1$/m);
    } finally {
      await p.close();
    }
  });

  it('with health.requireUpstream, is not ready while the upstream is down and ready again once it answers', async () => {
    const port = await findFreePort();
    const p = await startTestProxy(`http://127.0.0.1:${port}`, { health: { requireUpstream: true, upstreamProbeMs: 100 } });
    try {
      await readyz(p);
      await until(async () => (await readyz(p)).status === 503);
      expect((await readyz(p)).body).toMatchObject({ status: 'down', checks: { upstream: { status: 'down' } } });
      expect(await (await request(`${p.managementUrl}/metrics`)).body.text()).toMatch(/^tm_cache_ready 0$/m);
      // The instance comes up on that port: the next probe finds it.
      const emulator = await startTestEmulator({ port });
      try {
        await until(async () => (await readyz(p)).status === 200);
        expect((await readyz(p)).body.checks.upstream).toEqual({ status: 'ok', detail: 'up' });
      } finally {
        await emulator.close();
      }
    } finally {
      await p.close();
    }
  });

  it('learns the state from traffic: a failed request marks the upstream down, any answer marks it up', async () => {
    const emulator = await startTestEmulator();
    const p = await startTestProxy(emulator.url, { health: { upstreamProbeMs: 600_000 } });
    try {
      const m = emulator.tokens.member(0);
      await p.get('/api/v1/projects', m.token);
      expect((await readyz(p)).body.checks.upstream).toEqual({ status: 'ok', detail: 'up' });
      await emulator.faults({ down: true });
      await p.get(`/api/v1/projects/${m.project_ids[0]}/runs?per_page=15`, m.token);
      expect((await readyz(p)).body.checks.upstream.status).toBe('degraded');
      await emulator.clearFaults();
      await p.get(`/api/v1/projects/${m.project_ids[0]}/runs?per_page=25`, m.token);
      expect((await readyz(p)).body.checks.upstream.status).toBe('ok');
    } finally {
      await p.close();
      await emulator.close();
    }
  });
});
