/**
 * The revocation promise over every operation of the catalogue: after a user loses a project,
 * every cached answer that reveals anything of it stops within access.projectConfirmMs + one
 * request, whatever its path names (a run's results name only the run; GET /projects lists many
 * projects) and however fresh it still is. Checked on a replica that answers from its own memory,
 * and on a second replica that never saw the user and reads the entry through Redis. Real HTTP,
 * the real emulator, a private redis-server, one fake clock.
 */
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { OPERATIONS, getOperation, makePath, type OperationId } from '../../src/api/catalogue.js';
import type { Config } from '../../src/config/schema.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type DeepPartial, type TestProxy } from '../helpers/proxy.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { until } from '../helpers/wait.js';

let clock = Date.now();
const now = () => clock;
/** Small, so the window passes at once on the fake clock. */
const CONFIRM_MS = 2_000;
/** Every answer stays fresh far past the window: only the access check can stop it. */
const HOUR = { ttlMs: 3_600_000, staleWhileRevalidateMs: 3_600_000 };
const CONFIG: DeepPartial<Config> = {
  identity: { ttlMs: 10 * 3_600_000 },
  access: { projectConfirmMs: CONFIRM_MS },
  cache: { freshness: { default: HOUR, settled: HOUR, byResource: {} } },
};
const PROJECT_ROUTE = 'GET /api/v1/projects/{project_id}';

/**
 * Every operation, and what an answer of it reveals. `refused`: what the instance answers the user
 * once the project is gone (the operation's own status for a project it cannot access), or
 * `unlisted` for the list of the user's projects, which simply stops naming it.
 */
type Row = { readonly reveals: 'the project'; readonly refused: 403 | 404 | 'unlisted' } | { readonly reveals: 'no project'; readonly why: string };

const ADMIN_ONLY = 'admin only: shared among verified site admins and gated by access.ttlMs; users, roles and groups name no project';
const TABLE: Readonly<Record<OperationId, Row>> = {
  getCurrentUser: { reveals: 'no project', why: 'the caller themself: id, name, time settings' },
  listUsers: { reveals: 'no project', why: ADMIN_ONLY },
  getUser: { reveals: 'no project', why: ADMIN_ONLY },
  listProjectUsers: { reveals: 'the project', refused: 404 },
  listProjects: { reveals: 'the project', refused: 'unlisted' },
  getProject: { reveals: 'the project', refused: 404 },
  listRuns: { reveals: 'the project', refused: 404 },
  getRun: { reveals: 'the project', refused: 404 },
  listRunResults: { reveals: 'the project', refused: 403 },
  listMilestones: { reveals: 'the project', refused: 403 },
  getMilestone: { reveals: 'the project', refused: 403 },
  listSessions: { reveals: 'the project', refused: 403 },
  getSession: { reveals: 'the project', refused: 403 },
  listAutomationSources: { reveals: 'the project', refused: 403 },
  getAutomationSource: { reveals: 'the project', refused: 403 },
  listRoles: { reveals: 'no project', why: ADMIN_ONLY },
  getRole: { reveals: 'no project', why: ADMIN_ONLY },
  listGroups: { reveals: 'no project', why: ADMIN_ONLY },
  getGroup: { reveals: 'no project', why: ADMIN_ONLY },
};
const ids = Object.keys(TABLE) as OperationId[];
const revealing = ids.filter((id) => TABLE[id].reveals === 'the project');
const revealingNothing = ids.filter((id) => TABLE[id].reveals === 'no project');

let emulator: TestEmulator;
let redis: RedisHandle;
let client: Redis;
const running: TestProxy[] = [];
/** The member who loses a project, and one of each thing inside it. */
let member: { token: string; userId: number; projectId: number };
let pathIds: Record<string, number>;

beforeAll(async () => {
  emulator = await startTestEmulator();
  redis = await startRedis();
  client = new Redis(redis.url);
  const m = emulator.tokens.member(0);
  const issued = await emulator.mutate({ op: 'issue_token', user_id: m.user_id });
  member = { token: issued.token as string, userId: m.user_id, projectId: m.project_ids[0]! };
  pathIds = await idsInside(member.projectId);
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.close()));
  await emulator.mutate({ op: 'grant_project', user_id: member.userId, project_id: member.projectId });
});
afterAll(async () => {
  client?.disconnect();
  await emulator?.close();
  await redis?.stop();
});

