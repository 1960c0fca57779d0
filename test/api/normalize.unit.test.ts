import { describe, expect, it } from 'vitest';
import { OPERATIONS, getOperation, type OperationId } from '../../src/api/catalogue.js';
import { ValidationError } from '../../src/api/errors.js';
import { normalizeRequest, parseTimestamp } from '../../src/api/normalize.js';
import { matchRoute } from '../../src/api/route.js';
import { makeKeySuffix } from '../../src/cache/key.js';

function canon(opId: OperationId, query: string, ids: Record<string, number> = { project_id: 1, run_id: 1 }): string {
  return normalizeRequest(getOperation(opId), ids, query).query;
}

function problemOf(opId: OperationId, query: string): { status: number; errors: Record<string, readonly string[]> } {
  try {
    normalizeRequest(getOperation(opId), { project_id: 1, run_id: 1 }, query);
  } catch (err) {
    if (err instanceof ValidationError) return { status: err.status, errors: err.toBody().errors };
    throw err;
  }
  throw new Error(`expected ${query} to be rejected`);
}

describe('the catalogue', () => {
  it('describes the 19 operations of the spec, each once', () => {
    expect(OPERATIONS).toHaveLength(19);
    expect(new Set(OPERATIONS.map((o) => o.path)).size).toBe(19);
  });

  it('marks exactly users, roles and groups as admin only', () => {
    const admin = OPERATIONS.filter((o) => o.adminOnly)
      .map((o) => o.id)
      .sort();
    expect(admin).toEqual(['getGroup', 'getRole', 'getUser', 'listGroups', 'listRoles', 'listUsers']);
  });
});

describe('route matching', () => {
  it.each([
    ['/api/v1/user', 'getCurrentUser', {}],
    ['/api/v1/projects/7/runs', 'listRuns', { project_id: 7 }],
    ['/api/v1/projects/7/runs/', 'listRuns', { project_id: 7 }],
    ['/api/v1/automation/sources/12', 'getAutomationSource', { automation_source_id: 12 }],
    ['/api/v1/projects/3/automation/sources', 'listAutomationSources', { project_id: 3 }],
    ['/api/v1/runs/9/results', 'listRunResults', { run_id: 9 }],
  ])('matches %s to %s', (path, id, ids) => {
    const m = matchRoute(path);
    expect(m?.op.id).toBe(id);
    expect(m?.ids).toEqual(ids);
  });

  it.each(['/api/v1/projects/7/cases', '/api/v2/user', '/api/v1', '/health', '/api/v1/runs/9/results/4'])('does not match %s', (path) =>
    expect(matchRoute(path)).toBeUndefined(),
  );

  it.each(['/api/v1/runs/abc', '/api/v1/runs/0', '/api/v1/runs/-1', '/api/v1/projects/1.5/runs'])(
    'rejects the non-integer or non-positive id in %s with a 400 naming it',
    (path) => {
      expect(() => matchRoute(path)).toThrow(ValidationError);
      try {
        matchRoute(path);
      } catch (err) {
        expect((err as ValidationError).status).toBe(400);
        expect(Object.keys((err as ValidationError).toBody().errors)).toHaveLength(1);
      }
    },
  );
});

