/**
 * `cache.sharing: project`: a project's answers are stored once for the project, and a caller
 * reads them only with proof, three conditions: access to the project confirmed within
 * access.projectConfirmMs, a grant for every area the answer reveals within access.grantTtlMs
 * (earned by a 200 to that same user for an operation of the area), and no refusal since.
 * Real HTTP, the real emulator, a private redis-server, two replicas, one fake clock.
 */
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { getOperation, makePath, type OperationId } from '../../src/api/catalogue.js';
import type { Config } from '../../src/config/schema.js';
import type { TokenInfo } from '../../src/emulator/state.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type DeepPartial, type TestProxy, type TestResponse } from '../helpers/proxy.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { isSharedHit, readUntilSharedHit, twoMembersOfOneProject } from '../helpers/sharing.js';
import { until } from '../helpers/wait.js';

let clock = Date.now();
const now = () => clock;
const CONFIRM_MS = 2_000;
const GRANT_MS = 60_000;
/** Every answer stays fresh far past the windows: only the access checks can stop it. */
const HOUR = { ttlMs: 3_600_000, staleWhileRevalidateMs: 3_600_000 };
/** Fresh for 10 s, then stale for 1 s: expired after, but still held (for stale-if-error). */
const BRIEF = { ttlMs: 10_000, staleWhileRevalidateMs: 1_000 };
const CONFIG: DeepPartial<Config> = {
  identity: { ttlMs: 10 * 3_600_000 },
  access: { projectConfirmMs: CONFIRM_MS, grantTtlMs: GRANT_MS },
  cache: { sharing: 'project', freshness: { default: HOUR, settled: HOUR, byResource: {} } },
};

let emulator: TestEmulator;
let redis: RedisHandle;
let client: Redis;
const running: TestProxy[] = [];
/** Two members of one project (`a` fills, `b` reads), and a user who is not a member of it. */
let a: TokenInfo;
let b: TokenInfo;
let outsider: TokenInfo;
let projectId: number;
let pathIds: Record<string, number>;
let prefixes = 0;

beforeAll(async () => {
  emulator = await startTestEmulator();
  redis = await startRedis();
  client = new Redis(redis.url);
  const nonMember = (p: number) => emulator.tokens.all.find((t) => !t.is_admin && !t.project_ids.includes(p));
  ({ a, b, projectId } = twoMembersOfOneProject(emulator.tokens.all, (p) => nonMember(p) !== undefined));
  outsider = nonMember(projectId)!;
  pathIds = await idsInside(projectId);
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.close()));
  for (const area of ['runs', 'sessions'] as const) await emulator.mutate({ op: 'allow_area', user_id: b.user_id, project_id: projectId, area });
  await emulator.mutate({ op: 'grant_project', user_id: b.user_id, project_id: projectId });
});
afterAll(async () => {
  client?.disconnect();
  await emulator?.close();
  await redis?.stop();
});

/** One of each thing inside the project (a run with results), asked of the emulator directly. */
async function idsInside(id: number): Promise<Record<string, number>> {
  const first = async (path: string): Promise<number> => ((await httpGet(`${emulator.url}/api/v1${path}`, a.token)).json().result as { id: number }[])[0]!.id;
  const runs = (await httpGet(`${emulator.url}/api/v1/projects/${id}/runs?per_page=100`, a.token)).json().result as {
    id: number;
    total_count: number;
    untested_count: number;
  }[];
  return {
    project_id: id,
    run_id: runs.find((r) => r.total_count > r.untested_count)!.id,
    milestone_id: await first(`/projects/${id}/milestones`),
    session_id: await first(`/projects/${id}/sessions`),
    automation_source_id: await first(`/projects/${id}/automation/sources`),
  };
}

/** Two replicas sharing the test's redis-server under a key prefix of their own; `overrides` over CONFIG. */
async function replicas(overrides: DeepPartial<Config> = {}): Promise<[TestProxy, TestProxy]> {
  const cache = { ...CONFIG.cache, ...overrides.cache, redis: { url: redis.url, keyPrefix: `sharing-${++prefixes}:`, commandTimeoutMs: 500 } };
  const start = async () => {
    const p = await startTestProxy(emulator.url, { ...CONFIG, ...overrides, cache }, now);
    running.push(p);
    return p;
  };
  return [await start(), await start()];
}

