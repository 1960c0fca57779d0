/**
 * Every Redis mode the configuration offers, against the real thing: a six-node Redis Cluster
 * and a Sentinel set (redis-topologies.ts), both with AUTH, and a TLS-only Redis. In each,
 * replicas share answers through Redis; a wrong password is a degraded replica that still
 * answers, never a crash and never a secret in what it reports; and the Cluster and Sentinel
 * fail over under load without one failed request; a Cluster over TLS shares answers too.
 */
import { Redis } from 'ioredis';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { startTestProxy, type DeepPartial, type TestProxy } from '../helpers/proxy.js';
import { findFreePort, spawnServer, terminate, waitUntilReady } from '../helpers/redis.js';
import { redisTierOf } from '../helpers/replicas.js';
import { makeTestPki, startCluster, startSentinels, type ClusterHandle, type SentinelHandle, type TestPki } from '../helpers/redis-topologies.js';
import { startServe, type Serving } from '../helpers/serve.js';
import { until } from '../helpers/wait.js';

const HMAC_SECRET = 'cd'.repeat(32);
const SERVER_PASSWORD = 'server-pw-0123456789';
const SENTINEL_PASSWORD = 'sentinel-pw-0123456789';

let emulator: TestEmulator;
const proxies: TestProxy[] = [];

beforeAll(async () => {
  emulator = await startTestEmulator();
});
afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  await emulator?.close();
});

async function replica(redis: DeepPartial<Config['cache']['redis']>): Promise<TestProxy> {
  // Generous timeouts: a loaded CI machine must not turn a slow command into a miss here.
  const p = await startTestProxy(emulator.url, {
    identity: { hmacSecret: HMAC_SECRET },
    cache: { redis: { commandTimeoutMs: 1_000, connectTimeoutMs: 10_000, ...redis } },
  });
  proxies.push(p);
  return p;
}

async function redisCheck(managementUrl: string): Promise<{ status: string; detail?: string }> {
  const res = await request(`${managementUrl}/readyz`);
  return ((await res.body.json()) as { checks: { redis: { status: string; detail?: string } } }).checks.redis;
}

/** A path no test has asked yet (a fresh question for every call): a list of its own (a page of a list held would be derived). */
let creator = 0;
function freshPath(projectId: number): string {
  creator += 1;
  return `/api/v1/projects/${projectId}/runs?per_page=15&created_by=${creator}`;
}

/**
 * One replica fills a question; once its entry is in Redis (read back through that replica's own
 * Redis tier, by the key its memory tier holds), a fresh replica answers it from Redis, without
 * the instance.
 */
async function expectShared(settings: DeepPartial<Config['cache']['redis']>): Promise<void> {
  const m = emulator.tokens.member(0);
  const path = freshPath(m.project_ids[0]!);
  const a = await replica(settings);
  const filled = await a.get(path, m.token);
  expect(filled.status).toBe(200);
  const [key] = a.cache.memory.list(() => true, 10).entries.map((e) => e.key);
  expect(key).toBeDefined();
  await until(async () => (await redisTierOf(a).peek(key!)) !== undefined, 20_000).catch(() => expect.fail(`the entry ${key} never landed in Redis`));
  const b = await replica(settings);
  await emulator.resetStats();
  const shared = await b.get(path, m.token);
  // A project's runs: on replicas sharing by project (`npm run test:project`) the project's shared answer, which says so.
  const scope = b.config.cache.sharing === 'project' ? '; key=project' : '';
  expect(shared.headers['cache-status']).toMatch(new RegExp(`^tm-cache; hit; ttl=\\d+; detail=redis${scope}$`));
  expect(shared.body.equals(filled.body)).toBe(true);
  expect((await emulator.stats()).total).toBe(0);
}

