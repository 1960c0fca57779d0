/**
 * What is never derived: each row fills a source tm-cache could be tempted by, then asks a
 * question that source must not answer, and counts the question reaching the instance (its
 * `/__emulator/stats`). Runs in both sharing modes (`TM_CACHE_SHARING=project`): where a row's
 * answer differs by mode, the row says so.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ask, direct, expectAsked as expectAskedOf, expectDerived as expectDerivedOf, proveAreas, SHARING } from '../helpers/derived.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { twoMembersOfOneProject } from '../helpers/sharing.js';

let em: TestEmulator;
let p: TestProxy;
/** Two members of one project: `a` fills, `b` asks. */
let a: string;
let b: string;
let projectId: number;
let runIds: number[];

beforeAll(async () => {
  em = await startTestEmulator();
  p = await startTestProxy(em.url);
  const members = twoMembersOfOneProject(em.tokens.all);
  ({ projectId } = members);
  a = members.a.token;
  b = members.b.token;
  runIds = ((await direct(em, `/api/v1/projects/${projectId}/runs`, a)) as { result: { id: number }[] }).result.map((r) => r.id);
  expect(runIds.length).toBeGreaterThan(25);
  await proveAreas(p, a, projectId);
});
afterAll(async () => {
  await p?.close();
  await em?.close();
});

const runs = (query: string) => `/api/v1/projects/${projectId}/runs?${query}`;

const expectAsked = (proxy: TestProxy, path: string, token: string, headers: Record<string, string> = {}): Promise<void> =>
  expectAskedOf(em, proxy, path, token, headers);
const expectDerived = (proxy: TestProxy, path: string, token: string): Promise<void> => expectDerivedOf(em, proxy, path, token);

describe('never derived', () => {
  it('a page the source does not cover (15 runs held, 25 asked)', async () => {
    await p.get(runs('order=asc&per_page=15'), a);
    await expectAsked(p, runs('order=asc&per_page=25'), a);
    // The control: a page the source does cover is derived.
    await expectDerived(p, runs('order=asc&per_page=100&page=9'), a);
  });

  it('a page of the same list with other filters, sort or order', async () => {
    await p.get(runs('is_closed=0&per_page=50'), a);
    await expectAsked(p, runs('per_page=25&page=3'), a);
    await expectAsked(p, runs('is_closed=0&order=asc&per_page=15'), a);
    await expectAsked(p, runs('is_closed=0&sort=runs:closed_at&per_page=15'), a);
  });

  it('an expand the source lacks', async () => {
    await p.get(runs('per_page=25&page=2'), a);
    await expectAsked(p, `/api/v1/runs/${runIds[30]!}?expands=users`, a);
    await expectAsked(p, runs('per_page=15&page=3&expands=users'), a);
  });

  it("a milestone's statuses from a page of several milestones (they are its runs' results', not in the item)", async () => {
    const list = await p.get(`/api/v1/projects/${projectId}/milestones?expands=statuses`, a);
    const milestones = (list.json() as { result: { id: number }[] }).result;
    expect(milestones.length).toBeGreaterThan(1);
    await expectAsked(p, `/api/v1/milestones/${milestones[0]!.id}?expands=statuses`, a);
    await expectDerived(p, `/api/v1/milestones/${milestones[1]!.id}`, a);
  });

  it('a question whose client asks to revalidate (Cache-Control: no-cache)', async () => {
    await p.get(runs('per_page=50&page=2'), a);
    await expectAsked(p, `/api/v1/runs/${runIds[60]!}`, a, { 'cache-control': 'no-cache' });
  });

  it("another member's question: their own entry in user mode; in project mode, until they hold proof of every area it reveals", async () => {
    await p.get(runs('per_page=100&expands=milestones'), a);
    const run = `/api/v1/runs/${runIds[5]!}`;
    await expectAsked(p, `${run}?expands=milestones`, b);
    if (SHARING === 'user') return expectAsked(p, `/api/v1/runs/${runIds[6]!}`, b);
    // b proves the runs area (their own fill of a runs page), not the milestones area.
    await p.get(runs('per_page=25&page=4'), b);
    await expectAsked(p, `/api/v1/runs/${runIds[7]!}?expands=milestones`, b);
    await expectDerived(p, `/api/v1/runs/${runIds[8]!}`, b);
  });

  it('a source dropped by a write to what it holds', async () => {
    await p.get(runs('per_page=100&order=asc'), a);
    const run = runIds[runIds.length - 3]!;
    await expectDerived(p, `/api/v1/runs/${run}`, a);
    const write = await fetch(`${p.url}/api/v1/projects/${projectId}/runs`, { method: 'POST', headers: { authorization: `Bearer ${a}` } });
    expect(write.status).toBe(204);
    await expectAsked(p, `/api/v1/runs/${run}`, a);
  });

  it('a resource after a write to it, from a page that holds it (the page goes with the project it names)', async () => {
    await p.get(runs('per_page=100&order=asc&is_closed=0'), a);
    const list = await p.get(runs('per_page=100&order=asc&is_closed=0'), a);
    const run = (list.json() as { result: { id: number }[] }).result[0]!.id;
    await expectDerived(p, `/api/v1/runs/${run}`, a);
    const write = await fetch(`${p.url}/api/v1/runs/${run}`, { method: 'PATCH', headers: { authorization: `Bearer ${a}` } });
    expect(write.status).toBe(204);
    await expectAsked(p, `/api/v1/runs/${run}`, a);
  });

  it("a project from the caller's own list of projects in project mode, where the project's answer is shared (another scope)", async () => {
    const list = await p.get('/api/v1/projects', a);
    expect((list.json() as { result: { id: number }[] }).result.some((x) => x.id === projectId)).toBe(true);
    if (SHARING === 'user') return expectDerived(p, `/api/v1/projects/${projectId}`, a);
    await expectAsked(p, `/api/v1/projects/${projectId}`, a);
  });
});

