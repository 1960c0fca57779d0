/**
 * The admin API on the management port, over real HTTP: two replicas sharing a real
 * redis-server, in front of the real emulator. Purges reach both replicas and Redis; entries and
 * stats describe what really happened; bad input is a JSON 400/422 naming the field.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { startTestEmulator } from '../helpers/emulator.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { replicasOverEmulatorAndRedis, redisTierOf } from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

const TOKEN = 'admin-token-for-tests-0123456789';
const env = replicasOverEmulatorAndRedis();

async function admin(p: TestProxy, method: 'GET' | 'POST', path: string, body?: unknown, token: string | null = TOKEN) {
  const res = await request(p.managementUrl + path, {
    method,
    headers: { ...(token === null ? {} : { authorization: `Bearer ${token}` }), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) };
}

// A command timeout out of a loaded machine's reach: these tests are about purges, not Redis' speed.
const withRedis = () => ({ cache: { redis: { url: env.redis.url, commandTimeoutMs: 2_000 } }, admin: { token: TOKEN } });

describe('admin API access', () => {
  it('is 404 everywhere while admin.token is empty, and says how to enable it', async () => {
    const p = await env.replica({ cache: { redis: { url: env.redis.url, commandTimeoutMs: 2_000 } } });
    for (const [method, path] of [
      ['GET', '/admin/stats'],
      ['GET', '/admin/entries'],
      ['POST', '/admin/purge'],
      ['GET', '/'],
    ] as const) {
      const res = await admin(p, method, path, method === 'POST' ? { all: true } : undefined);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.json().message).toContain('admin.token');
    }
  });

  it('answers 401 to a missing or wrong token, also one that differs only in length or case, and 200 to the right one', async () => {
    const p = await env.replica(withRedis());
    for (const token of [null, '', 'nope', TOKEN.toUpperCase(), `${TOKEN}x`, TOKEN.slice(0, -1)]) {
      const res = await admin(p, 'GET', '/admin/stats', undefined, token);
      expect(res.status, String(token)).toBe(401);
      expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
    }
    const basic = await request(`${p.managementUrl}/admin/stats`, { headers: { authorization: `Basic ${Buffer.from(`x:${TOKEN}`).toString('base64')}` } });
    expect(basic.statusCode).toBe(401);
    await basic.body.dump();
    expect((await admin(p, 'GET', '/admin/stats')).status).toBe(200);
  });
});

describe('the viewer token (admin.viewerToken)', () => {
  const VIEWER = 'viewer-token-for-wall-screens-42';

  it('reads /admin/stats and the page, and is refused purges and entries with a 403 naming the rule', async () => {
    const p = await env.replica({ ...withRedis(), admin: { token: TOKEN, viewerToken: VIEWER } });
    const stats = await admin(p, 'GET', '/admin/stats', undefined, VIEWER);
    expect(stats.status).toBe(200);
    expect(stats.json().requests).toBeDefined();
    expect((await admin(p, 'GET', '/', undefined, VIEWER)).status).toBe(200);
    for (const [method, path] of [
      ['POST', '/admin/purge'],
      ['GET', '/admin/entries'],
    ] as const) {
      const res = await admin(p, method, path, method === 'POST' ? { all: true } : undefined, VIEWER);
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect(res.json().message).toContain('admin.viewerToken');
      expect(res.json().errors.authorization[0]).toMatch(/read-only/);
    }
    // The admin token still does everything; a wrong token is still 401, not 403.
    expect((await admin(p, 'GET', '/admin/entries')).status).toBe(200);
    expect((await admin(p, 'GET', '/admin/entries', undefined, `${VIEWER}x`)).status).toBe(401);
  });
});

describe('POST /admin/purge', () => {
  it('drops a tag on every replica and in Redis: the next request is a miss everywhere', async () => {
    const a = await env.replica(withRedis());
    const b = await env.replica(withRedis());
    const m = env.emulator.tokens.member(0);
    const project = m.project_ids[0]!;
    const path = `/api/v1/projects/${project}/runs?per_page=15`;
    expect((await a.get(path, m.token)).headers['cache-status']).toMatch(/fwd=uri-miss/);
    // A's fill holds its lock until its Redis write landed: before that, B would be collapsed into it, not a hit.
    await until(async () => (await env.client.keys('*:lock')).length === 0);
    expect((await b.get(path, m.token)).headers['cache-status']).toMatch(/hit;.*detail=redis/);
    expect((await b.get(path, m.token)).headers['cache-status']).toMatch(/hit;.*detail=memory/);

    const res = await admin(a, 'POST', '/admin/purge', { tag: `project:${project}` });
    expect(res.status).toBe(200);
    expect(res.json()).toMatchObject({ purged: 1, tiers: { memory: 1, redis: 1 } });
    // Replica b hears it through the invalidation channel.
    await until(async () => b.cache.memory.peek(keysOf(b)[0] ?? 'none') === undefined);
    expect(await redisTierOf(a).peek(keysOf(a)[0] ?? `u:${m.user_id}|v1|listRuns|${project}|per_page=15`)).toBeUndefined();
    expect((await b.get(path, m.token)).headers['cache-status']).toMatch(/fwd=uri-miss/);
  });

  // Per-user scopes: sharing by user, whatever the suite's default; sharing by project is the next test's.
  it('drops everything of one user (user_id), and only theirs', async () => {
    const p = await env.replica({ cache: { sharing: 'user' }, admin: { token: TOKEN } });
    const [m0, m1] = [env.emulator.tokens.member(0), env.emulator.tokens.member(1)];
    await p.get(`/api/v1/projects/${m0.project_ids[0]}/runs?per_page=15`, m0.token);
    await p.get(`/api/v1/projects/${m0.project_ids[0]}/milestones`, m0.token);
    await p.get(`/api/v1/projects/${m1.project_ids[0]}/runs?per_page=15`, m1.token);
    const res = await admin(p, 'POST', '/admin/purge', { user_id: m0.user_id });
    expect(res.json()).toMatchObject({ purged: 2 });
    expect(keysOf(p)).toEqual([expect.stringMatching(new RegExp(`^u:${m1.user_id}\\|`))]);
  });

  it('drops one operation for given ids across users, and nothing else', async () => {
    const p = await env.replica({ cache: { sharing: 'user' }, admin: { token: TOKEN } });
    const [m0, m1] = [env.emulator.tokens.member(0), env.emulator.tokens.member(1)];
    const shared = m0.project_ids.find((id) => m1.project_ids.includes(id));
    expect(shared, 'members 0 and 1 share a project').toBeDefined();
    for (const m of [m0, m1]) {
      await p.get(`/api/v1/projects/${shared}/runs?per_page=15`, m.token);
      await p.get(`/api/v1/projects/${shared}/runs?per_page=25`, m.token);
      await p.get(`/api/v1/projects/${shared}/milestones`, m.token);
    }
    const res = await admin(p, 'POST', '/admin/purge', { operation: 'listRuns', ids: { project_id: shared } });
    expect(res.json()).toMatchObject({ purged: 4 });
    expect(keysOf(p).every((k) => k.includes('|listMilestones|'))).toBe(true);
    expect(keysOf(p)).toHaveLength(2);
  });

  it('with cache.sharing: project, leaves a project’s shared entries to a purge by user_id, and drops them for every member with the project’s tag', async () => {
    // Its own key prefix: what Redis holds and drops is this test's alone.
    const p = await env.replica({
      cache: { sharing: 'project', redis: { url: env.redis.url, keyPrefix: 'admin-by-project:', commandTimeoutMs: 2_000 } },
      admin: { token: TOKEN },
    });
    const [m0, m1] = [env.emulator.tokens.member(0), env.emulator.tokens.member(1)];
    const shared = m0.project_ids.find((id) => m1.project_ids.includes(id));
    expect(shared, 'members 0 and 1 share a project').toBeDefined();
    const paths = [`/api/v1/projects/${shared}/runs?per_page=15`, `/api/v1/projects/${shared}/milestones`];
    const asks = async (m: typeof m0, path: string): Promise<string> => String((await p.get(path, m.token)).headers['cache-status']);
    // Each member asks each question twice: the first ask fills or proves them, the second is the
    // project's one entry of the question, the same for both.
    for (const m of [m0, m1]) for (const path of paths) await p.get(path, m.token);
    for (const m of [m0, m1]) for (const path of paths) expect(await asks(m, path)).toMatch(/^tm-cache; hit;.*detail=memory; key=project$/);
    const projectKeys = keysOf(p).sort();
    expect(projectKeys).toEqual([
      expect.stringMatching(new RegExp(`^p:${shared}\\|v1\\|listMilestones\\|`)),
      expect.stringMatching(new RegExp(`^p:${shared}\\|v1\\|listRuns\\|`)),
    ]);
    for (const key of projectKeys) await until(async () => (await redisTierOf(p).peek(key)) !== undefined);

    // A user's scope holds none of the project's answers: purging it drops nothing, and says so.
    const byUser = await admin(p, 'POST', '/admin/purge', { user_id: m0.user_id });
    expect(byUser.status).toBe(200);
    expect(byUser.json()).toEqual({ purged: 0, tiers: { memory: 0, redis: 0 }, tag: `u:${m0.user_id}` });
    expect(keysOf(p).sort()).toEqual(projectKeys);
    expect(await asks(m0, paths[0]!)).toMatch(/^tm-cache; hit;.*detail=memory; key=project$/);

    // The project's tag reaches its shared entries, here and in Redis: every member's next request goes upstream.
    const byProject = await admin(p, 'POST', '/admin/purge', { tag: `project:${shared}` });
    expect(byProject.status).toBe(200);
    expect(byProject.json()).toEqual({ purged: 2, tiers: { memory: 2, redis: 2 }, tag: `project:${shared}` });
    expect(keysOf(p)).toEqual([]);
    for (const key of projectKeys) expect(await redisTierOf(p).peek(key)).toBeUndefined();
    expect(await asks(m1, paths[0]!)).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored;.*key=project$/);
    expect(await asks(m0, paths[1]!)).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored;.*key=project$/);
  });

  it('drops everything with {"all": true}: memory here, memory of the other replicas, and the entries in Redis', async () => {
    const a = await env.replica(withRedis());
    const b = await env.replica(withRedis());
    const m = env.emulator.tokens.member(2);
    await a.get(`/api/v1/projects/${m.project_ids[0]}/runs?per_page=50`, m.token);
    await b.get(`/api/v1/projects/${m.project_ids[0]}/runs?per_page=50`, m.token);
    expect(keysOf(b).length).toBeGreaterThan(0);
    const entriesBefore = (await env.client.keys('tmc:{*}')).length;
    expect(entriesBefore).toBeGreaterThan(0);
    const res = await admin(a, 'POST', '/admin/purge', { all: true });
    expect(res.status).toBe(200);
    expect(res.json().tiers.redis).toBe(entriesBefore);
    expect(await env.client.keys('tmc:{*}')).toEqual([]);
    await until(() => keysOf(b).length === 0);
    // Identities are not entries: they survive a purge (no extra GET /user after it).
    expect((await env.client.keys('tmc:json:identity:*')).length).toBeGreaterThan(0);
  });

  it('is counted in tm_cache_purges_total and logged', async () => {
    const p = await env.replica({ admin: { token: TOKEN } });
    await admin(p, 'POST', '/admin/purge', { tag: 'run:1' });
    await admin(p, 'POST', '/admin/purge', { tag: 'run:2' });
    const metrics = await (await request(`${p.managementUrl}/metrics`)).body.text();
    expect(metrics).toMatch(/^tm_cache_purges_total 2$/m);
  });

  it.each([
    ['not JSON', '{"tag": ', 400, undefined],
    ['an array', [], 400, undefined],
    ['empty', {}, 422, 'tag'],
    ['two choices', { tag: 'run:1', all: true }, 422, 'all'],
    ['all false', { all: false }, 422, 'all'],
    ['an unknown field', { tags: 'run:1' }, 422, 'tags'],
    ['a tag with spaces', { tag: 'run 1' }, 422, 'tag'],
    ['a tag not a string', { tag: 5 }, 422, 'tag'],
    ['user_id zero', { user_id: 0 }, 422, 'user_id'],
    ['user_id not a number', { user_id: 'seven' }, 422, 'user_id'],
    ['an unknown operation', { operation: 'listEverything' }, 422, 'operation'],
    ['an operation without its ids', { operation: 'listRuns' }, 422, 'ids.project_id'],
    ['an operation with a foreign id', { operation: 'listRuns', ids: { project_id: 1, run_id: 2 } }, 422, 'ids.run_id'],
    ['ids without an operation', { ids: { project_id: 1 } }, 422, 'ids'],
  ])('refuses %s with a JSON error naming the field, and purges nothing', async (_, body, status, field) => {
    const p = await env.replica({ admin: { token: TOKEN } });
    const m = env.emulator.tokens.member(0);
    await p.get(`/api/v1/projects/${m.project_ids[0]}/runs?per_page=15`, m.token);
    const res = await admin(p, 'POST', '/admin/purge', body);
    expect(res.status).toBe(status);
    expect(res.json()).toMatchObject({ message: expect.any(String), errors: expect.any(Object) });
    if (field !== undefined) expect(Object.keys(res.json().errors)).toEqual([field]);
    expect(keysOf(p)).toHaveLength(1);
  });
});

describe('GET /admin/entries', () => {
  it("lists this replica's memory entries without bodies, filtered by user, operation and tag, with hits and freshness", async () => {
    // Per-user scopes: sharing by user, whatever the suite's default.
    const p = await env.replica({ cache: { sharing: 'user' }, admin: { token: TOKEN } });
    const [m0, m1] = [env.emulator.tokens.member(0), env.emulator.tokens.member(1)];
    const project = m0.project_ids[0]!;
    for (let i = 0; i < 3; i++) await p.get(`/api/v1/projects/${project}/runs?per_page=15`, m0.token);
    await p.get(`/api/v1/projects/${project}/milestones`, m0.token);
    await p.get(`/api/v1/projects/${m1.project_ids[0]}/runs?per_page=15`, m1.token);

    const all = (await admin(p, 'GET', '/admin/entries')).json();
    expect(all.total).toBe(3);
    const runs = (await admin(p, 'GET', `/admin/entries?user_id=${m0.user_id}&operation=listRuns`)).json();
    expect(runs.total).toBe(1);
    expect(runs.entries[0]).toMatchObject({
      scope: `u:${m0.user_id}`,
      operation: 'listRuns',
      ids: { project_id: project },
      query: 'per_page=15',
      tier: 'memory',
      hits: 2,
      stale: false,
      tags: expect.arrayContaining([`project:${project}`, `op:listRuns:${project}`, `u:${m0.user_id}`]),
    });
    expect(runs.entries[0].bytes).toBeGreaterThan(1_000);
    expect(runs.entries[0].freshForMs).toBeGreaterThan(0);
    expect(runs.entries[0]).not.toHaveProperty('body');
    expect(JSON.stringify(all)).not.toContain(m0.token);
    const byTag = (await admin(p, 'GET', `/admin/entries?tag=project:${project}&limit=1`)).json();
    expect(byTag.entries).toHaveLength(1);
    expect(byTag.total).toBeGreaterThanOrEqual(2);
  });

  it.each([
    ['?user_id=abc', 'user_id'],
    ['?operation=nope', 'operation'],
    ['?limit=0', 'limit'],
    ['?limit=100000', 'limit'],
    ['?tag=a%20b', 'tag'],
    ['?colour=red', 'colour'],
    ['?user_id=1&user_id=2', 'user_id'],
  ])('refuses %s with a 422 naming the parameter', async (query, param) => {
    const p = await env.replica({ admin: { token: TOKEN } });
    const res = await admin(p, 'GET', `/admin/entries${query}`);
    expect(res.status).toBe(422);
    expect(Object.keys(res.json().errors)).toEqual([param]);
  });
});

describe('GET /admin/stats', () => {
  it('counts requests by outcome and tier, upstream requests made and avoided, bytes and 304 savings', async () => {
    const emulator = await startTestEmulator();
    const p = await startTestProxy(emulator.url, { admin: { token: TOKEN } });
    try {
      const m = emulator.tokens.member(0);
      const path = `/api/v1/projects/${m.project_ids[0]}/runs?per_page=15`;
      const first = await p.get(path, m.token);
      for (let i = 0; i < 8; i++) await p.get(path, m.token);
      await p.get(path, m.token, { 'if-none-match': String(first.headers['etag']) });
      await p.get('/api/v1/projects/1/runs?colour=blue', m.token); // unknown parameter: bypass
      await p.get('/api/v1/projects/1/runs?per_page=7', m.token); // invalid: local 422
      await request(`${p.url}/api/v1/user`).then((r) => r.body.dump()); // no credential: answered 401 by the passthrough's guard
      await until(async () => (await admin(p, 'GET', '/admin/stats')).json().requests.total === 13);
      const stats = (await admin(p, 'GET', '/admin/stats')).json();
      expect(stats.requests.byOutcome).toEqual({ hit: 9, stale: 0, miss: 1, coalesced: 0, bypass: 1, error: 1, passthrough: 1 });
      expect(stats.requests.byTier).toMatchObject({ memory: 9 });
      expect(stats.hitRatio).toBeCloseTo(9 / 12, 5);
      const upstream = (await emulator.stats()).total;
      // Upstream requests of cacheable requests: GET /user, the fill and the bypass (it reached the
      // instance too); the passthrough (no credential: 401 here, never sent) is in neither side of the offload.
      expect(stats.upstream.requests).toBe(3);
      expect(upstream).toBe(3);
      expect(stats.upstream.offload).toBeCloseTo(1 - 3 / 12, 5);
      expect(stats.upstream.byStatusClass).toMatchObject({ '2xx': 3 });
      expect(stats.upstream.state).toBe('up');
      expect(stats.bytes.savedBy304).toBe(first.body.length);
      expect(stats.bytes.sent).toBeGreaterThanOrEqual(first.body.length * 9);
      expect(stats.memory).toMatchObject({ entries: 1, evictions: 0 });
      expect(stats.redis).toEqual({ configured: false, status: 'off', detail: null, errors: 0 });
      expect(stats.top.operations[0]).toEqual({ operation: 'listRuns', upstreamRequests: 1, requests: 10 });
      expect(stats.top.users[0]).toMatchObject({ userId: m.user_id, upstreamRequests: 2 });
      expect(stats.top.operations.map((r: { operation: string }) => r.operation).sort()).toEqual(['identity', 'invalid', 'listRuns', 'unknown']);
      const last = stats.series.at(-1);
      expect(stats.series.reduce((n: number, b: { requests: number }) => n + b.requests, 0)).toBe(13);
      expect(last.t % 10_000).toBe(0);
      expect(stats.version).toMatch(/^\d+\.\d+\.\d+/);
    } finally {
      await p.close();
      await emulator.close();
    }
  });

  it('reports 429s from the upstream, recent and total', async () => {
    const emulator = await startTestEmulator();
    const p = await startTestProxy(emulator.url, { admin: { token: TOKEN } });
    try {
      const m = emulator.tokens.member(0);
      await p.get('/api/v1/projects', m.token);
      await emulator.faults({ rate_limit: { after_n: 0, retry_after_s: 1 } });
      const limited = await p.get(`/api/v1/projects/${m.project_ids[0]}/runs?per_page=25`, m.token);
      expect(limited.status).toBe(429);
      const stats = (await admin(p, 'GET', '/admin/stats')).json();
      expect(stats.upstream.byStatusClass['429']).toBe(1);
      expect(stats.upstream.recent429).toBe(1);
      expect(stats.upstream.last429At).toEqual(expect.any(Number));
    } finally {
      await p.close();
      await emulator.close();
    }
  });
});

function keysOf(p: TestProxy): string[] {
  return p.cache.memory.list(() => true, 1_000).entries.map((e) => e.key);
}
