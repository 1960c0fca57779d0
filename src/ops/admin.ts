/**
 * The admin API, on the management port, for operators: purge, inspect, and the figures behind
 * the status page (served at GET /).
 *
 *   POST /admin/purge    {"tag": "project:5"} | {"user_id": 7} | {"operation": "listRuns", "ids": {"project_id": 5}} | {"all": true}
 *   GET  /admin/entries  ?user_id=&operation=&tag=&limit=   this replica's memory tier, without bodies
 *   GET  /admin/stats    requests by outcome and tier, hit ratio, offload, bytes, memory, Redis, upstream, top costs, the last 15 minutes
 *   GET  /               the status page (it asks for the token and polls /admin/stats)
 *
 * Enabled by `admin.token`: callers send `Authorization: Bearer <token>` (admin-guard.ts decides,
 * on the route that matched: a wrong or missing one is 401, a source that keeps failing 429).
 * `admin.viewerToken`, when set, reads /admin/stats (and so the page) and is refused (403) the rest.
 * Without a token every one of these answers 404, as if it did not exist. A purge applies on every replica (through the Redis invalidation channel when
 * there is one) and answers what this replica dropped; each is counted and logged at info.
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { OPERATIONS, type Operation } from '../api/catalogue.js';
import type { CacheEntry } from '../cache/entry.js';
import { operationTag } from '../cache/key.js';
import { entrySizeBytes, type MemoryTier } from '../cache/memory-tier.js';
import type { Invalidated } from '../cache/tiered.js';
import { AdminGuard, type AdminRouteConfig } from './admin-guard.js';
import type { Metrics } from './metrics.js';
import type { BudgetSnapshot } from '../upstream/fleet-budget.js';
import type { BudgetCounts, RequestStats } from './stats.js';
import { STATUS_PAGE_HEADERS, STATUS_PAGE_HTML } from './status-page.js';
import type { UpstreamHealth } from './upstream-health.js';
import type { TierCounts } from '../cache/tier.js';
import type { ReadinessCheck } from './readiness.js';

export interface AdminDeps {
  /** The current `admin.token` (reloadable); empty: the admin API is off. */
  readonly token: () => string;
  /** The current `admin.viewerToken` (reloadable): GET /admin/stats and the page only. */
  readonly viewerToken: () => string;
  readonly cache: {
    readonly memory: MemoryTier;
    invalidateTag(tag: string): Promise<TierCounts>;
    purgeAll(): Promise<TierCounts>;
    /** The purge itself: what each tier dropped, and what it could not reach (tiered.ts). */
    invalidate(what: { kind: 'all' } | { kind: 'tag'; tag: string }): Promise<Invalidated>;
  };
  readonly metrics: Metrics;
  readonly stats: RequestStats;
  readonly health: UpstreamHealth;
  readonly upstreamLoad: () => { active: number; queued: number };
  /** The fleet's upstream budget as this replica knows it (fleet-budget.ts); absent in tests that build the admin API alone. */
  readonly budget?: (() => BudgetSnapshot) | undefined;
  /** Redis' state (its readiness check), when it is configured. */
  readonly redis?: { readonly check: ReadinessCheck; errors(): number } | undefined;
  readonly logger: Logger;
  readonly now: () => number;
  readonly version: string;
  readonly startedAt: number;
}

const OPERATION_IDS = new Map<string, Operation>(OPERATIONS.map((op) => [op.id, op]));
const MAX_LIMIT = 1_000;
const DEFAULT_LIMIT = 100;
/** Tags as the write invalidation and the entries carry them: `project:5`, `user`, `op:listRuns:5`, `u:7`, `u:7|project:5`. */
const TAG = /^[A-Za-z0-9_:|,.-]{1,200}$/;

type ErrorBody = { message: string; errors: Record<string, string[]> };

class AdminInputError extends Error {
  constructor(
    readonly status: 400 | 422,
    readonly body: ErrorBody,
  ) {
    super(body.message);
  }
}

const invalid = (param: string, rule: string): AdminInputError =>
  new AdminInputError(422, { message: 'The given data was invalid.', errors: { [param]: [rule] } });