/** The first id of each list of the project (a run with results), asked of the emulator directly. */
async function idsInside(projectId: number): Promise<Record<string, number>> {
  const first = async (path: string, what: string): Promise<number> => {
    const items = (await httpGet(`${emulator.url}/api/v1${path}`, member.token)).json().result as { id: number }[];
    if (items.length === 0) throw new Error(`project ${projectId} has no ${what}`);
    return items[0]!.id;
  };
  const runs = (await httpGet(`${emulator.url}/api/v1/projects/${projectId}/runs?per_page=100`, member.token)).json().result as {
    id: number;
    total_count: number;
    untested_count: number;
  }[];
  const run = runs.find((r) => r.total_count > r.untested_count);
  if (run === undefined) throw new Error(`project ${projectId} has no run with results`);
  return {
    project_id: projectId,
    run_id: run.id,
    milestone_id: await first(`/projects/${projectId}/milestones`, 'milestone'),
    session_id: await first(`/projects/${projectId}/sessions`, 'session'),
    automation_source_id: await first(`/projects/${projectId}/automation/sources`, 'automation source'),
    user_id: member.userId,
    role_id: 1,
    group_id: 1,
  };
}

async function proxy(overrides: DeepPartial<Config> = {}): Promise<TestProxy> {
  const p = await startTestProxy(emulator.url, { ...CONFIG, ...overrides }, now);
  running.push(p);
  return p;
}

/** Two replicas sharing the test's redis-server under their own key prefix. */
async function replicasSharing(prefix: string): Promise<[TestProxy, TestProxy]> {
  const shared = { redis: { url: redis.url, keyPrefix: prefix, commandTimeoutMs: 500 } };
  return [await proxy({ cache: { ...CONFIG.cache, ...shared } }), await proxy({ cache: { ...CONFIG.cache, ...shared } })];
}

const pathOf = (id: OperationId): string => makePath(getOperation(id), pathIds);

/**
 * Whose entry answers a hit: the project's shared one ends its Cache-Status with `; key=project`
 * on a replica sharing by project (`cache.sharing: project`, every replica's default under
 * `npm run test:project`); the caller's own, and any answer of a replica sharing by user, say no
 * scope.
 */
type Answer = 'the project’s' | 'the caller’s own';

/** The Cache-Status of a hit from `p`'s memory, the answer being `answer`. */
function memoryHit(p: TestProxy, answer: Answer): RegExp {
  const suffix = p.config.cache.sharing === 'project' && answer === 'the project’s' ? '; key=project' : '';
  return new RegExp(`^tm-cache; hit;.*detail=memory${suffix}$`);
}

/**
 * Whose entry answers the repeat of an operation on a replica that filled it once, sharing by
 * project: the project's when the path names it, or when the first answer named it (a single run,
 * milestone, session or source: filled in the caller's own scope, its project not known yet, and
 * stored in the project's as well once its answer told it); the caller's own for GET /projects
 * (many projects) and for a run's results asked before the run was seen (nothing tells its project).
 */
function answeredFrom(id: OperationId): Answer {
  return id === 'listProjects' || id === 'listRunResults' ? 'the caller’s own' : 'the project’s';
}

/** The project's id among those a GET /projects answer lists. */
const lists = (body: { result: { id: number }[] }, projectId: number): boolean => body.result.some((p) => p.id === projectId);

describe('every operation of the catalogue is in the table', () => {
  it('names all 19, and says why each that reveals no project does not', () => {
    expect(ids.sort()).toEqual(OPERATIONS.map((op) => op.id).sort());
    for (const id of revealingNothing) {
      const op = getOperation(id);
      // The reason holds: an admin-only answer is shared among admins; GET /user is the caller.
      expect(op.adminOnly || op.resource === 'current_user').toBe(true);
    }
    for (const id of revealing) {
      const row = TABLE[id] as Extract<Row, { reveals: 'the project' }>;
      expect(getOperation(id).adminOnly).toBe(false);
      expect(row.refused).toBe(getOperation(id).noAccessStatus ?? 'unlisted');
    }
  });
});