const pathOf = (id: OperationId): string => makePath(getOperation(id), pathIds);
const RUNS = `/api/v1/projects/${'{p}'}/runs`;
const runs = (query = '') => RUNS.replace('{p}', String(projectId)) + query;
const sessions = () => `/api/v1/projects/${projectId}/sessions`;

/**
 * Waits until this test's replicas have written to Redis what another replica needs to serve
 * `user` the project's runs without asking: their confirmation of the project and their grant of
 * its runs, where `placed` belongs when given, and every entry a fill of theirs was storing (no
 * fill's lock left: a fill unlocks once its entry landed). These writes follow the answers that
 * earned them; keys of this test's prefix only, never an earlier test's.
 */
async function sharedProofOf(user: TokenInfo, placed?: string): Promise<void> {
  const prefix = `sharing-${prefixes}:`;
  const key = (namespace: string, k: string) => `${prefix}json:${namespace}:${k}`;
  const wanted = [key('project-access', `${user.user_id}:${projectId}`), key('area-grant', `${user.user_id}:${projectId}:runs`)];
  if (placed !== undefined) wanted.push(key('project-of', placed));
  await until(async () => (await client.exists(...wanted)) === wanted.length && (await client.keys(`${prefix}*:lock`)).length === 0);
}

/** The lists whose items tell a replica which project a run, milestone, session or source belongs to. */
async function fillProjectLists(p: TestProxy, token: string): Promise<void> {
  for (const path of [runs('?per_page=100'), `/api/v1/projects/${projectId}/milestones`, sessions(), `/api/v1/projects/${projectId}/automation/sources`]) {
    expect((await p.get(path, token)).status).toBe(200);
  }
}

