/**
 * buildProxy(config, deps): the tm-cache HTTP app. It never listens; the CLI and tests do.
 *
 *   every request ──▶ pipeline.ts (before fastify) ── GET/HEAD of a catalogued operation with a credential
 *        │                 route memo → caller → decide → read-through → writer → record
 *        ▼ anything else (other paths and methods, no credential, unknown parameters)
 *   forwarding.ts: a path outside `upstream.forwardPrefixes` ─▶ 404 here
 *        ▼
 *   fastify + @fastify/http-proxy (passthrough.ts): forwarded untouched, never cached, within the
 *   upstream timeouts; a successful write drops the tags its path names, on every replica.
 *
 * Fastify sees only what the cache does not answer, so no fastify hook may carry a feature of
 * cached requests: such features belong to the pipeline, which every cached request crosses.
 */
import fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { createServer, type RequestListener } from 'node:http';
import { createServer as createSecureServer, type ServerOptions as SecureServerOptions } from 'node:https';
import type { Logger } from 'pino';
import type { CacheEntry } from '../cache/entry.js';
import type { FillLock } from '../cache/fill.js';
import { FreshnessPolicy, type Learned } from '../cache/policy.js';
import { describeKey } from '../cache/key.js';
import { pathOf } from '../ops/access-log.js';
import type { Config } from '../config/schema.js';
import { retryAfterMsOf, type Upstream } from '../upstream/client.js';
import type { FleetBudget } from '../upstream/fleet-budget.js';
import type { InvalidationBus } from '../cache/invalidation.js';
import type { Recorder } from '../ops/recorder.js';
import { AccessRules } from './callers/access.js';
import { ProjectAccess, userProjectTag } from './callers/access-confirmation.js';
import { IdentityResolver, type IdentityLookupResult, type SharedLocks, type SharedStore } from './callers/identity.js';
import { forwardOnly } from './passthrough/forwarding.js';
import { passthroughRequestLogger, registerPassthrough } from './passthrough/proxy.js';
import { budgeted } from './passthrough/budgeted.js';
import { exchangeOf } from './exchange.js';
import { keysOnOrigin } from './decide.js';
import { OriginKeying } from './origin-keying.js';
import { Pipeline, type Handler } from './pipeline.js';
import { ReadThrough, type ReadCache } from './read-through.js';
import type { DerivationIndex } from '../cache/derive/index.js';
import { Deriver, type DeriverOptions, type SharedSources } from './derive/deriver.js';
import { ProofKeeper, type SharingEvents } from './callers/proofs.js';
import { AreaGrants } from './callers/access-grants.js';
import type { SharedTierBudget } from '../cache/budget.js';
import { RetryAfterGate } from './callers/retry-after.js';
import { Refreshers } from './callers/refreshers.js';
import type { Caller } from './callers/caller.js';
import { RouteMemo } from './route-memo.js';
import type { MemoFigures } from '../ops/metrics.js';

/** The cache as the app sees it: read-through operations, gzip variants and invalidation. */
export interface ProxyCache extends ReadCache {
  /** The largest entry some tier stores. */
  readonly maxEntryBytes: number;
  /** The entry with its gzip variant, made once (TieredCache.gzipVariant). */
  gzipVariant(key: string, entry: CacheEntry): Promise<CacheEntry>;
  invalidateTag(tag: string): Promise<unknown>;
}