export function registerAdmin(app: FastifyInstance, deps: AdminDeps): void {
  const guard = new AdminGuard({
    token: deps.token,
    viewerToken: deps.viewerToken,
    logger: deps.logger,
    now: deps.now,
    failed: () => deps.metrics.adminAuthFailure(),
  });
  // Encapsulated: the guard and the error handler apply to these routes and to nothing else.
  void app.register(async (admin) => {
    admin.addHook('onRequest', guard.check);
    admin.setErrorHandler((error: { statusCode?: number; message: string }, _request, reply) => {
      if (error instanceof AdminInputError) return reply.code(error.status).send(error.body);
      // A body fastify could not parse (not JSON, too large): the house error body, never a 500.
      const status = error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 500;
      if (status === 500) deps.logger.error({ err: error.message }, 'admin request failed');
      return reply.code(status).send({ message: status === 500 ? 'The admin request failed.' : `The request was refused: ${error.message}.`, errors: {} });
    });

    // The status page holds no figure and asks for the token itself: a browser that navigates to
    // it cannot send a bearer header, so only what it fetches (/admin/stats) is guarded.
    const publicRoute: { config: AdminRouteConfig } = { config: { public: true } };
    admin.get('/', publicRoute, async (_request, reply) => reply.headers(STATUS_PAGE_HEADERS).send(STATUS_PAGE_HTML));

    admin.post('/admin/purge', async (request, reply) => {
      const what = parsePurge(request.body);
      const { dropped: counts, unreached } = await deps.cache.invalidate(what);
      const purged = counts.memory ?? 0;
      deps.metrics.purge();
      const body = { purged, tiers: counts, ...(what.kind === 'tag' ? { tag: what.tag } : { all: true }) };
      if (unreached.length === 0) {
        deps.logger.info({ purge: what.kind === 'all' ? 'all' : what.tag, purged, tiers: counts }, 'purge');
        return reply.send(body);
      }
      // 503, not 200: the purge did not reach every tier (nor, then, every replica), and asking
      // again is the remedy once Redis answers; a 207 would need a multi-status body clients
      // do not parse. This replica drops what it could and keeps retrying the rest meanwhile.
      deps.logger.warn({ purge: what.kind === 'all' ? 'all' : what.tag, purged, tiers: counts, unreached }, 'purge did not reach every tier');
      return reply
        .code(503)
        .header('retry-after', '2')
        .send({
          message: `The purge did not reach ${unreached.join(' and ')} in time: this replica purged its memory and does not serve what Redis holds for it; it keeps retrying. Purge again once Redis answers.`,
          errors: {},
          unreached,
          ...body,
        });
    });

    admin.get('/admin/entries', async (request, reply) => reply.send(listEntries(deps, request.query as Record<string, unknown>)));

    // The figures only: a wall screen's viewer token reads them, and nothing else.
    const viewerRoute: { config: AdminRouteConfig } = { config: { viewer: true } };
    admin.get('/admin/stats', viewerRoute, async (_request, reply) => reply.header('cache-control', 'no-store').send(statsOf(deps)));
  });
}

type Purge = { kind: 'all' } | { kind: 'tag'; tag: string };

/** Exactly one of tag, user_id, operation (+ ids), all. */
function parsePurge(body: unknown): Purge {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new AdminInputError(400, {
      message: 'The body must be a JSON object: {"tag": ...}, {"user_id": ...}, {"operation": ..., "ids": {...}} or {"all": true}.',
      errors: {},
    });
  }
  const b = body as Record<string, unknown>;
  const chosen = ['tag', 'user_id', 'operation', 'all'].filter((k) => k in b);
  const unknown = Object.keys(b).filter((k) => !['tag', 'user_id', 'operation', 'ids', 'all'].includes(k));
  if (unknown.length > 0) throw invalid(unknown[0]!, `The ${unknown[0]} field is not defined: use one of tag, user_id, operation (with ids), all.`);
  if ('ids' in b && !('operation' in b)) throw invalid('ids', 'The ids field goes with operation.');
  if (chosen.length !== 1) throw invalid(chosen[1] ?? 'tag', 'Exactly one of tag, user_id, operation, all must be given.');
  if ('all' in b) {
    if (b['all'] !== true) throw invalid('all', 'The all field must be true.');
    return { kind: 'all' };
  }
  if ('tag' in b) {
    if (typeof b['tag'] !== 'string' || !TAG.test(b['tag']))
      throw invalid('tag', 'The tag must be a string of 1 to 200 letters, digits and _ : | , . - such as project:5.');
    return { kind: 'tag', tag: b['tag'] };
  }
  if ('user_id' in b) return { kind: 'tag', tag: `u:${positiveInteger(b['user_id'], 'user_id')}` };
  const op = OPERATION_IDS.get(String(b['operation']));
  if (typeof b['operation'] !== 'string' || op === undefined) {
    throw invalid('operation', `The operation must be one of ${[...OPERATION_IDS.keys()].join(', ')}.`);
  }
  const ids = b['ids'] ?? {};
  if (typeof ids !== 'object' || ids === null || Array.isArray(ids)) throw invalid('ids', 'The ids field must be an object such as {"project_id": 5}.');
  const given = ids as Record<string, unknown>;
  for (const name of Object.keys(given)) {
    if (!op.pathIds.includes(name)) throw invalid(`ids.${name}`, `${op.id} has no ${name}; its ids are: ${op.pathIds.join(', ') || 'none'}.`);
  }
  const values: Record<string, number> = {};
  for (const name of op.pathIds) {
    if (!(name in given)) throw invalid(`ids.${name}`, `The ids.${name} field is required for ${op.id}.`);
    values[name] = positiveInteger(given[name], `ids.${name}`);
  }
  return { kind: 'tag', tag: operationTag(op, values) };
}

