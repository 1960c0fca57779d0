/**
 * What the query engine needs to know about each kind of item: its id, creation time, fields
 * (for filters and sorts), JSON, and what it references per expand type.
 */
import type { ExpandType } from '../api/catalogue.js';
import type { Dataset } from './dataset.js';
import type { AutomationSource, Closable, Group, Milestone, Project, Role, Run, Session, User } from './model.js';
import {
  type JsonMemo,
  groupObject,
  milestoneObject,
  projectObject,
  resultJson,
  roleObject,
  runObject,
  sessionObject,
  sourceObject,
  userObject,
} from './serialize.js';

/** The dataset and its memoized JSON: what every read needs. */
export interface World {
  readonly data: Dataset;
  readonly memo: JsonMemo;
}

type Add = (id: number | null) => void;
export type Refs<T> = Partial<Record<ExpandType, (item: T, add: Add, world: World) => void>>;

export interface Kind<T> {
  id(item: T): number;
  createdAt(item: T, world: World): number;
  /** A field by its API name; timestamps as ms, null where null. */
  field(item: T, name: string, world: World): unknown;
  json(item: T, world: World): string;
  readonly refs: Refs<T>;
}

const prop = <T>(item: T, name: string): unknown => (item as Record<string, unknown>)[name];

function objectKind<T extends { id: number; created_at: number }>(json: Kind<T>['json'], refs: Refs<T>): Kind<T> {
  return { id: (x) => x.id, createdAt: (x) => x.created_at, field: prop, json, refs };
}

const stampUsers = (x: { created_by: number | null; updated_by: number | null }, add: Add) => {
  add(x.created_by);
  add(x.updated_by);
};

/** Statuses a counter array references: Untested when something is untested, else slot k → id k + 1. */
function counterStatuses(counts: Int32Array, add: Add): void {
  for (let k = 0; k < counts.length; k++) if (counts[k]! > 0) add(k + 1);
}

function closableRefs<T extends Closable>(): Refs<T> {
  return {
    users: (x, add) => {
      stampUsers(x, add);
      add(x.closed_by);
    },
    configs: (x, add) => add(x.config_id),
    milestones: (x, add) => add(x.milestone_id),
    states: (x, add) => add(x.state_id),
    statuses: (x, add) => counterStatuses(x.counts, add),
    issues: (x, add) => x.issues.forEach(add),
  };
}

export const USER: Kind<User> = objectKind<User>((u, w) => w.memo.get('user', u.id, () => userObject(u)), {
  users: stampUsers,
  roles: (u, add) => add(u.role_id),
  groups: (u, add) => u.groups.forEach(add),
});

export const PROJECT: Kind<Project> = objectKind<Project>((p, w) => w.memo.get('project', p.id, () => projectObject(w.data, p)), {
  users: stampUsers,
});

export const RUN: Kind<Run> = objectKind<Run>((r, w) => w.memo.get('run', r.id, () => runObject(w.data, r)), closableRefs<Run>());

const sessionBase = closableRefs<Session>();
export const SESSION: Kind<Session> = objectKind<Session>((s, w) => w.memo.get('session', s.id, () => sessionObject(w.data, s)), {
  ...sessionBase,
  users: (s, add, w) => {
    sessionBase.users!(s, add, w);
    add(s.assignee_id);
  },
  templates: (s, add) => add(s.template_id),
  field_values: (s, add) => s.field_values.forEach(add),
});

export const MILESTONE: Kind<Milestone> = objectKind<Milestone>((m, w) => w.memo.get('milestone', m.id, () => milestoneObject(m)), {
  users: stampUsers,
  milestones: (m, add) => {
    add(m.parent_id);
    add(m.root_id);
  },
  milestone_types: (m, add) => add(m.type_id),
  milestone_stats: (m, add) => add(m.id),
  issues: (m, add) => m.issues.forEach(add),
  statuses: (m, add, w) => w.data.runsByMilestone[m.id - 1]!.forEach((r) => counterStatuses(r.counts, add)),
});

export const SOURCE: Kind<AutomationSource> = objectKind<AutomationSource>((s, w) => w.memo.get('source', s.id, () => sourceObject(s)), {
  users: (s, add) => {
    stampUsers(s, add);
    add(s.retired_by);
  },
});

export const ROLE: Kind<Role> = objectKind<Role>((r, w) => w.memo.get('role', r.id, () => roleObject(r)), { users: stampUsers });

export const GROUP: Kind<Group> = objectKind<Group>((g, w) => w.memo.get('group', g.id, () => groupObject(g)), {
  users: (g, add) => {
    stampUsers(g, add);
    g.members.forEach(add);
  },
});

/** Project members answer with id and name only (spec, project user list). */
export const PROJECT_USER: Kind<User> = {
  ...USER,
  json: (u) => JSON.stringify({ id: u.id, name: u.name }),
  refs: {},
};

/** Results are indexes into the column store. */
export const RESULT: Kind<number> = {
  id: (i) => i + 1,
  createdAt: (i, w) => w.data.results.timeColumn('created_at')[i]!,
  field: (i, name, w) => resultField(w.data, i, name),
  json: (i, w) => resultJson(w.data, i),
  refs: {
    users: (i, add, w) => {
      const r = w.data.results;
      add(r.ref('created_by', i));
      add(r.ref('updated_by', i));
      add(r.ref('deleted_by', i));
      add(r.ref('assignee_id', i));
    },
    statuses: (i, add, w) => add(w.data.results.int('status_id', i)),
    issues: (i, add, w) => add(w.data.results.ref('issue_id', i)),
  },
};

function resultField(data: Dataset, i: number, name: string): unknown {
  const r = data.results;
  switch (name) {
    case 'created_at':
      return r.time('created_at', i);
    case 'is_latest':
      return r.int('is_latest', i) === 1;
    case 'assignee_id':
      return r.ref('assignee_id', i);
    case 'created_by':
      return r.int('created_by', i);
    case 'status_id':
      return r.int('status_id', i);
    default:
      return undefined;
  }
}