/** A wrong password: the replica starts, says why it is degraded (never the password), and answers. */
async function expectRefusedButServing(settings: DeepPartial<Config['cache']['redis']>, secret: string, reason: RegExp): Promise<void> {
  const p = await replica({ ...settings, connectTimeoutMs: 1_500 });
  const m = emulator.tokens.member(1);
  let check = await redisCheck(p.managementUrl);
  await until(async () => reason.test((check = await redisCheck(p.managementUrl)).detail ?? ''), 20_000).catch(() => undefined);
  expect(check.status).toBe('degraded');
  expect(check.detail).toMatch(reason);
  expect(JSON.stringify(check)).not.toContain(secret);
  expect((await p.get(freshPath(m.project_ids[0]!), m.token)).status).toBe(200);
  const metrics = await (await request(`${p.managementUrl}/metrics`)).body.text();
  expect(metrics).not.toContain(secret);
}

/**
 * Requests on two replicas (new questions, repeats, several users) while `failover` runs, and
 * for a while after: every one answered 200. Then the replicas use Redis again: a question
 * filled on one is a Redis hit on a fresh one.
 */
async function expectFailoverUnderLoad(settings: DeepPartial<Config['cache']['redis']>, failover: () => Promise<unknown>): Promise<void> {
  const replicas = [await replica(settings), await replica(settings)];
  const members = [0, 1, 2].map((i) => emulator.tokens.member(i));
  const statuses = new Map<number, number>();
  let stop = false;
  let sent = 0;
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; !stop; i++) {
      const m = members[(w + i) % members.length]!;
      const path = i % 3 === 0 ? freshPath(m.project_ids[0]!) : `/api/v1/projects/${m.project_ids[0]}/milestones?page=${(i % 4) + 1}`;
      const res = await replicas[(w + i) % 2]!.get(path, m.token);
      sent += 1;
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    }
  };
  const load = Promise.all([0, 1, 2, 3].map(worker));
  try {
    await new Promise((r) => setTimeout(r, 300));
    await failover();
    // Past the failover, until both replicas report Redis healthy again, and a little more.
    let checks: unknown[] = [];
    await until(
      async () => (checks = await Promise.all(replicas.map((p) => redisCheck(p.managementUrl)))).every((c) => (c as { status: string }).status === 'ok'),
      20_000,
    ).catch(() => expect.fail(`Redis not healthy again on both replicas after the failover: ${JSON.stringify(checks)}`));
    await new Promise((r) => setTimeout(r, 300));
  } finally {
    // Whatever failed, the load stops here: it must not outlive this test into the next.
    stop = true;
    await load;
  }
  expect(sent).toBeGreaterThan(20);
  expect(Object.fromEntries(statuses)).toEqual({ 200: sent });
  await expectShared(settings);
}

