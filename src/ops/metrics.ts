/**
 * Prometheus metrics, in Prometheus' conventions (base units, `_total` counters, `_seconds`
 * histograms, Node's default metrics under their standard names). Labels are bounded sets
 * (outcome, tier, operation id, status class, Redis command kind): never a credential, a user id
 * or a URL.
 *
 * Recording is on the hit path, so it is plain arithmetic on a slot found through small Maps keyed
 * by label values: no label object, no string building, no hashing per observation. prom-client's
 * own Counter/Histogram would build and hash a label string on every `inc`/`observe`; here the
 * exposition is built only when /metrics is scraped (`LabelledFamily.get`).
 */
import { Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { ReloadResult } from '../config/reload.js';
import type { CertificateReloadResult } from '../config/tls-files.js';
import type { BudgetEvents, BudgetMode, BudgetSnapshot } from '../upstream/fleet-budget.js';
import type { CacheEntry } from '../cache/entry.js';
import type { SharingEvents } from '../proxy/callers/proofs.js';

/** Status of an answer as a bounded label: 429 on its own (rate limiting is worth its own line). */
export type StatusClass = '2xx' | '3xx' | '4xx' | '429' | '5xx' | 'error';

function statusClassOf(status: number | undefined): StatusClass {
  if (status === undefined) return 'error';
  if (status === 429) return '429';
  if (status < 300) return '2xx';
  if (status < 400) return '3xx';
  if (status < 500) return '4xx';
  return '5xx';
}

const REQUEST_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const UPSTREAM_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const REDIS_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

interface Slot {
  readonly labels: Record<string, string>;
  /** Counter value, or a histogram's observation count. */
  count: number;
  sum: number;
  /** Histogram only: observations per bucket (not cumulative; summed at scrape). */
  readonly buckets: Float64Array | undefined;
}

interface MetricValue {
  value: number;
  labels: Record<string, string | number>;
  metricName?: string;
}

/**
 * A counter or histogram family whose children are found by label values in a fixed order.
 * Registered with prom-client as a custom metric (it only needs `name`, `help`, `type`, `get`).
 */
class LabelledFamily {
  readonly #root = new Map<string, unknown>();
  readonly #slots: Slot[] = [];

  // eslint-disable-next-line max-params -- prom-client's own shape of a family (name, help, type, labels, buckets, registry), one call per metric in the table below
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'histogram',
    readonly labelNames: readonly string[],
    readonly bounds: readonly number[] = [],
    registry: Registry,
  ) {
    registry.registerMetric(this as never);
  }

  /**
   * The child for these label values (in `labelNames` order), made on first use. Found through
   * one Map per label: no array, no string, nothing allocated once the child exists.
   */
  slot(a: string, b = '', c = '', d = ''): Slot {
    const depth = this.labelNames.length;
    let node = this.#root;
    if (depth > 1) node = child(node, a);
    if (depth > 2) node = child(node, b);
    if (depth > 3) node = child(node, c);
    const last = depth === 1 ? a : depth === 2 ? b : depth === 3 ? c : d;
    return (node.get(last) as Slot | undefined) ?? this.#add(node, last, [a, b, c, d]);
  }

  #add(node: Map<string, unknown>, last: string, values: readonly string[]): Slot {
    const labels: Record<string, string> = {};
    this.labelNames.forEach((name, i) => (labels[name] = values[i]!));
    const slot: Slot = { labels, count: 0, sum: 0, buckets: this.type === 'histogram' ? new Float64Array(this.bounds.length) : undefined };
    node.set(last, slot);
    this.#slots.push(slot);
    return slot;
  }

  inc(slot: Slot, by = 1): void {
    slot.count += by;
  }

  observe(slot: Slot, seconds: number): void {
    slot.count++;
    slot.sum += seconds;
    const bounds = this.bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (seconds <= bounds[i]!) {
        slot.buckets![i]!++;
        return;
      }
    }
  }

  /** prom-client reads this at scrape time. */
  get(): { name: string; help: string; type: string; values: MetricValue[]; aggregator: string } {
    const values: MetricValue[] = [];
    for (const slot of this.#slots) {
      if (this.type === 'counter') {
        values.push({ value: slot.count, labels: slot.labels });
        continue;
      }
      let cumulative = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        cumulative += slot.buckets![i]!;
        values.push({ metricName: `${this.name}_bucket`, value: cumulative, labels: { ...slot.labels, le: this.bounds[i]! } });
      }
      values.push({ metricName: `${this.name}_bucket`, value: slot.count, labels: { ...slot.labels, le: '+Inf' } });
      values.push({ metricName: `${this.name}_sum`, value: slot.sum, labels: slot.labels });
      values.push({ metricName: `${this.name}_count`, value: slot.count, labels: slot.labels });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: 'sum' };
  }

  /** Sum of counts over every child whose labels match `where` (for /admin/stats). */
  total(where: Readonly<Record<string, string>> = {}): number {
    let sum = 0;
    for (const slot of this.#slots) if (Object.entries(where).every(([k, v]) => slot.labels[k] === v)) sum += slot.count;
    return sum;
  }

  /** Every child's labels and count. */
  entries(): readonly Slot[] {
    return this.#slots;
  }
}

