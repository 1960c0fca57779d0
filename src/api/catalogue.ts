/**
 * The Read API as data: the 19 GET operations of `shared/spec/read-api.md`, and the resources
 * they are about.
 *
 * These two tables are the one description of the API in the project. The emulator's routes and
 * validation, the proxy's normalization, key scopes, freshness and invalidation are all derived
 * from them: adding an endpoint is adding one operation row (and, for a new kind of resource, one
 * resource row, which the compiler then demands).
 *
 * Invariants (checked by test/api/catalogue.unit.test.ts, and at load for the id parameters):
 * - every path id of an operation is the `idParam` of exactly one resource;
 * - an operation's path ends with its resource's collection segments (then its id for a single);
 * - a resource that is `settledWith` another is listed under it, and that one has a settled flag.
 */

/** Expand type names of the spec (section "Expand objects"). */
export const EXPAND_TYPES = [
  'automation_sources',
  'configs',
  'field_values',
  'groups',
  'issues',
  'milestone_stats',
  'milestone_types',
  'milestones',
  'roles',
  'states',
  'statuses',
  'templates',
  'users',
] as const;
export type ExpandType = (typeof EXPAND_TYPES)[number];

/**
 * Areas of a project: an instance grants access per project through roles, and answers 403
 * ("insufficient access") on results, milestones, sessions and automation sources, so a role may
 * allow some parts of a project and not others. The emulator restricts them (deny_area), and
 * `cache.sharing: project` serves a shared answer only to a caller with a grant for every area
 * it reveals (src/proxy/callers/access-grants.ts).
 */
export const AREAS = ['runs', 'results', 'milestones', 'sessions', 'automation_sources', 'users'] as const;
export type Area = (typeof AREAS)[number];

/**
 * The area an expand carries into an answer: a run with its milestones expanded reveals
 * milestones. Expands that name no area (issues, statuses, configs, ...) are the project's
 * settings; roles and groups expand only on admin-only answers. `users` reveals the people of
 * the project, as its member list does.
 */
export const EXPAND_AREAS: Readonly<Partial<Record<ExpandType, Area>>> = {
  milestones: 'milestones',
  milestone_stats: 'milestones',
  automation_sources: 'automation_sources',
  users: 'users',
};

/** `per_page` allowed values (spec, Limits). */
export const PER_PAGE_VALUES = [15, 25, 50, 100] as const;
export const DEFAULT_PER_PAGE = 100;
export const DEFAULT_ORDER = 'desc';
/** Status ids run from 1 to 25 (spec, Limits). */
const MAX_STATUS_ID = 25;

/** The kind of a query parameter decides how it is parsed, validated and canonicalized. */
export type ParamSpec =
  | { readonly name: 'page'; readonly kind: 'page' }
  | { readonly name: 'per_page'; readonly kind: 'per_page' }
  | { readonly name: 'sort'; readonly kind: 'sort'; readonly values: readonly string[]; readonly default: string }
  | { readonly name: 'order'; readonly kind: 'order' }
  | { readonly name: 'expands'; readonly kind: 'expands'; readonly values: readonly ExpandType[] }
  | { readonly name: string; readonly kind: 'boolean' }
  | { readonly name: string; readonly kind: 'timestamp' }
  /** Comma list of integer ids; `min`/`max` bound each id (status ids 1..25, assignee 0 = unassigned). */
  | { readonly name: string; readonly kind: 'id_list'; readonly min: number; readonly max?: number }
  /** Comma list of free-form strings (tags). */
  | { readonly name: string; readonly kind: 'string_list' };

export type ResourceName =
  'current_user' | 'user' | 'project_user' | 'project' | 'run' | 'result' | 'milestone' | 'session' | 'automation_source' | 'role' | 'group';

export type OperationId =
  | 'getCurrentUser'
  | 'listUsers'
  | 'getUser'
  | 'listProjectUsers'
  | 'listProjects'
  | 'getProject'
  | 'listRuns'
  | 'getRun'
  | 'listRunResults'
  | 'listMilestones'
  | 'getMilestone'
  | 'listSessions'
  | 'getSession'
  | 'listAutomationSources'
  | 'getAutomationSource'
  | 'listRoles'
  | 'getRole'
  | 'listGroups'
  | 'getGroup';

/** How the answer is shaped: list envelope, `{result, expands}`, or the flat current user. */
export type Envelope = 'list' | 'single' | 'flat';

