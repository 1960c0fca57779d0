/**
 * deny_area / allow_area: a user denied an area of a project gets 403 on that area's operations
 * of that project, and nowhere else: not on the project's other areas, not on another project,
 * and no other user.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AREAS, type Area } from '../../src/emulator/areas.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { call, get } from './http.js';

let em: TestEmulator;
let admin: string;
/** Fixed access (people.ts): user 2 sees projects 1-3, user 4 the odd ones. */
const DENIED_USER = 2;
const OTHER_MEMBER = 4;
const PROJECT = 1;
const OTHER_PROJECT = 3;
const tokenOf = (userId: number) => em.tokens.all.find((t) => t.user_id === userId)!.token;

/** Each area's operations on a project, with ids of things inside it. */
const operations = new Map<number, Record<Area, string[]>>();

async function firstId(path: string): Promise<number> {
  const a = await get(`${em.url}/api/v1${path}?per_page=15`, admin);
  return a.json().result[0].id;
}

async function operationsOf(p: number): Promise<Record<Area, string[]>> {
  const run = await firstId(`/projects/${p}/runs`);
  return {
    runs: [`/projects/${p}/runs`, `/runs/${run}`],
    results: [`/runs/${run}/results`],
    milestones: [`/projects/${p}/milestones`, `/milestones/${await firstId(`/projects/${p}/milestones`)}`],
    sessions: [`/projects/${p}/sessions`, `/sessions/${await firstId(`/projects/${p}/sessions`)}`],
    automation_sources: [`/projects/${p}/automation/sources`, `/automation/sources/${await firstId(`/projects/${p}/automation/sources`)}`],
    users: [`/projects/${p}/users`],
  };
}

beforeAll(async () => {
  em = await startTestEmulator();
  admin = em.tokens.admin().token;
  for (const p of [PROJECT, OTHER_PROJECT]) operations.set(p, await operationsOf(p));
});
afterAll(() => em?.close());
beforeEach(async () => {
  for (const user_id of [1, DENIED_USER, OTHER_MEMBER]) {
    for (const project_id of [PROJECT, OTHER_PROJECT]) {
      for (const area of AREAS) await em.mutate({ op: 'allow_area', user_id, project_id, area });
    }
  }
});

const read = (path: string, userId: number) => get(`${em.url}/api/v1${path}`, tokenOf(userId));

/** Status of each operation of each area of the project for the user, area by area. */
async function statusesByArea(userId: number, projectId: number): Promise<Record<Area, number[]>> {
  const out = {} as Record<Area, number[]>;
  for (const area of AREAS) {
    out[area] = [];
    for (const path of operations.get(projectId)![area]) out[area].push((await read(path, userId)).status);
  }
  return out;
}

function expected(deniedArea: Area | undefined, projectId: number): Record<Area, number[]> {
  const out = {} as Record<Area, number[]>;
  for (const area of AREAS) out[area] = operations.get(projectId)![area].map(() => (area === deniedArea ? 403 : 200));
  return out;
}

