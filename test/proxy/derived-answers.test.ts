/**
 * Derived answers, as properties: seeded random questions, each answered by tm-cache from a list
 * page it filled (a resource of the page, or a page of another size), against the real emulator
 * over real HTTP. Every derived answer must be JSON-equal to the instance's own answer to the same
 * caller, envelope and `expands` included, and must not reach the instance. Runs in both sharing
 * modes (`TM_CACHE_SHARING=project`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getOperation, PER_PAGE_VALUES, type ExpandType, type OperationId } from '../../src/api/catalogue.js';
import { Prng } from '../../src/emulator/prng.js';
import { ask, direct, proveAreas, SHARING } from '../helpers/derived.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';

let em: TestEmulator;
let p: TestProxy;
let member: { token: string; projectId: number };
let admin: string;
/** A run of the member's project that has results. */
let runId: number;
/** Paths tm-cache holds answers for already: asked again they are hits, not derived. */
let held: Set<string>;

const SEED = 26;
const ROUNDS = 10;

beforeAll(async () => {
  em = await startTestEmulator();
  p = await startTestProxy(em.url);
  const m = em.tokens.member(0);
  member = { token: m.token, projectId: m.project_ids[0]! };
  admin = em.tokens.admin().token;
  const runs = (await direct(em, `/api/v1/projects/${member.projectId}/runs?per_page=15`, member.token)) as { result: { id: number; total_count: number }[] };
  runId = runs.result.find((r) => r.total_count > 0)!.id;
  held = new Set(await proveAreas(p, member.token, member.projectId, runId));
});
afterAll(async () => {
  await p?.close();
  await em?.close();
});

/** The params of an operation the properties draw from. */
function paramValues(op: OperationId, name: string): readonly string[] {
  const spec = getOperation(op).params.find((s) => s.name === name);
  if (spec === undefined) return [];
  if (spec.kind === 'sort' || spec.kind === 'expands') return spec.values;
  if (spec.kind === 'order') return ['asc', 'desc'];
  return [];
}

function query(params: Record<string, string | number | readonly string[] | undefined>): string {
  const parts = Object.entries(params).flatMap(([name, value]) =>
    value === undefined || (Array.isArray(value) && value.length === 0) ? [] : [`${name}=${Array.isArray(value) ? value.join(',') : String(value)}`],
  );
  return parts.length === 0 ? '' : `?${parts.join('&')}`;
}

/** A random list question: its sort, order, page size and page, expands, and sometimes the settled filter. */
function drawList(rng: Prng, op: OperationId, maxPage = 2) {
  const allowed = paramValues(op, 'expands');
  const expands = (allowed.length === 0 ? [] : rng.subset(allowed, 3, 0.7)) as ExpandType[];
  const sorts = paramValues(op, 'sort');
  const settled = getOperation(op).params.find((s) => s.kind === 'boolean' && /^is_/.test(s.name))?.name;
  return {
    sort: sorts.length > 0 && rng.chance(0.5) ? rng.pick(sorts) : undefined,
    order: paramValues(op, 'order').length > 0 && rng.chance(0.5) ? rng.pick(['asc', 'desc']) : undefined,
    per_page: rng.pick(PER_PAGE_VALUES),
    page: rng.int(1, maxPage),
    ...(settled !== undefined && rng.chance(0.3) ? { [settled]: rng.pick(['0', '1']) } : {}),
    expands,
  };
}

interface Page {
  page: number | null;
  total: number;
  result: { id: number }[];
}

/** Fills `path` (a source): its page. */
async function fill(path: string, who: string): Promise<Page> {
  held.add(path);
  const res = await p.get(path, who);
  expect(res.status, path).toBe(200);
  return res.json() as Page;
}

/**
 * Asks `path` of tm-cache: the instance's answer to the same caller; when `derivable`, derived
 * from `sourcePath` without reaching the instance. Answers whether it was derived.
 */
async function expectEqual(path: string, sourcePath: string, who: string, derivable = true): Promise<boolean> {
  const answer = await ask(em, p, path, who);
  expect(answer.res.status, path).toBe(200);
  expect(answer.res.json(), `${path} from ${sourcePath}`).toEqual(await direct(em, path, who));
  if (!derivable) return false;
  expect(answer.derived, `${path} from ${sourcePath}: ${String(answer.res.headers['cache-status'])}`).toBe(true);
  expect(answer.upstream).toBe(0);
  return true;
}

interface ItemCase {
  readonly single: OperationId;
  readonly list: OperationId;
  readonly listPath: () => string;
  readonly singlePath: (id: number) => string;
  readonly who: () => string;
}

/** A resource of the member's project: its list under the project, itself at `/<collection>/{id}`. */
function ofProject(single: OperationId, list: OperationId, collection: string): ItemCase {
  return {
    single,
    list,
    listPath: () => `/api/v1/projects/${member.projectId}/${collection}`,
    singlePath: (id) => `/api/v1/${collection}/${id}`,
    who: () => member.token,
  };
}