export interface Operation {
  readonly id: OperationId;
  /** Path template relative to `/api/v1`, e.g. `/projects/{project_id}/runs`. */
  readonly path: string;
  /** Names of the path ids, in order of appearance. All are required positive integers. */
  readonly pathIds: readonly string[];
  readonly envelope: Envelope;
  readonly resource: ResourceName;
  /** Site admin access required (spec, endpoint summary). */
  readonly adminOnly: boolean;
  /**
   * The area of a project its answers belong to (a run's results: the run's project); null for
   * `getProject` (membership only) and the operations that name no project.
   */
  readonly area: Area | null;
  /**
   * What the instance answers when the caller cannot access the project the operation is about:
   * 403 where the spec lists 403 for the operation, else 404 (the project is not revealed).
   */
  readonly noAccessStatus: 403 | 404 | null;
  /** Query parameters the operation defines; any other parameter is unknown to it. */
  readonly params: readonly ParamSpec[];
  /** The status codes the spec lists for the operation (empty: "not listed per endpoint"). */
  readonly statusCodes: readonly number[];
}

const page: ParamSpec = { name: 'page', kind: 'page' };
const perPage: ParamSpec = { name: 'per_page', kind: 'per_page' };
const order: ParamSpec = { name: 'order', kind: 'order' };
const paging = [page, perPage] as const;

function sort(resource: string, fields: readonly string[]): ParamSpec {
  const values = fields.map((f) => `${resource}:${f}`);
  return { name: 'sort', kind: 'sort', values, default: values[0]! };
}
function expands(...values: ExpandType[]): ParamSpec {
  return { name: 'expands', kind: 'expands', values: [...values].sort() };
}
const bool = (name: string): ParamSpec => ({ name, kind: 'boolean' });
const ts = (name: string): ParamSpec => ({ name, kind: 'timestamp' });
const ids = (name: string, min = 1, max?: number): ParamSpec => (max === undefined ? { name, kind: 'id_list', min } : { name, kind: 'id_list', min, max });
const strings = (name: string): ParamSpec => ({ name, kind: 'string_list' });
const window = (field: string): ParamSpec[] => [ts(`${field}_after`), ts(`${field}_before`)];

const MILESTONE_EXPANDS = expands('issues', 'milestone_stats', 'milestone_types', 'milestones', 'statuses', 'users');
const SESSION_EXPANDS = expands('configs', 'field_values', 'issues', 'milestones', 'states', 'statuses', 'templates', 'users');
const RUN_EXPANDS = expands('configs', 'issues', 'milestones', 'states', 'statuses', 'users');
const ADMIN_USER_EXPANDS = expands('groups', 'roles', 'users');
/**
 * The spec does not list the result expands ("the example uses issues and users"); statuses is
 * what a result references besides those. Documented in docs/emulator.md.
 */
const RESULT_EXPANDS = expands('issues', 'statuses', 'users');

const CODES_ADMIN_LIST = [200, 400, 401, 403, 422];
const CODES_ADMIN_SINGLE = [200, 400, 401, 403, 404, 422];

