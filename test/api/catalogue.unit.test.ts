/**
 * The catalogue's resource rows agree with its operation rows and with the spec, and the one path
 * parser (src/api/route.ts) reads write paths the way matchRoute reads read paths.
 */
import { describe, expect, it } from 'vitest';
import { OPERATIONS, RESOURCES, makePath, resourceOfIdParam, type ResourceName, type SettledFlag } from '../../src/api/catalogue.js';
import { matchRoute, parsePathId, resourcesInPath, type ResourceRef } from '../../src/api/route.js';

/** Ids 11, 12, … for an operation's path ids, in order. */
function idsFor(pathIds: readonly string[]): Record<string, number> {
  return Object.fromEntries(pathIds.map((name, i) => [name, 11 + i]));
}

describe('the resource rows', () => {
  it.each<[ResourceName, SettledFlag | null]>([
    ['run', 'is_closed'],
    ['session', 'is_closed'],
    ['milestone', 'is_completed'],
    ['project', 'is_completed'],
    ['automation_source', 'is_retired'],
    ['result', null],
    ['user', null],
    ['current_user', null],
    ['project_user', null],
    ['role', null],
    ['group', null],
  ])('%s is settled by %s (spec, "States and transitions")', (resource, flag) => {
    expect(RESOURCES[resource].settledFlag).toBe(flag);
  });

  it('name every resource some operation is about, and no other', () => {
    expect(Object.keys(RESOURCES).sort()).toEqual([...new Set(OPERATIONS.map((op) => op.resource))].sort());
  });

  it.each(OPERATIONS.map((op) => [op.id, op] as const))('%s: the path ends with its resource collection', (_id, op) => {
    const spec = RESOURCES[op.resource];
    const tail = op.envelope === 'single' ? [...spec.collection, `{${spec.idParam}}`] : spec.collection;
    expect(op.path.split('/').slice(-tail.length)).toEqual(tail);
  });

  it.each(OPERATIONS.flatMap((op) => op.pathIds.map((name) => [op.id, name, op.path] as const)))(
    '%s: %s follows the collection of the resource it names',
    (_id, name, path) => {
      const collection = RESOURCES[resourceOfIdParam(name)].collection.join('/');
      expect(path).toContain(`/${collection}/{${name}}`);
    },
  );

  it('let a resource share only the settled state of a resource it is listed under, which has a flag', () => {
    for (const op of OPERATIONS) {
      const parent = RESOURCES[op.resource].settledWith;
      if (parent === null) continue;
      expect(RESOURCES[parent].settledFlag).not.toBeNull();
      expect(op.pathIds).toContain(RESOURCES[parent].idParam);
    }
    expect(RESOURCES.result.settledWith).toBe('run');
  });
});

describe('path ids', () => {
  it.each<[string, number | undefined]>([
    ['7', 7],
    ['02', 2],
    ['000000000000001', 1],
    ['0', undefined],
    ['-1', undefined],
    ['1.5', undefined],
    ['abc', undefined],
    ['', undefined],
    ['1234567890123456', undefined],
  ])('%j parses as %s', (raw, id) => {
    expect(parsePathId(raw)).toBe(id);
  });
});

describe('resources a path names', () => {
  it.each<[string, ResourceRef[]]>([
    ['/api/v1/projects/4/runs', [{ resource: 'project', id: 4 }, { resource: 'run' }]],
    ['/api/v1/projects/02', [{ resource: 'project', id: 2 }]],
    ['/api/v1/projects/abc', [{ resource: 'project' }]],
    ['/api/v1/projects/0', [{ resource: 'project' }]],
    ['/api/v1/projects', [{ resource: 'project' }]],
    ['/api/v1/runs/7/results/', [{ resource: 'run', id: 7 }, { resource: 'result' }]],
    ['/api/v1/automation/sources/3', [{ resource: 'automation_source', id: 3 }]],
    ['/api/v1/automation/sources/3/retire', [{ resource: 'automation_source', id: 3 }]],
    ['/api/v1/projects/3/automation/sources', [{ resource: 'project', id: 3 }, { resource: 'automation_source' }]],
    ['/api/v1/automation/3', []],
    ['/api/v1/users/9', [{ resource: 'user', id: 9 }, { resource: 'project_user' }]],
    ['/api/v1/user', [{ resource: 'current_user' }]],
    ['/api/v1/projects/4/cases/9', [{ resource: 'project', id: 4 }]],
    ['/api/v1/unknown/3', []],
    ['/api/v2/projects/3', []],
    ['/projects/3', []],
  ])('%s → %j', (path, refs) => {
    expect(resourcesInPath(path)).toEqual(refs);
  });

  it.each(OPERATIONS.map((op) => [op.id, op] as const))('%s: names the ids matchRoute reads from the same path, and its resource', (_id, op) => {
    const path = makePath(op, idsFor(op.pathIds));
    const refs = resourcesInPath(path);
    const named = Object.fromEntries(refs.flatMap((r) => (r.id === undefined ? [] : [[RESOURCES[r.resource].idParam!, r.id]])));
    expect(named).toEqual(matchRoute(path)?.ids);
    expect(refs.map((r) => r.resource)).toContain(op.resource);
  });

  it('reads a zero-padded id as matchRoute does', () => {
    expect(matchRoute('/api/v1/projects/02')?.ids).toEqual({ project_id: 2 });
    expect(resourcesInPath('/api/v1/projects/02')).toEqual([{ resource: 'project', id: 2 }]);
  });
});