function child(node: Map<string, unknown>, key: string): Map<string, unknown> {
  let next = node.get(key) as Map<string, unknown> | undefined;
  if (next === undefined) node.set(key, (next = new Map()));
  return next;
}

export type IdentityLookupResult = 'memo' | 'shared' | 'upstream' | 'refused' | 'error';
const RELOAD_RESULTS: readonly ReloadResult[] = ['applied', 'restart_needed', 'unchanged', 'refused'];
const CERTIFICATE_RELOAD_RESULTS: readonly CertificateReloadResult[] = ['applied', 'refused'];

export interface Metrics {
  readonly registry: Registry;
  /** One answered request, cached path or passthrough: counted, and its duration observed. */
  request(outcome: string, tier: string, operation: string, status: number, seconds: number): void;
  /** One upstream request made by the cache path (fills, refreshes, identity and access checks). */
  upstream(operation: string, status: number | undefined, seconds: number): void;
  redisCommand(command: string, seconds: number): void;
  eviction(tier: string): void;
  purge(): void;
  /** An admin API request refused for a missing or wrong token. */
  adminAuthFailure(): void;
  identityLookup(result: IdentityLookupResult): void;
  /** How a configuration reload (SIGHUP) ended: applied, restart_needed, unchanged, refused. */
  reload(result: ReloadResult): void;
  /** A new TLS certificate read (SIGHUP or its files changed): applied, or refused (the one in use kept). */
  certificateReload(result: CertificateReloadResult): void;
  bytesSent(bytes: number): void;
  notModifiedSaved(bytes: number): void;
  /** `tm_cache_ready`, read from the management port's readiness at scrape time. */
  watchReadiness(isReady: () => boolean): void;
  /** The pipeline's memos (routings, Authorization headers, refused tokens): entries and bytes. */
  watchMemos(read: () => MemoFigures): void;
  /** The memory tier and the upstream pools: sizes, bounds, requests in flight and waiting, the upstream's state. */
  watchServing(read: ServingReaders): void;
  /** Redis' errors, rejected values and state (registered only where Redis is configured). */
  watchRedis(read: RedisReaders): void;
  /** When the served TLS certificate expires (registered only with `server.tls`). */
  watchCertificate(notAfterMs: () => number): void;
  /** The fleet budget's events (fleet-budget.ts), counted: pass as its `events`. */
  readonly budget: BudgetEvents;
  /** A client's request the budget had no token for in time: answered stale (`stale`) or 429 (`refused`). */
  budgetDeferred(to: 'stale' | 'refused'): void;
  /** A question answered from a cached answer to a broader one (`Cache-Status: ...; detail=derived`), by operation and rule (item, page). */
  derived(operation: string, rule: string): void;
  /** Registers the fleet budget's gauges, read from its snapshot at scrape time (once per process). */
  watchBudget(snapshot: () => BudgetSnapshot): void;
  /** What sharing by project did (`cache.sharing: project`): pass as the read-through's `sharing`. */
  readonly sharing: SharingEvents;
  /** Read access for /admin/stats. */
  readonly families: {
    readonly requests: LabelledFamily;
    readonly upstreamResponses: LabelledFamily;
    readonly evictions: LabelledFamily;
    readonly budgetTokens: LabelledFamily;
    readonly budgetWaits: LabelledFamily;
    readonly budgetDeferred: LabelledFamily;
  };
  readonly totals: {
    bytesSent: number;
    notModifiedSaved: number;
    purges: number;
    adminAuthFailures: number;
    budgetPauses: number;
  } & SharingTotals;
}

