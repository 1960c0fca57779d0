import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { get, getAll, ids } from './http.js';

let em: TestEmulator;
let admin: string;
beforeAll(async () => {
  em = await startTestEmulator();
  admin = em.tokens.admin().token;
});
afterAll(() => em?.close());

const api = (path: string) => `${em.url}/api/v1${path}`;

/** Sort key value: null lowest; ties broken by id in the same direction. */
function isOrdered(items: any[], field: string, order: 'asc' | 'desc'): boolean {
  const key = (x: any) => (x[field] === null ? -Infinity : Date.parse(x[field]));
  const sign = order === 'asc' ? 1 : -1;
  return items.every((x, i) => {
    if (i === 0) return true;
    const a = items[i - 1];
    const d = key(x) - key(a);
    return sign * d > 0 || (d === 0 && sign * (x.id - a.id) > 0) || (key(x) === -Infinity && key(a) === -Infinity && sign * (x.id - a.id) > 0);
  });
}

const SORTS: [string, string, string][] = [
  ['/projects', 'projects:created_at', 'created_at'],
  ['/projects', 'projects:completed_at', 'completed_at'],
  ['/projects/1/runs', 'runs:created_at', 'created_at'],
  ['/projects/1/runs', 'runs:closed_at', 'closed_at'],
  ['/runs/3/results', 'run_results:created_at', 'created_at'],
  ['/projects/1/milestones', 'milestones:created_at', 'created_at'],
  ['/projects/1/milestones', 'milestones:completed_at', 'completed_at'],
  ['/projects/1/sessions', 'sessions:created_at', 'created_at'],
  ['/projects/1/sessions', 'sessions:closed_at', 'closed_at'],
  ['/projects/1/automation/sources', 'automation_sources:created_at', 'created_at'],
  ['/projects/1/automation/sources', 'automation_sources:ran_at', 'ran_at'],
  ['/projects/1/automation/sources', 'automation_sources:retired_at', 'retired_at'],
];

describe('sorting', () => {
  it.each(SORTS.flatMap(([p, s, f]) => (['asc', 'desc'] as const).map((o) => ({ p, s, f, o }))))('sorts $p by $s $o', async ({ p, s, f, o }) => {
    const items = await getAll(api(`${p}?sort=${s}&order=${o}`), admin);
    expect(items.length).toBeGreaterThan(1);
    expect(isOrdered(items, f, o)).toBe(true);
    expect(isOrdered(items, f, o === 'asc' ? 'desc' : 'asc')).toBe(false);
  });

  it.each(['/projects', '/projects/1/runs', '/runs/3/results', '/projects/1/milestones', '/projects/1/sessions', '/projects/1/automation/sources'])(
    'orders %s newest first without sort or order',
    async (p) => {
      const plain = await get(api(p), admin);
      expect(isOrdered(plain.json().result, 'created_at', 'desc')).toBe(true);
      const explicit = await get(api(`${p}?order=desc`), admin);
      expect(plain.text).toBe(explicit.text);
    },
  );

  it.each(['/users', '/roles', '/groups', '/projects/1/users'])('lists %s in id order', async (p) => {
    const got = ids((await get(api(p), admin)).json().result);
    expect(got).toEqual([...got].sort((a, b) => a - b));
  });
});

describe('pagination', () => {
  it.each(['/projects/1/runs', '/runs/3/results', '/users', '/projects/1/runs?is_closed=1', '/projects/1/runs?sort=runs:closed_at&order=asc'])(
    'walks %s at per_page=15: every item once, in order, with consistent page links',
    async (p) => {
      const everything = await getAll(api(p), admin);
      const sep = p.includes('?') ? '&' : '?';
      const first = (await get(api(`${p}${sep}per_page=15`), admin)).json();
      const last = Math.ceil(everything.length / 15);
      expect(last).toBeGreaterThan(1);
      const seen: number[] = [];
      for (let page = 1; page <= last; page++) {
        const body = (await get(api(`${p}${sep}per_page=15&page=${page}`), admin)).json();
        expect(body).toMatchObject({ page, per_page: 15, total: everything.length, last_page: last });
        expect(body.prev_page).toBe(page === 1 ? null : page - 1);
        expect(body.next_page).toBe(page === last ? null : page + 1);
        expect(body.result.length).toBe(page < last ? 15 : everything.length - 15 * (last - 1));
        seen.push(...ids(body.result));
      }
      expect(seen).toEqual(ids(everything));
      expect(first.total).toBe(everything.length);
    },
  );

  it('answers an empty list with page and last_page null', async () => {
    const body = (await get(api('/projects/1/runs?created_after=2030-01-01T00:00:00Z&page=3'), admin)).json();
    expect(body).toEqual({ page: null, prev_page: null, next_page: null, last_page: null, per_page: 100, total: 0, result: [], expands: {} });
  });

  it('answers a page beyond the last with no items, that page and a link back', async () => {
    const body = (await get(api('/projects/1/runs?per_page=15&page=999'), admin)).json();
    expect(body.result).toEqual([]);
    expect(body).toMatchObject({ page: 999, prev_page: 998, next_page: null, per_page: 15 });
    expect(body.last_page).toBe(Math.ceil(body.total / 15));
  });

  it.each([15, 25, 50, 100])('honours per_page=%i', async (n) => {
    const body = (await get(api(`/runs/3/results?per_page=${n}`), admin)).json();
    expect(body.per_page).toBe(n);
    expect(body.result.length).toBe(Math.min(n, body.total));
  });
});

