/**
 * Control-plane mutations: each changes the data as the real instance would and answers the
 * changed object as the API shows it. Time comes from the logical clock, so a mutated state is
 * as deterministic as a fresh one. Bodies are checked by MutationSchema on the route (400)
 * before any of this runs; here are only the checks a schema cannot make: missing things
 * answer 404, impossible transitions 409.
 */
import { Type, type Static, type TObject, type TProperties, type TSchema } from '@sinclair/typebox';
import { AREAS, type Area } from './areas.js';
import { byId } from './dataset.js';
import { ControlError } from './control-error.js';
import { STATUSES } from './lookups.js';
import { ADMIN_USER_ID, makeToken } from './people.js';
import { milestoneObject, projectObject, resultJson, runObject, sessionObject } from './serialize.js';
import type { EmulatorState } from './state.js';

const Id = Type.Integer({ minimum: 1 });
/** The acting user, default the admin. */
const ACTOR = { user_id: Type.Optional(Id) };
/** Not empty and not only whitespace. */
const Text = Type.String({ pattern: '\\S' });

/** Each op's body schema (its branch of MutationSchema) and what it does, in definition order. */
const MUTATIONS = new Map<string, { readonly schema: TSchema; readonly apply: (state: EmulatorState, body: any) => unknown }>();

/** Defines an op; `apply` sees the body typed as its schema, which the route has enforced. */
function mutation<P extends TProperties>(op: string, fields: P, apply: (state: EmulatorState, body: Static<TObject<P>>) => unknown): void {
  MUTATIONS.set(op, { schema: Type.Object({ op: Type.Literal(op), ...fields }, { additionalProperties: false }), apply });
}

/** The item `body[field]` names; the schema made that field an integer id. */
function mustFind<T extends { id: number }>(list: readonly T[], body: Record<string, unknown>, field: string): T {
  const id = body[field] as number;
  const item = byId(list, id);
  if (!item) throw new ControlError(404, field, `No resource with ${field} ${id}.`);
  return item;
}

/** The acting user, who must exist. */
function actor(state: EmulatorState, body: { user_id?: number }): number {
  if (body.user_id === undefined) return ADMIN_USER_ID;
  return mustFind(state.data.users, body, 'user_id').id;
}

function conflict(field: string, message: string): never {
  throw new ControlError(409, field, message);
}

/** Applies a change made by the acting user now: the given fields plus updated_at/by. */
function change<T extends { updated_at: number | null; updated_by: number | null }>(
  state: EmulatorState,
  body: { user_id?: number },
  item: T,
  fields: (at: number, by: number) => Partial<T>,
): void {
  const by = actor(state, body);
  const at = state.clock.tick();
  Object.assign(item, fields(at, by), { updated_at: at, updated_by: by });
}

mutation('close_run', { run_id: Id, ...ACTOR }, (state, body) => {
  const run = mustFind(state.data.runs, body, 'run_id');
  if (run.is_closed) conflict('run_id', `Run ${run.id} is already closed.`);
  change(state, body, run, (at, by) => ({ is_closed: true, closed_at: at, closed_by: by }));
  state.memo.forget('run', run.id);
  return runObject(state.data, run);
});

mutation('close_session', { session_id: Id, ...ACTOR }, (state, body) => {
  const s = mustFind(state.data.sessions, body, 'session_id');
  if (s.is_closed) conflict('session_id', `Session ${s.id} is already closed.`);
  change(state, body, s, (at, by) => ({ is_closed: true, closed_at: at, closed_by: by }));
  state.memo.forget('session', s.id);
  return sessionObject(state.data, s);
});

mutation('complete_milestone', { milestone_id: Id, ...ACTOR }, (state, body) => {
  const m = mustFind(state.data.milestones, body, 'milestone_id');
  if (m.is_completed) conflict('milestone_id', `Milestone ${m.id} is already completed.`);
  change(state, body, m, (at) => ({ is_completed: true, completed_at: at }));
  state.memo.forget('milestone', m.id);
  state.memo.forget('project', m.project_id); // its milestone counters changed
  return milestoneObject(m);
});

/**
 * A new latest result for one test of an active run (default: its first test). The previous
 * latest result loses is_latest; the run's counters move the test to the new status.
 */