describe('a user who lost a project', () => {
  it.each(revealing)('gets no cached %s of it past access.projectConfirmMs + one request, from memory or through Redis', async (id) => {
    const path = pathOf(id);
    const { token, userId, projectId } = member;
    const memoryOnly = await proxy();
    const [filler, reader] = await replicasSharing(`every-${id}:`);
    for (const p of [memoryOnly, filler]) {
      const filled = await p.get(path, token);
      expect(filled.status).toBe(200);
      expect(filled.headers['cache-status']).toMatch(/stored/);
    }
    if (id === 'listProjects') expect(lists((await memoryOnly.get(path, token)).json(), projectId)).toBe(true);
    expect((await memoryOnly.get(path, token)).headers['cache-status']).toMatch(memoryHit(memoryOnly, answeredFrom(id)));
    // The filler's entry is in Redis, with its tags: the reader would find it fresh there.
    const operationTag = `every-${id}:tag:op:${id}${
      getOperation(id).pathIds.length === 0
        ? ''
        : `:${getOperation(id)
            .pathIds.map((n) => pathIds[n])
            .join(',')}`
    }`;
    await until(async () => (await client.exists(operationTag)) === 1);

    await emulator.mutate({ op: 'revoke_project', user_id: userId, project_id: projectId });
    clock += CONFIRM_MS + 1_000;
    for (const [where, p] of [
      ['memory', memoryOnly],
      ['redis', reader],
    ] as const) {
      const res = await p.get(path, token);
      const row = TABLE[id] as Extract<Row, { reveals: 'the project' }>;
      // Whatever is answered comes from the instance, as it answers now.
      expect(res.headers['cache-status'], where).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=/);
      if (row.refused === 'unlisted') {
        expect(res.status, where).toBe(200);
        expect(lists(res.json(), projectId), where).toBe(false);
      } else {
        expect(res.status, where).toBe(row.refused);
      }
    }
  });

  it('has a run’s results tied to the run’s project once the run was seen: confirmed with one light request, not asked again', async () => {
    const p = await proxy();
    const { token, userId, projectId } = member;
    const results = pathOf('listRunResults');
    expect((await p.get(pathOf('getRun'), token)).status).toBe(200);
    expect((await p.get(results, token)).headers['cache-status']).toMatch(/stored/);
    await emulator.resetStats();
    clock += CONFIRM_MS + 1_000;
    // The run seen, its project is known: the results are the project's answer on a replica sharing by project.
    expect((await p.get(results, token)).headers['cache-status']).toMatch(memoryHit(p, 'the project’s'));
    const stats = await emulator.stats();
    expect(stats.by_route[PROJECT_ROUTE]).toBe(1);
    expect(stats.total).toBe(1);

    await emulator.mutate({ op: 'revoke_project', user_id: userId, project_id: projectId });
    clock += CONFIRM_MS + 1_000;
    const refused = await p.get(results, token);
    expect(refused.status).toBe(403);
    expect(refused.headers['cache-status']).toBe(`tm-cache; fwd=uri-miss; fwd-status=403${p.config.cache.sharing === 'project' ? '; key=project' : ''}`);
  });
});

describe('a project list past access.projectConfirmMs while the instance fails', () => {
  it('is served stale only as to any caller whose access could not be confirmed: with identity.staleOnOutage', async () => {
    const [allowing, refusing] = [await proxy(), await proxy({ identity: { ...CONFIG.identity, staleOnOutage: false } })];
    const path = pathOf('listProjects');
    for (const p of [allowing, refusing]) expect((await p.get(path, member.token)).status).toBe(200);
    clock += CONFIRM_MS + 1_000;
    await emulator.faults({ error_rate: 1, error_status: 503 });
    try {
      const stale = await allowing.get(path, member.token);
      expect(stale.status).toBe(200);
      expect(stale.headers['cache-status']).toMatch(/fwd=stale.*detail=stale-if-error/);
      const refused = await refusing.get(path, member.token);
      expect(refused.status).toBe(502);
      expect(refused.headers['cache-status']).not.toMatch(/stale/);
    } finally {
      await emulator.clearFaults();
    }
  });
});

describe('answers that reveal no project', () => {
  it('GET /user stays a hit after the user lost a project: it names none', async () => {
    const p = await proxy();
    const { token, userId, projectId } = member;
    expect((await p.get(pathOf('getCurrentUser'), token)).status).toBe(200);
    await emulator.mutate({ op: 'revoke_project', user_id: userId, project_id: projectId });
    clock += CONFIRM_MS + 1_000;
    await emulator.resetStats();
    expect((await p.get(pathOf('getCurrentUser'), token)).headers['cache-status']).toMatch(memoryHit(p, 'the caller’s own'));
    expect((await emulator.stats()).total).toBe(0);
  });
});