export interface ProxyDeps {
  readonly cache: ProxyCache;
  readonly upstream: Upstream;
  /** Where identity look-ups (GET /user) go: their own budget (UpstreamClient.withLane); else `upstream`. */
  readonly identityUpstream?: Upstream | undefined;
  readonly logger: Logger;
  readonly hmacSecret: Buffer;
  readonly shared?: SharedStore | undefined;
  /** Where identity look-ups take their cross-replica lock (the shared store's lock role). */
  readonly sharedLocks?: SharedLocks | undefined;
  /** Carries forgotten credentials between replicas (the invalidation bus). */
  readonly bus?: InvalidationBus | undefined;
  readonly lock?: FillLock | undefined;
  readonly now?: () => number;
  /** The one record of every request (metrics, stats, access log). */
  readonly recorder: Recorder;
  /** How each caller identification ended (metrics). */
  readonly onIdentityLookup?: ((result: IdentityLookupResult) => void) | undefined;
  /** Told of each passthrough answer's status, or failure (upstream health). */
  readonly onPassthroughAnswer?: ((status: number | undefined, error?: string) => void) | undefined;
  /**
   * The fleet's upstream budget (fleet-budget.ts): every passthrough request takes a token from it
   * (passthrough/budgeted.ts), and its 429s pause it; refresh-ahead waits out its pauses.
   * Absent (unit tests): passthrough requests are forwarded unbudgeted, as fills are then.
   */
  readonly budget?: Pick<FleetBudget, 'acquire' | 'onRateLimited' | 'pausedForMs'> | undefined;
  /** What sharing by project did (metrics, status page). */
  readonly sharing?: SharingEvents | undefined;
  /** Registers the sizes of the pipeline's memos, read at scrape time (metrics.ts). */
  readonly watchMemos?: ((read: () => MemoFigures) => void) | undefined;
  /** HTTPS (`server.tls`, certificates.ts): the listener serves TLS with these options; absent: plain HTTP. */
  readonly tls?: SecureServerOptions | undefined;
  /**
   * The index of the memory tier's list pages (`cache.derive.enabled`, cache/derive/index.ts): a
   * question nothing fresh is held for may be answered from a broader one (derive/deriver.ts).
   * Absent: nothing is derived.
   */
  readonly derivations?: DerivationIndex | undefined;
  /** A derived answer was served (metrics). */
  readonly onDerived?: DeriverOptions['onDerived'];
  /** The sources of derived answers other replicas stored in Redis (redis/derive-sets.ts); absent: this replica's memory alone. */
  readonly sharedDerivations?: SharedSources | undefined;
}

const EMPTY_QUERY = Object.freeze({});
const WRITE_METHODS = new Set(['DELETE', 'PATCH', 'POST', 'PUT']);

export interface Proxy {
  readonly app: FastifyInstance;
  /**
   * Applies the settings that can change safely while running (a reload, SIGHUP): freshness
   * rules, identity and access TTLs, Retry-After defaults. The rest needs a restart (reload.ts).
   */
  reconfigure(config: Config): void;
}

export async function buildProxy(config: Config, deps: ProxyDeps): Promise<Proxy> {
  const now = deps.now ?? Date.now;
  const sharesProjects = config.cache.sharing === 'project';
  const shared = deps.shared;
  // Sharing by project places a run's answers in its project's scope: what the instance said of
  // a resource's project is learned from list items too, and shared through Redis.
  const policy = new FreshnessPolicy(config.cache.freshness, config.cache.staleIfErrorMs, config.cache.storedHeaders, {
    fromLists: sharesProjects,
    // What one answer taught is one write, under the budget of the request that filled it.
    ...(sharesProjects && shared ? { onLearned: ((learned, budget) => void shared.setJsonMany(PLACES, learned, PLACE_TTL_MS, budget)) satisfies Learned } : {}),
  });
  // A list page indexed for derived answers names its items' project: a write to one of them then drops the project's entries, the page included.
  deps.derivations?.teach((tag, projectId) => policy.learnProject(tag, projectId));
  let closing = false;
  let current = config;
  let parts: PipelineParts | undefined;
  const requestLogger = passthroughRequestLogger(deps.logger) as FastifyBaseLogger;
  const app = fastify({
    serverFactory: (handler) => {
      parts = makePipeline(config, deps, policy, now, handler);
      const pipeline = parts.pipeline;
      // While closing, fastify answers everything (503 for new requests: return503OnClosing).
      const listener: RequestListener = (req, res) => (closing ? handler(req, res) : pipeline.handle(req, res));
      return deps.tls ? createSecureServer(deps.tls, listener) : createServer(listener);
    },
    // The server comes from the factory; this only makes listen() answer an https:// URL.
    ...(deps.tls ? { https: deps.tls } : {}),
    loggerInstance: deps.logger as FastifyBaseLogger,
    // Fastify logs nothing per request: the pipeline logs cached ones, passthrough.ts the others.
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: () => requestLogger,
    // Forwarded requests keep their query string as it is; nothing here parses it.
    routerOptions: { querystringParser: () => EMPTY_QUERY, ignoreTrailingSlash: true },
    return503OnClosing: true,
  });
  app.addHook('preClose', async () => {
    closing = true;
  });
  /**
   * `url` as the client sent it. The write is forwarded with its path up to the query or the
   * fragment (reply-from sends a WHATWG URL's pathname, which never holds a fragment): the tags
   * are read from that same path, or `/runs/7#x` would change run 7 and drop nothing.
   */
  async function invalidateForWrite(url: string): Promise<void> {
    const tags = policy.tagsForWrite(pathOf(url));
    await Promise.all(tags.map((tag) => deps.cache.invalidateTag(tag)));
    if (tags.length > 0) deps.logger.debug({ tags }, 'invalidated after write');
  }

  await registerPassthrough(app, config.upstream, {
    maxRetryAfterMs: () => current.upstream.maxRetryAfterMs,
    now,
    onAnswer: (request, status, ms, retryAfter) => {
      const x = exchangeOf(request.raw);
      if (x !== undefined) x.upstream = { status, ms };
      deps.onPassthroughAnswer?.(status);
      // A 429 to a passthrough request is the account's limit too: the whole fleet pauses.
      if (status === 429) deps.budget?.onRateLimited(retryAfterMsOf(retryAfter));
      if (WRITE_METHODS.has(request.method) && status >= 200 && status < 300) void invalidateForWrite(request.url);
    },
    onFailure: (request, status, code, ms) => {
      const x = exchangeOf(request.raw);
      if (x !== undefined) x.upstream = { status, ms, failed: true };
      deps.onPassthroughAnswer?.(undefined, code);
    },
  });
  app.addHook('onClose', async () => {
    parts?.readThrough.close();
    await deps.upstream.close();
  });
  return {
    app,
    reconfigure(next) {
      current = next;
      policy.reconfigure(next.cache.freshness, next.cache.staleIfErrorMs);
      parts?.gate.reconfigure(next.upstream.defaultRetryAfterMs, next.upstream.maxRetryAfterMs);
      parts?.identity.reconfigure({ ttlMs: next.identity.ttlMs, accessTtlMs: next.access.ttlMs, refusedTtlMs: next.identity.refusedTtlMs });
      parts?.projects.reconfigure(next.access.projectConfirmMs);
      parts?.grants.reconfigure(next.access.grantTtlMs);
    },
  };
}

