import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { get, getAll, ids } from './http.js';

let em: TestEmulator;
let admin: string;
/** Unfiltered lists, the oracle each filter is checked against. */
const all: Record<string, any[]> = {};
const LISTS = {
  runs: '/projects/1/runs',
  sessions: '/projects/1/sessions',
  milestones: '/projects/1/milestones',
  sources: '/projects/1/automation/sources',
  projects: '/projects',
  results: '/runs/3/results',
};

beforeAll(async () => {
  em = await startTestEmulator();
  admin = em.tokens.admin().token;
  for (const [name, path] of Object.entries(LISTS)) all[name] = await getAll(`${em.url}/api/v1${path}`, admin);
});
afterAll(() => em?.close());

const T = '2025-06-01T00:00:00.000Z';
const t = Date.parse(T);
const ms = (v: string | null) => (v === null ? null : Date.parse(v));
const after = (f: string) => (x: any) => ms(x[f]) !== null && ms(x[f])! >= t;
const before = (f: string) => (x: any) => ms(x[f]) !== null && ms(x[f])! < t;
/** The two most common values of a field, so the filter is neither empty nor everything. */
function two(list: string, f: string): number[] {
  const counts = new Map<number, number>();
  for (const x of all[list]!) counts.set(x[f], (counts.get(x[f]) ?? 0) + 1);
  return [...counts]
    .filter(([k]) => k !== null)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 2)
    .map(([k]) => k)
    .sort((a, b) => a - b);
}

/** The most common element of an array field. */
function topTag(list: string, f: string): string {
  const counts = new Map<string, number>();
  for (const x of all[list]!) for (const g of x[f]) counts.set(g, (counts.get(g) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))[0]![0];
}

type Case = [list: keyof typeof LISTS, query: () => string, keep: () => (x: any) => boolean];
const CASES: Case[] = [
  ['runs', () => `closed_after=${T}`, () => after('closed_at')],
  ['runs', () => `closed_before=${T}`, () => before('closed_at')],
  ['runs', () => `created_after=${T}`, () => after('created_at')],
  ['runs', () => `created_before=${T}`, () => before('created_at')],
  ['runs', () => `config_id=${two('runs', 'config_id')}`, () => (x) => two('runs', 'config_id').includes(x.config_id)],
  ['runs', () => `created_by=${two('runs', 'created_by')}`, () => (x) => two('runs', 'created_by').includes(x.created_by)],
  ['runs', () => 'is_closed=1', () => (x) => x.is_closed],
  ['runs', () => 'is_closed=false', () => (x) => !x.is_closed],
  ['runs', () => `milestone_id=${two('runs', 'milestone_id')}`, () => (x) => two('runs', 'milestone_id').includes(x.milestone_id)],
  ['runs', () => `state_id=${two('runs', 'state_id')}`, () => (x) => two('runs', 'state_id').includes(x.state_id)],
  ['runs', () => 'tags=smoke,api', () => (x) => x.tags.includes('smoke') || x.tags.includes('api')],
  ['sessions', () => `assignee_id=${two('sessions', 'assignee_id')}`, () => (x) => two('sessions', 'assignee_id').includes(x.assignee_id)],
  ['sessions', () => `closed_after=${T}`, () => after('closed_at')],
  ['sessions', () => `closed_before=${T}`, () => before('closed_at')],
  ['sessions', () => `created_after=${T}`, () => after('created_at')],
  ['sessions', () => `created_before=${T}`, () => before('created_at')],
  ['sessions', () => `config_id=${two('sessions', 'config_id')}`, () => (x) => two('sessions', 'config_id').includes(x.config_id)],
  ['sessions', () => `created_by=${two('sessions', 'created_by')}`, () => (x) => two('sessions', 'created_by').includes(x.created_by)],
  ['sessions', () => 'is_closed=0', () => (x) => !x.is_closed],
  ['sessions', () => `milestone_id=${two('sessions', 'milestone_id')}`, () => (x) => two('sessions', 'milestone_id').includes(x.milestone_id)],
  ['sessions', () => `state_id=${two('sessions', 'state_id')}`, () => (x) => two('sessions', 'state_id').includes(x.state_id)],
  ['sessions', () => `tags=${topTag('sessions', 'tags')}`, () => (x) => x.tags.includes(topTag('sessions', 'tags'))],
  ['sessions', () => `template_id=${two('sessions', 'template_id')}`, () => (x) => two('sessions', 'template_id').includes(x.template_id)],
  ['milestones', () => 'automation_tags=ci,e2e', () => (x) => x.automation_tags.some((g: string) => g === 'ci' || g === 'e2e')],
  ['milestones', () => `completed_after=${T}`, () => after('completed_at')],
  ['milestones', () => `completed_before=${T}`, () => before('completed_at')],
  ['milestones', () => `created_after=${T}`, () => after('created_at')],
  ['milestones', () => `created_before=${T}`, () => before('created_at')],
  ['milestones', () => `created_by=${two('milestones', 'created_by')}`, () => (x) => two('milestones', 'created_by').includes(x.created_by)],
  ['milestones', () => 'is_completed=true', () => (x) => x.is_completed],
  ['milestones', () => `parent_id=${two('milestones', 'parent_id')}`, () => (x) => two('milestones', 'parent_id').includes(x.parent_id)],
  ['milestones', () => `root_id=${two('milestones', 'root_id')}`, () => (x) => two('milestones', 'root_id').includes(x.root_id)],
  ['milestones', () => `type_id=${two('milestones', 'type_id')}`, () => (x) => two('milestones', 'type_id').includes(x.type_id)],
  ['sources', () => 'is_retired=1', () => (x) => x.is_retired],
  ['sources', () => 'is_retired=0', () => (x) => !x.is_retired],
  ['projects', () => 'is_completed=1', () => (x) => x.is_completed],
  ['projects', () => 'is_completed=0', () => (x) => !x.is_completed],
  ['results', () => `created_after=${all.results![40].created_at}`, () => (x) => x.created_at >= all.results![40].created_at],
  ['results', () => `created_before=${all.results![40].created_at}`, () => (x) => x.created_at < all.results![40].created_at],
  ['results', () => `created_by=${two('results', 'created_by')}`, () => (x) => two('results', 'created_by').includes(x.created_by)],
  ['results', () => `assignee_id=${two('results', 'assignee_id')[0]}`, () => (x) => x.assignee_id === two('results', 'assignee_id')[0]],
  ['results', () => 'assignee_id=0', () => (x) => x.assignee_id === null],
  [
    'results',
    () => `assignee_id=0,${two('results', 'assignee_id')[0]}`,
    () => (x) => x.assignee_id === null || x.assignee_id === two('results', 'assignee_id')[0],
  ],
  ['results', () => 'status_id=3,5', () => (x) => x.status_id === 3 || x.status_id === 5],
  ['results', () => 'get_latest_result=1', () => (x) => x.is_latest],
  ['results', () => 'get_latest_result=true&status_id=2', () => (x) => x.is_latest && x.status_id === 2],
];