describe('expands', () => {
  /** The ids the items reference through the given fields (arrays flattened). */
  const refs = (items: any[], fields: string[]) =>
    [...new Set(items.flatMap((x) => fields.flatMap((f) => x[f])).filter((v) => v !== null && v !== undefined))].sort((a, b) => a - b);

  it.each([
    ['/projects/1/runs?per_page=15', 'users', ['created_by', 'updated_by', 'closed_by']],
    ['/projects/1/runs?per_page=15', 'milestones', ['milestone_id']],
    ['/projects/1/runs?per_page=15', 'configs', ['config_id']],
    ['/projects/1/runs?per_page=15', 'states', ['state_id']],
    ['/projects/1/runs?per_page=15', 'issues', ['issues']],
    ['/projects/1/sessions?per_page=15', 'users', ['created_by', 'updated_by', 'closed_by', 'assignee_id']],
    ['/projects/1/sessions?per_page=15', 'templates', ['template_id']],
    ['/projects/1/sessions?per_page=15', 'field_values', ['field_values']],
    ['/projects/1/milestones', 'milestones', ['parent_id', 'root_id']],
    ['/projects/1/milestones', 'milestone_types', ['type_id']],
    ['/projects/1/milestones', 'milestone_stats', ['id']],
    ['/runs/3/results?per_page=50', 'users', ['created_by', 'updated_by', 'deleted_by', 'assignee_id']],
    ['/runs/3/results?per_page=50', 'statuses', ['status_id']],
    ['/users?per_page=15', 'roles', ['role_id']],
    ['/users?per_page=15', 'groups', ['groups']],
    ['/groups', 'users', ['created_by', 'updated_by', 'members']],
    ['/projects/1/automation/sources', 'users', ['created_by', 'updated_by', 'retired_by']],
  ])('expands %s with exactly the %s the page references', async (p, type, fields) => {
    const body = (await get(api(`${p}&expands=${type}`.replace(/^([^?]*)&/, '$1?')), admin)).json();
    const expected = refs(body.result, fields as string[]);
    expect(expected.length).toBeGreaterThan(0);
    expect(Object.keys(body.expands)).toEqual([type]);
    expect(ids(body.expands[type])).toEqual(expected);
    for (const o of body.expands[type]) expect(typeof o.name).toBe('string');
  });

  it('expands the statuses a run counts, and a single run like a list item', async () => {
    const body = (await get(api('/runs/3?expands=statuses,users'), admin)).json();
    const run = body.result;
    const counted = [run.untested_count > 0 ? 1 : 0, ...Array.from({ length: 24 }, (_, k) => (run[`status${k + 1}_count`] > 0 ? k + 2 : 0))].filter(Boolean);
    expect(ids(body.expands.statuses)).toEqual(counted);
    expect(Object.keys(body.expands)).toEqual(['statuses', 'users']);
  });

  it('keeps milestone stats consistent with the runs of the milestone', async () => {
    const m = (await get(api('/runs/3'), admin)).json().result.milestone_id;
    const stats = (await get(api(`/milestones/${m}?expands=milestone_stats`), admin)).json().expands.milestone_stats[0];
    const runs = await getAll(api(`/projects/${(await get(api('/runs/3'), admin)).json().result.project_id}/runs?milestone_id=${m}`), admin);
    expect(stats.run_count).toBe(runs.length);
    expect(stats.total_count).toBe(runs.reduce((n, r) => n + r.total_count, 0));
  });
});
