import { describe, expect, it } from 'vitest';
import { OPERATIONS, getOperation, makePath, type OperationId } from '../../src/api/catalogue.js';
import { normalizeRequest } from '../../src/api/normalize.js';
import { FreshnessPolicy } from '../../src/cache/policy.js';
import { ADMIN_SCOPE, hmacCredential, makeKey, makeKeySuffix, userScope } from '../../src/cache/key.js';
import { DEFAULT_CONFIG } from '../../src/config/schema.js';

const SHORT = DEFAULT_CONFIG.cache.freshness.default.ttlMs;
const LONG = DEFAULT_CONFIG.cache.freshness.settled.ttlMs;

function policy(byResource = {}): FreshnessPolicy {
  return new FreshnessPolicy({ ...DEFAULT_CONFIG.cache.freshness, byResource }, DEFAULT_CONFIG.cache.staleIfErrorMs);
}

function decide(p: FreshnessPolicy, op: OperationId, ids: Record<string, number>, body: unknown) {
  return p.decide(normalizeRequest(getOperation(op), ids, ''), Buffer.from(JSON.stringify(body)));
}

describe('freshness by resource state', () => {
  it.each<[string, OperationId, Record<string, number>, unknown, number]>([
    ['a closed run', 'getRun', { run_id: 7 }, { result: { id: 7, project_id: 2, is_closed: true }, expands: {} }, LONG],
    ['an active run', 'getRun', { run_id: 8 }, { result: { id: 8, project_id: 2, is_closed: false }, expands: {} }, SHORT],
    ['a closed session', 'getSession', { session_id: 3 }, { result: { id: 3, project_id: 2, is_closed: true }, expands: {} }, LONG],
    ['a completed milestone', 'getMilestone', { milestone_id: 3 }, { result: { id: 3, project_id: 1, is_completed: true }, expands: {} }, LONG],
    ['a completed project', 'getProject', { project_id: 3 }, { result: { id: 3, is_completed: true }, expands: {} }, LONG],
    ['an active project', 'getProject', { project_id: 4 }, { result: { id: 4, is_completed: false }, expands: {} }, SHORT],
    ['a retired source', 'getAutomationSource', { automation_source_id: 5 }, { result: { id: 5, project_id: 1, is_retired: true }, expands: {} }, LONG],
    ['a list of runs', 'listRuns', { project_id: 1 }, { result: [{ id: 1, is_closed: true }] }, SHORT],
    ['a body that is not JSON', 'getRun', { run_id: 9 }, 'not json', SHORT],
  ])('%s lives %i ms', (_name, op, ids, body, ttlMs) => {
    expect(decide(policy(), op, ids, body).ttlMs).toBe(ttlMs);
  });

  it('treats the results of a run seen closed as settled, and of a run seen active as changing', () => {
    const p = policy();
    expect(decide(p, 'listRunResults', { run_id: 7 }, { result: [] }).ttlMs).toBe(SHORT);
    decide(p, 'getRun', { run_id: 7 }, { result: { id: 7, project_id: 2, is_closed: true } });
    expect(decide(p, 'listRunResults', { run_id: 7 }, { result: [] }).ttlMs).toBe(LONG);
    decide(p, 'getRun', { run_id: 7 }, { result: { id: 7, project_id: 2, is_closed: false } });
    expect(decide(p, 'listRunResults', { run_id: 7 }, { result: [] }).ttlMs).toBe(SHORT);
  });

  /** Every single operation, the flag the spec says settles its resource (null: none does). */
  const SINGLE_FLAGS: [OperationId, string, string | null][] = [
    ['getRun', 'run_id', 'is_closed'],
    ['getSession', 'session_id', 'is_closed'],
    ['getMilestone', 'milestone_id', 'is_completed'],
    ['getProject', 'project_id', 'is_completed'],
    ['getAutomationSource', 'automation_source_id', 'is_retired'],
    ['getUser', 'user_id', null],
    ['getRole', 'role_id', null],
    ['getGroup', 'group_id', null],
  ];

  it('knows every single operation', () => {
    const singles = OPERATIONS.filter((op) => op.envelope === 'single').map((op) => op.id);
    expect(SINGLE_FLAGS.map(([op]) => op).sort()).toEqual(singles.sort());
  });

  it.each(SINGLE_FLAGS)('%s is settled exactly when %s names a resource with %s set', (op, idName, flag) => {
    const p = policy();
    const all = { is_closed: true, is_completed: true, is_retired: true };
    const others = Object.fromEntries(
      Object.keys(all)
        .filter((f) => f !== flag)
        .map((f) => [f, true]),
    );
    expect(decide(p, op, { [idName]: 3 }, { result: { id: 3, ...others } }).ttlMs).toBe(SHORT);
    if (flag === null) return;
    expect(decide(p, op, { [idName]: 3 }, { result: { id: 3, [flag]: true } }).ttlMs).toBe(LONG);
    expect(decide(p, op, { [idName]: 3 }, { result: { id: 3, [flag]: false } }).ttlMs).toBe(SHORT);
  });

  it('keeps lists short even when they are lists of settled resources', () => {
    const p = policy();
    for (const op of OPERATIONS.filter((o) => o.envelope === 'list' && o.id !== 'listRunResults')) {
      const ids = Object.fromEntries(op.pathIds.map((name) => [name, 7]));
      decide(p, 'getRun', { run_id: 7 }, { result: { id: 7, is_closed: true } });
      decide(p, 'getProject', { project_id: 7 }, { result: { id: 7, is_completed: true } });
      expect(decide(p, op.id, ids, { result: [] }).ttlMs, op.id).toBe(SHORT);
    }
  });

  it('applies a per-resource override to changing answers only', () => {
    const p = policy({ role: { ttlMs: 5_000, staleWhileRevalidateMs: 1_000 } });
    expect(decide(p, 'listRoles', {}, { result: [] })).toMatchObject({ ttlMs: 5_000, staleWhileRevalidateMs: 1_000 });
    expect(decide(p, 'listGroups', {}, { result: [] }).ttlMs).toBe(SHORT);
  });
});