/**
 * What sharing by project did. `savedBySharing`: for each shared entry, the members it served
 * besides the one whose request filled it; per-user caching would have asked the instance once
 * for each of them (at least once per freshness period), so this is what sharing saved.
 */
export interface SharingTotals {
  sharedHits: number;
  grantFills: number;
  savedBySharing: number;
}

/** Entries and estimated bytes of one bounded memo. */
export interface MemoSize {
  readonly entries: number;
  readonly bytes: number;
}

export interface MemoFigures {
  readonly routes: MemoSize;
  readonly headers: MemoSize;
  readonly refused: MemoSize;
}

/** An upstream pool's load. */
export interface PoolLoad {
  readonly active: number;
  readonly queued: number;
}

export interface ServingReaders {
  memory(): MemoSize;
  memoryMaxBytes(): number;
  upstream(): PoolLoad;
  /** The upstream's last known state: false once it did not answer. */
  upstreamUp(): boolean;
  identityUpstream(): PoolLoad;
}

export interface RedisReaders {
  errors(): number;
  rejected(): number;
  up(): boolean;
}

export interface MetricsOptions {
  readonly version: string;
  /** Register the Redis families (they appear only where Redis is configured). */
  readonly redis: boolean;
}

/**
 * How often Node's event-loop delay histogram samples (ms): the `nodejs_eventloop_lag_{min,max,mean,
 * stddev,p50,p90,p99}_seconds` families, each the interval between samples (so this plus the lag),
 * and catch every stall at least this long. prom-client's default, 10 ms, wakes an idle replica 100
 * times a second: 1 % of a core for nothing, and on a core shared with other replicas each wake-up
 * evicts the working set of the one serving. `nodejs_eventloop_lag_seconds` (the lag measured
 * at each scrape, what the chart's dashboard plots) does not depend on it.
 */
const EVENT_LOOP_SAMPLE_MS = 100;