/** The pipeline, the parts of it a reload reconfigures, and the read-through (closed with the app: its refreshes ahead cancelled). */
interface PipelineParts {
  readonly pipeline: Pipeline;
  readonly readThrough: ReadThrough;
  readonly gate: RetryAfterGate;
  readonly identity: IdentityResolver;
  readonly projects: ProjectAccess;
  readonly grants: AreaGrants;
}

/**
 * The parts of the pipeline, wired: identity, access rules, the read-through and the route memo;
 * `passthrough` (fastify's handler) behind the forwarding rules, then the budget.
 */
// eslint-disable-next-line max-lines-per-function -- the pipeline's wiring: identity, access rules, read-through and memos, each built once from the config
function makePipeline(config: Config, deps: ProxyDeps, policy: FreshnessPolicy, now: () => number, passthrough: Handler): PipelineParts {
  const gate = new RetryAfterGate(config.upstream.defaultRetryAfterMs, config.upstream.maxRetryAfterMs);
  // A replica's fill (or look-up) may wait up to upstream.budget.maxWaitMs for a token, its lock
  // renewed meanwhile: the others follow it that long too, rather than ask the same question again.
  const followMs = config.cache.redis.lockWaitMs + config.upstream.budget.maxWaitMs;
  const identity = new IdentityResolver({
    onLookup: deps.onIdentityLookup,
    lockTtlMs: config.cache.redis.lockTtlMs,
    lockWaitMs: config.cache.redis.lockWaitMs,
    followMs,
    ttlMs: config.identity.ttlMs,
    accessTtlMs: config.access.ttlMs,
    maxEntries: config.identity.maxEntries,
    maxBytes: config.identity.maxBytes,
    refusedTtlMs: config.identity.refusedTtlMs,
    refusedMaxBytes: config.identity.refusedMaxBytes,
    hmacSecret: deps.hmacSecret,
    upstream: deps.identityUpstream ?? deps.upstream,
    knownUpstream: deps.upstream,
    shared: deps.shared,
    sharedLocks: deps.sharedLocks,
    retryAfter: gate,
    bus: deps.bus,
    now,
  });
  const renewIdentity = (authorization: string, caller: Caller, askedAt: number, budget?: SharedTierBudget): void =>
    identity.renew(authorization, caller, askedAt, budget);
  const projects = new ProjectAccess({ confirmMs: config.access.projectConfirmMs, upstream: deps.upstream, shared: deps.shared, renewIdentity, now });
  // Sharing by project: the members whose credentials a shared entry's refresh may be asked under (refreshers.ts).
  const refreshers =
    config.cache.sharing === 'project'
      ? new Refreshers({
          proofs: {
            isLive: (credential, t) => identity.isLive(credential, t),
            confirmedUntil: (userId, projectId) => projects.confirmedUntil(userId, projectId),
            grantedUntil: (userId, projectId, mask) => grants.grantedUntil(userId, projectId, mask),
          },
          seenWithinMs: () => identity.ttlMs,
          confirmMs: () => projects.confirmMs,
          grantTtlMs: () => grants.ttlMs,
        })
      : undefined;
  const grants = new AreaGrants({
    ttlMs: config.access.grantTtlMs,
    shared: deps.shared,
    bus: deps.bus,
    now,
    onRefused: (userId, projectId, where) => {
      projects.forget(userId, projectId, where);
      refreshers?.drop(userId, projectId);
    },
  });
  const access = new AccessRules({
    markAdmin: (caller) => identity.markAdmin(caller),
    clearAdmin: (caller) => identity.clearAdmin(caller),
    forget: (authorization) => identity.forget(authorization),
    deleteEntry: (key) => void deps.cache.delete(key),
    dropUserProject: (caller, projectId) => void deps.cache.invalidateTag(userProjectTag(caller.scope, projectId)),
    refuseMember: (caller, projectId) => grants.refuse(caller.userId, projectId, now()),
  });
  // Whether a browser's Origin splits an operation's entries, learned from the instance's answers.
  const originKeying = keysOnOrigin(config.cache.storedHeaders) ? new OriginKeying() : undefined;
  const readThrough = new ReadThrough({
    cache: deps.cache,
    originKeying,
    upstream: deps.upstream,
    policy,
    access,
    proofs: new ProofKeeper({
      projects,
      grants,
      refreshers,
      events: deps.sharing,
      renewIdentity,
      findPlace: config.cache.sharing === 'project' && deps.shared ? placeFromShared(deps.shared, policy) : undefined,
    }),
    staleOnOutage: config.identity.staleOnOutage,
    gate,
    lock: deps.lock,
    lockTtlMs: config.cache.redis.lockTtlMs,
    lockWaitMs: config.cache.redis.lockWaitMs,
    followMs,
    maxEntryBytes: deps.cache.maxEntryBytes,
    now,
    deriver:
      deps.derivations &&
      new Deriver({ index: deps.derivations, peek: (key) => deps.cache.peekMemory(key), onDerived: deps.onDerived, shared: deps.sharedDerivations }),
    // The key as describeKey shows it: a log line never carries a user id with a canonical query.
    refreshAheadStartAt: config.cache.refreshAhead.enabled ? config.cache.refreshAhead.startAt : undefined,
    mayRefreshAhead: deps.budget === undefined ? undefined : () => deps.budget!.pausedForMs() === 0,
    onBackgroundError: (err, key) =>
      deps.logger.warn({ err: err instanceof Error ? err.message : String(err), ...describeKey(key) }, 'background refresh failed'),
  });
  // A path that is not forwarded is refused before it takes a token; one that is waits for its token.
  const verifiedUser = (authorization: string): number | undefined => identity.peek(authorization, now())?.userId;
  const forward = forwardOnly(
    config.upstream.forwardPrefixes,
    deps.budget === undefined ? passthrough : budgeted(passthrough, { budget: deps.budget, verifiedUser }),
    deps.logger,
  );
  const routes = new RouteMemo(config.server.routeMemoMaxBytes);
  deps.watchMemos?.(() => {
    const { headers, refused } = identity.stats();
    return { routes: routes.stats(), headers, refused };
  });
  const options = {
    routes,
    identity,
    readThrough,
    cache: deps.cache,
    honorNoCache: config.cache.honorClientNoCache,
    originKeying,
    sharing: config.cache.sharing,
    projectOfResource: (tag: string) => policy.projectOfResource(tag),
    strict: config.cache.strict,
    now,
    logger: deps.logger,
    recorder: deps.recorder,
  };
  return { pipeline: new Pipeline(options, forward), readThrough, gate, identity, projects, grants };
}

/** Where replicas share what the instance said of a resource's project (`run:7` → 4), and for how long. */
const PLACES = 'project-of';
const PLACE_TTL_MS = 24 * 3_600_000;
/** Resources asked of the shared store at most once each (bounded: past it, the set starts over). */
const MAX_PLACES_ASKED = 100_000;

/** Asks the shared store, once per resource, for the project another replica learned it belongs to. */
function placeFromShared(shared: SharedStore, policy: FreshnessPolicy): (tag: string, budget: SharedTierBudget) => Promise<void> {
  const asked = new Set<string>();
  return async (tag, budget) => {
    if (asked.has(tag)) return;
    if (asked.size >= MAX_PLACES_ASKED) asked.clear();
    asked.add(tag);
    const projectId = await shared.getJson<number>(PLACES, tag, { budget, isValid: (v) => Number.isSafeInteger(v) && (v as number) > 0 });
    if (projectId !== undefined) policy.learnProject(tag, projectId);
  };
}
