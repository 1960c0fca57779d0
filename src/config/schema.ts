/**
 * The configuration of `tm-cache serve`, described once. This TypeBox schema is the JSON Schema
 * that validates the merged sources (validate.ts, Ajv), the `Config` type the code reads, and the
 * defaults: `DEFAULT_CONFIG` collects the `default` of every setting. That is the one source of
 * truth; `config/default.yaml` documents each setting and a test checks it equals DEFAULT_CONFIG.
 * Units are in the names (ttlMs, maxBytes); messages take the unit from the name.
 *
 * Annotations beyond JSON Schema (an Ajv vocabulary, read but never validated): `flag` and `env`
 * that set a setting; `secret`, never shown in messages; `allowed`, what a message says is allowed
 * where the keywords cannot say it (formats, implemented in validate.ts); `note`, added to the
 * derived description; `allowedKeys`, what keys an open map allows.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { RESOURCES, type ResourceName } from '../api/catalogue.js';
import { DEFAULT_STORED_HEADERS, KEEPABLE_HEADER_NAMES } from '../cache/entry.js';

/** setTimeout fires at once for delays above 2^31 − 1 ms, so no duration may exceed it. */
const MAX_TIMER_MS = 2_147_483_647;
const MiB = 1024 * 1024;

// Defaults that the cache tiers also fall back to when built without a Config (tests, benches).
export const DEFAULT_MAX_BYTES = 256 * MiB;
export const DEFAULT_MAX_ENTRY_BYTES = 8 * MiB;
export const DEFAULT_KEY_PREFIX = 'tmc:';
export const DEFAULT_COMMAND_TIMEOUT_MS = 50;
export const DEFAULT_CONNECT_TIMEOUT_MS = 2_000;
export const DEFAULT_BREAKER_THRESHOLD = 3;
export const DEFAULT_BREAKER_COOLDOWN_MS = 1_000;
/** While Redis is down each replica keeps this share of the fleet's budget: four replicas stay within it. */
const DEFAULT_BUDGET_FALLBACK_SHARE = 0.25;

/** The resources of the catalogue: a `byResource` key must be one of them. */
export const RESOURCE_NAMES: readonly ResourceName[] = (Object.keys(RESOURCES) as ResourceName[]).sort();

type Annotations = { readonly flag?: string; readonly env?: string; readonly secret?: boolean };

const withDefault = (value: unknown) => (value === undefined ? {} : { default: value });
const section = <T extends Record<string, TSchema>>(fields: T) => Type.Object(fields, { additionalProperties: false });

const integer = (minimum: number, maximum: number, value?: number, more?: object) => Type.Integer({ minimum, maximum, ...withDefault(value), ...more });
const durationMs = (min: number, value?: number, more?: Annotations) => integer(min, MAX_TIMER_MS, value, more);
const count = (min: number, value: number) => integer(min, Number.MAX_SAFE_INTEGER, value);
const port = (value: number, more: Annotations) => integer(0, 65_535, value, { note: '0 picks a free port', ...more });
const boolean = (value: boolean, more?: Annotations) => Type.Boolean({ default: value, ...more });
const text = (allowed: string, value: string, more?: object) => Type.String({ allowed, default: value, ...more });
const host = (value: string, more: Annotations) =>
  text('a host name or IP address to listen on, e.g. 127.0.0.1 or 0.0.0.0', value, { pattern: '^[^\\s/]+$', ...more });

/** The path of a PEM file, or empty; what the file holds is checked when it is read (tls-files.ts). */
const pemPath = (what: string, more: Annotations) => text(`empty, or the path of a readable PEM file holding ${what}`, '', { pattern: '^(|\\S.*)$', ...more });

function oneOf<const T extends readonly string[]>(values: T, value: T[number], more?: Annotations) {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], default: value, ...more });
}

/** A mapping whose keys are data (resource names, key ids), replaced whole by the source that sets it. */
function openMap<T>(keys: object, value: TSchema, allowedKeys: string, more?: Annotations) {
  return Type.Unsafe<T>({ type: 'object', propertyNames: { type: 'string', ...keys }, additionalProperties: value, allowedKeys, default: {}, ...more });
}

