import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { ISO_MS, get } from './http.js';

let em: TestEmulator;
let admin: string;
beforeAll(async () => {
  em = await startTestEmulator();
  admin = em.tokens.admin().token;
});
afterAll(() => em?.close());

const api = (path: string) => `${em.url}/api/v1${path}`;

type FieldType = 'int' | 'int?' | 'string' | 'string?' | 'bool' | 'time' | 'time?' | 'ints' | 'strings' | 'array';
const STAMPS = { created_at: 'time', created_by: 'int', updated_at: 'time?', updated_by: 'int?' } as const;
const COUNTERS: Record<string, FieldType> = Object.fromEntries([
  ['untested_count', 'int'],
  ...Array.from({ length: 24 }, (_, i) => [`status${i + 1}_count`, 'int']),
  ['success_count', 'int'],
  ['failure_count', 'int'],
  ['completed_count', 'int'],
  ['total_count', 'int'],
]);
const CLOSABLE = { ...COUNTERS, is_closed: 'bool', closed_at: 'time?', closed_by: 'int?' } as const;

/** Every field the spec lists, per resource, with its type; `?` marks nullable. */
const SHAPES: Record<string, Record<string, FieldType>> = {
  user: {
    id: 'int',
    name: 'string',
    email: 'string',
    type: 'int',
    timezone: 'string?',
    date_format: 'string?',
    time_format: 'string?',
    role_id: 'int',
    groups: 'ints',
    ...STAMPS,
    created_by: 'int?',
  },
  projectUser: { id: 'int', name: 'string' },
  project: {
    id: 'int',
    name: 'string',
    note: 'string?',
    is_completed: 'bool',
    milestone_count: 'int',
    milestone_active_count: 'int',
    milestone_completed_count: 'int',
    ...STAMPS,
    completed_at: 'time?',
  },
  run: { id: 'int', project_id: 'int', name: 'string', config_id: 'int', milestone_id: 'int', state_id: 'int', tags: 'strings', ...CLOSABLE, ...STAMPS },
  session: {
    id: 'int',
    project_id: 'int',
    name: 'string',
    config_id: 'int',
    milestone_id: 'int',
    state_id: 'int',
    template_id: 'int',
    assignee_id: 'int?',
    tags: 'strings',
    field_values: 'ints',
    ...CLOSABLE,
    ...STAMPS,
  },
  milestone: {
    id: 'int',
    project_id: 'int',
    root_id: 'int?',
    parent_id: 'int?',
    name: 'string',
    type_id: 'int',
    automation_tags: 'strings',
    is_completed: 'bool',
    ...STAMPS,
    completed_at: 'time?',
  },
  source: {
    id: 'int',
    project_id: 'int',
    name: 'string',
    status: 'int',
    is_retired: 'bool',
    run_count: 'int',
    test_count_average: 'int',
    elapsed_average: 'int',
    ran_at: 'time',
    ...STAMPS,
    retired_at: 'time?',
    retired_by: 'int?',
  },
  role: { id: 'int', name: 'string', permissions: 'int', is_default: 'bool', ...STAMPS },
  group: { id: 'int', name: 'string', members: 'ints', ...STAMPS },
  result: {
    id: 'int',
    project_id: 'int',
    run_id: 'int',
    test_id: 'int',
    case_id: 'int',
    status_id: 'int',
    note: 'string',
    elapsed: 'int',
    assignee_id: 'int?',
    is_latest: 'bool',
    issues: 'array',
    created_at: 'time',
    created_by: 'int',
    updated_at: 'time?',
    updated_by: 'int?',
    deleted_at: 'time?',
    deleted_by: 'int?',
  },
};

function matchesType(v: unknown, t: FieldType): boolean {
  if (t.endsWith('?') && v === null) return true;
  switch (t.replace('?', '')) {
    case 'int':
      return Number.isInteger(v);
    case 'string':
      return typeof v === 'string';
    case 'bool':
      return typeof v === 'boolean';
    case 'time':
      return typeof v === 'string' && ISO_MS.test(v);
    case 'ints':
      return Array.isArray(v) && v.every(Number.isInteger);
    case 'strings':
      return Array.isArray(v) && v.every((x) => typeof x === 'string');
    default:
      return Array.isArray(v);
  }
}