/** A resource listed site-wide at `/<collection>`, asked by `who`. */
function siteWide(single: OperationId, list: OperationId, collection: string, who: () => string): ItemCase {
  return { single, list, listPath: () => `/api/v1/${collection}`, singlePath: (id) => `/api/v1/${collection}/${id}`, who };
}

/** Each derivable single operation, the list it is derived from, and whose token asks. */
const ITEM_CASES: readonly ItemCase[] = [
  ofProject('getRun', 'listRuns', 'runs'),
  ofProject('getMilestone', 'listMilestones', 'milestones'),
  ofProject('getSession', 'listSessions', 'sessions'),
  ofProject('getAutomationSource', 'listAutomationSources', 'automation/sources'),
  siteWide('getProject', 'listProjects', 'projects', () => member.token),
  siteWide('getRole', 'listRoles', 'roles', () => admin),
  siteWide('getGroup', 'listGroups', 'groups', () => admin),
];

/**
 * `GET /projects` is the caller's own answer in both modes, and `GET /projects/{id}` a project's
 * shared answer with sharing by project: there it is derived only when the question falls back
 * to the caller's own scope (expanding an area they hold no grant for), which the never-derived
 * table pins down; here only its equality is asserted.
 */
const derivedInThisMode = (single: OperationId): boolean => !(SHARING === 'project' && single === 'getProject');

describe('a resource answered from a list page that holds it', () => {
  for (const c of ITEM_CASES) {
    it(`${c.single} from ${c.list}: equal to the instance's answer, for random pages, sorts and expands`, async () => {
      const rng = new Prng(SEED);
      const asked = new Set<string>();
      let derived = 0;
      for (let round = 0; round < ROUNDS; round++) {
        const listQuery = drawList(rng, c.list, 1);
        const listPath = c.listPath() + query(listQuery);
        const items = (await fill(listPath, c.who())).result;
        if (items.length === 0) continue;
        const item = rng.pick(items);
        // A milestone's statuses are its runs' results': narrowed only when the page holds that one milestone.
        const narrowable = listQuery.expands.filter((t) => !(c.single === 'getMilestone' && t === 'statuses' && items.length > 1));
        const singlePath = c.singlePath(item.id) + query({ expands: rng.subset(narrowable, narrowable.length, 0.8) });
        if (asked.has(singlePath)) continue;
        asked.add(singlePath);
        if (await expectEqual(singlePath, listPath, c.who(), derivedInThisMode(c.single))) derived++;
      }
      if (derivedInThisMode(c.single)) expect(derived).toBeGreaterThan(ROUNDS / 3);
    });
  }
});

/** Each list operation whose pages are derived from another page of it. */
const PAGE_CASES: readonly { list: OperationId; path: () => string; who: () => string }[] = [
  { list: 'listRuns', path: () => `/api/v1/projects/${member.projectId}/runs`, who: () => member.token },
  { list: 'listMilestones', path: () => `/api/v1/projects/${member.projectId}/milestones`, who: () => member.token },
  { list: 'listSessions', path: () => `/api/v1/projects/${member.projectId}/sessions`, who: () => member.token },
  { list: 'listAutomationSources', path: () => `/api/v1/projects/${member.projectId}/automation/sources`, who: () => member.token },
  { list: 'listProjectUsers', path: () => `/api/v1/projects/${member.projectId}/users`, who: () => member.token },
  { list: 'listRunResults', path: () => `/api/v1/runs/${runId}/results`, who: () => member.token },
  { list: 'listProjects', path: () => `/api/v1/projects`, who: () => member.token },
  { list: 'listUsers', path: () => `/api/v1/users`, who: () => admin },
  { list: 'listRoles', path: () => `/api/v1/roles`, who: () => admin },
  { list: 'listGroups', path: () => `/api/v1/groups`, who: () => admin },
];

describe('a page answered from a cached page of another size of the same list', () => {
  for (const c of PAGE_CASES) {
    it(`${c.list}: equal to the instance's answer, envelope included, for random page sizes, pages, sorts and expands`, async () => {
      const rng = new Prng(SEED + 1);
      const asked = new Set<string>();
      let derived = 0;
      for (let round = 0; round < ROUNDS; round++) {
        const source = drawList(rng, c.list, 3);
        const sourcePath = c.path() + query(source);
        const { total } = await fill(sourcePath, c.who());
        // The pages of other sizes the source covers whole (or that lie past the last page).
        const first = (source.page - 1) * source.per_page;
        const end = Math.min(source.page * source.per_page, total);
        const covered = PER_PAGE_VALUES.filter((size) => size !== source.per_page).flatMap((size) => {
          const last = Math.ceil(total / size);
          const pages = Array.from({ length: last + 1 }, (_, i) => i + 1);
          return pages
            .filter((pg) => total === 0 || pg > last || ((pg - 1) * size >= first && Math.min(pg * size, total) <= end && first < end))
            .map((pg) => [size, pg] as const);
        });
        if (covered.length === 0) continue;
        const [size, pg] = rng.pick(covered);
        const narrowable = source.expands.filter((t) => !(c.list === 'listMilestones' && t === 'statuses'));
        const { expands: _, per_page: __, page: ___, ...rest } = source;
        const path = c.path() + query({ ...rest, per_page: size, page: pg, expands: rng.subset(narrowable, narrowable.length, 0.8) });
        if (asked.has(path) || held.has(path)) continue;
        asked.add(path);
        if (await expectEqual(path, sourcePath, c.who())) derived++;
      }
      expect(derived).toBeGreaterThan(ROUNDS / 3);
    });
  }
});

