/**
 * Revocation promises, on one replica, over real HTTP against the real emulator, with a fake
 * clock: project access revoked upstream stops a user's cached answers of the project within
 * access.projectConfirmMs + one request, whatever their own freshness; a lapsed identity gets
 * stale answers only while the instance itself fails, never because tm-cache's own queue is full.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { httpGet, startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { proxyOverEmulator } from '../helpers/setup.js';
import { until } from '../helpers/wait.js';

let clock = Date.now();
const now = () => clock;
/** access.projectConfirmMs, set explicitly (its default) so the test reads the same on code that predates it. */
const CONFIRM_MS = 30_000;
const PROJECT_ROUTE = 'GET /api/v1/projects/{project_id}';

const env = proxyOverEmulator({ identity: { ttlMs: 10 * 3_600_000 }, access: { projectConfirmMs: CONFIRM_MS } }, now);
const extra: TestProxy[] = [];
afterEach(async () => {
  await env.emulator.clearFaults();
  await Promise.all(extra.splice(0).map((p) => p.close()));
});

async function proxyWith(overrides: Parameters<typeof startTestProxy>[1]): Promise<TestProxy> {
  const p = await startTestProxy(env.emulator.url, overrides, now);
  extra.push(p);
  return p;
}

/** Closed runs of a project, asked of the emulator directly. */
async function closedRuns(token: string, projectId: number): Promise<number[]> {
  const res = await httpGet(`${env.emulator.url}/api/v1/projects/${projectId}/runs?is_closed=1`, token);
  const ids = (res.json().result as { id: number }[]).map((r) => r.id);
  if (ids.length < 2) throw new Error(`project ${projectId} has fewer than two closed runs`);
  return ids;
}

/** A fresh token of the i-th member, so a revoked token never leaks into another test. */
async function freshToken(i: number): Promise<{ token: string; userId: number; projectId: number }> {
  const m = env.emulator.tokens.member(i % 3);
  const issued = await env.emulator.mutate({ op: 'issue_token', user_id: m.user_id });
  return { token: issued.token as string, userId: m.user_id, projectId: m.project_ids[0]! };
}

describe('revoked project access', () => {
  it('stops serving a settled answer within access.projectConfirmMs, and drops the user’s other answers of the project', async () => {
    const { token, userId, projectId } = await freshToken(0);
    const [runA, runB] = await closedRuns(token, projectId);
    const first = await env.proxy.get(`/api/v1/runs/${runA}`, token);
    expect(first.headers['cache-status']).toBe('tm-cache; fwd=uri-miss; fwd-status=200; stored; ttl=3600');
    expect((await env.proxy.get(`/api/v1/runs/${runB}`, token)).status).toBe(200);
    await env.emulator.mutate({ op: 'revoke_project', user_id: userId, project_id: projectId });
    try {
      clock += CONFIRM_MS - 1_000;
      // Inside the window the promise allows the hit, and it costs the instance nothing.
      expect((await env.proxy.get(`/api/v1/runs/${runA}`, token)).headers['cache-status']).toMatch(/^tm-cache; hit;/);
      clock += 2_000;
      const refused = await env.proxy.get(`/api/v1/runs/${runA}`, token);
      expect(refused.status).toBe(404);
      expect(refused.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=404(; key=project)?$/);
      await env.emulator.mutate({ op: 'grant_project', user_id: userId, project_id: projectId });
      // Run B was never asked for again: the refusal dropped it with every answer of the project held for this user.
      const again = await env.proxy.get(`/api/v1/runs/${runB}`, token);
      expect(again.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored/);
    } finally {
      await env.emulator.mutate({ op: 'grant_project', user_id: userId, project_id: projectId });
    }
  });

  it('keeps serving a confirmed user for one light request per project and window, renewed by any fresh answer of the project', async () => {
    const { token, projectId } = await freshToken(1);
    const [run] = await closedRuns(token, projectId);
    await env.proxy.get(`/api/v1/runs/${run}`, token);
    await env.emulator.resetStats();
    clock += CONFIRM_MS + 1_000;
    for (let i = 0; i < 3; i++)
      expect((await env.proxy.get(`/api/v1/runs/${run}`, token)).headers['cache-status']).toMatch(/^tm-cache; hit;.*detail=memory(; key=project)?$/);
    let stats = await env.emulator.stats();
    expect(stats.by_route[PROJECT_ROUTE]).toBe(1);
    expect(stats.total).toBe(1);
    // A fill of another answer of the project confirms access as well: no confirmation is due after it.
    clock += CONFIRM_MS - 5_000;
    expect((await env.proxy.get(`/api/v1/projects/${projectId}/milestones?per_page=15`, token)).status).toBe(200);
    clock += 10_000;
    expect((await env.proxy.get(`/api/v1/runs/${run}`, token)).headers['cache-status']).toMatch(/^tm-cache; hit;/);
    stats = await env.emulator.stats();
    expect(stats.by_route[PROJECT_ROUTE]).toBe(1);
  });

  it('serves nothing of the project when its confirmation is due and tm-cache’s own queue is full', async () => {
    const p = await proxyWith({ upstream: { maxConcurrent: 1, maxQueue: 0 }, identity: { ttlMs: 10 * 3_600_000 }, access: { projectConfirmMs: CONFIRM_MS } });
    // The confirmation is a request of the fill lane: that lane's only slot is taken.
    const { token, projectId } = await freshToken(2);
    const [run] = await closedRuns(token, projectId);
    expect((await p.get(`/api/v1/runs/${run}`, token)).status).toBe(200);
    clock += CONFIRM_MS + 1_000;
    const { junk } = await holdTheOnlySlot(p, 'fill');
    const res = await p.get(`/api/v1/runs/${run}`, token);
    await junk;
    expect(res.status).toBe(503);
    expect(res.headers['cache-status']).not.toMatch(/stale/);
  });
});

