/**
 * The response's `expands` object (spec rule 3): per requested type, the objects the returned
 * items reference, sorted by id, each at least `{id, name}`. Unknown references are skipped.
 */
import type { ExpandType } from '../api/catalogue.js';
import { byId, type Dataset } from './dataset.js';
import type { Kind, World } from './kinds.js';
import type { Named } from './model.js';
import { counterFields } from './serialize.js';

function milestoneStats(data: Dataset, id: number) {
  const m = byId(data.milestones, id);
  if (!m) return undefined;
  const runs = data.runsByMilestone[id - 1]!;
  const sum = new Int32Array(25);
  for (const r of runs) for (let k = 0; k < sum.length; k++) sum[k]! += r.counts[k]!;
  const c = counterFields(data, sum);
  return {
    id,
    name: m.name,
    run_count: runs.length,
    untested_count: c.untested_count,
    success_count: c.success_count,
    failure_count: c.failure_count,
    completed_count: c.completed_count,
    total_count: c.total_count,
  };
}

const idName = (x: Named | undefined) => (x ? { id: x.id, name: x.name } : undefined);

/** The expand object of one type and id, or undefined when it does not exist. */
function expandObject(data: Dataset, type: ExpandType, id: number): unknown {
  switch (type) {
    case 'users':
      return idName(byId(data.users, id));
    case 'roles':
      return idName(byId(data.roles, id));
    case 'groups':
      return idName(byId(data.groups, id));
    case 'milestones':
      return idName(byId(data.milestones, id));
    case 'automation_sources':
      return idName(byId(data.sources, id));
    case 'configs':
      return byId(data.configs, id);
    case 'states':
      return byId(data.states, id);
    case 'templates':
      return byId(data.templates, id);
    case 'milestone_types':
      return byId(data.milestoneTypes, id);
    case 'field_values':
      return byId(data.fieldValues, id);
    case 'statuses':
      return byId(data.statuses, id);
    case 'issues':
      return byId(data.issues, id);
    case 'milestone_stats':
      return milestoneStats(data, id);
  }
}

function expandJson(world: World, type: ExpandType, id: number): string | undefined {
  // Stats change with results; everything else an expand shows is immutable, so memoize it.
  if (type === 'milestone_stats') {
    const stats = milestoneStats(world.data, id);
    return stats && JSON.stringify(stats);
  }
  const obj = expandObject(world.data, type, id);
  return obj === undefined ? undefined : world.memo.get(`x:${type}`, id, () => obj);
}

/** `{"<type>":[...],...}` for the items of a page (or the one item of a single answer). */
export function makeExpands<T>(world: World, kind: Kind<T>, items: readonly T[], types: readonly ExpandType[]): string {
  if (types.length === 0) return '{}';
  const parts: string[] = [];
  for (const type of types) {
    const refs = kind.refs[type];
    const ids = new Set<number>();
    const add = (id: number | null) => {
      if (id !== null && id > 0) ids.add(id);
    };
    if (refs) for (const item of items) refs(item, add, world);
    const objects: string[] = [];
    for (const id of [...ids].sort((a, b) => a - b)) {
      const json = expandJson(world, type, id);
      if (json !== undefined) objects.push(json);
    }
    parts.push(`${JSON.stringify(type)}:[${objects.join(',')}]`);
  }
  return `{${parts.join(',')}}`;
}
