import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { call, get } from './http.js';

let em: TestEmulator;
let admin: string;
/** A project member(0) cannot see, and one item of each kind inside it. */
const hidden = { project: 0, run: 0, milestone: 0, session: 0, source: 0 };

beforeAll(async () => {
  em = await startTestEmulator();
  admin = em.tokens.admin().token;
  const seen = new Set(em.tokens.member(0).project_ids);
  hidden.project = em.tokens.admin().project_ids.find((p) => !seen.has(p))!;
  const first = async (path: string) => (await get(`${em.url}/api/v1/projects/${hidden.project}${path}`, admin)).json().result[0].id;
  hidden.run = await first('/runs');
  hidden.milestone = await first('/milestones');
  hidden.session = await first('/sessions');
  hidden.source = await first('/automation/sources');
});
afterAll(() => em?.close());

const api = (path: string) => `${em.url}/api/v1${path}`;
const member = () => em.tokens.member(0).token;

describe('authentication', () => {
  it.each([
    ['without an Authorization header', undefined],
    ['with an unknown token', 'tmc_nope'],
    ['with an empty token', ''],
  ])('answers 401 %s', async (_, token) => {
    const a = await get(api('/user'), token);
    expect(a.status).toBe(401);
    expect(a.json()).toEqual({ message: 'Unauthenticated.', errors: {} });
  });

  it('answers 401 for a Basic Authorization header', async () => {
    const { request } = await import('undici');
    const res = await request(api('/user'), { headers: { authorization: `Basic ${admin}` } });
    await res.body.text();
    expect(res.statusCode).toBe(401);
  });

  it('checks authentication before parameters', async () => {
    expect((await get(api('/projects?per_page=17'))).status).toBe(401);
    expect((await get(api('/runs/abc'))).status).toBe(401);
  });

  it('lists exactly the projects each caller can access', async () => {
    for (const t of em.tokens.all) {
      const body = (await get(api('/projects'), t.token)).json();
      expect(body.result.map((p: any) => p.id).sort((a: number, b: number) => a - b)).toEqual(t.project_ids);
    }
    expect(em.tokens.noAccess().project_ids).toEqual([]);
  });
});

describe('site admin operations', () => {
  it.each(['/users', '/users/1', '/roles', '/roles/1', '/groups', '/groups/1'])('answers 403 on %s to a member', async (p) => {
    const a = await get(api(p), member());
    expect(a.status).toBe(403);
    expect(a.json().message).toMatch(/admin/);
    expect((await get(api(p), admin)).status).toBe(200);
  });

  it('validates parameters before the admin check, and checks admin before existence', async () => {
    expect((await get(api('/users?per_page=17'), member())).status).toBe(422);
    expect((await get(api('/users/999999'), member())).status).toBe(403);
  });
});

describe('project access', () => {
  const cases: [string, () => string, number, string][] = [
    ['a hidden project', () => `/projects/${hidden.project}`, 404, 'project_id'],
    ['the users of a hidden project', () => `/projects/${hidden.project}/users`, 404, 'project_id'],
    ['the runs of a hidden project', () => `/projects/${hidden.project}/runs`, 404, 'project_id'],
    ['a run in a hidden project', () => `/runs/${hidden.run}`, 404, 'run_id'],
    ['the results of a run in a hidden project', () => `/runs/${hidden.run}/results`, 403, 'run_id'],
    ['the milestones of a hidden project', () => `/projects/${hidden.project}/milestones`, 403, 'project_id'],
    ['a milestone in a hidden project', () => `/milestones/${hidden.milestone}`, 403, 'milestone_id'],
    ['the sessions of a hidden project', () => `/projects/${hidden.project}/sessions`, 403, 'project_id'],
    ['a session in a hidden project', () => `/sessions/${hidden.session}`, 403, 'session_id'],
    ['the sources of a hidden project', () => `/projects/${hidden.project}/automation/sources`, 403, 'project_id'],
    ['a source in a hidden project', () => `/automation/sources/${hidden.source}`, 403, 'automation_source_id'],
  ];
  it.each(cases)('answers %s with the catalogue status (%#)', async (_, path, status, param) => {
    const a = await get(api(path()), member());
    expect(a.status).toBe(status);
    expect(Object.keys(a.json().errors)).toEqual([param]);
    expect((await get(api(path()), admin)).status).toBe(200);
  });

  it('does not reveal a hidden project: its 404 body equals that of a missing one', async () => {
    const hiddenBody = (await get(api(`/projects/${hidden.project}`), member())).json();
    const missing = (await get(api('/projects/99999'), member())).json();
    expect(hiddenBody.message).toBe(missing.message);
    expect((await get(api(`/projects/${hidden.project}`), em.tokens.noAccess().token)).status).toBe(404);
  });
});