const ADD_RESULT = {
  run_id: Id,
  status_id: Type.Integer({ minimum: 1, maximum: STATUSES.length }),
  test_id: Type.Optional(Id),
  assignee_id: Type.Optional(Type.Union([Id, Type.Null()])),
  elapsed: Type.Optional(Type.Integer({ minimum: 0 })),
  ...ACTOR,
};
mutation('add_result', ADD_RESULT, (state, body) => {
  const run = mustFind(state.data.runs, body, 'run_id');
  const testId = body.test_id ?? run.testIds[0]!;
  const t = run.testIds.indexOf(testId);
  if (t < 0) throw new ControlError(404, 'test_id', `Run ${run.id} has no test ${testId}.`);
  if (run.is_closed) conflict('run_id', `Run ${run.id} is closed; results cannot be added.`);
  const by = actor(state, body);
  const at = state.clock.tick();
  const store = state.data.results;
  const previous = run.latest[t]!;
  if (previous >= 0) store.setInt('is_latest', previous, 0);
  const index = store.push({
    project_id: run.project_id,
    run_id: run.id,
    test_id: testId,
    case_id: run.caseIds[t]!,
    status_id: body.status_id,
    note: 0,
    elapsed: body.elapsed ?? 60,
    assignee_id: body.assignee_id ?? null,
    is_latest: true,
    issue_id: null,
    created_at: at,
    created_by: by,
    updated_at: null,
    updated_by: null,
    deleted_at: null,
    deleted_by: null,
  });
  run.latest[t] = index;
  state.data.runResults[run.id - 1]!.push(index);
  run.counts[previous < 0 ? 0 : store.int('status_id', previous) - 1]!--;
  run.counts[body.status_id - 1]!++;
  Object.assign(run, { updated_at: at, updated_by: by });
  state.memo.forget('run', run.id);
  return JSON.parse(resultJson(state.data, index));
});

mutation('rename_project', { project_id: Id, name: Text, ...ACTOR }, (state, body) => {
  const p = mustFind(state.data.projects, body, 'project_id');
  change(state, body, p, () => ({ name: body.name }));
  state.memo.forget('project', p.id);
  return projectObject(state.data, p);
});

mutation('revoke_token', { token: Text }, (state, body) => {
  const caller = state.findCaller(body.token);
  if (!caller) throw new ControlError(404, 'token', 'No such token.');
  caller.revoked = true;
  return { token: body.token, user_id: caller.userId, revoked: true };
});

/** A second (third, ...) token for a user: deterministic, derived from the seed and a counter. */
mutation('issue_token', { user_id: Id }, (state, body) => {
  const user = mustFind(state.data.users, body, 'user_id');
  const n = state.data.callers.filter((c) => c.userId === user.id).length;
  const token = makeToken(state.data.seed, user.id, n);
  state.addCaller({ token, userId: user.id, revoked: false });
  return state.describeUser(user.id, token);
});

for (const grant of [true, false]) {
  mutation(grant ? 'grant_project' : 'revoke_project', { user_id: Id, project_id: Id }, (state, body) => {
    const user = mustFind(state.data.users, body, 'user_id');
    const project = mustFind(state.data.projects, body, 'project_id');
    const set = state.data.access.get(user.id)!;
    if (grant) set.add(project.id);
    else set.delete(project.id);
    const token = state.data.callers.find((c) => c.userId === user.id)?.token;
    return state.describeUser(user.id, token);
  });
}

/** An enum rather than a union of literals, so a wrong area is answered with the allowed ones. */
const AreaName = Type.Unsafe<Area>({ type: 'string', enum: [...AREAS] });

/**
 * Restricts (or lifts the restriction on) one area of one project for one user, member or not
 * (a denial outlives a membership change). Neither touches membership; nothing else lifts a denial.
 */
for (const deny of [true, false]) {
  mutation(deny ? 'deny_area' : 'allow_area', { user_id: Id, project_id: Id, area: AreaName }, (state, body) => {
    const user = mustFind(state.data.users, body, 'user_id');
    const project = mustFind(state.data.projects, body, 'project_id');
    if (deny) state.denials.deny(user.id, project.id, body.area);
    else state.denials.allow(user.id, project.id, body.area);
    return { user_id: user.id, project_id: project.id, denied_areas: state.denials.deniedAreas(user.id, project.id) };
  });
}

/**
 * A user made a site admin, or demoted (`is_admin: false`): from the next request, admin-only
 * operations answer them 403 and their projects are their memberships alone (an admin sees every
 * project). Their tokens keep working.
 */
mutation('set_admin', { user_id: Id, is_admin: Type.Boolean() }, (state, body) => {
  const user = mustFind(state.data.users, body, 'user_id');
  const at = state.clock.tick();
  Object.assign(user, { is_admin: body.is_admin, updated_at: at, updated_by: ADMIN_USER_ID });
  state.memo.forget('user', user.id);
  const token = state.data.callers.find((c) => c.userId === user.id)?.token;
  return state.describeUser(user.id, token);
});

/**
 * The POST body. `op` is checked first (as an enum: an unknown op is answered with the known ones),
 * then picks its branch (ajv's discriminator), so an error names that op's field, not every op's.
 */
export const MutationSchema = {
  type: 'object',
  required: ['op'],
  properties: { op: { enum: [...MUTATIONS.keys()] } },
  discriminator: { propertyName: 'op' },
  oneOf: [...MUTATIONS.values()].map((m) => m.schema),
};

/** Applies a body MutationSchema accepted. */
export function applyMutation(state: EmulatorState, body: unknown): unknown {
  return MUTATIONS.get((body as { op: string }).op)!.apply(state, body);
}
