/**
 * The fixture of a multi-replica test file: one emulator, one private redis-server (never the
 * machine's shared one), a plain ioredis client on it (an operator's or an attacker's), and
 * tm-cache replicas started on demand; all closed after the file's tests.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import type { RedisTier } from '../../src/cache/redis/tier.js';
import type { Config } from '../../src/config/schema.js';
import { startTestEmulator, type TestEmulator } from './emulator.js';
import { startTestProxy, type DeepPartial, type TestProxy } from './proxy.js';
import { startRedis, type RedisHandle } from './redis.js';

export interface ReplicaFixture {
  readonly emulator: TestEmulator;
  readonly redis: RedisHandle;
  /** A plain client on the test's redis-server. */
  readonly client: Redis;
  /** A new replica with nothing in memory, in front of the emulator; `overrides` over the defaults. */
  replica(overrides?: DeepPartial<Config>): Promise<TestProxy>;
}

export function replicasOverEmulatorAndRedis(): ReplicaFixture {
  const proxies: TestProxy[] = [];
  const state = {} as { emulator: TestEmulator; redis: RedisHandle; client: Redis };
  beforeAll(async () => {
    state.emulator = await startTestEmulator();
    state.redis = await startRedis();
    state.client = new Redis(state.redis.url);
  });
  afterAll(async () => {
    await Promise.all(proxies.map((p) => p.close()));
    state.client?.disconnect();
    await state.emulator?.close();
    await state.redis?.stop();
  });
  return {
    get emulator() {
      return state.emulator;
    },
    get redis() {
      return state.redis;
    },
    get client() {
      return state.client;
    },
    replica: async (overrides = {}) => {
      const p = await startTestProxy(state.emulator.url, overrides);
      proxies.push(p);
      return p;
    },
  };
}

/** The replica's Redis tier (the second tier of its cache). */
export function redisTierOf(p: TestProxy): RedisTier {
  return p.cache.tiers[1] as RedisTier;
}