function positiveInteger(value: unknown, param: string): number {
  const n = typeof value === 'string' && /^\d{1,15}$/.test(value) ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1) throw invalid(param, `The ${param} must be a positive integer.`);
  return n;
}

interface ListedJson {
  key: string;
  scope: string;
  operation: string;
  ids: Record<string, number>;
  query: string;
  tags: readonly string[];
  bytes: number;
  ageMs: number;
  freshForMs: number;
  stale: boolean;
  tier: 'memory';
  hits: number;
}

function listEntries(deps: AdminDeps, query: Record<string, unknown>): { entries: ListedJson[]; total: number; limit: number } {
  const unknown = Object.keys(query).filter((k) => !['user_id', 'operation', 'tag', 'limit'].includes(k));
  if (unknown.length > 0) throw invalid(unknown[0]!, `The ${unknown[0]} parameter is not defined: use user_id, operation, tag, limit.`);
  const one = (name: string): string | undefined => {
    const v = query[name];
    if (Array.isArray(v)) throw invalid(name, `The ${name} parameter may be given once.`);
    return v === undefined || v === '' ? undefined : String(v);
  };
  const userId = one('user_id');
  const scope = userId === undefined ? undefined : `u:${positiveInteger(userId, 'user_id')}`;
  const operation = one('operation');
  if (operation !== undefined && !OPERATION_IDS.has(operation))
    throw invalid('operation', `The operation must be one of ${[...OPERATION_IDS.keys()].join(', ')}.`);
  const tag = one('tag');
  if (tag !== undefined && !TAG.test(tag)) throw invalid('tag', 'The tag must be 1 to 200 letters, digits and _ : | , . - such as project:5.');
  const rawLimit = one('limit');
  const limit = rawLimit === undefined ? DEFAULT_LIMIT : positiveInteger(rawLimit, 'limit');
  if (limit > MAX_LIMIT) throw invalid('limit', `The limit must be at most ${MAX_LIMIT}.`);
  const now = deps.now();
  const { entries, total } = deps.cache.memory.list(
    (key, entry) => {
      const parts = key.split('|');
      if (scope !== undefined && parts[0] !== scope) return false;
      if (operation !== undefined && parts[2] !== operation) return false;
      return tag === undefined || entry.tags.includes(tag);
    },
    limit,
    now,
  );
  return { entries: entries.map(({ key, entry, hits }) => describeEntry(key, entry, hits, now)), total, limit };
}

/** A key is `<scope>|<version>|<operation>|<ids>|<canonical query>` (cache/key.ts). */
function describeEntry(key: string, entry: CacheEntry, hits: number, now: number): ListedJson {
  const [scope = '', , operation = '', ids = '', ...rest] = key.split('|');
  const query = rest.join('|');
  const op = OPERATION_IDS.get(operation);
  const values = ids === '' ? [] : ids.split(',').map(Number);
  return {
    key,
    scope,
    operation,
    ids: Object.fromEntries((op?.pathIds ?? []).map((name, i) => [name, values[i]!])),
    query,
    tags: entry.tags,
    bytes: entrySizeBytes(entry),
    ageMs: Math.max(0, now - entry.storedAt),
    freshForMs: Math.max(0, entry.freshUntil - now),
    stale: now >= entry.freshUntil,
    tier: 'memory',
    hits,
  };
}