// eslint-disable-next-line max-lines-per-function -- a declaration table: one family per metric, each with its help text
export function createMetrics(options: MetricsOptions): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  new Gauge({
    name: 'tm_cache_build_info',
    help: 'Build of this tm-cache: always 1, labelled with version and Node.js version.',
    labelNames: ['version', 'node'] as const,
    registers: [registry],
  }).set({ version: options.version, node: process.version }, 1);

  const requests = new LabelledFamily(
    'tm_cache_requests_total',
    'Requests by outcome (hit, stale, miss, coalesced, bypass, error, passthrough), tier (memory, redis, none), operation (catalogue id, invalid, unknown, passthrough) and the status class answered (2xx, 3xx, 4xx, 429, 5xx): a relayed 404 is a miss with status_class 4xx, a refused credential a bypass with 4xx, a local 422 an error with 4xx.',
    'counter',
    ['outcome', 'tier', 'operation', 'status_class'],
    [],
    registry,
  );
  const requestDuration = new LabelledFamily(
    'tm_cache_request_duration_seconds',
    "Time from a request's arrival to its answer being handed to the socket, by outcome and operation.",
    'histogram',
    ['outcome', 'operation'],
    REQUEST_BUCKETS,
    registry,
  );
  const upstreamDuration = new LabelledFamily(
    'tm_cache_upstream_request_duration_seconds',
    'Upstream requests of cacheable requests (fills, refreshes, GET /user, access checks, forwards for an unknown parameter), by operation and status class, until the whole answer was read.',
    'histogram',
    ['operation', 'status_class'],
    UPSTREAM_BUCKETS,
    registry,
  );
  const upstreamResponses = new LabelledFamily(
    'tm_cache_upstream_responses_total',
    "Upstream answers to the cache's own requests by status class (2xx, 3xx, 4xx, 429, 5xx, error: no answer).",
    'counter',
    ['status_class'],
    [],
    registry,
  );
  const evictions = new LabelledFamily(
    'tm_cache_evictions_total',
    'Entries evicted to make room (not expiry, not invalidation), by tier.',
    'counter',
    ['tier'],
    [],
    registry,
  );
  const identityLookups = new LabelledFamily(
    'tm_cache_identity_lookups_total',
    'Caller identifications by result: memo (known in this process), shared (from Redis), upstream (GET /user said who), refused (401/403/... relayed), error (upstream failed).',
    'counter',
    ['result'],
    [],
    registry,
  );
  // The one counted on every hit (a caller known to this process): found once, here.
  const memoLookups = identityLookups.slot('memo');
  const redisDuration = options.redis
    ? new LabelledFamily(
        'tm_cache_redis_command_duration_seconds',
        'Redis operations by kind (get, set, delete, tag, lock, json, publish, secret, budget, probe), answered or failed.',
        'histogram',
        ['command'],
        REDIS_BUCKETS,
        registry,
      )
    : undefined;
  const budgetTokens = new LabelledFamily(
    'tm_cache_upstream_budget_tokens_total',
    "Tokens of the fleet's upstream budget taken by this replica, by priority (client, unverified, background, ahead): one per upstream request.",
    'counter',
    ['priority'],
    [],
    registry,
  );
  const budgetWaits = new LabelledFamily(
    'tm_cache_upstream_budget_waits_total',
    'Requests that found no budget token at hand and waited, by priority and result (granted: a token came; spent: none within upstream.budget.maxWaitMs, the fleet paused for longer, or the queue full).',
    'counter',
    ['priority', 'result'],
    [],
    registry,
  );
  const budgetSkips = new LabelledFamily(
    'tm_cache_upstream_budget_skipped_total',
    'Background work skipped for want of a budget token: none at hand, or (refresh-ahead) none within its wait, by priority.',
    'counter',
    ['priority'],
    [],
    registry,
  );
  // Every result is there from the start at 0, so that an alert on increase() sees the first one.
  const reloads = new LabelledFamily(
    'tm_cache_reloads_total',
    'Configuration reloads (SIGHUP) by result: applied (some setting changed at once), restart_needed (only settings that need a restart changed), unchanged, refused (the file or environment did not load or validate: the running configuration kept).',
    'counter',
    ['result'],
    [],
    registry,
  );
  for (const result of RELOAD_RESULTS) reloads.slot(result);
  const certificateReloads = new LabelledFamily(
    'tm_cache_tls_reloads_total',
    'New TLS certificates read (SIGHUP, or their files changed) by result: applied (served from the next connection on), refused (unreadable, not PEM, or a key that does not match: the certificate in use kept).',
    'counter',
    ['result'],
    [],
    registry,
  );
  for (const result of CERTIFICATE_RELOAD_RESULTS) certificateReloads.slot(result);
  const totals = {
    bytesSent: 0,
    notModifiedSaved: 0,
    purges: 0,
    adminAuthFailures: 0,
    budgetPauses: 0,
    sharedHits: 0,
    grantFills: 0,
    savedBySharing: 0,
  };
  const budgetDeferred = new LabelledFamily(
    'tm_cache_upstream_budget_deferred_total',
    "Client requests the fleet's upstream budget had no token for within upstream.budget.maxWaitMs, by what they got: stale (a stale answer within cache.staleIfErrorMs, Cache-Status detail=budget) or refused (429 with a Retry-After).",
    'counter',
    ['to'],
    [],
    registry,
  );
  // Both results are there from the start at 0, so that an alert on increase() sees the first one.
  for (const to of ['stale', 'refused']) budgetDeferred.slot(to);
  const derived = new LabelledFamily(
    'tm_cache_derived_total',
    'Questions answered from a fresh cached answer to a broader one (Cache-Status detail=derived; counted as hits in tm_cache_requests_total), by operation and rule: item (one resource from a list page that holds it) or page (a page from a cached page of the same list).',
    'counter',
    ['operation', 'rule'],
    [],
    registry,
  );
  counterOf(
    registry,
    'tm_cache_shared_hits_total',
    "Fresh hits on a project's shared entries (cache.sharing: project), served to a member with proof of access.",
    () => totals.sharedHits,
  );
  counterOf(
    registry,
    'tm_cache_grant_fills_total',
    "Requests for a project's shared answer by a member without a grant for its areas, filled under their own token (which earns the grant).",
    () => totals.grantFills,
  );
  counterOf(
    registry,
    'tm_cache_sharing_saved_requests_total',
    'Upstream requests sharing by project saved: per shared entry, the members it served besides the one whose request filled it.',
    () => totals.savedBySharing,
  );
  counterOf(
    registry,
    'tm_cache_upstream_budget_pauses_total',
    "Fleet pauses this replica learned of: a 429 from the instance, its own or another replica's through Redis.",
    () => totals.budgetPauses,
  );
  counterOf(registry, 'tm_cache_bytes_sent_total', 'Body bytes sent to clients by the cache path (not passthrough).', () => totals.bytesSent);
  counterOf(
    registry,
    'tm_cache_not_modified_bytes_saved_total',
    "Body bytes not sent because a client's If-None-Match matched (304).",
    () => totals.notModifiedSaved,
  );
  counterOf(registry, 'tm_cache_purges_total', 'Purges through the admin API (POST /admin/purge).', () => totals.purges);
  counterOf(
    registry,
    'tm_cache_admin_auth_failures_total',
    'Admin API requests refused for a missing or wrong token (401), not counting those answered 429 to a source that kept failing.',
    () => totals.adminAuthFailures,
  );

  // The last request's labels and the children they found: a busy proxy's next request mostly
  // has the same (a poller's hits), found by four comparisons rather than six Map look-ups.
  const last = { outcome: '', tier: '', operation: '', statusClass: '', count: undefined as Slot | undefined, duration: undefined as Slot | undefined };
  return {
    registry,
    request(outcome, tier, operation, status, seconds) {
      const statusClass = statusClassOf(status);
      if (last.count === undefined || last.outcome !== outcome || last.tier !== tier || last.operation !== operation || last.statusClass !== statusClass) {
        last.outcome = outcome;
        last.tier = tier;
        last.operation = operation;
        last.statusClass = statusClass;
        last.count = requests.slot(outcome, tier, operation, statusClass);
        last.duration = requestDuration.slot(outcome, operation);
      }
      requests.inc(last.count);
      requestDuration.observe(last.duration!, seconds);
    },
    upstream(operation, status, seconds) {
      const statusClass = statusClassOf(status);
      upstreamResponses.inc(upstreamResponses.slot(statusClass));
      upstreamDuration.observe(upstreamDuration.slot(operation, statusClass), seconds);
    },
    redisCommand(command, seconds) {
      if (redisDuration) redisDuration.observe(redisDuration.slot(command), seconds);
    },
    eviction(tier) {
      evictions.inc(evictions.slot(tier));
    },
    purge() {
      totals.purges++;
    },
    adminAuthFailure() {
      totals.adminAuthFailures++;
    },
    identityLookup(result) {
      identityLookups.inc(result === 'memo' ? memoLookups : identityLookups.slot(result));
    },
    reload(result) {
      reloads.inc(reloads.slot(result));
    },
    certificateReload(result) {
      certificateReloads.inc(certificateReloads.slot(result));
    },
    bytesSent(bytes) {
      totals.bytesSent += bytes;
    },
    notModifiedSaved(bytes) {
      totals.notModifiedSaved += bytes;
    },
    watchReadiness(isReady) {
      gaugeOf(registry, 'tm_cache_ready', '1 while /readyz answers 200 (ready for traffic), else 0.', () => (isReady() ? 1 : 0));
    },
    watchMemos(read) {
      gaugeOf(registry, 'tm_cache_route_memo_entries', 'URL routings remembered.', () => read().routes.entries);
      gaugeOf(
        registry,
        'tm_cache_route_memo_bytes',
        'Estimated bytes of the URL routings remembered (bound: server.routeMemoMaxBytes).',
        () => read().routes.bytes,
      );
      gaugeOf(registry, 'tm_cache_identity_memo_entries', 'Authorization headers remembered as received.', () => read().headers.entries);
      gaugeOf(
        registry,
        'tm_cache_identity_memo_bytes',
        'Estimated bytes of the Authorization headers remembered (bound: identity.maxBytes).',
        () => read().headers.bytes,
      );
      gaugeOf(registry, 'tm_cache_identity_refused_entries', 'Refused tokens remembered (by HMAC).', () => read().refused.entries);
      gaugeOf(
        registry,
        'tm_cache_identity_refused_bytes',
        'Estimated bytes of the refused tokens remembered (bound: identity.refusedMaxBytes).',
        () => read().refused.bytes,
      );
    },
    watchServing(read) {
      gaugeOf(registry, 'tm_cache_memory_entries', 'Entries in the memory tier.', () => read.memory().entries);
      gaugeOf(registry, 'tm_cache_memory_bytes', 'Bytes held by the memory tier.', () => read.memory().bytes);
      gaugeOf(registry, 'tm_cache_memory_max_bytes', "The memory tier's bound (cache.memory.maxBytes).", () => read.memoryMaxBytes());
      gaugeOf(registry, 'tm_cache_upstream_active', 'Upstream requests in flight.', () => read.upstream().active);
      gaugeOf(registry, 'tm_cache_upstream_queued', 'Upstream requests waiting for a slot.', () => read.upstream().queued);
      gaugeOf(registry, 'tm_cache_upstream_up', "The upstream's last known state: 1 it answered, 0 it did not (refused, reset, timed out).", () =>
        read.upstreamUp() ? 1 : 0,
      );
      gaugeOf(registry, 'tm_cache_identity_upstream_active', 'Identity look-ups (GET /user) in flight.', () => read.identityUpstream().active);
      gaugeOf(registry, 'tm_cache_identity_upstream_queued', 'Identity look-ups waiting for a slot.', () => read.identityUpstream().queued);
    },
    watchRedis(read) {
      counterOf(registry, 'tm_cache_redis_errors_total', 'Redis errors, timeouts, disconnections and calls skipped while it was unavailable.', () =>
        read.errors(),
      );
      counterOf(
        registry,
        'tm_cache_redis_rejected_total',
        'Values read from Redis that did not verify under their key (another secret, altered, copied) or were invalid: misses, left in Redis.',
        () => read.rejected(),
      );
      gaugeOf(registry, 'tm_cache_redis_up', '1 while Redis is usable, 0 while it is degraded (down, reconnecting, breaker open).', () => (read.up() ? 1 : 0));
    },
    watchCertificate(notAfterMs) {
      gaugeOf(
        registry,
        'tm_cache_tls_certificate_expiry_timestamp_seconds',
        'When the TLS certificate served expires (seconds since the epoch): alert well before it.',
        () => notAfterMs() / 1_000,
      );
    },
    budget: {
      taken: (priority) => budgetTokens.inc(budgetTokens.slot(priority)),
      waited: (priority, result) => budgetWaits.inc(budgetWaits.slot(priority, result)),
      skipped: (priority) => budgetSkips.inc(budgetSkips.slot(priority)),
      paused: () => void totals.budgetPauses++,
      modeChanged: () => undefined,
    },
    budgetDeferred(to) {
      budgetDeferred.inc(budgetDeferred.slot(to));
    },
    derived(operation, rule) {
      derived.inc(derived.slot(operation, rule));
    },
    watchBudget(snapshot) {
      const gauge = (name: string, help: string, read: (s: BudgetSnapshot) => number): void => {
        new Gauge({
          name,
          help,
          registers: [registry],
          collect() {
            this.set(read(snapshot()));
          },
        });
      };
      gauge(
        'tm_cache_upstream_budget_rate',
        "The fleet's upstream rate as this replica last learned it (requests per second): the budget, or what 429s taught.",
        (s) => s.rateRps,
      );
      gauge(
        'tm_cache_upstream_budget_ceiling',
        "The most the fleet's upstream rate may climb to (requests per second): upstream.budget.requestsPerSecond; 0 when the rate is learned.",
        (s) => s.ceilingRps,
      );
      gauge(
        'tm_cache_upstream_budget_paused_seconds',
        "How long the fleet's upstream requests are still paused after a 429 (0: not paused).",
        (s) => s.pausedMs / 1_000,
      );
      gauge(
        'tm_cache_upstream_budget_queued',
        'Requests waiting for a budget token, every priority.',
        (s) => s.queued.client + s.queued.unverified + s.queued.background + s.queued.ahead,
      );
      gauge(
        'tm_cache_upstream_budget_shared',
        "Where budget tokens come from: 1 the fleet's shared bucket (Redis), 0 this replica's own (its fallback share, or no Redis).",
        (s) => (s.mode === SHARED ? 1 : 0),
      );
    },
    sharing: sharingEvents(totals),
    families: { requests, upstreamResponses, evictions, budgetTokens, budgetWaits, budgetDeferred },
    totals,
  };
}

