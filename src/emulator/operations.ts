/**
 * One handler per catalogued operation: checks existence and access, then answers the body.
 * Authentication, parameter validation and the admin check have happened before (api.ts).
 * A project (or a thing inside one) the caller cannot access answers `op.noAccessStatus`; when
 * that is 404 the body is exactly the not-found body, so nothing reveals the project exists.
 * A member denied the operation's area of the project (areas.ts) answers 403, whatever the
 * operation: the caller already knows the project exists.
 */
import type { Operation, OperationId } from '../api/catalogue.js';
import { makeErrorBody, type ErrorBody } from '../api/errors.js';
import type { CanonicalRequest } from '../api/normalize.js';
import { areaOf, type AreaDenials } from './areas.js';
import { byId, canAccess } from './dataset.js';
import { GROUP, MILESTONE, PROJECT, PROJECT_USER, RESULT, ROLE, RUN, SESSION, SOURCE, USER, type Kind, type World } from './kinds.js';
import { listBody, makeSingleBody } from './query.js';
import { currentUserObject } from './serialize.js';

/** An answer other than 200, with the API's error body. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
  ) {
    super(body.message);
  }
}

/** What a read needs, plus the areas denied to whom. */
export interface OperationWorld extends World {
  readonly denials: AreaDenials;
}

export interface OperationContext {
  readonly world: OperationWorld;
  readonly userId: number;
  readonly req: CanonicalRequest;
}

type Handler = (ctx: OperationContext) => string;

function notFound(param: string, id: number): HttpError {
  return new HttpError(404, makeErrorBody('Not found.', { [param]: [`No resource with ${param} ${id}.`] }));
}

/** The project must exist and be accessible to the caller, and so must the operation's area of it. */
function assertProjectAccess(ctx: OperationContext, projectId: number, param: string, id: number): void {
  if (!canAccess(ctx.world.data, ctx.userId, projectId)) throw noProjectAccess(ctx.req.op, param, id);
  const area = areaOf(ctx.req.op.id);
  if (area !== undefined && ctx.world.denials.isDenied(ctx.userId, projectId, area)) {
    throw new HttpError(
      403,
      makeErrorBody(`You do not have access to the ${area} of this project.`, { [param]: [`No access to ${area} of project ${projectId}.`] }),
    );
  }
}

function noProjectAccess(op: Operation, param: string, id: number): HttpError {
  if (op.noAccessStatus === 403) {
    return new HttpError(403, makeErrorBody('You do not have access to this project.', { [param]: [`No access to ${param} ${id}.`] }));
  }
  return notFound(param, id);
}

/** Looks up `{param}` in the list, 404 when absent, then checks access to its project. */
function find<T extends { readonly id: number }>(ctx: OperationContext, list: readonly T[], param: string, projectOf?: (x: T) => number): T {
  const id = ctx.req.ids[param]!;
  const item = byId(list, id);
  if (!item) throw notFound(param, id);
  if (projectOf) assertProjectAccess(ctx, projectOf(item), param, id);
  return item;
}

const projectOf = (x: { project_id: number }) => x.project_id;
const selfProject = (x: { id: number }) => x.id;

function single<T extends { readonly id: number }>(kind: Kind<T>, list: (w: World) => readonly T[], param: string, scope?: (x: T) => number): Handler {
  return (ctx) => makeSingleBody(ctx.world, kind, find(ctx, list(ctx.world), param, scope), ctx.req);
}

/** A list of one project's items, from the per-project index. */
function projectList<T>(kind: Kind<T>, pick: (ix: World['data']['byProject'][number]) => readonly T[]): Handler {
  return (ctx) => {
    const project = find(ctx, ctx.world.data.projects, 'project_id', selfProject);
    return listBody(ctx.world, kind, pick(ctx.world.data.byProject[project.id - 1]!), ctx.req);
  };
}

const HANDLERS: Record<OperationId, Handler> = {
  getCurrentUser: (ctx) => JSON.stringify(currentUserObject(ctx.world.data.users[ctx.userId - 1]!)),
  listUsers: (ctx) => listBody(ctx.world, USER, ctx.world.data.users, ctx.req),
  getUser: single(USER, (w) => w.data.users, 'user_id'),
  listProjectUsers: (ctx) => {
    const project = find(ctx, ctx.world.data.projects, 'project_id', selfProject);
    const members = ctx.world.data.users.filter((u) => ctx.world.data.access.get(u.id)?.has(project.id));
    return listBody(ctx.world, PROJECT_USER, members, ctx.req);
  },
  listProjects: (ctx) => {
    const visible = ctx.world.data.projects.filter((p) => canAccess(ctx.world.data, ctx.userId, p.id));
    return listBody(ctx.world, PROJECT, visible, ctx.req);
  },
  getProject: single(PROJECT, (w) => w.data.projects, 'project_id', selfProject),
  listRuns: projectList(RUN, (ix) => ix.runs),
  getRun: single(RUN, (w) => w.data.runs, 'run_id', projectOf),
  listRunResults: (ctx) => {
    const run = find(ctx, ctx.world.data.runs, 'run_id', projectOf);
    return listBody(ctx.world, RESULT, ctx.world.data.runResults[run.id - 1]!, ctx.req);
  },
  listMilestones: projectList(MILESTONE, (ix) => ix.milestones),
  getMilestone: single(MILESTONE, (w) => w.data.milestones, 'milestone_id', projectOf),
  listSessions: projectList(SESSION, (ix) => ix.sessions),
  getSession: single(SESSION, (w) => w.data.sessions, 'session_id', projectOf),
  listAutomationSources: projectList(SOURCE, (ix) => ix.sources),
  getAutomationSource: single(SOURCE, (w) => w.data.sources, 'automation_source_id', projectOf),
  listRoles: (ctx) => listBody(ctx.world, ROLE, ctx.world.data.roles, ctx.req),
  getRole: single(ROLE, (w) => w.data.roles, 'role_id'),
  listGroups: (ctx) => listBody(ctx.world, GROUP, ctx.world.data.groups, ctx.req),
  getGroup: single(GROUP, (w) => w.data.groups, 'group_id'),
};

export function runOperation(ctx: OperationContext): string {
  return HANDLERS[ctx.req.op.id](ctx);
}
