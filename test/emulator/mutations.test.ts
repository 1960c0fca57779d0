import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { call, get } from './http.js';

let em: TestEmulator;
let admin: string;
beforeAll(async () => {
  em = await startTestEmulator();
  admin = em.tokens.admin().token;
});
afterAll(() => em?.close());

const api = (path: string) => `${em.url}/api/v1${path}`;
const read = async (path: string, token = admin) => (await get(api(path), token)).json();
/** The first item of a list matching a predicate. */
const firstWhere = async (path: string, keep: (x: any) => boolean) => (await read(`${path}?per_page=100`)).result.find(keep);

describe('mutations', () => {
  it('close_run closes an active run: is_closed, closed_at/by, updated_at/by', async () => {
    const run = await firstWhere('/projects/1/runs', (r) => !r.is_closed);
    const changed = await em.mutate({ op: 'close_run', run_id: run.id, user_id: 2 });
    expect(changed).toMatchObject({ id: run.id, is_closed: true, closed_by: 2, updated_by: 2 });
    expect(Date.parse(changed.closed_at)).toBeGreaterThan(Date.parse('2026-01-01T00:00:00.000Z'));
    expect((await read(`/runs/${run.id}`)).result).toEqual(changed);
    const again = await call(`${em.url}/__emulator/mutations`, { method: 'POST', body: JSON.stringify({ op: 'close_run', run_id: run.id }) });
    expect(again.status).toBe(409);
  });

  it('close_session closes an active session', async () => {
    const s = await firstWhere('/projects/1/sessions', (x) => !x.is_closed);
    const changed = await em.mutate({ op: 'close_session', session_id: s.id });
    expect(changed).toMatchObject({ id: s.id, is_closed: true, closed_by: 1 });
    expect((await read(`/sessions/${s.id}`)).result.closed_at).toBe(changed.closed_at);
  });

  it('complete_milestone completes it and moves the project counters', async () => {
    const m = await firstWhere('/projects/1/milestones', (x) => !x.is_completed);
    const before = (await read('/projects/1')).result;
    const changed = await em.mutate({ op: 'complete_milestone', milestone_id: m.id });
    expect(changed).toMatchObject({ id: m.id, is_completed: true });
    expect(changed.completed_at).toBe(changed.updated_at);
    const after = (await read('/projects/1')).result;
    expect(after.milestone_completed_count).toBe(before.milestone_completed_count + 1);
    expect(after.milestone_active_count).toBe(before.milestone_active_count - 1);
  });

  it('add_result adds the latest result of a test and moves the run counters', async () => {
    const run = await firstWhere('/projects/2/runs', (r) => !r.is_closed);
    const latest = (await read(`/runs/${run.id}/results?get_latest_result=1`)).result;
    const test = latest.find((r: any) => r.status_id !== 3);
    const result = await em.mutate({ op: 'add_result', run_id: run.id, test_id: test.test_id, status_id: 3, assignee_id: null });
    expect(result).toMatchObject({ run_id: run.id, test_id: test.test_id, status_id: 3, is_latest: true, assignee_id: null });
    const after = (await read(`/runs/${run.id}`)).result;
    expect(after.status2_count).toBe(run.status2_count + 1);
    expect(after[`status${test.status_id - 1}_count`]).toBe(run[`status${test.status_id - 1}_count`] - 1);
    expect(after.total_count).toBe(run.total_count);
    expect(after.updated_at).toBe(result.created_at);
    const newest = (await read(`/runs/${run.id}/results?per_page=15`)).result[0];
    expect(newest).toEqual(result);
    const old = (await read(`/runs/${run.id}/results?per_page=100`)).result.find((r: any) => r.id === test.id);
    expect(old.is_latest).toBe(false);
  });

  it('rename_project renames it', async () => {
    const changed = await em.mutate({ op: 'rename_project', project_id: 2, name: 'Renamed' });
    expect(changed).toMatchObject({ id: 2, name: 'Renamed' });
    expect((await read('/projects/2')).result.name).toBe('Renamed');
  });

  it('grant_project and revoke_project change what a caller sees', async () => {
    const m = em.tokens.noAccess();
    expect((await get(api('/projects/1'), m.token)).status).toBe(404);
    expect(await em.mutate({ op: 'grant_project', user_id: m.user_id, project_id: 1 })).toMatchObject({ project_ids: [1] });
    expect((await get(api('/projects/1'), m.token)).status).toBe(200);
    expect((await read('/projects', m.token)).total).toBe(1);
    await em.mutate({ op: 'revoke_project', user_id: m.user_id, project_id: 1 });
    expect((await get(api('/projects/1'), m.token)).status).toBe(404);
  });

  it('set_admin promotes a user and demotes them: admin-only operations answer 200, then 403; their token keeps working', async () => {
    const m = em.tokens.noAccess();
    expect((await get(api('/users'), m.token)).status).toBe(403);
    expect(await em.mutate({ op: 'set_admin', user_id: m.user_id, is_admin: true })).toMatchObject({ user_id: m.user_id, is_admin: true });
    expect((await get(api('/users'), m.token)).status).toBe(200);
    expect(await em.mutate({ op: 'set_admin', user_id: m.user_id, is_admin: false })).toMatchObject({ is_admin: false, project_ids: [] });
    expect((await get(api('/users'), m.token)).status).toBe(403);
    expect((await get(api('/user'), m.token)).status).toBe(200);
  });

  it('revoke_token makes the token answer 401 and drops it from the token list', async () => {
    const m = em.tokens.member(2);
    expect((await get(api('/user'), m.token)).status).toBe(200);
    expect(await em.mutate({ op: 'revoke_token', token: m.token })).toMatchObject({ user_id: m.user_id, revoked: true });
    expect((await get(api('/user'), m.token)).status).toBe(401);
    const listed = (await get(`${em.url}/__emulator/tokens`)).json();
    expect(listed.map((t: any) => t.token)).not.toContain(m.token);
  });

  it('issue_token gives a user a further, distinct token that works as the user', async () => {
    const m = em.tokens.member(1);
    const issued = await em.mutate({ op: 'issue_token', user_id: m.user_id });
    expect(issued).toMatchObject({ user_id: m.user_id, project_ids: m.project_ids });
    expect(issued.token).not.toBe(m.token);
    const me = await get(api('/user'), issued.token);
    expect(me.status).toBe(200);
    expect(me.json().id).toBe(m.user_id);
  });

  it.each([
    [{ op: 'explode' }, 400, 'op'],
    [{}, 400, 'op'],
    [{ op: 'close_run' }, 400, 'run_id'],
    [{ op: 'close_run', run_id: 'x' }, 400, 'run_id'],
    [{ op: 'close_run', run_id: 999999 }, 404, 'run_id'],
    [{ op: 'add_result', run_id: 1, status_id: 99 }, 400, 'status_id'],
    [{ op: 'rename_project', project_id: 1, name: '' }, 400, 'name'],
    [{ op: 'grant_project', user_id: 2, project_id: 999 }, 404, 'project_id'],
    [{ op: 'revoke_token', token: 'nope' }, 404, 'token'],
    [{ op: 'issue_token', user_id: 999 }, 404, 'user_id'],
    [{ op: 42 }, 400, 'op'],
    [{ op: 'close_run', run_id: '5' }, 400, 'run_id'],
    [{ op: 'close_run', run_id: 0 }, 400, 'run_id'],
    [{ op: 'add_result', status_id: 1 }, 400, 'run_id'],
    [{ op: 'add_result', run_id: 1, status_id: 1, assignee_id: 'x' }, 400, 'assignee_id'],
    [{ op: 'add_result', run_id: 1, status_id: 1, elapsed: -1 }, 400, 'elapsed'],
    [{ op: 'rename_project', project_id: 1, name: ' \t' }, 400, 'name'],
    [{ op: 'rename_project', project_id: 1 }, 400, 'name'],
    [{ op: 'revoke_token', token: 7 }, 400, 'token'],
    [{ op: 'issue_token' }, 400, 'user_id'],
    [{ op: 'grant_project', user_id: 2 }, 400, 'project_id'],
    [{ op: 'revoke_token', token: 'x', user_id: 1 }, 400, 'user_id'],
    [[{ op: 'close_run', run_id: 1 }], 400, 'body'],
  ])('rejects %j with %i naming %s', async (body, status, field) => {
    const a = await call(`${em.url}/__emulator/mutations`, { method: 'POST', body: JSON.stringify(body) });
    expect(a.status).toBe(status);
    expect(Object.keys(a.json().errors)).toEqual([field]);
  });

  it.each([
    [
      { op: 'explode' },
      'op',
      'The op must be one of close_run, close_session, complete_milestone, add_result, rename_project, revoke_token, issue_token, grant_project, revoke_project, deny_area, allow_area, set_admin.',
    ],
    [{ run_id: 1 }, 'op', 'The op is required.'],
    [{ op: 'close_session' }, 'session_id', 'The session_id is required.'],
    [{ op: 'close_session', session_id: true }, 'session_id', 'The session_id must be integer.'],
    [{ op: 'add_result', run_id: 1, status_id: 10 }, 'status_id', 'The status_id must be <= 9.'],
    [{ op: 'complete_milestone', milestone_id: 1, milestone: 2 }, 'milestone', 'Unknown field milestone.'],
  ])('answers %j with 400 naming the field and the rule it broke', async (body, field, rule) => {
    const a = await call(`${em.url}/__emulator/mutations`, { method: 'POST', body: JSON.stringify(body) });
    expect(a.status).toBe(400);
    expect(a.json()).toEqual({ message: rule, errors: { [field]: [rule] } });
  });

  it('changes nothing when the body is rejected, even if the op and its fields were valid', async () => {
    const run = await firstWhere('/projects/3/runs', (r) => !r.is_closed);
    const a = await call(`${em.url}/__emulator/mutations`, { method: 'POST', body: JSON.stringify({ op: 'close_run', run_id: run.id, by: 2 }) });
    expect(a.status).toBe(400);
    expect((await read(`/runs/${run.id}`)).result).toEqual(run);
  });

  it('rejects a body that is not JSON with 400 naming the body', async () => {
    const a = await call(`${em.url}/__emulator/mutations`, { method: 'POST', body: '{nope' });
    expect(a.status).toBe(400);
    expect(Object.keys(a.json().errors)).toEqual(['body']);
  });
});