describe('marking', () => {
  it('counts derived answers by operation and rule in tm_cache_derived_total, and as hits', async () => {
    const metrics = await (await fetch(`${p.managementUrl}/metrics`)).text();
    const count = (labels: string) => Number(new RegExp(`^tm_cache_derived_total\\{${labels}\\} (\\d+)$`, 'm').exec(metrics)?.[1] ?? 0);
    expect(count('operation="getRun",rule="item"')).toBeGreaterThan(ROUNDS / 3);
    expect(count('operation="listRunResults",rule="page"')).toBeGreaterThan(ROUNDS / 3);
    expect(metrics).not.toContain(member.token);
  });
});

describe('a list and the questions it answers, asked together (a dashboard opening)', () => {
  it("the items and the smaller page wait for the list's fill under way and are derived from it: one request reaches the instance", async () => {
    const own = await startTestProxy(em.url);
    try {
      await proveAreas(own, member.token, member.projectId);
      const list = `/api/v1/projects/${member.projectId}/runs?is_closed=0&per_page=25&expands=statuses`;
      const smaller = `/api/v1/projects/${member.projectId}/runs?is_closed=0&per_page=15&expands=statuses`;
      const ids = ((await direct(em, list, member.token)) as { result: { id: number }[] }).result.slice(0, 3).map((r) => r.id);
      expect(ids).toHaveLength(3);
      const items = ids.map((id) => `/api/v1/runs/${id}?expands=statuses`);
      await em.faults({ latency_ms: 300 });
      const before = await em.stats();
      const listAnswer = own.get(list, member.token);
      // The list's request first, as a dashboard's first panel; the others while it is at the instance.
      await new Promise((resolve) => setTimeout(resolve, 100));
      const answers = await Promise.all([...items, smaller].map((path) => own.get(path, member.token)));
      expect((await listAnswer).status).toBe(200);
      const after = await em.stats();
      await em.clearFaults();
      const reached = (route: string) => (after.by_route[route] ?? 0) - (before.by_route[route] ?? 0);
      expect(reached('GET /api/v1/projects/{project_id}/runs')).toBe(1);
      expect(reached('GET /api/v1/runs/{run_id}')).toBe(0);
      for (const [i, path] of [...items, smaller].entries()) {
        expect(String(answers[i]!.headers['cache-status']), path).toContain('detail=derived');
        expect(answers[i]!.json()).toEqual(await direct(em, path, member.token));
      }
    } finally {
      await em.clearFaults();
      await own.close();
    }
  });

  it("an item the list under way turns out not to hold: asked of the instance once the list is in, the instance's answer", async () => {
    const own = await startTestProxy(em.url);
    try {
      await proveAreas(own, member.token, member.projectId);
      const list = `/api/v1/projects/${member.projectId}/runs?is_closed=1&per_page=15&order=asc`;
      const ids = async (path: string) => ((await direct(em, path, member.token)) as { result: { id: number }[] }).result.map((r) => r.id);
      // An open run, so not in the list of closed ones, nor in the page of runs proveAreas read.
      const proven = new Set(await ids(`/api/v1/projects/${member.projectId}/runs?per_page=15`));
      const open = (await ids(`/api/v1/projects/${member.projectId}/runs?is_closed=0&per_page=100&order=asc`)).find((id) => !proven.has(id));
      expect(open).toBeDefined();
      const item = `/api/v1/runs/${open!}`;
      await em.faults({ latency_ms: 300 });
      const before = await em.stats();
      const listAnswer = own.get(list, member.token);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const answer = await own.get(item, member.token);
      expect((await listAnswer).status).toBe(200);
      const after = await em.stats();
      await em.clearFaults();
      expect((after.by_route['GET /api/v1/runs/{run_id}'] ?? 0) - (before.by_route['GET /api/v1/runs/{run_id}'] ?? 0)).toBe(1);
      expect(String(answer.headers['cache-status'])).not.toContain('detail=derived');
      expect(answer.json()).toEqual(await direct(em, item, member.token));
    } finally {
      await em.clearFaults();
      await own.close();
    }
  });
});