describe('normalization makes equal questions byte-equal', () => {
  it.each<[OperationId, string, string]>([
    ['listRuns', '', ''],
    ['listRuns', 'page=1&per_page=100&order=desc&sort=runs:created_at', ''],
    ['listRuns', 'expands=users,milestones', 'expands=milestones,users'],
    ['listRuns', 'expands=milestones&expands=users', 'expands=milestones,users'],
    ['listRuns', 'expands= users , milestones ,users', 'expands=milestones,users'],
    ['listRuns', 'milestone_id=3&milestone_id=1', 'milestone_id=1,3'],
    ['listRuns', 'milestone_id=10,2,2,010', 'milestone_id=2,10'],
    ['listRuns', 'is_closed=true', 'is_closed=1'],
    ['listRuns', 'is_closed=false', 'is_closed=0'],
    ['listRuns', 'is_closed=', ''],
    ['listRuns', 'tags=b,a&tags=a', 'tags=a,b'],
    ['listRuns', 'per_page=15&page=2', 'page=2&per_page=15'],
    ['listRuns', 'order=asc&sort=runs:closed_at', 'order=asc&sort=runs%3Aclosed_at'.replace('%3A', ':')],
    ['listRuns', 'created_after=2024-01-01T00:00:00Z', 'created_after=2024-01-01T00%3A00%3A00.000Z'],
    ['listRuns', 'created_after=2024-01-01T02:00:00%2B02:00', 'created_after=2024-01-01T00%3A00%3A00.000Z'],
    ['listRuns', 'created_after=2024-01-01', 'created_after=2024-01-01T00%3A00%3A00.000Z'],
    ['listRuns', 'page=2&page=2', 'page=2'],
    ['listRunResults', 'assignee_id=0,4', 'assignee_id=0,4'],
    ['listRunResults', 'get_latest_result=true', 'get_latest_result=1'],
    ['listProjects', 'sort=projects:created_at&is_completed=0', 'is_completed=0'],
  ])('%s ?%s → %s', (op, query, expected) => {
    expect(canon(op, query)).toBe(expected);
  });

  it('gives different questions different key suffixes', () => {
    const op = getOperation('listRuns');
    const suffixes = ['', 'page=2', 'is_closed=1', 'is_closed=0', 'milestone_id=1', 'milestone_id=1,2', 'expands=users'].map((q) =>
      makeKeySuffix(normalizeRequest(op, { project_id: 1 }, q)),
    );
    suffixes.push(makeKeySuffix(normalizeRequest(op, { project_id: 2 }, '')));
    suffixes.push(makeKeySuffix(normalizeRequest(getOperation('listSessions'), { project_id: 1 }, '')));
    expect(new Set(suffixes).size).toBe(suffixes.length);
  });

  it('keeps keys short by hashing a long canonical query', () => {
    const ids = Array.from({ length: 200 }, (_, i) => i + 1).join(',');
    const suffix = makeKeySuffix(normalizeRequest(getOperation('listRuns'), { project_id: 1 }, `milestone_id=${ids}`));
    expect(suffix.length).toBeLessThan(80);
  });

  it('lists unknown parameters instead of dropping them silently', () => {
    const req = normalizeRequest(getOperation('listRuns'), { project_id: 1 }, 'zeta=1&alpha=2&page=2');
    expect(req.unknown).toEqual(['alpha', 'zeta']);
    expect(req.query).toBe('page=2');
  });

  it('exposes typed values with the defaults filled in', () => {
    const req = normalizeRequest(getOperation('listRuns'), { project_id: 1 }, 'is_closed=1&milestone_id=3,1');
    expect(req).toMatchObject({ page: 1, perPage: 100, sort: 'runs:created_at', order: 'desc', expands: [] });
    expect(req.filters).toEqual({ is_closed: true, milestone_id: [1, 3] });
  });
});

describe('validation names the parameter and the rule', () => {
  it.each<[OperationId, string, number, string]>([
    ['listRuns', 'per_page=17', 422, 'per_page'],
    ['listRuns', 'per_page=ten', 400, 'per_page'],
    ['listRuns', 'page=0', 422, 'page'],
    ['listRuns', 'page=x', 400, 'page'],
    ['listRuns', 'order=sideways', 422, 'order'],
    ['listRuns', 'sort=runs:name', 422, 'sort'],
    ['listRuns', 'expands=groups', 422, 'expands'],
    ['listRuns', 'is_closed=maybe', 422, 'is_closed'],
    ['listRuns', 'milestone_id=1,x', 400, 'milestone_id'],
    ['listRuns', 'milestone_id=0', 422, 'milestone_id'],
    ['listRuns', 'created_after=yesterday', 400, 'created_after'],
    ['listRuns', 'created_after=2024-02-30T00:00:00Z', 400, 'created_after'],
    ['listRuns', 'page=2&page=3', 422, 'page'],
    ['listRunResults', 'status_id=26', 422, 'status_id'],
    ['listRunResults', 'status_id=0', 422, 'status_id'],
    ['listProjects', 'expands=milestones', 422, 'expands'],
  ])('%s ?%s → %i on %s', (op, query, status, param) => {
    const problem = problemOf(op, query);
    expect(problem.status).toBe(status);
    expect(Object.keys(problem.errors)).toEqual([param]);
    expect(problem.errors[param]![0]).toMatch(new RegExp(param));
  });

  it('reports every invalid parameter at once, 400 winning over 422', () => {
    const problem = problemOf('listRuns', 'per_page=17&order=up&page=x');
    expect(problem.status).toBe(400);
    expect(Object.keys(problem.errors).sort()).toEqual(['order', 'page', 'per_page']);
  });
});

describe('timestamps', () => {
  it.each([
    ['2024-03-01T10:20:30.123Z', Date.UTC(2024, 2, 1, 10, 20, 30, 123)],
    ['2024-03-01T10:20:30Z', Date.UTC(2024, 2, 1, 10, 20, 30)],
    ['2024-03-01T10:20:30', Date.UTC(2024, 2, 1, 10, 20, 30)],
    ['2024-03-01T12:20:30+0200', Date.UTC(2024, 2, 1, 10, 20, 30)],
    ['2024-03-01', Date.UTC(2024, 2, 1)],
  ])('parses %s', (text, ms) => expect(parseTimestamp(text)).toBe(ms));

  it.each(['2024-13-01', '2024-03-01T25:00:00Z', 'now', '1700000000', ''])('rejects %s', (text) => expect(parseTimestamp(text)).toBeUndefined());
});