const hostPortList = Type.Array(Type.String({ format: 'host-port' }), {
  allowed: 'a list of host:port strings, e.g. [redis-0:6379, "[::1]:6379"]',
  default: [],
});

/** Freshness of one class of answers (RFC 9111 §4.2, RFC 5861): fresh for ttlMs, then stale-while-revalidate. */
const freshnessRule = (ttlMs?: number, staleWhileRevalidateMs?: number) =>
  section({ ttlMs: durationMs(0, ttlMs), staleWhileRevalidateMs: durationMs(0, staleWhileRevalidateMs) });

export const ConfigSchema = section({
  upstream: section({
    url: text('an absolute http:// or https:// URL of the instance without credentials, query or fragment, e.g. https://tm.example.com; or empty', '', {
      format: 'upstream-url',
      flag: '--upstream',
      env: 'TM_CACHE_UPSTREAM',
    }),
    connectTimeoutMs: durationMs(1, 5_000),
    headersTimeoutMs: durationMs(1, 30_000),
    bodyTimeoutMs: durationMs(1, 30_000),
    connections: count(1, 64),
    maxConcurrent: count(1, 64),
    maxQueue: count(0, 1_024),
    maxPerUser: count(1, 256),
    defaultRetryAfterMs: durationMs(1, 60_000),
    maxBodyBytes: count(1, 32 * MiB),
    maxRetryAfterMs: durationMs(1, 600_000),
    forwardPrefixes: Type.Array(Type.String({ pattern: '^/[^?#\\s]*$' }), {
      allowed: 'a list of path prefixes, each starting with /, e.g. [/api/]',
      default: ['/api/'],
    }),
    // The fleet's upstream budget (src/upstream/fleet-budget.ts): one token bucket for every replica.
    budget: section({
      requestsPerSecond: Type.Number({
        minimum: 0,
        maximum: 100_000,
        default: 0,
        allowed: "a number of requests per second from 0 to 100000, e.g. 40 or 0.5 (0: no fixed budget, learned from the instance's 429s)",
      }),
      burst: integer(0, 1_000_000, 0, { note: "requests; 0: one second's worth of the rate" }),
      fallbackShare: Type.Number({
        exclusiveMinimum: 0,
        maximum: 1,
        default: DEFAULT_BUDGET_FALLBACK_SHARE,
        allowed: "a fraction above 0 and at most 1, e.g. 0.25 (one replica's share of the budget while Redis is down)",
      }),
      maxWaitMs: durationMs(0, 10_000),
    }),
  }),
  server: section({
    host: host('127.0.0.1', { flag: '--host', env: 'TM_CACHE_HOST' }),
    port: port(8080, { flag: '--port', env: 'TM_CACHE_PORT' }),
    managementHost: host('127.0.0.1', { flag: '--management-host', env: 'TM_CACHE_MANAGEMENT_HOST' }),
    managementPort: port(9090, { flag: '--management-port', env: 'TM_CACHE_MANAGEMENT_PORT' }),
    shutdownGraceMs: durationMs(0, 10_000),
    routeMemoMaxBytes: count(1, 16 * MiB),
    logLevel: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'info', { flag: '--log-level', env: 'TM_CACHE_LOG_LEVEL' }),
    // HTTPS on the listeners (src/certificates.ts): the files are read, parsed and matched at
    // start (config/tls-files.ts), and again on SIGHUP and whenever their directory changes.
    tls: section({
      certFile: pemPath('the certificate chain (server certificate first)', { flag: '--tls-cert-file', env: 'TM_CACHE_TLS_CERT_FILE' }),
      keyFile: pemPath('the private key of that certificate, unencrypted', { flag: '--tls-key-file', env: 'TM_CACHE_TLS_KEY_FILE' }),
      clientCaFile: pemPath('the CA certificates that issue client certificates (then required on the proxy port)', {
        flag: '--tls-client-ca-file',
        env: 'TM_CACHE_TLS_CLIENT_CA_FILE',
      }),
      management: boolean(true, { env: 'TM_CACHE_TLS_MANAGEMENT' }),
    }),
  }),
  identity: section({
    // ≥ 1: a memo with ttl 0 means "no expiry" to lru-cache, the opposite of the intent.
    ttlMs: durationMs(1, 60_000, { env: 'TM_CACHE_IDENTITY_TTL_MS' }),
    hmacSecret: text('empty (without Redis, or with cache.redis.encryptionKeys), or at least 32 bytes as hex or base64 (e.g. `openssl rand -base64 32`)', '', {
      format: 'hmac-secret',
      secret: true,
      env: 'TM_CACHE_HMAC_SECRET',
    }),
    maxEntries: count(1, 100_000),
    maxBytes: count(1, 16 * MiB),
    refusedTtlMs: durationMs(0, 5_000),
    refusedMaxBytes: count(1, 4 * MiB),
    maxConcurrent: count(1, 16),
    maxQueue: count(0, 256),
    staleOnOutage: boolean(true),
  }),
  access: section({ ttlMs: durationMs(1, 300_000), projectConfirmMs: durationMs(0, 30_000), grantTtlMs: durationMs(0, 300_000) }),
  log: section({
    access: oneOf(['all', 'errors', 'off'], 'all', { env: 'TM_CACHE_LOG_ACCESS' }),
    accessSample: Type.Number({ minimum: 0, maximum: 1, default: 1, allowed: 'a fraction from 0 to 1, e.g. 0.01' }),
  }),
  admin: section({
    token: text('empty (the admin API is off), or at least 16 characters without whitespace', '', {
      pattern: '^(|\\S{16,})$',
      secret: true,
      env: 'TM_CACHE_ADMIN_TOKEN',
    }),
    // Read-only: GET /admin/stats and the status page, never a purge nor the entries (a wall screen).
    viewerToken: text('empty (no viewer token), or at least 16 characters without whitespace, other than admin.token', '', {
      pattern: '^(|\\S{16,})$',
      secret: true,
      env: 'TM_CACHE_ADMIN_VIEWER_TOKEN',
    }),
  }),
  health: section({
    requireUpstream: boolean(false),
    upstreamProbeMs: durationMs(100, 10_000),
  }),
  cache: section({
    // Whose answers share an entry: each user's own, or a project's, among its proven members (src/proxy/decide.ts).
    sharing: oneOf(['user', 'project'], 'user', { env: 'TM_CACHE_SHARING' }),
    strict: boolean(false),
    honorClientNoCache: boolean(true),
    // Headers of the instance's answer kept in entries and sent with every cached answer (entry.ts).
    storedHeaders: Type.Array(Type.Unsafe<(typeof KEEPABLE_HEADER_NAMES)[number]>({ type: 'string', enum: [...KEEPABLE_HEADER_NAMES] }), {
      allowed: `a list of lower-case header names among ${KEEPABLE_HEADER_NAMES.join(', ')}`,
      default: [...DEFAULT_STORED_HEADERS],
    }),
    staleIfErrorMs: durationMs(0, 24 * 3_600_000),
    // Derived answers (src/proxy/derive/deriver.ts): a question answered from a fresh cached answer to a broader one.
    derive: section({ enabled: boolean(true) }),
    // Refresh-ahead (refresh-ahead.ts): a fresh entry read in its last part of freshness is refreshed, timed to land just before it expires.
    refreshAhead: section({
      enabled: boolean(true),
      startAt: Type.Number({
        exclusiveMinimum: 0,
        exclusiveMaximum: 1,
        default: 0.75,
        allowed: 'a fraction above 0 and below 1, e.g. 0.75 (the share of freshness elapsed from which a read marks an answer as polled)',
      }),
    }),
    freshness: section({
      default: freshnessRule(30_000, 30_000),
      settled: freshnessRule(3_600_000, 3_600_000),
      // A rule may leave fields out: loadConfig fills them from `default` after validation,
      // so the schema allows a partial rule while the type promises a whole one.
      byResource: openMap<Partial<Record<ResourceName, FreshnessRule>>>(
        { enum: RESOURCE_NAMES },
        Type.Partial(freshnessRule()),
        `resource names: ${RESOURCE_NAMES.join(', ')}`,
      ),
    }),
    memory: section({ maxBytes: count(1, DEFAULT_MAX_BYTES), maxEntryBytes: count(1, DEFAULT_MAX_ENTRY_BYTES) }),
    redis: section({
      url: text('a redis:// or rediss:// URL such as redis://[:password@]host[:port][/db], or empty (memory tier only)', '', {
        format: 'redis-url',
        flag: '--redis',
        env: 'TM_CACHE_REDIS',
      }),
      mode: oneOf(['standalone', 'cluster', 'sentinel'], 'standalone'),
      nodes: hostPortList,
      sentinels: hostPortList,
      sentinelName: text('a string (empty only outside sentinel mode)', 'mymaster'),
      // Credentials and TLS for every mode; in standalone mode the URL may carry them instead.
      username: text('empty (the default user), or an ACL user name without whitespace', '', { pattern: '^\\S*$', env: 'TM_CACHE_REDIS_USERNAME' }),
      password: text('empty (no AUTH), or the password of the Redis servers', '', { secret: true, env: 'TM_CACHE_REDIS_PASSWORD' }),
      tls: boolean(false),
      sentinelUsername: text("empty (the default user), or the sentinels' ACL user name without whitespace", '', { pattern: '^\\S*$' }),
      sentinelPassword: text('empty (no AUTH), or the password of the sentinels', '', { secret: true, env: 'TM_CACHE_REDIS_SENTINEL_PASSWORD' }),
      keyPrefix: text('a string without whitespace', DEFAULT_KEY_PREFIX, { pattern: '^\\S*$' }),
      commandTimeoutMs: durationMs(1, DEFAULT_COMMAND_TIMEOUT_MS, { env: 'TM_CACHE_REDIS_COMMAND_TIMEOUT_MS' }),
      connectTimeoutMs: durationMs(1, DEFAULT_CONNECT_TIMEOUT_MS),
      breakerThreshold: count(1, DEFAULT_BREAKER_THRESHOLD),
      breakerCooldownMs: durationMs(1, DEFAULT_BREAKER_COOLDOWN_MS),
      lockTtlMs: durationMs(1, 5_000),
      lockWaitMs: durationMs(0, 2_000, { env: 'TM_CACHE_REDIS_LOCK_WAIT_MS' }),
      maxEntryBytes: count(1, DEFAULT_MAX_ENTRY_BYTES),
      encryptionKeys: openMap<Record<string, string>>(
        { pattern: '^[A-Za-z0-9_.-]{1,64}$' },
        Type.String({
          format: 'encryption-key',
          secret: true,
          allowed: 'a quoted string of exactly 32 bytes: 64 hex chars or base64 (e.g. `openssl rand -base64 32`)',
        }),
        'key ids of 1 to 64 letters, digits, _ . -',
        { secret: true, env: 'TM_CACHE_REDIS_ENCRYPTION_KEYS' },
      ),
      encryptionKeyId: text('empty, or one of the ids of cache.redis.encryptionKeys', '', { env: 'TM_CACHE_REDIS_ENCRYPTION_KEY_ID' }),
    }),
  }),
});

type DeepReadonly<T> = T extends readonly (infer U)[] ? readonly DeepReadonly<U>[] : T extends object ? { readonly [K in keyof T]: DeepReadonly<T[K]> } : T;

export type Config = DeepReadonly<Static<typeof ConfigSchema>>;
export type FreshnessRule = DeepReadonly<Static<ReturnType<typeof freshnessRule>>>;
export type RedisMode = Config['cache']['redis']['mode'];
export type Sharing = Config['cache']['sharing'];

/** Every setting's `default`, collected: a section has none of its own (every leaf has one). */
function defaultsOf(schema: TSchema): unknown {
  if ('default' in schema) return structuredClone(schema['default']);
  return Object.fromEntries(Object.entries(schema['properties'] as Record<string, TSchema>).map(([k, s]) => [k, defaultsOf(s)]));
}

/** The built-in defaults (frozen); `config/default.yaml` documents each one and must agree (a test checks). */
export const DEFAULT_CONFIG = deepFreeze(defaultsOf(ConfigSchema) as Config);

export function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}
