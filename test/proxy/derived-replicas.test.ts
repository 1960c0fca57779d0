/**
 * Derived answers across replicas (redis/derive-sets.ts): replica A fills a list page, which it
 * records in Redis under what it can answer; replica B, which never held that page, is asked one
 * of its resources (or a page of another size) and answers it derived from A's entry, read
 * through its Redis tier, without asking the instance. What is recorded is a hint: a member whose
 * entry is gone, holds something else or is another caller's derives nothing, and a Redis that is
 * down or slow leaves the question to the instance. Two replicas over one private redis-server,
 * the real emulator over real HTTP; runs in both sharing modes (`TM_CACHE_SHARING=project`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { direct, expectAsked, expectDerived, proveAreas, SHARING } from '../helpers/derived.js';
import type { TestProxy } from '../helpers/proxy.js';
import { redisTierOf, replicasOverEmulatorAndRedis } from '../helpers/replicas.js';
import { twoMembersOfOneProject } from '../helpers/sharing.js';
import { until } from '../helpers/wait.js';

const env = replicasOverEmulatorAndRedis();
const PREFIX = 'dx:';
// A generous command timeout: on a loaded machine a slow Redis reply must not make a request skip Redis (budget.ts).
const CONFIG = { cache: { redis: { keyPrefix: PREFIX, commandTimeoutMs: 2_000 } } };

let a: TestProxy;
/** The replica asked: a new one per test, holding nothing but its proofs (a page it reads from Redis is kept in its memory). */
let b: TestProxy;
let config: typeof CONFIG & { cache: { redis: { url: string } } };
let token: string;
let other: string;
let userId: number;
let project: number;

interface Page {
  total: number;
  result: { id: number }[];
}

/** What a question is indexed under in Redis: its scope (the member's own, or the project's) and what it names. */
function setKey(name: string): string {
  return `${PREFIX}derive:${SHARING === 'project' ? `p:${project}` : `u:${userId}`}|${name}`;
}

/**
 * A's runs page `path` answered, once Redis names a page holding each of its runs: the page's own
 * background write (each run's set is written with it), or an earlier page's when A derived this
 * one from a page it holds (nothing then to write).
 */
async function fillOnA(path: string): Promise<Page> {
  const res = await a.get(path, token);
  expect(res.status, path).toBe(200);
  const page = res.json() as Page;
  const recorded = async (id: number) => (await env.client.zcard(setKey(`run:${id}`))) > 0;
  await until(async () => (await Promise.all(page.result.map((run) => recorded(run.id)))).every(Boolean));
  return page;
}

/** The runs of A's page that B does not hold in memory (B's proofs read the first 15). */
async function runsOnlyInRedis(path: string): Promise<number[]> {
  const page = await fillOnA(path);
  const held = (await direct(env.emulator, `/api/v1/projects/${project}/runs?per_page=15`, token)) as Page;
  const ids = page.result.map((r) => r.id).filter((id) => !held.result.some((r) => r.id === id));
  expect(ids.length, 'runs of the page B does not hold').toBeGreaterThan(2);
  return ids;
}

beforeAll(async () => {
  config = { cache: { redis: { ...CONFIG.cache.redis, url: env.redis.url } } };
  a = await env.replica(config);
  const members = twoMembersOfOneProject(env.emulator.tokens.all);
  ({ token, user_id: userId } = members.a);
  other = members.b.token;
  project = members.projectId;
  // The replicas know the member, and with sharing by project hold their proofs of every area.
  await proveAreas(a, token, project);
});
beforeEach(async () => {
  b = await env.replica(config);
  await proveAreas(b, token, project);
});

describe('a derived answer from another replica', () => {
  it('answers a run of a page another replica filled, from Redis, without asking the instance', async () => {
    const ids = await runsOnlyInRedis(`/api/v1/projects/${project}/runs?per_page=100`);
    const path = `/api/v1/runs/${ids[0]!}`;
    await expectDerived(env.emulator, b, path, token);
  });
});

describe('a page of a list another replica filled', () => {
  it('answers a page of another size, from Redis, without asking the instance', async () => {
    const source = await fillOnA(`/api/v1/projects/${project}/runs?per_page=100`);
    // The second page of 15: past what B's proof holds (the first 15), within A's page.
    expect(source.total, 'runs of the project').toBeGreaterThan(15);
    const path = `/api/v1/projects/${project}/runs?per_page=15&page=2`;
    await expectDerived(env.emulator, b, path, token);
  });
});