function assertShape(item: Record<string, unknown>, shape: Record<string, FieldType>): void {
  for (const [field, t] of Object.entries(shape)) {
    expect(field in item, `field ${field}`).toBe(true);
    expect(matchesType(item[field], t), `${field}=${JSON.stringify(item[field])} is ${t}`).toBe(true);
  }
}

const LISTS: [string, string][] = [
  ['/users', 'user'],
  ['/projects/1/users', 'projectUser'],
  ['/projects', 'project'],
  ['/projects/1/runs', 'run'],
  ['/runs/1/results', 'result'],
  ['/projects/1/milestones', 'milestone'],
  ['/projects/1/sessions', 'session'],
  ['/projects/1/automation/sources', 'source'],
  ['/roles', 'role'],
  ['/groups', 'group'],
];
const SINGLES: [string, string][] = [
  ['/users/2', 'user'],
  ['/projects/1', 'project'],
  ['/runs/1', 'run'],
  ['/milestones/1', 'milestone'],
  ['/sessions/1', 'session'],
  ['/automation/sources/1', 'source'],
  ['/roles/1', 'role'],
  ['/groups/1', 'group'],
];

describe('every endpoint', () => {
  it('answers GET /user with the flat current user', async () => {
    const a = await get(api('/user'), em.tokens.member(0).token);
    expect(a.status).toBe(200);
    expect(a.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(Object.keys(a.json())).toEqual(['id', 'name', 'timezone', 'date_format', 'time_format']);
    expect(a.json().id).toBe(em.tokens.member(0).user_id);
  });

  it.each(LISTS)('answers %s with the list envelope and every field of every item', async (path, shape) => {
    const a = await get(api(path), admin);
    expect(a.status).toBe(200);
    expect(a.headers['content-type']).toBe('application/json; charset=utf-8');
    const body = a.json();
    expect(Object.keys(body)).toEqual(['page', 'prev_page', 'next_page', 'last_page', 'per_page', 'total', 'result', 'expands']);
    expect(body.result.length).toBeGreaterThan(0);
    expect(body.per_page).toBe(100);
    expect(body.expands).toEqual({});
    for (const item of body.result) assertShape(item, SHAPES[shape]!);
  });

  it.each(SINGLES)('answers %s wrapped in result, with every field', async (path, shape) => {
    const a = await get(api(path), admin);
    expect(a.status).toBe(200);
    expect(Object.keys(a.json())).toEqual(['result', 'expands']);
    assertShape(a.json().result, SHAPES[shape]!);
    expect(a.json().result.id).toBe(Number(path.split('/').pop()));
  });

  it('keeps run and session counters consistent', async () => {
    for (const path of ['/projects/1/runs', '/projects/1/sessions']) {
      for (const x of (await get(api(path), admin)).json().result) {
        let numbered = 0;
        for (let k = 1; k <= 24; k++) numbered += x[`status${k}_count`];
        expect(x.untested_count + numbered).toBe(x.total_count);
        expect(x.completed_count).toBe(x.total_count - x.untested_count);
        expect(x.success_count + x.failure_count).toBeLessThanOrEqual(x.completed_count);
        expect(x.is_closed).toBe(x.closed_at !== null);
      }
    }
  });

  it('counts each run test once: latest results match the run counters', async () => {
    const run = (await get(api('/runs/7'), admin)).json().result;
    const latest = (await get(api('/runs/7/results?get_latest_result=1'), admin)).json();
    expect(latest.total).toBe(run.completed_count);
    const passed = latest.result.filter((r: any) => r.status_id === 2).length;
    expect(passed).toBe(run.status1_count);
  });

  it('keeps project milestone counters consistent with its milestones', async () => {
    const project = (await get(api('/projects/2'), admin)).json().result;
    const milestones = (await get(api('/projects/2/milestones'), admin)).json();
    expect(project.milestone_count).toBe(milestones.total);
    const completed = milestones.result.filter((m: any) => m.is_completed).length;
    expect(project.milestone_completed_count).toBe(completed);
    expect(project.milestone_active_count).toBe(milestones.total - completed);
  });

  it('lists only the members of a project in its user list', async () => {
    const m = em.tokens.member(0);
    const users = (await get(api(`/projects/${m.project_ids[0]}/users`), m.token)).json().result;
    expect(users.map((u: any) => u.id)).toContain(m.user_id);
    const outsider = em.tokens.noAccess();
    expect(users.map((u: any) => u.id)).not.toContain(outsider.user_id);
  });
});