describe('filters', () => {
  const named = CASES.map(([list, query, keep]) => ({ list, query, keep, label: query.toString().replace(/^\(\) => |[`'"]/g, '') }));
  it.each(named)('filters $list by $label exactly as the unfiltered list says', async ({ list, query, keep }) => {
    const expected = all[list]!.filter(keep());
    expect(expected.length).toBeGreaterThan(0);
    expect(expected.length).toBeLessThan(all[list]!.length);
    const got = await getAll(`${em.url}/api/v1${LISTS[list]}?${query()}`, admin);
    expect(ids(got)).toEqual(ids(expected));
  });

  it('answers get_latest_result=0 with every result', async () => {
    const got = await getAll(`${em.url}/api/v1${LISTS.results}?get_latest_result=0`, admin);
    expect(ids(got)).toEqual(ids(all.results!));
    expect(got.some((r) => !r.is_latest)).toBe(true);
  });

  it.each([
    ['milestone_id=MS1&milestone_id=MS2', 'milestone_id=MS1,MS2'],
    ['state_id=1&state_id=2&state_id=3', 'state_id=3,1,2'],
    ['tags=smoke&tags=api', 'tags=api,smoke'],
    ['expands=users&expands=milestones', 'expands=milestones,users'],
    ['is_closed=true', 'is_closed=1'],
  ])('treats repeated keys %s like the comma list %s', async (repeated, comma) => {
    const [a, b] = two('runs', 'milestone_id');
    const fill = (q: string) => q.replace('MS1', String(a)).replace('MS2', String(b));
    const x = await get(`${em.url}/api/v1/projects/1/runs?${fill(repeated)}`, admin);
    const y = await get(`${em.url}/api/v1/projects/1/runs?${fill(comma)}`, admin);
    expect(x.status).toBe(200);
    expect(x.json().total).toBeGreaterThan(0);
    expect(x.text).toBe(y.text);
  });

  it('ignores parameters the endpoint does not define', async () => {
    const x = await get(`${em.url}/api/v1/projects/1/runs?per_page=15&frobnicate=1&template_id=2`, admin);
    const y = await get(`${em.url}/api/v1/projects/1/runs?per_page=15`, admin);
    expect(x.status).toBe(200);
    expect(x.text).toBe(y.text);
  });

  it('combines different filters with AND', async () => {
    const got = await getAll(`${em.url}/api/v1/projects/1/runs?is_closed=1&tags=smoke`, admin);
    expect(ids(got)).toEqual(ids(all.runs!.filter((x) => x.is_closed && x.tags.includes('smoke'))));
  });
});