describe('error codes and bodies', () => {
  it.each([
    ['/runs/abc', 400, 'run_id'],
    ['/projects/0', 400, 'project_id'],
    ['/projects/1/runs?created_after=yesterday', 400, 'created_after'],
    ['/projects/1/runs?closed_before=2025-02-30T00:00:00Z', 400, 'closed_before'],
    ['/projects/1/runs?page=abc', 400, 'page'],
    ['/projects/1/runs?per_page=many', 400, 'per_page'],
    ['/projects/1/runs?config_id=a,b', 400, 'config_id'],
    ['/projects/1/runs?per_page=17', 422, 'per_page'],
    ['/projects/1/runs?page=0', 422, 'page'],
    ['/projects/1/runs?sort=runs:name', 422, 'sort'],
    ['/projects/1/runs?order=sideways', 422, 'order'],
    ['/projects/1/runs?expands=groups', 422, 'expands'],
    ['/projects/1/runs?is_closed=maybe', 422, 'is_closed'],
    ['/runs/3/results?status_id=26', 422, 'status_id'],
    ['/runs/3/results?assignee_id=-1', 422, 'assignee_id'],
    ['/users?expands=milestones', 422, 'expands'],
    ['/runs/999999', 404, 'run_id'],
    ['/runs/999999/results', 404, 'run_id'],
    ['/projects/999', 404, 'project_id'],
    ['/projects/999/users', 404, 'project_id'],
    ['/users/9999', 404, 'user_id'],
    ['/milestones/99999', 404, 'milestone_id'],
    ['/sessions/99999', 404, 'session_id'],
    ['/automation/sources/99999', 404, 'automation_source_id'],
    ['/roles/999', 404, 'role_id'],
    ['/groups/999', 404, 'group_id'],
  ])('answers %s with %i naming %s', async (path, status, param) => {
    const a = await get(api(path), admin);
    expect(a.status).toBe(status);
    expect(a.headers['content-type']).toBe('application/json; charset=utf-8');
    const body = a.json();
    expect(typeof body.message).toBe('string');
    expect(Object.keys(body.errors)).toEqual([param]);
    expect(body.errors[param][0]).toEqual(expect.any(String));
  });

  it('answers an unknown /api/v1 path with 404 JSON', async () => {
    const a = await get(api('/nothing/here'), admin);
    expect(a.status).toBe(404);
    expect(a.json().errors).toHaveProperty('path');
  });

  it.each(['POST', 'PUT', 'PATCH', 'DELETE'])('answers %s on a catalogued path with 204 after auth', async (method) => {
    expect((await call(api('/projects/1/runs'), { method, token: admin, body: '{"name":"x"}' })).status).toBe(204);
    expect((await call(api('/projects/1/runs'), { method, body: '{}' })).status).toBe(401);
  });

  it('answers other methods with 405 JSON', async () => {
    const a = await call(api('/projects/1/runs'), { method: 'OPTIONS', token: admin });
    expect(a.status).toBe(405);
    expect(a.json().errors).toHaveProperty('method');
  });
});