describe('Redis Cluster with AUTH', () => {
  let cluster: ClusterHandle;
  const settings = (): DeepPartial<Config['cache']['redis']> => ({ mode: 'cluster', nodes: cluster.nodes, password: SERVER_PASSWORD });

  beforeAll(async () => {
    cluster = await startCluster({ password: SERVER_PASSWORD });
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it('shares answers between replicas', async () => {
    await expectShared(settings());
  });

  it('with a wrong password: degraded, says why, still answers', async () => {
    await expectRefusedButServing({ ...settings(), password: 'not-the-password-42' }, 'not-the-password-42', /authentication refused/);
  });

  it('fails over under load without a failed request, then shares again', async () => {
    await expectFailoverUnderLoad(settings(), () => cluster.killMasterOf(0));
  }, 90_000);
});

describe('Redis Sentinel with AUTH on the servers and on the sentinels', () => {
  let sentinels: SentinelHandle;
  const settings = (): DeepPartial<Config['cache']['redis']> => ({
    mode: 'sentinel',
    sentinels: sentinels.sentinels,
    sentinelName: sentinels.name,
    password: SERVER_PASSWORD,
    sentinelPassword: SENTINEL_PASSWORD,
  });
  beforeAll(async () => {
    sentinels = await startSentinels({ password: SERVER_PASSWORD, sentinelPassword: SENTINEL_PASSWORD });
  }, 60_000);
  afterAll(async () => {
    await sentinels?.stop();
  });

  it('shares answers between replicas', async () => {
    await expectShared(settings());
  });

  it('with a wrong server password: degraded, says why, still answers', async () => {
    await expectRefusedButServing({ ...settings(), password: 'not-the-password-43' }, 'not-the-password-43', /authentication refused/);
  });

  it('with a wrong sentinel password: degraded, still answers', async () => {
    await expectRefusedButServing({ ...settings(), sentinelPassword: 'not-the-password-44' }, 'not-the-password-44', /.+/);
  });

  it('fails over under load without a failed request, then shares again', async () => {
    await expectFailoverUnderLoad(settings(), () => sentinels.killMaster());
  }, 90_000);
});

describe('Redis over TLS', () => {
  let dir: string;
  let plainPort: number;
  let tlsPort: number;
  let server: ReturnType<typeof spawnServer>;
  let pki: TestPki;
  let cluster: ClusterHandle | undefined;
  let tlsSentinels: SentinelHandle | undefined;
  const running: Serving[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tmc-tls-'));
    pki = makeTestPki(dir);
    plainPort = await findFreePort();
    tlsPort = await findFreePort();
    server = spawnServer(plainPort, [
      '--tls-port',
      String(tlsPort),
      '--tls-cert-file',
      pki.cert,
      '--tls-key-file',
      pki.key,
      '--tls-ca-cert-file',
      pki.ca,
      '--tls-auth-clients',
      'no',
      '--requirepass',
      SERVER_PASSWORD,
    ]);
    await waitUntilReady(server, plainPort);
  }, 60_000);
  afterAll(async () => {
    for (const s of running) s.child.kill('SIGKILL');
    await terminate(server, 'SIGTERM');
    await cluster?.stop();
    await tlsSentinels?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /**
   * Appended to a file's `cache.redis`: a command answered within 2 s is not a timeout. At the
   * default (50 ms) a loaded machine times out the entry's write over TLS, the entry never lands
   * and the test waits for it in vain; what these tests ask is whether the mode works.
   */
  const PATIENT_REDIS = '    commandTimeoutMs: 2000\n';

  async function serve(env: Record<string, string>): Promise<Serving> {
    const s = await startServe({
      TM_CACHE_UPSTREAM: emulator.url,
      TM_CACHE_PORT: '0',
      TM_CACHE_MANAGEMENT_PORT: '0',
      TM_CACHE_HMAC_SECRET: HMAC_SECRET,
      TM_CACHE_REDIS_PASSWORD: SERVER_PASSWORD,
      TM_CACHE_LOG_ACCESS: 'off',
      ...env,
    });
    running.push(s);
    return s;
  }

  const plainKeys = async (): Promise<number> => {
    const client = new Redis({ port: plainPort, password: SERVER_PASSWORD, lazyConnect: true });
    try {
      await client.connect();
      return await client.dbsize();
    } finally {
      client.disconnect();
    }
  };

  it('rediss:// with the private CA in NODE_EXTRA_CA_CERTS: verified, connected, and entries land', async () => {
    const file = join(dir, 'rediss.yaml');
    writeFileSync(file, `cache:\n  redis:\n${PATIENT_REDIS}`);
    const s = await serve({ TM_CACHE_CONFIG: file, TM_CACHE_REDIS: `rediss://localhost:${tlsPort}`, NODE_EXTRA_CA_CERTS: pki.ca });
    expect(await redisCheck(s.management)).toEqual({ status: 'ok' });
    const m = emulator.tokens.member(2);
    const before = await plainKeys();
    const res = await request(`${s.url}${freshPath(m.project_ids[0]!)}`, { headers: { authorization: `Bearer ${m.token}` } });
    await res.body.dump();
    expect(res.statusCode).toBe(200);
    await until(async () => (await plainKeys()) >= before + 2, 20_000);
  });

  it('cache.redis.tls with a redis:// URL is TLS too', async () => {
    const file = join(dir, 'tls.yaml');
    writeFileSync(file, 'cache:\n  redis:\n    tls: true\n');
    const s = await serve({ TM_CACHE_CONFIG: file, TM_CACHE_REDIS: `redis://localhost:${tlsPort}`, NODE_EXTRA_CA_CERTS: pki.ca });
    expect(await redisCheck(s.management)).toEqual({ status: 'ok' });
  });

  /**
   * Two `serve` processes on `yaml`: the first fills a question, the second answers it from Redis
   * once the entry is there. They share by user whatever the suite's default (serve is given only
   * the environment above), so the answer names no project scope.
   */
  async function expectServesShare(yaml: string, entries: () => Promise<string[]>): Promise<void> {
    const file = join(dir, `shared-${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(file, yaml + PATIENT_REDIS);
    const settings = { TM_CACHE_CONFIG: file, NODE_EXTRA_CA_CERTS: pki.ca, TM_CACHE_REDIS_SENTINEL_PASSWORD: SENTINEL_PASSWORD };
    const [a, b] = [await serve(settings), await serve(settings)];
    expect(await redisCheck(a.management)).toEqual({ status: 'ok' });
    const m = emulator.tokens.member(1);
    const path = freshPath(m.project_ids[0]!);
    const before = (await entries()).length;
    const ask = async (s: Serving) => {
      const res = await request(`${s.url}${path}`, { headers: { authorization: `Bearer ${m.token}` } });
      return { status: res.statusCode, cacheStatus: String(res.headers['cache-status']), body: Buffer.from(await res.body.arrayBuffer()) };
    };
    const filled = await ask(a);
    expect(filled.status).toBe(200);
    await until(async () => (await entries()).length === before + 1, 20_000);
    await emulator.resetStats();
    const shared = await ask(b);
    expect(shared.cacheStatus).toMatch(/^tm-cache; hit; ttl=\d+; detail=redis$/);
    expect(shared.body.equals(filled.body)).toBe(true);
    expect((await emulator.stats()).by_route['GET /api/v1/projects/{project_id}/runs'] ?? 0).toBe(0);
  }

  // Entries of runs lists ("tmc:{<key>}"; not their locks, "...}:lock").
  const RUNS_ENTRIES = 'tmc:{*listRuns*}';

  it('a Redis Cluster over TLS (bus and replication too), with AUTH: two replicas share answers through it', async () => {
    cluster = await startCluster({ password: SERVER_PASSWORD, tls: pki });
    const nodes = cluster.nodes.map((n) => `"${n}"`).join(', ');
    await expectServesShare(`cache:\n  redis:\n    mode: cluster\n    tls: true\n    nodes: [${nodes}]\n`, () => cluster!.keys(RUNS_ENTRIES));
  }, 90_000);

  it('Redis Sentinel over TLS (servers and sentinels), with AUTH on both: two replicas share answers through it', async () => {
    tlsSentinels = await startSentinels({ password: SERVER_PASSWORD, sentinelPassword: SENTINEL_PASSWORD, tls: pki });
    const list = tlsSentinels.sentinels.map((n) => `"${n}"`).join(', ');
    await expectServesShare(`cache:\n  redis:\n    mode: sentinel\n    tls: true\n    sentinelName: ${tlsSentinels.name}\n    sentinels: [${list}]\n`, () =>
      tlsSentinels!.keys(RUNS_ENTRIES),
    );
  }, 90_000);

  it('refuses a server its CAs do not vouch for: degraded, never connected unverified, still answering', async () => {
    const s = await serve({ TM_CACHE_REDIS: `rediss://localhost:${tlsPort}` });
    const check = await redisCheck(s.management);
    expect(check.status).toBe('degraded');
    const m = emulator.tokens.member(2);
    const res = await request(`${s.url}${freshPath(m.project_ids[0]!)}`, { headers: { authorization: `Bearer ${m.token}` } });
    await res.body.dump();
    expect(res.statusCode).toBe(200);
    expect(s.output()).not.toContain(SERVER_PASSWORD);
  });
});
