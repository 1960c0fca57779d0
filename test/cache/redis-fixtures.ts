import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { createRedisRoles, type RedisRoles, type RedisRolesOptions } from '../../src/cache/redis/roles.js';
import type { RedisTier } from '../../src/cache/redis/tier.js';

/**
 * Shared by the Redis tests. Each set of roles gets its own key prefix, so tests sharing one
 * private redis-server never see each other's keys. Command timeouts are generous here (tests
 * run in parallel on 2 cores): the failure tests set the production default explicitly.
 *
 * The roles' connection outlives the tier (closing a tier only lets its writes land): every
 * connection opened here is closed by `closeRedisRoles()`, which each test file calls in afterAll.
 */
let prefixCount = 0;
const opened: RedisRoles[] = [];

export function uniquePrefix(): string {
  return `t${process.pid}-${++prefixCount}:`;
}

/** The identity HMAC secret every replica of a test shares (values are bound with a key derived from it). */
const TEST_HMAC_SECRET = Buffer.alloc(32, 7);

/** Every Redis role over one new connection, bound (as the server does before serving), once ready. */
export async function makeRedisRoles(url: string, options: Partial<RedisRolesOptions> = {}): Promise<RedisRoles> {
  const roles = createRedisRoles({ url, keyPrefix: uniquePrefix(), commandTimeoutMs: 2_000, ...options });
  roles.bind(TEST_HMAC_SECRET);
  opened.push(roles);
  if (!(await roles.connection.ready(15_000))) throw new Error(`Redis on ${url} not ready within 15 s`);
  return roles;
}

export async function makeRedisTier(url: string, options: Partial<RedisRolesOptions> = {}): Promise<RedisTier> {
  return (await makeRedisRoles(url, options)).tier;
}

export async function closeRedisRoles(): Promise<void> {
  await Promise.all(opened.splice(0).map((roles) => roles.close()));
}

/**
 * For a test file: a private redis-server and a plain client on it, from beforeAll; after
 * all its tests, the roles made here, the client and the server are closed.
 */
export function useRedisServer(): { readonly server: RedisHandle; readonly url: string; readonly raw: Redis } {
  let server: RedisHandle | undefined;
  let raw: Redis | undefined;
  beforeAll(async () => {
    server = await startRedis();
    raw = rawClient(server.url);
  });
  afterAll(async () => {
    await closeRedisRoles();
    raw?.disconnect();
    await server?.stop();
  });
  return {
    get server() {
      return server!;
    },
    get url() {
      return server!.url;
    },
    get raw() {
      return raw!;
    },
  };
}

/** A plain client for looking at what the tier wrote, the way an operator would. */
export function rawClient(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: 1 });
}

/** Polls `condition` until true; fails after `timeoutMs` (generous: reconnects take time). */
export async function waitUntil(condition: () => boolean | Promise<boolean>, timeoutMs = 20_000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await sleep(25);
  }
}

/** A logger that remembers what it was told. */
export function recordingLogger(): { lines: Array<{ level: string; obj: object; msg?: string }>; warn: L; info: L; error: L } {
  const lines: Array<{ level: string; obj: object; msg?: string }> = [];
  const at =
    (level: string): L =>
    (obj, msg) =>
      void lines.push({ level, obj, msg });
  return { lines, warn: at('warn'), info: at('info'), error: at('error') };
}
type L = (obj: object, msg?: string) => void;
