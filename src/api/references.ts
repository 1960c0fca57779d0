/**
 * What an item of an answer references, per expand type, read from the item's own JSON: the
 * answer's `expands` object holds, per requested type, the objects its items reference (spec,
 * rule 3). A derived answer (src/proxy/derive/) narrows a broader answer's `expands` to what its
 * own items reference, so this table must say exactly what the instance counts as a reference.
 *
 * The spec names users for `created_by` and `closed_by` and leaves the rest open; the reference
 * instance (src/emulator/kinds.ts) counts these fields, and test/proxy/derived-*.test.ts proves
 * that every narrowed answer equals the instance's. A type whose references are not in the item
 * (a milestone's `statuses`: the statuses of its runs' results) is `undefined`: never narrowed.
 */
import type { ExpandType, ResourceName } from './catalogue.js';

/** How one expand type's references are read from an item: fields holding an id or an array of ids, or the run counters. */
type Reader = { readonly fields: readonly string[] } | { readonly counters: true };

type References = Partial<Record<ExpandType, Reader>>;

const stamps = ['created_by', 'updated_by'];

/** Runs and sessions: the same references besides a session's own. */
const closable: References = {
  users: { fields: [...stamps, 'closed_by'] },
  configs: { fields: ['config_id'] },
  milestones: { fields: ['milestone_id'] },
  states: { fields: ['state_id'] },
  statuses: { counters: true },
  issues: { fields: ['issues'] },
};

/** Per resource, per expand type, where an item names what it references. Resources without a row are never narrowed. */
const REFERENCES: Partial<Record<ResourceName, References>> = {
  run: closable,
  session: {
    ...closable,
    users: { fields: [...stamps, 'closed_by', 'assignee_id'] },
    templates: { fields: ['template_id'] },
    field_values: { fields: ['field_values'] },
  },
  milestone: {
    users: { fields: stamps },
    milestones: { fields: ['parent_id', 'root_id'] },
    milestone_types: { fields: ['type_id'] },
    milestone_stats: { fields: ['id'] },
    issues: { fields: ['issues'] },
  },
  automation_source: { users: { fields: [...stamps, 'retired_by'] } },
  project: { users: { fields: stamps } },
  user: { users: { fields: stamps }, roles: { fields: ['role_id'] }, groups: { fields: ['groups'] } },
  role: { users: { fields: stamps } },
  group: { users: { fields: [...stamps, 'members'] } },
  result: {
    users: { fields: [...stamps, 'deleted_by', 'assignee_id'] },
    statuses: { fields: ['status_id'] },
    issues: { fields: ['issues'] },
  },
};

/** The run counters: `untested_count` is status 1, `status<k>_count` status k + 1 (spec, Run). */
const COUNTER_STATUSES = 24;

/** Whether the ids an item of `resource` references as `type` can be read from the item itself. */
export function hasReferences(resource: ResourceName, type: ExpandType): boolean {
  return REFERENCES[resource]?.[type] !== undefined;
}

/**
 * Adds to `into` the ids (> 0) an item of `resource` references as `type`. Call only where
 * `hasReferences` says so.
 */
export function addReferences(resource: ResourceName, type: ExpandType, item: Readonly<Record<string, unknown>>, into: Set<number>): void {
  const reader = REFERENCES[resource]?.[type];
  if (reader === undefined) throw new Error(`${resource} names no ${type} in its items`);
  if ('counters' in reader) {
    if (positive(item['untested_count'])) into.add(1);
    for (let k = 1; k <= COUNTER_STATUSES; k++) if (positive(item[`status${k}_count`])) into.add(k + 1);
    return;
  }
  for (const field of reader.fields) {
    const value = item[field];
    if (Array.isArray(value)) for (const id of value) addId(id, into);
    else addId(value, into);
  }
}

function addId(value: unknown, into: Set<number>): void {
  if (positive(value)) into.add(value);
}

function positive(value: unknown): value is number {
  return typeof value === 'number' && value > 0;
}