/**
 * The members each shared entry served on this replica (a small array: a team), first the one
 * whose fill stored it. An entry read from Redis, filled elsewhere, starts with its first reader.
 * A WeakMap: an entry's readers go with the entry.
 */
function sharingEvents(totals: SharingTotals): SharingEvents {
  const readers = new WeakMap<CacheEntry, number[]>();
  return {
    sharedHit(userId, entry) {
      totals.sharedHits++;
      const seen = readers.get(entry);
      if (seen === undefined) return void readers.set(entry, [userId]);
      if (seen.includes(userId)) return;
      seen.push(userId);
      totals.savedBySharing++;
    },
    grantFill() {
      totals.grantFills++;
    },
    stored(userId, entry) {
      readers.set(entry, [userId]);
    },
  };
}

const SHARED: BudgetMode = 'shared';

/** A counter whose value is kept elsewhere (a plain number) and read at scrape time. */
function counterOf(registry: Registry, name: string, help: string, read: () => number): void {
  registry.registerMetric({
    name,
    help,
    type: 'counter',
    get: () => ({ name, help, type: 'counter', values: [{ value: read(), labels: {} }], aggregator: 'sum' }),
  } as never);
}

/** A gauge read at scrape time. */
function gaugeOf(registry: Registry, name: string, help: string, read: () => number): void {
  new Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      this.set(read());
    },
  });
}