describe('a member of the project', () => {
  it("reads another member's shared answer as a hit once proven, and not before", async () => {
    const [r1] = await replicas();
    const filled = await r1.get(runs(), a.token);
    expect(filled.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored.*key=project$/);
    // b holds no grant for the runs of the project: filled under b's own token, which earns it.
    await emulator.resetStats();
    const first = await r1.get(runs(), b.token);
    expect(first.status).toBe(200);
    expect(first.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored.*key=project$/);
    expect((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/runs']).toBe(1);
    // Proven: a's other runs question, never asked by b, is a hit for b.
    expect((await r1.get(runs('?per_page=15'), a.token)).status).toBe(200);
    await emulator.resetStats();
    const shared = await r1.get(runs('?per_page=15'), b.token);
    expect(shared.status).toBe(200);
    expect(isSharedHit(shared)).toBe(true);
    expect((await emulator.stats()).total).toBe(0);
  });

  it('is not served past access.grantTtlMs on the word of an old grant: proven again under their own token', async () => {
    const [r1] = await replicas();
    await r1.get(runs(), a.token);
    expect(isSharedHit(await readUntilSharedHit(r1, runs(), b.token))).toBe(true);
    clock += GRANT_MS + 1_000;
    expect((await r1.get(runs(), a.token)).status).toBe(200); // a proves again too
    await emulator.resetStats();
    const again = await r1.get(runs(), b.token);
    expect(isSharedHit(again)).toBe(false);
    expect((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/runs']).toBe(1);
  });

  it('asking a question that expands an area they hold no grant for, is answered from their own scope, as in user mode, and never from the shared one', async () => {
    const [r1] = await replicas();
    const expanded = runs('?expands=milestones');
    // a proves the milestones area, then fills the shared answer.
    expect((await r1.get(`/api/v1/projects/${projectId}/milestones`, a.token)).status).toBe(200);
    expect((await r1.get(expanded, a.token)).headers['cache-status']).toMatch(/key=project$/);
    // b has never listed milestones: no 200 to the expanded question proves that area for b.
    await emulator.resetStats();
    const first = await r1.get(expanded, b.token);
    expect(first.status).toBe(200);
    expect(first.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored; ttl=\d+$/);
    const again = await r1.get(expanded, b.token);
    expect(again.headers['cache-status']).toMatch(/^tm-cache; hit; ttl=\d+; detail=memory$/);
    expect(again.body.equals(first.body)).toBe(true);
    expect((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/runs']).toBe(1);
  });

  it('asking on two replicas at once without proof, costs the instance one request: the second waits for the first and is proven by it', async () => {
    const [r1, r2] = await replicas();
    // Both replicas know the caller: only the fill is left.
    for (const p of [r1, r2]) expect((await p.get('/api/v1/user', a.token)).status).toBe(200);
    await emulator.resetStats();
    await emulator.faults({ latency_ms: 400 });
    try {
      const first = r1.get(runs(), a.token);
      await until(async () => (await client.keys(`sharing-${prefixes}:*:lock`)).length > 0);
      const second = await r2.get(runs(), a.token);
      expect((await first).headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored.*key=project$/);
      expect(second.status).toBe(200);
      expect(second.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; collapsed; ttl=\d+; detail=redis; key=project$/);
    } finally {
      await emulator.clearFaults();
    }
    expect((await emulator.stats()).total).toBe(1);
  });

  it('asking for a resource named by its id alone, stores the answer that tells its project in the project scope: the next request of any proven member is a shared hit', async () => {
    const [r1] = await replicas();
    const run = `/api/v1/runs/${pathIds['run_id']}`;
    const first = await r1.get(run, a.token);
    expect(first.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored; ttl=\d+$/);
    await emulator.resetStats();
    const again = await r1.get(run, a.token);
    expect(isSharedHit(again)).toBe(true);
    expect(again.body.equals(first.body)).toBe(true);
    // b, proven for the runs of the project, reads the same entry.
    expect(isSharedHit(await readUntilSharedHit(r1, runs(), b.token))).toBe(true);
    await emulator.resetStats();
    const theirs = await r1.get(run, b.token);
    expect(isSharedHit(theirs)).toBe(true);
    expect(theirs.body.equals(first.body)).toBe(true);
    expect((await emulator.stats()).total).toBe(0);
  });

  it('asking on another replica for a resource one replica placed, is placed there from the first request: the team’s entry from Redis, no request to the instance', async () => {
    const [r1, r2] = await replicas();
    const run = `/api/v1/runs/${pathIds['run_id']}`;
    expect((await r1.get(run, a.token)).status).toBe(200); // placed in its project, the place shared
    // b proves the runs of the project on r1 (the grant shared through Redis).
    expect(isSharedHit(await readUntilSharedHit(r1, runs(), b.token))).toBe(true);
    await sharedProofOf(b, `run:${pathIds['run_id']}`);
    await emulator.resetStats();
    const there = await r2.get(run, b.token);
    expect(there.status).toBe(200);
    expect(there.headers['cache-status']).toMatch(/^tm-cache; hit;.*detail=redis; key=project$/);
    expect((await emulator.stats()).by_route['GET /api/v1/runs/{run_id}'] ?? 0).toBe(0);
  });

  it('without a grant for an area, proves it once: their other questions of it wait for that proof, then read the team’s entries', async () => {
    const [r1] = await replicas();
    const pages = ['?per_page=15', '?per_page=25', '?per_page=50'].map((q) => runs(q));
    for (const page of pages) expect((await r1.get(page, a.token)).status).toBe(200); // the team's entries
    await emulator.faults({ latency_ms: 300 });
    try {
      await emulator.resetStats();
      const answers = await Promise.all(pages.map((page) => r1.get(page, b.token)));
      for (const res of answers) expect(res.status).toBe(200);
      // One of b's questions proved the runs of the project; the others waited for it and were shared hits.
      expect((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/runs']).toBe(1);
      expect(answers.filter(isSharedHit).length).toBe(2);
    } finally {
      await emulator.clearFaults();
    }
  });

  it('without a grant for an area, proves it once when its questions are derived answers: three runs of the team’s list cost one request', async () => {
    const [r1] = await replicas();
    const ids = await teamRunsList(r1);
    const answers = await askedTogether(r1, ids);
    // One of b's questions proved the runs of the project; the others waited for it and were derived from the team's list.
    expect(answers.filter((res) => String(res.headers['cache-status']).includes('detail=derived')).length).toBe(2);
  });

  it('whose grant for an area lapsed while the project stays confirmed, proves it once: three runs of the team’s list cost one request', async () => {
    const [r1] = await replicas();
    const ids = await teamRunsList(r1);
    expect((await r1.get(runs('?per_page=100'), b.token)).status).toBe(200); // b proves the runs
    clock += GRANT_MS + 1;
    // b's project confirmed again (the project's own answer), the runs grant lapsed.
    expect((await r1.get(`/api/v1/projects/${projectId}`, b.token)).status).toBe(200);
    expect((await r1.get(runs('?per_page=100'), a.token)).status).toBe(200);
    await askedTogether(r1, ids);
  });

  it('whose confirmation of the project is due, is confirmed once: three runs of the team’s list cost one request', async () => {
    const [r1] = await replicas();
    const ids = await teamRunsList(r1);
    expect((await r1.get(runs('?per_page=100'), b.token)).status).toBe(200); // b proves the runs, and the project
    clock += CONFIRM_MS + 1;
    expect((await r1.get(runs('?per_page=100'), a.token)).status).toBe(200);
    // A run's fill under b's token confirms the project; the other two are derived after it.
    const answers = await askedTogether(r1, ids);
    expect((await emulator.stats()).total).toBe(1);
    expect(answers.filter((res) => String(res.headers['cache-status']).includes('detail=derived')).length).toBe(2);
  });

  it('whose confirmation is due, reads runs whose own entries expired derived from the team’s fresh list: one confirmation, no run asked', async () => {
    const [r1] = await replicas({ cache: { ...CONFIG.cache, freshness: { default: BRIEF, settled: BRIEF, byResource: {} } } });
    const ids = await teamRunsList(r1);
    expect((await r1.get(runs('?per_page=100'), b.token)).status).toBe(200); // b proves the runs, and the project
    // The runs' own entries, filled once (no-cache: not derived), as a dashboard's first load leaves them.
    for (const id of ids) expect((await r1.get(`/api/v1/runs/${id}`, b.token, { 'cache-control': 'no-cache' })).status).toBe(200);
    clock += BRIEF.ttlMs + BRIEF.staleWhileRevalidateMs + 1;
    expect((await r1.get(runs('?per_page=100'), a.token)).status).toBe(200); // the team's list, fresh again
    await emulator.faults({ latency_ms: 300 });
    try {
      await emulator.resetStats();
      const answers = await Promise.all(ids.map((id) => r1.get(`/api/v1/runs/${id}`, b.token)));
      for (const res of answers) expect(res.status).toBe(200);
      expect((await emulator.stats()).by_route).toEqual({ 'GET /api/v1/projects/{project_id}': 1 });
      expect(answers.every((res) => String(res.headers['cache-status']).includes('detail=derived'))).toBe(true);
    } finally {
      await emulator.clearFaults();
    }
  });

  /** The team's runs list, filled by a on `p` (it holds the runs, and places them in the project): three of its runs. */
  async function teamRunsList(p: TestProxy): Promise<number[]> {
    const list = (await p.get(runs('?per_page=100'), a.token)).json().result as { id: number }[];
    return list.slice(0, 3).map((r) => r.id);
  }

  /** The runs `ids` asked by b at once, the instance slow: all 200, one run asked of the instance (b's proof). */
  async function askedTogether(p: TestProxy, ids: readonly number[]): Promise<TestResponse[]> {
    await emulator.faults({ latency_ms: 300 });
    try {
      await emulator.resetStats();
      const answers = await Promise.all(ids.map((id) => p.get(`/api/v1/runs/${id}`, b.token)));
      for (const res of answers) expect(res.status).toBe(200);
      expect((await emulator.stats()).by_route['GET /api/v1/runs/{run_id}'] ?? 0).toBe(1);
      return answers;
    } finally {
      await emulator.clearFaults();
    }
  }

  it('opening a dashboard of the project, costs one request per area: the proofs confirm the project, and a question expanding another area proves its own', async () => {
    const [r1] = await replicas();
    const project = `/api/v1/projects/${projectId}`;
    const expanded = runs('?per_page=25&expands=users');
    const plain = runs('?per_page=15');
    for (const path of [project, plain, sessions()]) expect((await r1.get(path, a.token)).status).toBe(200); // the team's entries
    await emulator.faults({ latency_ms: 300 });
    try {
      await emulator.resetStats();
      // As a browser opens the panels: the question expanding users on its way to the instance, then the others together.
      const first = r1.get(expanded, b.token);
      await until(async () => ((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/runs'] ?? 0) === 1);
      const [projectAnswer, plainAnswer, sessionsAnswer] = await Promise.all([project, plain, sessions()].map((path) => r1.get(path, b.token)));
      const expandedAnswer = await first;
      const answers = [projectAnswer!, plainAnswer!, sessionsAnswer!, expandedAnswer];
      for (const res of answers) expect(res.status).toBe(200);
      const byRoute = (await emulator.stats()).by_route;
      // No confirmation asked: b's proofs of the runs and the sessions confirmed the project.
      expect(byRoute['GET /api/v1/projects/{project_id}'] ?? 0).toBe(0);
      // One proof of the runs: the question expanding users (answered from b's own scope) proved it, the plain page waited for it.
      expect(byRoute['GET /api/v1/projects/{project_id}/runs']).toBe(1);
      expect(byRoute['GET /api/v1/projects/{project_id}/sessions']).toBe(1);
      expect(isSharedHit(projectAnswer!)).toBe(true);
      expect(isSharedHit(plainAnswer!)).toBe(true);
      expect(expandedAnswer.headers['cache-status']).not.toContain('key=project');
    } finally {
      await emulator.clearFaults();
    }
  });

  it('holding a grant earned on one replica, is served by the other from Redis without asking the instance', async () => {
    const [r1, r2] = await replicas();
    await r1.get(runs(), a.token);
    expect(isSharedHit(await readUntilSharedHit(r1, runs(), b.token))).toBe(true);
    await sharedProofOf(b);
    await emulator.resetStats();
    const there = await r2.get(runs(), b.token);
    expect(there.status).toBe(200);
    expect(there.headers['cache-status']).toMatch(/^tm-cache; hit;.*detail=redis; key=project$/);
    expect((await emulator.stats()).total).toBe(0);
  });
});

describe('a user who is no member of the project', () => {
  it.each(['listRuns', 'getProject', 'listSessions'] as const)('never reads its shared %s, on either replica', async (id) => {
    const [r1, r2] = await replicas();
    const path = pathOf(id);
    expect((await r1.get(path, a.token)).status).toBe(200);
    for (const p of [r1, r2, r1]) {
      const res = await p.get(path, outsider.token);
      expect(res.status).toBe(getOperation(id).noAccessStatus);
      expect(res.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=40[34]/);
    }
    // The team's entry is still there: one caller's refusal evicts nothing.
    expect(isSharedHit(await r1.get(path, a.token))).toBe(true);
  });
});

describe('a member denied one area of the project', () => {
  it('never receives a shared sessions answer, while reading the shared runs', async () => {
    await emulator.mutate({ op: 'deny_area', user_id: b.user_id, project_id: projectId, area: 'sessions' });
    const [r1, r2] = await replicas();
    expect((await r1.get(sessions(), a.token)).status).toBe(200);
    expect((await r1.get(runs(), a.token)).status).toBe(200);
    expect(isSharedHit(await readUntilSharedHit(r1, runs(), b.token))).toBe(true);
    for (const p of [r1, r2, r1, r2]) {
      const res = await p.get(sessions(), b.token);
      expect(res.status).toBe(403);
      expect(res.headers['cache-status']).toMatch(/fwd-status=403/);
    }
    // The refusal cost b their proof for the project (proven again), never the team its entries.
    expect((await r1.get(runs(), b.token)).status).toBe(200);
    expect(isSharedHit(await readUntilSharedHit(r1, runs(), b.token))).toBe(true);
    expect(isSharedHit(await r1.get(sessions(), a.token))).toBe(true);
  });

  it("waiting on another member's fill of that area on another replica, is never handed its answer: asked under their own token, and refused", async () => {
    await emulator.mutate({ op: 'deny_area', user_id: b.user_id, project_id: projectId, area: 'sessions' });
    const [r1, r2] = await replicas();
    expect((await r1.get('/api/v1/user', a.token)).status).toBe(200);
    // b is proven for the project (runs), so the sessions question reaches the fill.
    expect((await r1.get(runs(), a.token)).status).toBe(200);
    expect(isSharedHit(await readUntilSharedHit(r2, runs(), b.token))).toBe(true);
    await emulator.resetStats();
    await emulator.faults({ latency_ms: 400 });
    try {
      const filling = r1.get(sessions(), a.token);
      await until(async () => (await client.keys(`sharing-${prefixes}:*:lock`)).length > 0);
      const refused = await r2.get(sessions(), b.token);
      expect(refused.status).toBe(403);
      expect(refused.headers['cache-status']).toMatch(/fwd-status=403/);
      expect((await filling).status).toBe(200);
    } finally {
      await emulator.clearFaults();
    }
    expect((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/sessions']).toBe(2);
  });

  it('stops being served that area on every replica at their first refusal, within access.grantTtlMs', async () => {
    const [r1, r2] = await replicas();
    await r1.get(runs(), a.token);
    for (const p of [r1, r2]) expect(isSharedHit(await readUntilSharedHit(p, runs(), b.token))).toBe(true);
    await emulator.mutate({ op: 'deny_area', user_id: b.user_id, project_id: projectId, area: 'runs' });
    // A question nobody asked goes to the instance under b's proof; it refuses: b's grants of the project go everywhere.
    // (Another order: a page of the list held would be derived from it, as the shared entry is served, while b's grant holds.)
    expect((await r1.get(runs('?order=asc&per_page=25'), b.token)).status).toBe(403);
    expect((await r1.get(runs(), b.token)).status).toBe(403);
    await until(async () => (await r2.get(runs(), b.token)).status === 403);
    expect((await r2.get(runs(), b.token)).status).toBe(403);
    // Never the shared entry.
    for (const p of [r1, r2]) expect(isSharedHit(await p.get(runs(), a.token))).toBe(true);
  });
});

/**
 * Refreshes under a member's credential: answers fresh for 1 s, then served stale while one
 * background refresh runs (refresh-ahead off: its skip when no budget token is at hand would make
 * the tests flaky; both refreshes choose the credential alike), identities for 3 s, confirmations
 * for 2 s. `b` proves first, `a` half a second later: b's proofs expire sooner, so a refresh of
 * a's read is asked under b's token.
 */
const SHORT: DeepPartial<Config> = {
  identity: { ttlMs: 3_000 },
  cache: {
    refreshAhead: { enabled: false },
    freshness: { default: { ttlMs: 1_000, staleWhileRevalidateMs: 3_600_000 }, settled: HOUR, byResource: {} },
  },
};

/** Requests the emulator received with `token` since the last reset. */
async function askedWith(token: string): Promise<number> {
  return (await emulator.stats()).by_token[token] ?? 0;
}

/** Served from the project's shared entry (fresh, or stale while it is refreshed), not asked of the instance for this caller. */
const fromShared = (res: TestResponse) => res.status === 200 && /^tm-cache; (hit|fwd=stale);.*key=project$/.test(String(res.headers['cache-status'] ?? ''));

/** `b` proves on `p` at t0 (their own fill), then `a` at t0 + 500 ms (their own fill: the shared entry stored then); answers t0. */
async function bThenA(p: TestProxy, path: string): Promise<number> {
  const t0 = clock;
  expect((await p.get(path, b.token)).status).toBe(200);
  clock = t0 + 500;
  expect((await p.get(path, a.token)).status).toBe(200);
  expect(isSharedHit(await p.get(path, a.token))).toBe(true);
  return t0;
}

describe("a shared entry's refresh, asked under a member's credential", () => {
  it('renews that member’s confirmation and identity: no GET /projects/{id} or GET /user of theirs in the next period', async () => {
    const [r1] = await replicas(SHORT);
    const t0 = await bThenA(r1, runs());
    // a reads it stale: refreshed in the background, under b's token (b's proof is due first).
    clock = t0 + 1_800;
    await emulator.resetStats();
    expect(fromShared(await r1.get(runs(), a.token))).toBe(true);
    await until(async () => (await askedWith(b.token)) === 1);
    expect(await askedWith(a.token)).toBe(0);
    // Past b's own proofs (confirmation t0 + 2 s, identity t0 + 3 s): renewed by the refresh, asked at t0 + 1.8 s.
    clock = t0 + 3_300;
    await emulator.resetStats();
    expect(fromShared(await r1.get(runs(), b.token))).toBe(true);
    const routes = (await emulator.stats()).by_route;
    expect(routes['GET /api/v1/projects/{project_id}']).toBeUndefined();
    expect(routes['GET /api/v1/user']).toBeUndefined();
  });

  it('refused, relays nothing, evicts nothing, drops the member: their credential is never chosen again', async () => {
    const [r1] = await replicas(SHORT);
    const t0 = await bThenA(r1, runs());
    await emulator.mutate({ op: 'deny_area', user_id: b.user_id, project_id: projectId, area: 'runs' });
    clock = t0 + 1_800;
    await emulator.resetStats();
    expect(fromShared(await r1.get(runs(), a.token))).toBe(true);
    await until(async () => (await askedWith(b.token)) === 1); // b's refresh: 403
    // The team's entry stays, and the next refreshes (now, and once stale again) go under a's token.
    for (const [at, asked] of [
      [1_800, 1],
      [2_900, 2],
    ] as const) {
      clock = t0 + at;
      expect(fromShared(await r1.get(runs(), a.token))).toBe(true);
      await until(async () => (await askedWith(a.token)) === asked);
      expect(await askedWith(b.token)).toBe(1);
    }
    // b reads nothing of the runs from the cache: the instance's 403, under b's own token.
    expect((await r1.get(runs(), b.token)).status).toBe(403);
  });

  it('is asked only under a member who may read that entry: one denied its area never refreshes it, nor gets it', async () => {
    await emulator.mutate({ op: 'deny_area', user_id: b.user_id, project_id: projectId, area: 'sessions' });
    const [r1, r2] = await replicas(SHORT);
    const t0 = await bThenA(r1, runs());
    expect((await r1.get(sessions(), a.token)).status).toBe(200);
    expect(isSharedHit(await r1.get(sessions(), a.token))).toBe(true);
    clock = t0 + 1_800;
    await emulator.resetStats();
    // The runs, stale, are refreshed under b (their proof is due first)...
    expect(fromShared(await r1.get(runs(), a.token))).toBe(true);
    await until(async () => (await askedWith(b.token)) === 1);
    // ...the sessions, once that refresh is over, under a: b may not read them, however due b's proof is.
    expect(fromShared(await r1.get(sessions(), a.token))).toBe(true);
    await until(async () => (await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/sessions'] === 1);
    expect(await askedWith(a.token)).toBe(1);
    expect(await askedWith(b.token)).toBe(1);
    for (const p of [r1, r2]) {
      const res = await p.get(sessions(), b.token);
      expect(res.status).toBe(403);
      expect(res.headers['cache-status']).toMatch(/fwd-status=403/);
    }
  });
});

/** Every operation whose answers are shared by project. */
const SHARED: readonly OperationId[] = [
  'listProjectUsers',
  'getProject',
  'listRuns',
  'getRun',
  'listRunResults',
  'listMilestones',
  'getMilestone',
  'listSessions',
  'getSession',
  'listAutomationSources',
  'getAutomationSource',
];

describe('a member who lost the project', () => {
  it.each(SHARED)('is refused its shared %s within access.projectConfirmMs + one request, on every replica', async (id) => {
    const [r1, r2] = await replicas();
    const path = pathOf(id);
    // Lists first: they tell the replicas which project a run, milestone, session or source is in.
    await fillProjectLists(r1, a.token);
    for (const p of [r1, r2]) expect(isSharedHit(await readUntilSharedHit(p, path, a.token)), `a on ${p === r1 ? 1 : 2}`).toBe(true);
    for (const p of [r1, r2]) expect(isSharedHit(await readUntilSharedHit(p, path, b.token)), `b on ${p === r1 ? 1 : 2}`).toBe(true);

    await emulator.mutate({ op: 'revoke_project', user_id: b.user_id, project_id: projectId });
    clock += CONFIRM_MS + 1_000;
    for (const p of [r1, r2]) {
      const res = await p.get(path, b.token);
      expect(res.status).toBe(getOperation(id).noAccessStatus);
      expect(res.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=40[34]/);
    }
    // The team keeps its entry.
    expect(isSharedHit(await readUntilSharedHit(r1, path, a.token))).toBe(true);
  });
});

describe('what stays per user or per admin in project mode', () => {
  it('GET /projects and GET /user stay the caller’s own; an admin-only answer stays with verified admins', async () => {
    const [r1] = await replicas();
    const admin = emulator.tokens.admin();
    for (const path of ['/api/v1/projects', '/api/v1/user']) {
      expect((await r1.get(path, a.token)).status).toBe(200);
      const theirs = await r1.get(path, b.token);
      expect(theirs.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored/);
      expect(theirs.headers['cache-status']).not.toMatch(/key=project/);
    }
    expect((await r1.get('/api/v1/users', admin.token)).status).toBe(200);
    expect((await r1.get('/api/v1/users', b.token)).status).toBe(403);
  });
});

describe('an admin demoted', () => {
  const ACCESS_MS = 2_000;
  /** A hit of an admin-only operation: only the admin scope holds its answers (decide.ts), so a hit is that scope's. */
  const isAdminHit = (res: TestResponse) => res.status === 200 && /^tm-cache; hit;/.test(String(res.headers['cache-status'] ?? ''));

  it.each(['user', 'project'] as const)(
    'loses what the admin scope gave within access.ttlMs of their verification, on either replica (%s mode)',
    async (sharing) => {
      // A user made admin for this test only (the emulator's own admin serves the other tests).
      const user = emulator.tokens.all.find((t) => !t.is_admin && ![a, b, outsider].includes(t))!;
      await emulator.mutate({ op: 'set_admin', user_id: user.user_id, is_admin: true });
      try {
        const [r1, r2] = await replicas({ access: { ...CONFIG.access, ttlMs: ACCESS_MS }, cache: { sharing } });
        const t0 = clock;
        // Verified by the instance's 200 on r1; r2 trusts the verification r1 shared, until its expiry.
        expect((await r1.get('/api/v1/users', user.token)).status).toBe(200);
        for (const p of [r1, r2]) expect(isAdminHit(await p.get('/api/v1/users', user.token)), `admin hit on ${p === r1 ? 1 : 2}`).toBe(true);
        await emulator.mutate({ op: 'set_admin', user_id: user.user_id, is_admin: false });
        // Past access.ttlMs from the verification, the admin scope's answer is theirs no more: the instance's 403.
        clock = t0 + ACCESS_MS + 1;
        for (const p of [r1, r2, r1, r2]) {
          const res = await p.get('/api/v1/users', user.token);
          expect(res.status).toBe(403);
          expect(res.headers['cache-status']).toMatch(/fwd-status=403/);
        }
        // The admins keep their shared entry.
        const admin = emulator.tokens.admin();
        expect((await r1.get('/api/v1/users', admin.token)).status).toBe(200);
        expect(isAdminHit(await r1.get('/api/v1/users', admin.token))).toBe(true);
      } finally {
        await emulator.mutate({ op: 'set_admin', user_id: user.user_id, is_admin: false });
      }
    },
  );
});

describe('cache.sharing: user', () => {
  it('keeps every answer per user, as before: a second member asks the instance for their own', async () => {
    const [r1] = await replicas({ cache: { sharing: 'user' } });
    expect((await r1.get(runs(), a.token)).headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored(; ttl=\d+)?$/);
    await emulator.resetStats();
    const theirs = await r1.get(runs(), b.token);
    expect(theirs.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored(; ttl=\d+)?$/);
    expect((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/runs']).toBe(1);
    expect((await r1.get(runs(), b.token)).headers['cache-status']).toMatch(/^tm-cache; hit;.*detail=memory$/);
  });
});