describe('deny_area', () => {
  it.each(AREAS)('denies %s of one project to one user: 403 there, 200 on every other area, project and user', async (area) => {
    const answer = await em.mutate({ op: 'deny_area', user_id: DENIED_USER, project_id: PROJECT, area });
    expect(answer).toEqual({ user_id: DENIED_USER, project_id: PROJECT, denied_areas: [area] });

    expect(await statusesByArea(DENIED_USER, PROJECT)).toEqual(expected(area, PROJECT));
    expect((await read(`/projects/${PROJECT}`, DENIED_USER)).status).toBe(200); // membership only
    expect(await statusesByArea(DENIED_USER, OTHER_PROJECT)).toEqual(expected(undefined, OTHER_PROJECT));
    expect(await statusesByArea(OTHER_MEMBER, PROJECT)).toEqual(expected(undefined, PROJECT));

    await em.mutate({ op: 'allow_area', user_id: DENIED_USER, project_id: PROJECT, area });
    expect(await statusesByArea(DENIED_USER, PROJECT)).toEqual(expected(undefined, PROJECT));
  });

  it('answers 403 in the API error shape, naming the path parameter', async () => {
    await em.mutate({ op: 'deny_area', user_id: DENIED_USER, project_id: PROJECT, area: 'runs' });
    const [, single] = operations.get(PROJECT)!.runs;
    const a = await read(single!, DENIED_USER);
    expect(a.status).toBe(403);
    expect(a.headers['content-type']).toMatch(/^application\/json/);
    const message = 'You do not have access to the runs of this project.';
    expect(a.json()).toEqual({ message, errors: { run_id: [`No access to runs of project ${PROJECT}.`] } });
  });

  it('keeps several denials of one user and project, and denies the admin too', async () => {
    await em.mutate({ op: 'deny_area', user_id: DENIED_USER, project_id: PROJECT, area: 'users' });
    const answer = await em.mutate({ op: 'deny_area', user_id: DENIED_USER, project_id: PROJECT, area: 'sessions' });
    expect(answer.denied_areas).toEqual(['sessions', 'users']);
    const statuses = await statusesByArea(DENIED_USER, PROJECT);
    expect([statuses.sessions, statuses.users, statuses.runs]).toEqual([[403, 403], [403], [200, 200]]);

    await em.mutate({ op: 'deny_area', user_id: 1, project_id: PROJECT, area: 'milestones' });
    expect(await statusesByArea(1, PROJECT)).toEqual(expected('milestones', PROJECT));
  });

  it('checks in order: 401, parameters, existence, membership, then the area', async () => {
    await em.mutate({ op: 'deny_area', user_id: DENIED_USER, project_id: PROJECT, area: 'runs' });
    await em.mutate({ op: 'deny_area', user_id: OTHER_MEMBER, project_id: 2, area: 'runs' }); // not a member of 2
    expect((await get(`${em.url}/api/v1/projects/${PROJECT}/runs`, 'tmc_nobody')).status).toBe(401);
    expect((await read(`/projects/${PROJECT}/runs?per_page=17`, DENIED_USER)).status).toBe(422);
    expect((await read('/runs/abc', DENIED_USER)).status).toBe(400);
    expect((await read('/runs/999999', DENIED_USER)).status).toBe(404);
    expect((await read('/projects/999/runs', DENIED_USER)).status).toBe(404);
    const notMember = await read('/projects/2/runs', OTHER_MEMBER);
    expect(notMember.status).toBe(404); // as for any non-member: the project's existence stays hidden
    expect(notMember.json().message).toBe('Not found.');
  });

  it('outlives a stats reset, a cleared fault set and a membership revoked and granted again; only allow_area lifts it', async () => {
    await em.mutate({ op: 'deny_area', user_id: DENIED_USER, project_id: PROJECT, area: 'results' });
    await em.resetStats();
    await em.clearFaults();
    await em.mutate({ op: 'revoke_project', user_id: DENIED_USER, project_id: PROJECT });
    await em.mutate({ op: 'grant_project', user_id: DENIED_USER, project_id: PROJECT });
    const [results] = operations.get(PROJECT)!.results;
    expect((await read(results!, DENIED_USER)).status).toBe(403);
    const answer = await em.mutate({ op: 'allow_area', user_id: DENIED_USER, project_id: PROJECT, area: 'results' });
    expect(answer.denied_areas).toEqual([]);
    expect((await read(results!, DENIED_USER)).status).toBe(200);
  });

  it.each([
    [{ op: 'deny_area', user_id: 2, project_id: 1, area: 'tests' }, 400, 'area', `The area must be one of ${AREAS.join(', ')}.`],
    [{ op: 'deny_area', user_id: 2, project_id: 1 }, 400, 'area', 'The area is required.'],
    [{ op: 'allow_area', user_id: 2, area: 'runs' }, 400, 'project_id', 'The project_id is required.'],
    [{ op: 'deny_area', user_id: '2', project_id: 1, area: 'runs' }, 400, 'user_id', 'The user_id must be integer.'],
    [{ op: 'deny_area', user_id: 2, project_id: 1, area: 'runs', until: 5 }, 400, 'until', 'Unknown field until.'],
    [{ op: 'deny_area', user_id: 9999, project_id: 1, area: 'runs' }, 404, 'user_id', 'No resource with user_id 9999.'],
    [{ op: 'allow_area', user_id: 2, project_id: 999, area: 'runs' }, 404, 'project_id', 'No resource with project_id 999.'],
  ])('rejects %j with %i naming %s', async (body, status, field, message) => {
    const a = await call(`${em.url}/__emulator/mutations`, { method: 'POST', body: JSON.stringify(body) });
    expect(a.status).toBe(status);
    expect(a.json()).toEqual({ message, errors: { [field]: [message] } });
  });
});
