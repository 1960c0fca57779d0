/**
 * The secret values in a shared Redis are checked with is one Redis does not hold. An attacker
 * who can read and write Redis, with an ordinary client: finds no secret there, cannot make
 * replicas delete each other's values, and cannot make a replica serve a value for longer than
 * its own settings allow. An operator who forgets the secret is stopped at start, told how to
 * make one; and a FLUSHDB between two replicas' starts no longer splits them.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import type { CacheEntry } from '../../src/cache/entry.js';
import { KEY_VERSION } from '../../src/cache/key.js';
import type { Config } from '../../src/config/schema.js';
import { startProxy, type RunningProxy } from '../../src/serve.js';
import { httpGet, makeConfig, type DeepPartial, type TestProxy } from '../helpers/proxy.js';
import { redisTierOf, replicasOverEmulatorAndRedis } from '../helpers/replicas.js';
import { CLI } from '../helpers/serve.js';
import { until } from '../helpers/wait.js';

const env = replicasOverEmulatorAndRedis();
const SECRET = Buffer.alloc(32, 0x21).toString('hex');
const OTHER_SECRET = Buffer.alloc(32, 0x42).toString('hex');
const ENCRYPTION_KEY = Buffer.alloc(32, 0x63).toString('base64');

beforeEach(async () => {
  await env.emulator.resetStats();
  await env.emulator.clearFaults();
});

/** `tm-cache serve` as a process; what it wrote and how it ended (killed after 10 s if it serves instead). */
function serveProcess(args: readonly string[], extraEnv: Record<string, string> = {}): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--management-port', '0', ...args], {
    env: { PATH: process.env['PATH'] ?? '', TM_CACHE_UPSTREAM: env.emulator.url, ...extraEnv },
  });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  return new Promise((resolve) => {
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** A replica sharing the test's Redis under `prefix`, connected; `more` over its Redis settings. */
async function replica(prefix: string, more: DeepPartial<Config> = {}): Promise<TestProxy> {
  const p = await env.replica({
    ...more,
    cache: { ...more.cache, redis: { url: env.redis.url, keyPrefix: prefix, commandTimeoutMs: 2_000, connectTimeoutMs: 10_000, ...more.cache?.redis } },
  });
  expect(await redisTierOf(p).connection.ready(10_000)).toBe(true);
  return p;
}

const WITH_SECRET: DeepPartial<Config> = { identity: { hmacSecret: SECRET } };
const WITH_KEYS_ONLY: DeepPartial<Config> = { cache: { redis: { encryptionKeys: { k1: ENCRYPTION_KEY }, encryptionKeyId: 'k1' } } };

const routeCount = async (route: string): Promise<number> => (await env.emulator.stats()).by_route[route] ?? 0;

describe('a replica with a shared Redis and no secret of its own', () => {
  it.each([
    ['a Redis URL', () => ['--redis', env.redis.url], undefined],
    ['cluster mode', () => [], 'cache:\n  redis:\n    mode: cluster\n    nodes: ["127.0.0.1:1"]\n'],
    ['sentinel mode', () => [], 'cache:\n  redis:\n    mode: sentinel\n    sentinels: ["127.0.0.1:1"]\n'],
  ] as const)('exits 2 at start (%s), naming the settings and how to make a secret, and writes nothing to Redis', async (_, args, file: string | undefined) => {
    const config = file === undefined ? [] : ['--config', writeTemp(file)];
    const before = await env.client.dbsize();
    const { code, output } = await serveProcess([...args(), ...config]);
    expect(code).toBe(2);
    expect(output).toContain('identity.hmacSecret');
    expect(output).toContain('cache.redis.encryptionKeys');
    expect(output).toContain('openssl rand -base64 32');
    expect(output).toContain('TM_CACHE_HMAC_SECRET');
    expect(await env.client.dbsize()).toBe(before);
  });

  it('starts with TM_CACHE_HMAC_SECRET, or with encryption keys alone', async () => {
    for (const secret of [
      { TM_CACHE_HMAC_SECRET: SECRET },
      { TM_CACHE_REDIS_ENCRYPTION_KEYS: `k1:${ENCRYPTION_KEY}`, TM_CACHE_REDIS_ENCRYPTION_KEY_ID: 'k1' },
    ]) {
      const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--management-port', '0', '--redis', env.redis.url], {
        env: { PATH: process.env['PATH'] ?? '', TM_CACHE_UPSTREAM: env.emulator.url, ...secret },
      });
      let output = '';
      child.stdout.on('data', (d) => (output += d));
      await until(() => output.includes('tm-cache serving') || child.exitCode !== null, 15_000);
      expect(output).toContain('tm-cache serving');
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
  });
});

describe('what Redis holds', () => {
  it.each([
    ['identity.hmacSecret', 'held-secret:', WITH_SECRET],
    ['encryption keys alone', 'held-keys:', WITH_KEYS_ONLY],
  ] as const)('holds no secret with %s, after traffic', async (_, prefix, settings) => {
    const p = await replica(prefix, settings);
    const member = env.emulator.tokens.member(0);
    expect((await p.get('/api/v1/projects', member.token)).status).toBe(200);
    await until(async () => (await env.client.keys(`${prefix}json:identity:*`)).length === 1);
    expect(await env.client.keys(`${prefix}*secret*`)).toEqual([]);
  });
});

describe('two replicas with the same configured secret', () => {
  it.each([
    ['identity.hmacSecret', 'flush-secret:', WITH_SECRET],
    ['encryption keys alone', 'flush-keys:', WITH_KEYS_ONLY],
  ] as const)('share identities and entries (%s) even when Redis is flushed between their starts', async (_, prefix, settings) => {
    const a = await replica(prefix, settings);
    await env.client.flushdb();
    const b = await replica(prefix, settings);
    const member = env.emulator.tokens.member(1);
    const path = '/api/v1/projects?page=4';
    expect((await a.get(path, member.token)).status).toBe(200);
    await until(async () => (await env.client.keys(`${prefix}{u:${member.user_id}|*`)).length === 1);
    await until(async () => (await env.client.keys(`${prefix}json:identity:*`)).length === 1);

    const res = await b.get(path, member.token);
    expect(res.status).toBe(200);
    expect(res.headers['cache-status']).toMatch(/hit.*detail=redis/);
    // B knew the caller from A's identity in Redis: one GET /user and one GET /projects in all.
    expect(await routeCount('GET /api/v1/user')).toBe(1);
    expect(await routeCount('GET /api/v1/projects')).toBe(1);
    expect(redisTierOf(b).connection.stats().byKind['tampered']).toBeUndefined();
  });
});

describe("a value in Redis that does not verify under the reader's secret", () => {
  it('is a miss, counted, and left in Redis for the replica that wrote it', async () => {
    const prefix = 'foreign:';
    const member = env.emulator.tokens.member(0);
    const path = '/api/v1/projects?page=6';
    const key = `${prefix}{u:${member.user_id}|${KEY_VERSION}|listProjects||page=6}`;
    // Another replica, under another secret (a rollout, a misconfigured pod), wrote the entry.
    const writer = await replica(prefix, { identity: { hmacSecret: OTHER_SECRET } });
    expect((await writer.get(path, member.token)).status).toBe(200);
    await until(async () => (await env.client.exists(key)) === 1);
    const written = await env.client.getBuffer(key);

    const reader = await replica(prefix, WITH_SECRET);
    // Knows the caller now; another list (another filter), whose total would derive page 6 of the first.
    expect((await reader.get('/api/v1/projects?is_completed=0&page=7', member.token)).status).toBe(200);
    // The instance fails, so the reader stores nothing of its own over the writer's value.
    await env.emulator.faults({ error_rate: 1, error_status: 503 });
    const res = await reader.get(path, member.token);
    await env.emulator.clearFaults();
    expect(res.headers['cache-status'] ?? '').not.toMatch(/hit/);
    // Counted (once per read: the look-up, and the fill lock's look for an entry stored meanwhile).
    expect(redisTierOf(reader).connection.stats().byKind['tampered']).toBeGreaterThanOrEqual(1);
    expect(await env.client.getBuffer(key)).toEqual(written);
    // And the writer still serves it from Redis to a fresh replica of its own.
    const sibling = await replica(prefix, { identity: { hmacSecret: OTHER_SECRET } });
    expect((await sibling.get(path, member.token)).headers['cache-status']).toMatch(/hit.*detail=redis/);
  });
});

describe('what an entry read back from Redis claims', () => {
  const prefix = 'claims:';

  function entryClaiming(times: Pick<CacheEntry, 'storedAt' | 'freshUntil' | 'staleWhileRevalidateUntil' | 'staleIfErrorUntil'>): CacheEntry {
    const etag = '"claimed"';
    return {
      status: 200,
      headers: { 'content-type': 'application/json', etag, 'cache-control': 'private', vary: 'Authorization, Accept-Encoding' },
      body: Buffer.from('{"result":[],"claimed":true}'),
      etag,
      ...times,
      tags: [],
    };
  }

  /** An authentic entry (written with the replicas' secret, as a compromised replica could) for the member's page. */
  async function plant(page: number, times: Parameters<typeof entryClaiming>[0]): Promise<string> {
    const member = env.emulator.tokens.member(0);
    const writer = await replica(prefix, WITH_SECRET);
    const key = `u:${member.user_id}|${KEY_VERSION}|listProjects||page=${page}`;
    await redisTierOf(writer).set(key, entryClaiming(times));
    expect(await env.client.exists(`${prefix}{${key}}`)).toBe(1);
    return `/api/v1/projects?page=${page}`;
  }

  it("is fresh for no longer than the reader's own freshness rule gives the operation (30 million seconds claimed)", async () => {
    const now = Date.now();
    const claimedMs = 30_000_000_000;
    const path = await plant(8, { storedAt: now, freshUntil: now + claimedMs, staleWhileRevalidateUntil: now + claimedMs, staleIfErrorUntil: now + claimedMs });
    const reader = await replica(prefix, { ...WITH_SECRET, cache: { freshness: { default: { ttlMs: 20_000, staleWhileRevalidateMs: 5_000 } } } });
    const member = env.emulator.tokens.member(0);
    const first = await reader.get(path, member.token);
    const ttl = Number(/ttl=(-?\d+)/.exec(String(first.headers['cache-status']))?.[1]);
    expect(first.headers['cache-status']).toMatch(/hit.*detail=redis/);
    expect(ttl).toBeLessThanOrEqual(20);
    // Copied into memory with the bounded freshness, not the claimed one.
    const again = await reader.get(path, member.token);
    expect(again.headers['cache-status']).toMatch(/hit.*detail=memory/);
    expect(Number(/ttl=(-?\d+)/.exec(String(again.headers['cache-status']))?.[1])).toBeLessThanOrEqual(20);
  });

  it('is a miss when it claims to have been stored in the future', async () => {
    const later = Date.now() + 3_600_000;
    const path = await plant(9, { storedAt: later, freshUntil: later + 10_000, staleWhileRevalidateUntil: later + 10_000, staleIfErrorUntil: later + 10_000 });
    const reader = await replica(prefix, WITH_SECRET);
    const member = env.emulator.tokens.member(0);
    const res = await reader.get(path, member.token);
    expect(res.headers['cache-status']).not.toMatch(/hit/);
    expect(res.json()).toEqual((await httpGet(env.emulator.url + path, member.token)).json());
  });
});

describe('secrets and keys in messages', () => {
  it('shows no password of a Redis URL given in its query (exit 2)', async () => {
    for (const url of ['redis://127.0.0.1:1/0?password=QuerySecret123', 'redis://127.0.0.1:1/x?password=QuerySecret123']) {
      const { code, output } = await serveProcess(['--redis', url]);
      expect(code).toBe(2);
      expect(output).not.toContain('QuerySecret123');
    }
  });

  it('shows no aliased value of a YAML alias error (exit 2)', async () => {
    const file = writeTemp('admin:\n  token: *AliasSecret0123456789\n');
    const { code, output } = await serveProcess(['--config', file]);
    expect(code).toBe(2);
    expect(output).toContain('not valid YAML');
    expect(output).not.toContain('AliasSecret0123456789');
  });

  it('logs a refused Redis value by operation, scope kind and digest, never the user id or the query', async () => {
    const prefix = 'log-refused:';
    const member = env.emulator.tokens.member(0);
    const path = '/api/v1/projects?page=11&per_page=25';
    const writer = await replica(prefix, { identity: { hmacSecret: OTHER_SECRET } });
    expect((await writer.get(path, member.token)).status).toBe(200);
    await until(async () => (await env.client.keys(`${prefix}{u:${member.user_id}|*`)).length === 1);

    const { proxy, lines } = await replicaWithLog({ ...WITH_SECRET, cache: { redis: { url: env.redis.url, keyPrefix: prefix, commandTimeoutMs: 2_000 } } });
    await until(() => proxy.cache.tiers.length === 2 && redisTierOf(proxy as TestProxy).connection.healthy(), 10_000);
    expect((await httpGet(proxy.url + path, member.token)).status).toBe(200);
    const refused = lines().filter((l) => l.includes('cache tier failure (tampered)'));
    expect(refused).toHaveLength(1);
    expect(refused[0]).toContain('listProjects');
    expect(refused[0]).toContain('"scope":"user"');
    expect(refused[0]).not.toContain(`u:${member.user_id}`);
    expect(refused[0]).not.toContain('per_page');
  });

  it('logs a failed background refresh by operation, scope kind and digest, never the user id or the query', async () => {
    const { proxy, lines } = await replicaWithLog({ cache: { freshness: { default: { ttlMs: 0, staleWhileRevalidateMs: 600_000 } } } });
    const member = env.emulator.tokens.member(0);
    const path = '/api/v1/projects?page=12&per_page=15';
    expect((await httpGet(proxy.url + path, member.token)).status).toBe(200);
    await env.emulator.faults({ down: true });
    const stale = await httpGet(proxy.url + path, member.token);
    expect(stale.headers['cache-status']).toMatch(/stale/);
    await until(() => lines().some((l) => l.includes('background refresh failed')));
    await env.emulator.clearFaults();
    const line = lines().find((l) => l.includes('background refresh failed'))!;
    expect(line).toContain('listProjects');
    expect(line).not.toContain(`u:${member.user_id}`);
    expect(line).not.toContain('per_page');
  });
});

const withLog: RunningProxy[] = [];
afterAll(async () => {
  await Promise.all(withLog.map((p) => p.close()));
});

/** A replica whose log lines (warn and above) the test reads. */
async function replicaWithLog(overrides: DeepPartial<Config>): Promise<{ proxy: RunningProxy; lines: () => string[] }> {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(
        ...chunk
          .toString()
          .split('\n')
          .filter((l) => l !== ''),
      );
      done();
    },
  });
  const proxy = await startProxy(makeConfig(env.emulator.url, overrides), { logger: pino({ level: 'warn' }, sink) });
  withLog.push(proxy);
  return { proxy, lines: () => [...lines] };
}

let temps = 0;
function writeTemp(text: string): string {
  const path = join(tmpdir(), `tm-cache-redis-secret-${process.pid}-${temps++}.yaml`);
  writeFileSync(path, text);
  return path;
}