/**
 * Occupies the only slot of one of the proxy's upstream lanes on a slow instance (the attack:
 * anyone can send junk tokens, and any member can ask for misses). `identity`: a junk token's
 * GET /user holds the identity lane; `fill`: another member's miss holds the fill lane. Resolves
 * once the slot is taken, with that request (wrapped: an async function returning a promise
 * would wait for it).
 */
async function holdTheOnlySlot(p: TestProxy, lane: 'identity' | 'fill'): Promise<{ junk: Promise<unknown> }> {
  const other = env.emulator.tokens.member(1).token;
  if (lane === 'fill') expect((await p.get('/api/v1/projects?per_page=15', other)).status).toBe(200); // known caller
  await env.emulator.faults({ latency_ms: 1_500 });
  const junk =
    // The miss: another list than the one asked above (another filter), which would derive a page of it.
    lane === 'identity'
      ? p.get('/api/v1/projects?per_page=15', 'junk-token-that-the-instance-refuses')
      : p.get('/api/v1/projects?is_completed=0&per_page=50', other);
  const gauge = lane === 'identity' ? /tm_cache_identity_upstream_active 1\b/ : /tm_cache_upstream_active 1\b/;
  await until(async () => gauge.test((await httpGet(`${p.managementUrl}/metrics`)).body.toString()));
  return { junk };
}

describe('a lapsed identity while the instance fails', () => {
  it('never gets stale answers because tm-cache’s own queue is full', async () => {
    // The re-verification of a credential seen before is a GET /user in the fills' lane (known
    // callers never wait behind unknown credentials): another member's miss takes its only slot.
    const p = await proxyWith({ identity: { ttlMs: 1_000 }, upstream: { maxConcurrent: 1, maxQueue: 0 } });
    const { token } = await freshToken(3);
    const path = '/api/v1/projects?per_page=25';
    expect((await p.get(path, token)).status).toBe(200);
    await env.emulator.mutate({ op: 'revoke_token', token });
    clock += 2_000;
    const { junk } = await holdTheOnlySlot(p, 'fill');
    const res = await p.get(path, token);
    await junk;
    expect(res.status).toBe(503);
    expect(res.headers['cache-status']).not.toMatch(/stale/);
  });

  it('is re-verified past junk tokens holding the identity lane: a revoked one gets the instance’s 401', async () => {
    const p = await proxyWith({ identity: { ttlMs: 1_000, maxConcurrent: 1, maxQueue: 0 } });
    const { token } = await freshToken(5);
    const path = '/api/v1/projects?per_page=25';
    expect((await p.get(path, token)).status).toBe(200);
    await env.emulator.mutate({ op: 'revoke_token', token });
    clock += 2_000;
    const { junk } = await holdTheOnlySlot(p, 'identity');
    const res = await p.get(path, token);
    await junk;
    expect(res.status).toBe(401);
    expect(res.headers['cache-status']).not.toMatch(/stale/);
  });

  it('gets stale answers on an instance failure only when identity.staleOnOutage allows it', async () => {
    const path = '/api/v1/projects?per_page=50';
    const { token } = await freshToken(4);
    const [allowing, refusing] = [await proxyWith({ identity: { ttlMs: 1_000 } }), await proxyWith({ identity: { ttlMs: 1_000, staleOnOutage: false } })];
    for (const p of [allowing, refusing]) expect((await p.get(path, token)).status).toBe(200);
    clock += 2_000;
    await env.emulator.faults({ error_rate: 1, error_status: 503 });
    const stale = await allowing.get(path, token);
    expect(stale.status).toBe(200);
    expect(stale.headers['cache-status']).toMatch(/fwd=stale.*detail=stale-if-error/);
    const refused = await refusing.get(path, token);
    expect(refused.status).toBe(502);
    expect(refused.headers['cache-status']).not.toMatch(/stale/);
  });
});