describe('on a proxy of its own', () => {
  it('from a source gone stale', async () => {
    let offsetMs = 0;
    const stepped = await startTestProxy(em.url, {}, () => Date.now() + offsetMs);
    try {
      await proveAreas(stepped, a, projectId);
      await stepped.get(runs('per_page=100'), a);
      await expectDerived(stepped, `/api/v1/runs/${runIds[1]!}`, a);
      offsetMs = 31_000; // past the default 30 s freshness of lists
      await expectAsked(stepped, `/api/v1/runs/${runIds[2]!}`, a);
    } finally {
      await stepped.close();
    }
  });

  it("not from a stale source, but from its refresh under way: waited for, then derived; a stale item's own refresh is not asked meanwhile", async () => {
    let offsetMs = 0;
    // Confirmations outlive the step in time, so that the stale list is served (and refreshed) in either mode.
    const stepped = await startTestProxy(em.url, { access: { projectConfirmMs: 600_000 } }, () => Date.now() + offsetMs);
    const reached = async (before: Awaited<ReturnType<TestEmulator['stats']>>, route: string) =>
      ((await em.stats()).by_route[route] ?? 0) - (before.by_route[route] ?? 0);
    try {
      await proveAreas(stepped, a, projectId);
      await stepped.get(runs('per_page=100'), a);
      const held = `/api/v1/runs/${runIds[4]!}`;
      // An item with an entry of its own (a client's no-cache fills it from the instance).
      expect((await stepped.get(held, a, { 'cache-control': 'no-cache' })).status).toBe(200);
      offsetMs = 31_000; // past the default 30 s freshness, within its 30 s stale-while-revalidate
      await em.faults({ latency_ms: 400 });
      const before = await em.stats();
      const stale = await stepped.get(runs('per_page=100'), a);
      expect(String(stale.headers['cache-status'])).toContain('stale-while-revalidate');
      const [missed, staleItem] = await Promise.all([stepped.get(`/api/v1/runs/${runIds[2]!}`, a), stepped.get(held, a)]);
      expect(String(missed.headers['cache-status'])).toContain('detail=derived');
      expect(String(staleItem.headers['cache-status'])).toContain('stale-while-revalidate');
      const derivedLater = await stepped.get(held, a);
      expect(String(derivedLater.headers['cache-status'])).toContain('detail=derived');
      // Counted before the answers are checked against the instance's own (which asks it directly).
      expect(await reached(before, 'GET /api/v1/runs/{run_id}')).toBe(0);
      expect(await reached(before, 'GET /api/v1/projects/{project_id}/runs')).toBe(1);
      await em.clearFaults();
      expect(missed.json()).toEqual(await direct(em, `/api/v1/runs/${runIds[2]!}`, a));
      expect(derivedLater.json()).toEqual(await direct(em, held, a));
    } finally {
      await em.clearFaults();
      await stepped.close();
    }
  });

  it("from a fresh source whose project access lapsed: confirmed first, as for a hit, in user mode; a member's question goes to the instance", async () => {
    let offsetMs = 0;
    const stepped = await startTestProxy(em.url, { access: { projectConfirmMs: 1_000 } }, () => Date.now() + offsetMs);
    try {
      await proveAreas(stepped, a, projectId);
      await stepped.get(runs('per_page=100'), a);
      offsetMs = 2_000; // the list still fresh, the access to its project not confirmed any more
      const before = await em.stats();
      const answer = await ask(em, stepped, `/api/v1/runs/${runIds[3]!}`, a);
      const after = await em.stats();
      const reached = (route: string) => (after.by_route[route] ?? 0) - (before.by_route[route] ?? 0);
      expect(answer.res.json()).toEqual(await direct(em, `/api/v1/runs/${runIds[3]!}`, a));
      if (SHARING === 'project') return expect(reached('GET /api/v1/runs/{run_id}')).toBe(1);
      expect(answer.derived).toBe(true);
      expect(reached('GET /api/v1/projects/{project_id}')).toBe(1);
      expect(reached('GET /api/v1/runs/{run_id}')).toBe(0);
    } finally {
      await stepped.close();
    }
  });

  it('with cache.derive.enabled false', async () => {
    const off = await startTestProxy(em.url, { cache: { derive: { enabled: false } } });
    try {
      await proveAreas(off, a, projectId);
      await off.get(runs('per_page=100'), a);
      await expectAsked(off, `/api/v1/runs/${runIds[1]!}`, a);
      await expectAsked(off, runs('per_page=25&page=2'), a);
    } finally {
      await off.close();
    }
  });
});