/** Every operation: its path ids, an answer, and the tags the entry carries. */
const OP_TAGS: [OperationId, Record<string, number>, unknown, string[]][] = [
  ['listRuns', { project_id: 4 }, { result: [] }, ['project:4']],
  ['getRun', { run_id: 7 }, { result: { id: 7, project_id: 4 } }, ['run:7', 'project:4']],
  ['listRunResults', { run_id: 7 }, { result: [] }, ['run:7']],
  ['listProjects', {}, { result: [] }, ['project']],
  ['getProject', { project_id: 4 }, { result: { id: 4 } }, ['project:4']],
  ['listUsers', {}, { result: [] }, ['user']],
  ['getGroup', { group_id: 2 }, { result: { id: 2 } }, ['group:2']],
  ['getCurrentUser', {}, { id: 1 }, []],
  ['getUser', { user_id: 9 }, { result: { id: 9 } }, ['user:9']],
  ['listProjectUsers', { project_id: 4 }, { result: [] }, ['project:4']],
  ['listMilestones', { project_id: 4 }, { result: [] }, ['project:4']],
  ['getMilestone', { milestone_id: 3 }, { result: { id: 3, project_id: 4 } }, ['milestone:3', 'project:4']],
  ['listSessions', { project_id: 4 }, { result: [] }, ['project:4']],
  ['getSession', { session_id: 5 }, { result: { id: 5, project_id: 4 } }, ['session:5', 'project:4']],
  ['listAutomationSources', { project_id: 4 }, { result: [] }, ['project:4']],
  ['getAutomationSource', { automation_source_id: 6 }, { result: { id: 6, project_id: 4 } }, ['automation_source:6', 'project:4']],
  ['listRoles', {}, { result: [] }, ['role']],
  ['getRole', { role_id: 2 }, { result: { id: 2 } }, ['role:2']],
  ['listGroups', {}, { result: [] }, ['group']],
];

describe('invalidation tags', () => {
  it.each(OP_TAGS)('%s %j is tagged %j', (op, ids, body, tags) => {
    expect(decide(policy(), op, ids, body).tags).toEqual(tags);
  });

  it('has a tags row for every operation', () => {
    expect(OP_TAGS.map(([op]) => op).sort()).toEqual(OPERATIONS.map((op) => op.id).sort());
  });

  it.each(OPERATIONS.map((op) => [op.id, op] as const))('a write to the path of a %s answer drops at least its path tags', (_id, op) => {
    const ids = Object.fromEntries(op.pathIds.map((name, i) => [name, 11 + i]));
    const tags = decide(policy(), op.id, ids, { result: [] }).tags;
    expect(policy().tagsForWrite(makePath(op, ids))).toEqual(expect.arrayContaining([...tags]));
  });

  it.each([
    ['/api/v1/projects/4/runs', ['project', 'project:4']],
    ['/api/v1/projects', ['project']],
    ['/api/v1/users/9', ['user', 'user:9']],
    ['/api/v1/automation/sources/3', ['automation_source:3']],
    ['/api/v1/automation/sources/3/retire', ['automation_source:3']],
    ['/api/v1/projects/3/automation/sources', ['project', 'project:3']],
    ['/api/v1/unknown/3', []],
    ['/api/v1/projects/02', ['project', 'project:2']],
    ['/api/v1/projects/abc', ['project']],
    ['/api/v1/runs/7/results', ['run:7']],
    ['/api/v1/runs/7/', ['run:7']],
    ['/api/v1/milestones/3', ['milestone:3']],
    ['/api/v1/sessions/5', ['session:5']],
    ['/api/v1/roles/2', ['role', 'role:2']],
    ['/api/v1/groups/2', ['group', 'group:2']],
    ['/api/v1/projects/4/users', ['project', 'project:4', 'user']],
    ['/api/v1/user', []],
  ])('a write to %s drops %j', (path, tags) => {
    expect(policy().tagsForWrite(path)).toEqual(tags);
  });

  it('also drops the project of a run it has seen, on a write to that run', () => {
    const p = policy();
    decide(p, 'getRun', { run_id: 7 }, { result: { id: 7, project_id: 4 } });
    expect(p.tagsForWrite('/api/v1/runs/7')).toEqual(['run:7', 'project:4']);
  });

  it.each<[OperationId, string, string]>([
    ['getSession', 'session_id', '/api/v1/sessions/07/close'],
    ['getMilestone', 'milestone_id', '/api/v1/milestones/7'],
    ['getAutomationSource', 'automation_source_id', '/api/v1/automation/sources/7'],
  ])('also drops the project of a %s seen, on a write to %s', (op, idName, path) => {
    const p = policy();
    decide(p, op, { [idName]: 7 }, { result: { id: 7, project_id: 4 } });
    expect(p.tagsForWrite(path)).toContain('project:4');
  });
});