describe('never derived across replicas', () => {
  it('not from what a recorded member names when its entry is gone or holds something else: the instance answers', async () => {
    const ids = await runsOnlyInRedis(`/api/v1/projects/${project}/runs?per_page=100&order=desc`);
    const run = ids[1]!;
    const recorded = setKey(`run:${run}`);
    // The run's set now names only a page that is gone and a real page of the scope that does not hold it.
    const notHolding = (await env.client.keys(`${PREFIX}{${scopeOf()}|v1|listMilestones|*}`))[0]?.slice(PREFIX.length + 1, -1);
    expect(notHolding, 'a real entry of the scope').toBeDefined();
    await env.client.del(recorded);
    const future = Date.now() + 60_000;
    await env.client.zadd(recorded, future, `${scopeOf()}|v1|listRuns|${project}|per_page=99`, future, notHolding!);
    const path = `/api/v1/runs/${run}`;
    await expectAsked(env.emulator, b, path, token);
  });

  it('not to another caller: their own scope, or with sharing by project a member without proof on this replica', async () => {
    const [run] = await runsOnlyInRedis(`/api/v1/projects/${project}/runs?per_page=50`);
    const path = `/api/v1/runs/${run!}`;
    await expectAsked(env.emulator, b, path, other);
  });

  // With sharing by user, a page of another caller's scope holds the run: named in this caller's set, it is still not theirs.
  // (With sharing by project, the member's and the other's questions share the project's scope: the test above is theirs.)
  it.runIf(SHARING === 'user')("not from another caller's page named in this caller's set", async () => {
    const [run] = await runsOnlyInRedis(`/api/v1/projects/${project}/runs?per_page=25`);
    expect((await a.get(`/api/v1/projects/${project}/runs?per_page=25`, other)).status).toBe(200);
    const theirs = (await env.client.keys(`${PREFIX}{*|listRuns|${project}|per_page=25}`))
      .map((k) => k.slice(PREFIX.length + 1, -1))
      .filter((k) => !k.startsWith(`${scopeOf()}|`));
    expect(theirs.length, "the other caller's page").toBeGreaterThan(0);
    await env.client.del(setKey(`run:${run!}`));
    for (const key of theirs) await env.client.zadd(setKey(`run:${run!}`), Date.now() + 60_000, key);
    const path = `/api/v1/runs/${run!}`;
    await expectAsked(env.emulator, b, path, token);
  });
});

function scopeOf(): string {
  return SHARING === 'project' ? `p:${project}` : `u:${userId}`;
}

describe('Redis failing', () => {
  /** A run only Redis holds (A's page), asked of `p`: answered by the instance, not derived. */
  async function askedUpstream(p: TestProxy, run: number): Promise<void> {
    const path = `/api/v1/runs/${run}`;
    await expectAsked(env.emulator, p, path, token);
  }

  it('slow: the question costs at most one command timeout and goes to the instance', async () => {
    const ids = await runsOnlyInRedis(`/api/v1/projects/${project}/runs?per_page=100&page=1&order=desc`);
    // The default command timeout (50 ms): the question's own lookup times out, and nothing more is sent to Redis for it.
    const slow = await env.replica({ cache: { redis: { keyPrefix: PREFIX, url: env.redis.url } } });
    await proveAreas(slow, token, project);
    const before = redisTierOf(slow).stats().byKind;
    await env.client.call('CLIENT', 'PAUSE', '400', 'ALL');
    await askedUpstream(slow, ids[2]!);
    const after = redisTierOf(slow).stats().byKind;
    // The question's own lookup timed out; the lookup of a source was not sent (its budget spent).
    expect((after['get'] ?? 0) - (before['get'] ?? 0)).toBe(1);
    expect(after['derive'] ?? 0).toBe(before['derive'] ?? 0);
    await sleep(450);
  });

  it('down: the question goes to the instance', async () => {
    const ids = await runsOnlyInRedis(`/api/v1/projects/${project}/runs?per_page=50&page=1&order=desc`);
    await env.redis.stop();
    try {
      await askedUpstream(b, ids[0]!);
    } finally {
      await env.redis.restart();
    }
  });
});