export const OPERATIONS: readonly Operation[] = [
  {
    id: 'getCurrentUser',
    path: '/user',
    pathIds: [],
    envelope: 'flat',
    resource: 'current_user',
    area: null,
    adminOnly: false,
    noAccessStatus: null,
    params: [],
    statusCodes: [200, 400, 401],
  },
  {
    id: 'listUsers',
    path: '/users',
    pathIds: [],
    envelope: 'list',
    resource: 'user',
    area: null,
    adminOnly: true,
    noAccessStatus: null,
    params: [...paging, ADMIN_USER_EXPANDS],
    statusCodes: CODES_ADMIN_LIST,
  },
  {
    // The spec leaves open whether the user is wrapped in `result`; we wrap it like every other
    // single operation (docs/emulator.md, "API notes").
    id: 'getUser',
    path: '/users/{user_id}',
    pathIds: ['user_id'],
    envelope: 'single',
    resource: 'user',
    area: null,
    adminOnly: true,
    noAccessStatus: null,
    params: [ADMIN_USER_EXPANDS],
    statusCodes: CODES_ADMIN_SINGLE,
  },
  {
    id: 'listProjectUsers',
    path: '/projects/{project_id}/users',
    pathIds: ['project_id'],
    envelope: 'list',
    resource: 'project_user',
    area: 'users',
    adminOnly: false,
    noAccessStatus: 404,
    params: [...paging],
    statusCodes: [200, 400, 401, 404, 422],
  },
  {
    id: 'listProjects',
    path: '/projects',
    pathIds: [],
    envelope: 'list',
    resource: 'project',
    area: null,
    adminOnly: false,
    noAccessStatus: null,
    params: [...paging, sort('projects', ['created_at', 'completed_at']), order, bool('is_completed'), expands('users')],
    statusCodes: [],
  },
  {
    id: 'getProject',
    path: '/projects/{project_id}',
    pathIds: ['project_id'],
    envelope: 'single',
    resource: 'project',
    area: null,
    adminOnly: false,
    noAccessStatus: 404,
    params: [expands('users')],
    statusCodes: [],
  },
  {
    id: 'listRuns',
    path: '/projects/{project_id}/runs',
    pathIds: ['project_id'],
    envelope: 'list',
    resource: 'run',
    area: 'runs',
    adminOnly: false,
    noAccessStatus: 404,
    params: [
      ...paging,
      sort('runs', ['created_at', 'closed_at']),
      order,
      ...window('closed'),
      ...window('created'),
      ids('config_id'),
      ids('created_by'),
      bool('is_closed'),
      ids('milestone_id'),
      ids('state_id'),
      strings('tags'),
      RUN_EXPANDS,
    ],
    statusCodes: [],
  },
  {
    id: 'getRun',
    path: '/runs/{run_id}',
    pathIds: ['run_id'],
    envelope: 'single',
    resource: 'run',
    area: 'runs',
    adminOnly: false,
    noAccessStatus: 404,
    params: [RUN_EXPANDS],
    statusCodes: [],
  },
  {
    id: 'listRunResults',
    path: '/runs/{run_id}/results',
    pathIds: ['run_id'],
    envelope: 'list',
    resource: 'result',
    area: 'results',
    adminOnly: false,
    noAccessStatus: 403,
    params: [
      ...paging,
      sort('run_results', ['created_at']),
      order,
      ...window('created'),
      ids('created_by'),
      ids('assignee_id', 0),
      ids('status_id', 1, MAX_STATUS_ID),
      bool('get_latest_result'),
      RESULT_EXPANDS,
    ],
    statusCodes: [200, 400, 401, 403, 422],
  },
  {
    id: 'listMilestones',
    path: '/projects/{project_id}/milestones',
    pathIds: ['project_id'],
    envelope: 'list',
    resource: 'milestone',
    area: 'milestones',
    adminOnly: false,
    noAccessStatus: 403,
    params: [
      ...paging,
      sort('milestones', ['created_at', 'completed_at']),
      order,
      strings('automation_tags'),
      ...window('completed'),
      ...window('created'),
      ids('created_by'),
      bool('is_completed'),
      ids('parent_id'),
      ids('root_id'),
      ids('type_id'),
      MILESTONE_EXPANDS,
    ],
    statusCodes: [200, 400, 401, 403, 422],
  },
  {
    id: 'getMilestone',
    path: '/milestones/{milestone_id}',
    pathIds: ['milestone_id'],
    envelope: 'single',
    resource: 'milestone',
    area: 'milestones',
    adminOnly: false,
    noAccessStatus: 403,
    params: [MILESTONE_EXPANDS],
    statusCodes: [200, 400, 401, 403, 404, 422],
  },
  {
    id: 'listSessions',
    path: '/projects/{project_id}/sessions',
    pathIds: ['project_id'],
    envelope: 'list',
    resource: 'session',
    area: 'sessions',
    adminOnly: false,
    noAccessStatus: 403,
    params: [
      ...paging,
      sort('sessions', ['created_at', 'closed_at']),
      order,
      ids('assignee_id'),
      ...window('closed'),
      ...window('created'),
      ids('config_id'),
      ids('created_by'),
      bool('is_closed'),
      ids('milestone_id'),
      ids('state_id'),
      strings('tags'),
      ids('template_id'),
      SESSION_EXPANDS,
    ],
    statusCodes: [200, 400, 401, 403, 422],
  },
  {
    id: 'getSession',
    path: '/sessions/{session_id}',
    pathIds: ['session_id'],
    envelope: 'single',
    resource: 'session',
    area: 'sessions',
    adminOnly: false,
    noAccessStatus: 403,
    params: [SESSION_EXPANDS],
    statusCodes: [200, 400, 401, 403, 404, 422],
  },
  {
    id: 'listAutomationSources',
    path: '/projects/{project_id}/automation/sources',
    pathIds: ['project_id'],
    envelope: 'list',
    resource: 'automation_source',
    area: 'automation_sources',
    adminOnly: false,
    noAccessStatus: 403,
    params: [...paging, sort('automation_sources', ['created_at', 'ran_at', 'retired_at']), order, bool('is_retired'), expands('users')],
    statusCodes: [200, 400, 401, 403, 422],
  },
  {
    id: 'getAutomationSource',
    path: '/automation/sources/{automation_source_id}',
    pathIds: ['automation_source_id'],
    envelope: 'single',
    resource: 'automation_source',
    area: 'automation_sources',
    adminOnly: false,
    noAccessStatus: 403,
    params: [expands('users')],
    statusCodes: [200, 400, 401, 403, 404, 422],
  },
  {
    id: 'listRoles',
    path: '/roles',
    pathIds: [],
    envelope: 'list',
    resource: 'role',
    area: null,
    adminOnly: true,
    noAccessStatus: null,
    params: [...paging, expands('users')],
    statusCodes: [],
  },
  {
    id: 'getRole',
    path: '/roles/{role_id}',
    pathIds: ['role_id'],
    envelope: 'single',
    resource: 'role',
    area: null,
    adminOnly: true,
    noAccessStatus: null,
    params: [expands('users')],
    statusCodes: [],
  },
  {
    id: 'listGroups',
    path: '/groups',
    pathIds: [],
    envelope: 'list',
    resource: 'group',
    area: null,
    adminOnly: true,
    noAccessStatus: null,
    params: [...paging, expands('users')],
    statusCodes: CODES_ADMIN_LIST,
  },
  {
    id: 'getGroup',
    path: '/groups/{group_id}',
    pathIds: ['group_id'],
    envelope: 'single',
    resource: 'group',
    area: null,
    adminOnly: true,
    noAccessStatus: null,
    params: [expands('users')],
    statusCodes: CODES_ADMIN_SINGLE,
  },
];