describe('what answers teach of their resources’ projects (cache.sharing: project)', () => {
  type Told = { learned: (readonly [string, number])[]; budget: unknown };
  function learning(): { p: FreshnessPolicy; told: Told[] } {
    const told: Told[] = [];
    const p = new FreshnessPolicy(DEFAULT_CONFIG.cache.freshness, DEFAULT_CONFIG.cache.staleIfErrorMs, DEFAULT_CONFIG.cache.storedHeaders, {
      fromLists: true,
      onLearned: (learned, budget) => told.push({ learned: [...learned], budget }),
    });
    return { p, told };
  }
  const decideWith = (p: FreshnessPolicy, op: OperationId, ids: Record<string, number>, body: unknown, budget: { sharedTierSpent: boolean }) =>
    p.decide(normalizeRequest(getOperation(op), ids, ''), Buffer.from(JSON.stringify(body)), budget);

  it('tells once per answer what it taught, with the budget of the request that filled it, and nothing it already knew', () => {
    const { p, told } = learning();
    const budget = { sharedTierSpent: false };
    // As the instance answers a list (spec, List envelope): the items are read only from that.
    const page = {
      page: 1,
      prev_page: null,
      next_page: null,
      last_page: 1,
      per_page: 100,
      total: 3,
      result: [1, 2, 3].map((id) => ({ id, project_id: 4 })),
      expands: {},
    };
    decideWith(p, 'listRuns', { project_id: 4 }, page, budget);
    expect(told).toEqual([
      {
        learned: [
          ['run:1', 4],
          ['run:2', 4],
          ['run:3', 4],
        ],
        budget,
      },
    ]);
    expect(p.projectOfResource('run:2')).toBe(4);
    // The same page again, and a run it listed: nothing new, nothing told.
    decideWith(p, 'listRuns', { project_id: 4 }, page, budget);
    decideWith(p, 'getRun', { run_id: 2 }, { result: { id: 2, project_id: 4 } }, budget);
    expect(told).toHaveLength(1);
    // A run seen moved to another project is news.
    decideWith(p, 'getRun', { run_id: 2 }, { result: { id: 2, project_id: 5 } }, budget);
    expect(told.at(-1)).toEqual({ learned: [['run:2', 5]], budget });
  });

  it('remembers what another replica shared without telling it again', () => {
    const { p, told } = learning();
    p.learnProject('milestone:9', 3);
    expect(p.projectOfResource('milestone:9')).toBe(3);
    expect(told).toEqual([]);
  });
});

describe('keys', () => {
  const suffix = makeKeySuffix(normalizeRequest(getOperation('listRuns'), { project_id: 1 }, 'page=2'));

  it('put the scope first so callers and access levels never share an entry', () => {
    const keys = [makeKey(userScope(1), suffix), makeKey(userScope(2), suffix), makeKey(ADMIN_SCOPE, suffix)];
    expect(new Set(keys).size).toBe(3);
    expect(keys[0]).toBe('u:1|v1|listRuns|1|page=2');
  });

  it('never contain a credential: an HMAC stands for it', () => {
    const secret = Buffer.alloc(32, 9);
    const digest = hmacCredential(secret, 'Bearer tmc_secret_token');
    expect(digest).not.toContain('tmc_secret_token');
    expect(digest).toBe(hmacCredential(secret, 'Bearer tmc_secret_token'));
    expect(digest).not.toBe(hmacCredential(Buffer.alloc(32, 8), 'Bearer tmc_secret_token'));
  });
});
