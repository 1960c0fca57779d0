/**
 * The validated configuration of `tm-cache serve`. Units are in the names (ttlMs, maxBytes).
 *
 * Sources, lowest precedence first: the defaults below (mirrored with a comment per setting in
 * `config/default.yaml`), the `--config` file, environment variables, command-line flags.
 * `load.ts` validates the merged result once at start and freezes it; after that the code trusts it.
 */
import type { ResourceName } from '../api/catalogue.js';

export type RedisMode = 'standalone' | 'cluster' | 'sentinel';
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/** Freshness of one class of answers (RFC 9111 §4.2, RFC 5861). */
export interface FreshnessRule {
  /** How long an answer is fresh: served from cache without asking upstream. */
  readonly ttlMs: number;
  /** After that, how long it may still be served at once while a background refresh runs. */
  readonly staleWhileRevalidateMs: number;
}

export interface Config {
  readonly upstream: {
    /** Base URL of the instance, e.g. `https://tm.example.com` (without `/api/v1`). */
    readonly url: string;
    readonly connectTimeoutMs: number;
    readonly headersTimeoutMs: number;
    readonly bodyTimeoutMs: number;
    /** Keep-alive connections to upstream. */
    readonly connections: number;
    /** Cache fills in flight at once; more wait in a queue. */
    readonly maxConcurrent: number;
    /** Fills that may wait for a slot; beyond that the proxy answers 503. */
    readonly maxQueue: number;
    /** Wait when a 429 carries no Retry-After. */
    readonly defaultRetryAfterMs: number;
  };
  readonly server: {
    readonly host: string;
    readonly port: number;
    readonly managementHost: string;
    readonly managementPort: number;
    /** How long SIGTERM waits for in-flight requests before closing anyway. */
    readonly shutdownGraceMs: number;
    readonly logLevel: LogLevel;
  };
  readonly identity: {
    /** How long a token → caller resolution is remembered. A revoked token is refused within it. */
    readonly ttlMs: number;
    /** HMAC secret (hex or base64, ≥ 32 bytes) for credentials; generated and shared via Redis when empty. */
    readonly hmacSecret: string;
    /** Entries of the in-process identity memo. */
    readonly maxEntries: number;
  };
  readonly access: {
    /** How long a verified admin (a 200 from an admin-only operation) is remembered. */
    readonly ttlMs: number;
  };
  readonly cache: {
    /** Reject parameters the catalogue does not know with 422 instead of forwarding them uncached. */
    readonly strict: boolean;
    /** Let a client's `Cache-Control: no-cache` force a (coalesced) revalidation. */
    readonly honorClientNoCache: boolean;
    /** Serve a stale entry while upstream fails, for this long past its freshness (RFC 5861 §4). */
    readonly staleIfErrorMs: number;
    readonly freshness: {
      /** Lists and anything still changing (active runs, open sessions, ...). */
      readonly default: FreshnessRule;
      /** Resources in a final state: closed runs and sessions, completed milestones and projects, retired sources, results of a closed run. */
      readonly settled: FreshnessRule;
      /** Per-resource overrides of `default`, e.g. `{ role: { ttlMs: 300000, ... } }`. */
      readonly byResource: Readonly<Partial<Record<ResourceName, FreshnessRule>>>;
    };
    readonly memory: {
      readonly maxBytes: number;
      readonly maxEntryBytes: number;
    };
    readonly redis: {
      /** `redis://host:port/db`; empty: memory tier only. */
      readonly url: string;
      readonly mode: RedisMode;
      /** Cluster seed nodes `host:port` (mode cluster). */
      readonly nodes: readonly string[];
      /** Sentinels `host:port` (mode sentinel). */
      readonly sentinels: readonly string[];
      /** Name of the master the sentinels watch (mode sentinel). */
      readonly sentinelName: string;
      readonly keyPrefix: string;
      readonly commandTimeoutMs: number;
      readonly connectTimeoutMs: number;
      /** How long a replica waits for another replica's fill of the same key before filling itself. */
      readonly lockWaitMs: number;
      /** Encryption keys `{ id: key }` (32 bytes, hex or base64); empty: values stored unencrypted. */
      readonly encryptionKeys: Readonly<Record<string, string>>;
      /** Id of the key new entries are written with; must be one of `encryptionKeys`. */
      readonly encryptionKeyId: string;
    };
  };
}

const MiB = 1024 * 1024;

/** The built-in defaults; `config/default.yaml` documents each one and must agree (a test checks). */
export const DEFAULT_CONFIG: Config = {
  upstream: {
    url: '',
    connectTimeoutMs: 5_000,
    headersTimeoutMs: 30_000,
    bodyTimeoutMs: 30_000,
    connections: 64,
    maxConcurrent: 64,
    maxQueue: 1_024,
    defaultRetryAfterMs: 60_000,
  },
  server: {
    host: '127.0.0.1',
    port: 8080,
    managementHost: '127.0.0.1',
    managementPort: 9090,
    shutdownGraceMs: 10_000,
    logLevel: 'info',
  },
  identity: { ttlMs: 60_000, hmacSecret: '', maxEntries: 100_000 },
  access: { ttlMs: 300_000 },
  cache: {
    strict: false,
    honorClientNoCache: true,
    staleIfErrorMs: 24 * 3_600_000,
    freshness: {
      default: { ttlMs: 30_000, staleWhileRevalidateMs: 30_000 },
      settled: { ttlMs: 3_600_000, staleWhileRevalidateMs: 3_600_000 },
      byResource: {},
    },
    memory: { maxBytes: 256 * MiB, maxEntryBytes: 8 * MiB },
    redis: {
      url: '',
      mode: 'standalone',
      nodes: [],
      sentinels: [],
      sentinelName: 'mymaster',
      keyPrefix: 'tmc:',
      commandTimeoutMs: 50,
      connectTimeoutMs: 2_000,
      lockWaitMs: 2_000,
      encryptionKeys: {},
      encryptionKeyId: '',
    },
  },
};