export const API_PREFIX = '/api/v1';

/** The lifecycle flags of the spec ("States and transitions"): `true` means the resource is final. */
export type SettledFlag = 'is_closed' | 'is_completed' | 'is_retired';

/** Where a resource sits in the URL space and when it stops changing: what the cache needs of it. */
export interface ResourceSpec {
  /**
   * Path segments of its collection (`runs`, `automation/sources`). Wherever they occur in a path,
   * a following id names one resource of this kind: `/projects/4/runs` and `/runs/7` alike.
   */
  readonly collection: readonly string[];
  /** The path parameter that names one of it (`/runs/{run_id}`); null when no path names one. */
  readonly idParam: string | null;
  /** The flag that marks it final (spec, "States and transitions"); null when it has none. */
  readonly settledFlag: SettledFlag | null;
  /**
   * The resource it is listed under and whose settled state it shares: the results of a closed
   * run do not change any more. Null for a resource that settles on its own or never.
   */
  readonly settledWith: ResourceName | null;
}

/**
 * Every resource of the catalogue. A Record, so a new ResourceName does not compile until it has
 * a row. `is_latest` of results is not a settled flag: a newer result clears it.
 */
export const RESOURCES: Readonly<Record<ResourceName, ResourceSpec>> = {
  current_user: { collection: ['user'], idParam: null, settledFlag: null, settledWith: null },
  user: { collection: ['users'], idParam: 'user_id', settledFlag: null, settledWith: null },
  // The members of a project: `/projects/{project_id}/users`, items are users.
  project_user: { collection: ['users'], idParam: null, settledFlag: null, settledWith: null },
  project: { collection: ['projects'], idParam: 'project_id', settledFlag: 'is_completed', settledWith: null },
  run: { collection: ['runs'], idParam: 'run_id', settledFlag: 'is_closed', settledWith: null },
  result: { collection: ['results'], idParam: null, settledFlag: null, settledWith: 'run' },
  milestone: { collection: ['milestones'], idParam: 'milestone_id', settledFlag: 'is_completed', settledWith: null },
  session: { collection: ['sessions'], idParam: 'session_id', settledFlag: 'is_closed', settledWith: null },
  automation_source: {
    collection: ['automation', 'sources'],
    idParam: 'automation_source_id',
    settledFlag: 'is_retired',
    settledWith: null,
  },
  role: { collection: ['roles'], idParam: 'role_id', settledFlag: null, settledWith: null },
  group: { collection: ['groups'], idParam: 'group_id', settledFlag: null, settledWith: null },
};

/** idParam → resource. Built at load so a path id no resource claims fails every start and test. */
const RESOURCE_OF_ID_PARAM: ReadonlyMap<string, ResourceName> = (() => {
  const byParam = new Map<string, ResourceName>();
  for (const [name, spec] of Object.entries(RESOURCES) as [ResourceName, ResourceSpec][]) {
    if (spec.idParam !== null) byParam.set(spec.idParam, name);
  }
  for (const op of OPERATIONS) {
    for (const id of op.pathIds) if (!byParam.has(id)) throw new Error(`${op.id}: no resource has id parameter ${id}`);
  }
  return byParam;
})();

/** The resource a path id names (`run_id` → `run`). */
export function resourceOfIdParam(idParam: string): ResourceName {
  const resource = RESOURCE_OF_ID_PARAM.get(idParam);
  if (resource === undefined) throw new Error(`no resource has id parameter ${idParam}`);
  return resource;
}

const BY_ID = new Map<OperationId, Operation>(OPERATIONS.map((op) => [op.id, op]));

export function getOperation(id: OperationId): Operation {
  const op = BY_ID.get(id);
  if (!op) throw new Error(`unknown operation ${id}`);
  return op;
}

/** The path with `{name}` replaced by the given ids, under `/api/v1`. */
export function makePath(op: Operation, ids: Readonly<Record<string, number>>): string {
  return API_PREFIX + op.path.replace(/\{(\w+)\}/g, (_, name: string) => String(ids[name]));
}