function statsOf(deps: AdminDeps): unknown {
  const { stats, metrics, health } = deps;
  const now = deps.now();
  const cacheable = stats.total - stats.byOutcome.passthrough;
  const served = stats.byOutcome.hit + stats.byOutcome.stale;
  const upstreamRequests = stats.upstreamRequests;
  const byStatusClass: Record<string, number> = { '2xx': 0, '3xx': 0, '4xx': 0, '429': 0, '5xx': 0, error: 0 };
  for (const slot of metrics.families.upstreamResponses.entries()) byStatusClass[slot.labels['status_class']!] = slot.count;
  const memory = deps.cache.memory;
  const redisState = deps.redis?.check.check();
  return {
    version: deps.version,
    node: process.version,
    startedAt: deps.startedAt,
    now,
    uptimeS: Math.round((now - deps.startedAt) / 100) / 10,
    requests: { total: stats.total, byOutcome: { ...stats.byOutcome }, byTier: { ...stats.byTier } },
    hitRatio: cacheable > 0 ? served / cacheable : null,
    upstream: {
      requests: upstreamRequests,
      avoided: Math.max(0, cacheable - upstreamRequests),
      offload: cacheable > 0 ? Math.max(0, 1 - upstreamRequests / cacheable) : null,
      byStatusClass,
      state: health.state,
      lastError: health.lastError,
      lastCheckedAt: health.lastCheckedAt,
      last429At: health.last429At,
      recent429: health.recent429(),
      ...deps.upstreamLoad(),
      budget: budgetOf(deps),
    },
    bytes: { sent: metrics.totals.bytesSent, savedBy304: metrics.totals.notModifiedSaved },
    // cache.sharing: project (metrics.ts SharingTotals): what sharing a project's answers among its members saved.
    sharing: { sharedHits: metrics.totals.sharedHits, grantFills: metrics.totals.grantFills, savedRequests: metrics.totals.savedBySharing },
    memory: { ...memory.stats(), maxBytes: memory.maxBytes, evictions: metrics.families.evictions.total({ tier: 'memory' }) },
    redis: deps.redis
      ? { configured: true, status: redisState!.status, detail: redisState!.detail ?? null, errors: deps.redis.errors() }
      : { configured: false, status: 'off', detail: null, errors: 0 },
    top: topTables(stats),
    series: stats.series().map((b) => ({ t: b.t, requests: b.requests, byOutcome: { ...b.byOutcome }, upstream: b.upstream })),
  };
}

/**
 * The budget in /admin/stats: where tokens come from, whether the rate is fixed (the configured
 * ceiling) or learned from 429s, any pause (when, until when, why), who waits, what the lack of
 * tokens did over the last minute (per second), and counts since start.
 */
function budgetOf(deps: AdminDeps): BudgetStats | null {
  if (deps.budget === undefined) return null;
  const s = deps.budget();
  const { metrics } = deps;
  const now = deps.now();
  return {
    mode: s.mode,
    rate: s.ceilingRps > 0 ? 'fixed' : 'learned',
    rateRps: Math.round(s.rateRps * 100) / 100,
    ceilingRps: s.ceilingRps > 0 ? s.ceilingRps : null,
    pausedMs: Math.ceil(s.pausedMs),
    pause:
      s.pause === undefined
        ? null
        : {
            since: new Date(now - s.pause.sinceMsAgo).toISOString(),
            until: new Date(now + s.pausedMs).toISOString(),
            from: s.pause.from,
            retryAfterMs: s.pause.retryAfterMs,
          },
    queued: { ...s.queued },
    waiting: s.queued.client + s.queued.unverified + s.queued.background + s.queued.ahead,
    lastMinutePerSecond: deps.stats.budgetPerSecond(),
    tokens: metrics.families.budgetTokens.total({}),
    waits: metrics.families.budgetWaits.total({}),
    spent: metrics.families.budgetWaits.total({ result: 'spent' }),
    deferredToStale: metrics.families.budgetDeferred.total({ to: 'stale' }),
    refused: metrics.families.budgetDeferred.total({ to: 'refused' }),
    pauses: metrics.totals.budgetPauses,
  };
}

export interface BudgetStats {
  readonly mode: BudgetSnapshot['mode'];
  /** fixed: `upstream.budget.requestsPerSecond` is the ceiling; learned: the rate is what 429s taught. */
  readonly rate: 'fixed' | 'learned';
  readonly rateRps: number;
  /** The configured budget (req/s); null when the rate is learned. */
  readonly ceilingRps: number | null;
  readonly pausedMs: number;
  /** The pause under way: since and until (ISO times), this replica's 429 or the fleet's, and the Retry-After it carried (ms; null: none, or another replica's). */
  readonly pause: { since: string; until: string; from: 'this-replica' | 'fleet'; retryAfterMs: number | null } | null;
  readonly queued: BudgetSnapshot['queued'];
  readonly waiting: number;
  /** Client 429s from the budget (`refused`), stale answers with detail=budget (`stale`), refresh-ahead skipped (`skipped`): per second over the last minute. */
  readonly lastMinutePerSecond: BudgetCounts;
  readonly tokens: number;
  readonly waits: number;
  readonly spent: number;
  readonly deferredToStale: number;
  readonly refused: number;
  readonly pauses: number;
}

/** The top operations and users by upstream requests, each with what the rows leave out: rows and rest add up to the totals above. */
function topTables(stats: RequestStats): unknown {
  const operations = stats.topOperations();
  const users = stats.topUsers();
  return { operations, otherOperations: stats.restOf(operations), users, otherUsers: stats.restOf(users) };
}
