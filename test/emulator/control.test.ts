import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { call, get } from './http.js';

let em: TestEmulator;
let admin: string;
beforeAll(async () => {
  em = await startTestEmulator();
  admin = em.tokens.admin().token;
});
afterAll(() => em?.close());
beforeEach(async () => {
  await em.clearFaults();
  await em.resetStats();
});

const api = (path: string) => `${em.url}/api/v1${path}`;
const PATHS = [
  '/user',
  '/projects?expands=users',
  '/projects/1/runs?per_page=50&expands=users,milestones,statuses',
  '/runs/3/results?expands=users',
  '/users?expands=groups,roles',
  '/projects/2/milestones?expands=milestone_stats',
];

describe('determinism', () => {
  it('answers byte-identical bodies from two instances with the same seed, different ones with another seed', async () => {
    const twin = await startTestEmulator({ seed: 42 });
    const other = await startTestEmulator({ seed: 43 });
    try {
      expect(twin.tokens.all).toEqual(em.tokens.all);
      expect(other.tokens.admin().token).not.toBe(em.tokens.admin().token);
      for (const p of PATHS) {
        const a = await get(api(p), admin);
        const b = await get(`${twin.url}/api/v1${p}`, twin.tokens.admin().token);
        const c = await get(`${other.url}/api/v1${p}`, other.tokens.admin().token);
        expect(b.text).toBe(a.text);
        if (p !== '/user') expect(c.text).not.toBe(a.text);
      }
    } finally {
      await twin.close();
      await other.close();
    }
  });
});

describe('stats', () => {
  it('counts API requests by route template and by token, never control-plane calls', async () => {
    const member = em.tokens.member(1).token;
    await get(api('/projects/1/runs'), admin);
    await get(api('/projects/2/runs?per_page=15'), admin);
    await get(api('/user'), member);
    await get(api('/user'));
    await call(api('/projects/1/runs'), { method: 'POST', token: admin, body: '{}' });
    await em.stats();
    const s = await em.stats();
    expect(s.total).toBe(5);
    expect(s.by_route).toEqual({ 'GET /api/v1/projects/{project_id}/runs': 2, 'GET /api/v1/user': 2, 'POST /api/v1/projects/{project_id}/runs': 1 });
    expect(s.by_token).toEqual({ [admin]: 3, [member]: 1, '(none)': 1 });
    await em.resetStats();
    expect(await em.stats()).toEqual({ total: 0, peak_per_s: 0, rate_limited: 0, lockouts: 0, by_route: {}, by_token: {} });
  });
});

describe('faults', () => {
  it('adds latency', async () => {
    await em.faults({ latency_ms: 150 });
    const t = Date.now();
    expect((await get(api('/user'), admin)).status).toBe(200);
    expect(Date.now() - t).toBeGreaterThanOrEqual(140);
  });

  it('fails every request with error_rate 1 and the given status, none after clearing', async () => {
    await em.faults({ error_rate: 1, error_status: 503 });
    const a = await get(api('/user'), admin);
    expect(a.status).toBe(503);
    expect(a.json()).toHaveProperty('message');
    await em.clearFaults();
    expect((await get(api('/user'), admin)).status).toBe(200);
  });

  it('fails about error_rate of the requests, the same ones for the same fault set', async () => {
    const statuses = async () => {
      await em.faults({ error_rate: 0.5 });
      const out: number[] = [];
      for (let i = 0; i < 40; i++) out.push((await get(api('/user'), admin)).status);
      return out;
    };
    const first = await statuses();
    expect(first.filter((s) => s === 500).length).toBeGreaterThan(5);
    expect(first.filter((s) => s === 200).length).toBeGreaterThan(5);
    expect(await statuses()).toEqual(first);
  });

  it('resets connections when down, and still counts what arrived', async () => {
    await em.faults({ down: true });
    await expect(get(api('/user'), admin)).rejects.toThrow();
    expect((await em.stats()).total).toBe(1);
  });

  it('answers 429 with Retry-After once after_n requests were served', async () => {
    await em.faults({ rate_limit: { after_n: 2, retry_after_s: 30 } });
    expect((await get(api('/user'), admin)).status).toBe(200);
    expect((await get(api('/user'), admin)).status).toBe(200);
    const limited = await get(api('/user'), admin);
    expect(limited.status).toBe(429);
    expect(limited.headers['retry-after']).toBe('30');
    expect((await get(api('/user'), admin)).status).toBe(429);
  });

  it.each([
    [{ latency_ms: -1 }, 'latency_ms'],
    [{ error_rate: 2 }, 'error_rate'],
    [{ error_status: 200 }, 'error_status'],
    [{ down: 'yes' }, 'down'],
    // Complete, so the nested type error is the only one (a missing field is reported first).
    [{ rate_limit: { after_n: 'x', retry_after_s: 30 } }, 'after_n'],
    [{ latncy_ms: 5 }, 'latncy_ms'],
    [{ down: 'true' }, 'down'],
    [{ latency_ms: 1.5 }, 'latency_ms'],
    [{ rate_limit: { after_n: 2 } }, 'retry_after_s'],
    [{ rate_limit: { after_n: 2, retry_after_s: 30, every: 5 } }, 'every'],
    [[{ down: true }], 'body'],
  ])('rejects the fault set %j naming %s', async (body, field) => {
    const a = await call(`${em.url}/__emulator/faults`, { method: 'PUT', body: JSON.stringify(body) });
    expect(a.status).toBe(400);
    expect(Object.keys(a.json().errors)).toEqual([field]);
  });

  it.each([
    [{ latency_ms: -1 }, 'latency_ms', 'The latency_ms must be >= 0.'],
    [{ error_status: 600 }, 'error_status', 'The error_status must be <= 599.'],
    [{ down: 1 }, 'down', 'The down must be boolean.'],
    [{ latncy_ms: 5 }, 'latncy_ms', 'Unknown field latncy_ms.'],
    [{ rate_limit: { after_n: 1 } }, 'retry_after_s', 'The retry_after_s is required.'],
    [{ rate_limit: { after_n: 1, retry_after_s: 1, burst: 0 } }, 'burst', 'The burst must be >= 1.'],
    ['down', 'body', 'The body must be object.'],
  ])('answers %j with the field and the rule it broke, and keeps the faults it had', async (body, field, rule) => {
    await em.faults({ latency_ms: 1 });
    const a = await call(`${em.url}/__emulator/faults`, { method: 'PUT', body: JSON.stringify(body) });
    expect(a.status).toBe(400);
    expect(a.headers['content-type']).toMatch(/^application\/json/);
    expect(a.json()).toEqual({ message: rule, errors: { [field]: [rule] } });
    expect((await get(`${em.url}/__emulator/faults`)).json()).toEqual({ latency_ms: 1 });
  });
});
