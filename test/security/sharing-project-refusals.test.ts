/**
 * `cache.sharing: project`, what a member's refusals and an unproven caller's fills do to the
 * team: a refusal to a member's question about an area of a project drops their proof on every
 * replica by whatever key the question was answered from, and a caller without proof never holds
 * the fill lock the team's requests wait on. Real HTTP, the real emulator, two replicas over a
 * private redis-server; each test on a key prefix of its own.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import type { TokenInfo } from '../../src/emulator/state.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { startTestProxy, type DeepPartial, type TestProxy } from '../helpers/proxy.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { isSharedHit, readUntilSharedHit, twoMembersOfOneProject } from '../helpers/sharing.js';
import { until } from '../helpers/wait.js';

/** Every answer stays fresh far past the test: only the access checks can stop it. */
const HOUR = { ttlMs: 3_600_000, staleWhileRevalidateMs: 3_600_000 };
const CONFIG: DeepPartial<Config> = {
  identity: { ttlMs: 10 * 3_600_000 },
  access: { projectConfirmMs: 30_000, grantTtlMs: 300_000 },
  cache: { sharing: 'project', freshness: { default: HOUR, settled: HOUR, byResource: {} } },
};

let emulator: TestEmulator;
let redis: RedisHandle;
const running: TestProxy[] = [];
/** Two members of one project (`a` fills, `b` reads), and a user who is a member of no project. */
let a: TokenInfo;
let b: TokenInfo;
let nobody: TokenInfo;
let projectId: number;
let prefixes = 0;

beforeAll(async () => {
  emulator = await startTestEmulator();
  redis = await startRedis();
  ({ a, b, projectId } = twoMembersOfOneProject(emulator.tokens.all));
  nobody = emulator.tokens.noAccess();
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.close()));
  await emulator.clearFaults();
  await emulator.mutate({ op: 'allow_area', user_id: b.user_id, project_id: projectId, area: 'milestones' });
});
afterAll(async () => {
  await emulator?.close();
  await redis?.stop();
});

/** Two replicas sharing the test's redis-server under a key prefix of their own. */
async function replicas(): Promise<[TestProxy, TestProxy]> {
  const cache = { ...CONFIG.cache, redis: { url: redis.url, keyPrefix: `refusals-${++prefixes}:`, commandTimeoutMs: 500 } };
  const start = async () => {
    const p = await startTestProxy(emulator.url, { ...CONFIG, cache });
    running.push(p);
    return p;
  };
  return [await start(), await start()];
}

/** Requests the emulator received with `token` since the last reset (counted on arrival, before any latency). */
async function askedWith(token: string): Promise<number> {
  return (await emulator.stats()).by_token[token] ?? 0;
}

const milestones = (query = '') => `/api/v1/projects/${projectId}/milestones${query}`;

describe('a member refused an area on a question answered from their own key', () => {
  it("loses their grants and confirmation of the project on every replica: the team's shared entry of that area is theirs no more", async () => {
    const [r1, r2] = await replicas();
    expect((await r1.get(milestones(), a.token)).status).toBe(200);
    for (const p of [r1, r2]) expect(isSharedHit(await readUntilSharedHit(p, milestones(), b.token)), `b on ${p === r1 ? 1 : 2}`).toBe(true);
    await emulator.mutate({ op: 'deny_area', user_id: b.user_id, project_id: projectId, area: 'milestones' });
    // b holds no grant for the project's users: the expanded question is b's own (their own key), and refused.
    const refused = await r1.get(milestones('?expands=users'), b.token);
    expect(refused.status).toBe(403);
    expect(refused.headers['cache-status']).toMatch(/fwd-status=403/);
    expect(refused.headers['cache-status']).not.toMatch(/key=project/);
    // The refusal was of the milestones of the project: the shared entry of them is served to b nowhere.
    const here = await r1.get(milestones(), b.token);
    expect(here.status).toBe(403);
    expect(here.headers['cache-status']).toMatch(/fwd-status=403/);
    await until(async () => (await r2.get(milestones(), b.token)).status === 403);
    // Never the team's entry.
    for (const p of [r1, r2]) expect(isSharedHit(await p.get(milestones(), a.token))).toBe(true);
  });
});

describe('a user who is a member of no project, asking a project question', () => {
  it("never holds the team's cross-replica fill lock: a member asking the same on another replica meanwhile is sent to the instance at once", async () => {
    const [r1, r2] = await replicas();
    // Both replicas know both callers: only the fills are left.
    for (const p of [r1, r2]) for (const t of [nobody, b]) expect((await p.get('/api/v1/user', t.token)).status).toBe(200);
    await emulator.resetStats();
    await emulator.faults({ latency_ms: 1_500 });
    let nobodyAnswered = false;
    const outsider = r1.get(milestones(), nobody.token).finally(() => (nobodyAnswered = true));
    // The outsider's fill is under way on replica 1 (the instance has their request) when b asks on replica 2.
    await until(async () => (await askedWith(nobody.token)) === 1);
    const member = r2.get(milestones(), b.token);
    try {
      // b's request reaches the instance while the outsider's is still being answered: b waited on no fill of theirs.
      await until(async () => (await askedWith(b.token)) === 1 || nobodyAnswered);
      expect(nobodyAnswered).toBe(false);
    } finally {
      await Promise.allSettled([outsider, member]);
    }
    expect((await outsider).status).toBe(403);
    const theirs = await member;
    expect(theirs.status).toBe(200);
    expect(theirs.headers['cache-status']).toMatch(/^tm-cache; fwd=uri-miss; fwd-status=200; stored.*key=project$/);
    expect(await askedWith(b.token)).toBe(1);
  });
});
