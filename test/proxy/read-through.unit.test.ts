/**
 * The pieces of the pipeline, each against fakes below it: decide (scope, key, fill key, who
 * may read), the access rules, the Retry-After gate, and the read-through over a fake cache and
 * a fake Upstream (counting what reached "the instance").
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { makeErrorBody } from '../../src/api/errors.js';
import type { CacheEntry } from '../../src/cache/entry.js';
import type { FillLock } from '../../src/cache/fill.js';
import { FreshnessPolicy } from '../../src/cache/policy.js';
import { DEFAULT_CONFIG } from '../../src/config/schema.js';
import { AccessRules, type AccessTargets } from '../../src/proxy/callers/access.js';
import { ProjectAccess } from '../../src/proxy/callers/access-confirmation.js';
import { AreaGrants } from '../../src/proxy/callers/access-grants.js';
import { ProofKeeper } from '../../src/proxy/callers/proofs.js';
import { decide, lapsedKey, type Decision } from '../../src/proxy/decide.js';
import { Exchange } from '../../src/proxy/exchange.js';
import { ReadThrough, type Found, type ReadCache } from '../../src/proxy/read-through.js';
import { RetryAfterGate } from '../../src/proxy/callers/retry-after.js';
import { resolveRoute, type CacheableRoute } from '../../src/proxy/route-memo.js';
import type { Served } from '../../src/proxy/respond/served.js';
import { UpstreamError, type LaneCaller, type Upstream, type UpstreamResponse } from '../../src/upstream/client.js';
import { makeEntry } from '../cache/fixtures.js';
import type { Caller } from '../../src/proxy/callers/caller.js';

const T0 = 1_800_000_000_000;

function caller(userId: number, adminUntil = 0): Caller {
  return { userId, scope: `u:${userId}`, credentialId: `cred-${userId}`, verifiedUntil: T0 + 60_000, adminUntil };
}

function route(url: string): CacheableRoute {
  const r = resolveRoute(url);
  if (r.kind !== 'cacheable') throw new Error(`${url} is ${r.kind}`);
  return r;
}

const isAdmin = (c: Caller, t: number) => t < c.adminUntil;
const decideFor = (url: string, c: Caller, headers: Record<string, string> = {}, honorNoCache = true): Decision =>
  decide(
    route(url),
    c,
    'Bearer t',
    headers,
    T0,
    { honorNoCache, isVerifiedAdmin: isAdmin, sharing: 'user', projectOfResource: () => undefined },
    new Exchange({} as IncomingMessage, {} as ServerResponse, 0, 'test'),
  );

describe('decide', () => {
  it("keys a member's question in their own scope, readable and filled under one key", () => {
    const d = decideFor('/api/v1/projects/1/runs?per_page=15', caller(7));
    expect(d).toMatchObject({ key: 'u:7|v1|listRuns|1|per_page=15', mayRead: true, noCache: false });
    expect(d.fillKey).toBe(d.key);
  });

  it('shares admin-only answers in the admin scope among verified admins only', () => {
    const verified = decideFor('/api/v1/users', caller(1, T0 + 1));
    expect(verified).toMatchObject({ key: 'admin|v1|listUsers||', fillKey: 'admin|v1|listUsers||', mayRead: true });
    const unverified = decideFor('/api/v1/users', caller(2));
    expect(unverified).toMatchObject({ key: 'admin|v1|listUsers||', fillKey: 'u:2|v1|listUsers||', mayRead: false });
  });

  it.each([
    ['/api/v1/users', 'admin', 'admin'],
    ['/api/v1/user', 'u:7', 'identity'],
    ['/api/v1/projects', 'u:7', 'project'],
    ['/api/v1/runs/4/results', 'u:7', 'project'],
  ])('decides %s into scope %s, gated by %s', (url, scope, gate) => {
    expect(decideFor(url, caller(7))).toMatchObject({ scope, gate });
  });

  it("gives a lapsed caller their own scope's key, none for an admin-only operation or an unknown caller", () => {
    expect(lapsedKey(route('/api/v1/projects/1/runs'), caller(7))).toBe(decideFor('/api/v1/projects/1/runs', caller(7)).key);
    expect(lapsedKey(route('/api/v1/users'), caller(7, T0 + 1))).toBeUndefined();
    expect(lapsedKey(route('/api/v1/projects'), undefined)).toBeUndefined();
    expect(lapsedKey(resolveRoute('/api/v1/projects?per_page=abc'), caller(7))).toBeUndefined();
  });

  it.each([
    [{ 'cache-control': 'no-cache' }, true, true],
    [{ 'cache-control': 'max-age=0' }, true, true],
    [{ pragma: 'no-cache' }, true, true],
    [{ 'cache-control': 'max-age=60' }, true, false],
    [{ 'cache-control': 'no-cache' }, false, false],
  ])('with %o and honorClientNoCache %s, noCache is %s', (headers, honor, expected) => {
    expect(decideFor('/api/v1/projects', caller(7), headers, honor).noCache).toBe(expected);
  });
});

describe('AccessRules', () => {
  function recorder() {
    const log: string[] = [];
    const targets: AccessTargets = {
      markAdmin: (c) => void log.push(`markAdmin ${c.userId}`),
      clearAdmin: (c) => void log.push(`clearAdmin ${c.userId}`),
      forget: (a) => void log.push(`forget ${a}`),
      deleteEntry: (k) => void log.push(`delete ${k}`),
      dropUserProject: (c, p) => void log.push(`drop ${c.userId} ${p}`),
      refuseMember: (c, p) => void log.push(`refuse ${c.userId} ${p}`),
    };
    return { log, rules: new AccessRules(targets) };
  }
  const request = (adminOnly: boolean, mayRead: boolean) => ({
    key: 'K',
    mayRead,
    gate: adminOnly ? ('admin' as const) : ('project' as const),
    caller: caller(3),
    authorization: 'A',
    projectId: 0,
  });

  it.each([
    [200, true, true, ['markAdmin 3']],
    [200, false, true, []],
    [401, false, true, ['delete K']],
    [403, true, true, ['delete K']],
    [404, false, true, ['delete K']],
    [404, false, false, []],
    [429, false, true, []],
    [500, false, true, []],
  ])('after the fill answered %i (admin-only %s, may read %s): %o', (status, adminOnly, mayRead, expected) => {
    const { log, rules } = recorder();
    rules.afterFill(request(adminOnly, mayRead), status);
    expect(log).toEqual(expected);
  });

  it.each([
    [401, false, ['forget A']],
    [403, true, ['clearAdmin 3']],
    [403, false, []],
    [404, true, []],
  ])('a caller served %i (admin-only %s): %o', (status, adminOnly, expected) => {
    const { log, rules } = recorder();
    rules.afterRefusal(request(adminOnly, true), status);
    expect(log).toEqual(expected);
  });

  it.each([
    ['member', 401, ['refuse 3 5']],
    ['member', 403, ['refuse 3 5']],
    ['member', 404, ['refuse 3 5']],
    ['member', 429, []],
    ['project', 403, ['refuse 3 5', 'delete K']],
    ['project', 404, ['refuse 3 5', 'delete K']],
    ['project', 500, []],
  ] as const)("after the fill of a member's question about project 5 (gate %s) answered %i: %o", (gate, status, expected) => {
    const { log, rules } = recorder();
    rules.afterFill({ ...request(false, true), gate, projectId: 5 }, status);
    expect(log).toEqual(expected);
  });

  it.each([
    ['member', 403, ['drop 3 5', 'refuse 3 5']],
    ['project', 401, ['refuse 3 5', 'forget A']],
  ] as const)("a confirmation of a member's question about project 5 (gate %s) refused %i: %o", (gate, status, expected) => {
    const { log, rules } = recorder();
    rules.afterConfirmation({ ...request(false, true), gate, projectId: 5 }, 5, status);
    expect(log).toEqual(expected);
  });

  it.each([
    [403, ['drop 3 5']],
    [404, ['drop 3 5']],
    [401, ['forget A']],
    [429, []],
  ])('a project access confirmation refused %i: %o', (status, expected) => {
    const { log, rules } = recorder();
    rules.afterConfirmation(request(false, true), 5, status);
    expect(log).toEqual(expected);
  });
});

describe('RetryAfterGate', () => {
  it("blocks a user for the instance's Retry-After, the default without one, and forgets the block once past", () => {
    const gate = new RetryAfterGate(60_000, 600_000);
    expect(gate.blockedMs(1, T0)).toBe(0);
    expect(gate.block(1, '5', T0)).toBe(5_000);
    expect(gate.blockedMs(1, T0 + 1_000)).toBe(4_000);
    expect(gate.blockedMs(2, T0 + 1_000)).toBe(0);
    expect(gate.blockedMs(1, T0 + 5_000)).toBe(0);
    expect(gate.block(2, undefined, T0)).toBe(60_000);
    expect(gate.block(3, new Date(T0 + 30_000).toUTCString(), T0)).toBe(30_000);
  });
});

/** A cache of Map entries; `async: true` answers like a lower tier (a promise, tier `redis`). */
function fakeCache(async = false) {
  const entries = new Map<string, CacheEntry>();
  const deleted: string[] = [];
  const cache: ReadCache = {
    get: (key) => {
      const entry = entries.get(key);
      const found: Found | undefined = entry && { entry, tier: async ? 'redis' : 'memory' };
      return async ? Promise.resolve(found) : found;
    },
    peekMemory: (key) => (async ? undefined : entries.get(key)),
    set: (key, entry) => void entries.set(key, entry),
    backfill: (key, entry) => void entries.set(key, entry),
    delete: async (key) => void (deleted.push(key), entries.delete(key)),
  };
  return { entries, deleted, cache };
}

function fakeUpstream(answer: () => UpstreamResponse | Promise<UpstreamResponse>) {
  const paths: string[] = [];
  const upstream: Upstream = {
    get: async (path) => (paths.push(path), answer()),
    close: async () => undefined,
  };
  return { paths, upstream };
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}): UpstreamResponse => ({
  status,
  headers: { 'content-type': 'application/json', ...headers },
  body: Buffer.from(JSON.stringify(body)),
});

/** The fixtures' entries are of project 5: their callers' access to it is confirmed (access-confirmation.ts has its own tests). */
function confirmedProjects(upstream: Upstream, clock: { t: number }): ProjectAccess {
  const projects = new ProjectAccess({ confirmMs: 24 * 3_600_000, upstream, now: () => clock.t });
  for (const userId of [2, 3, 7, 8]) projects.renew(userId, 5, clock.t - 3_600_000);
  return projects;
}

function readThrough(
  cache: ReadCache,
  upstream: Upstream,
  clock: { t: number },
  access = new AccessRules({ markAdmin() {}, clearAdmin() {}, forget() {}, deleteEntry: (k) => void cache.delete(k), dropUserProject() {}, refuseMember() {} }),
  lock?: FillLock,
) {
  return new ReadThrough({
    cache,
    lock,
    upstream,
    policy: new FreshnessPolicy(DEFAULT_CONFIG.cache.freshness, DEFAULT_CONFIG.cache.staleIfErrorMs),
    access,
    proofs: new ProofKeeper({ projects: confirmedProjects(upstream, clock), grants: new AreaGrants({ ttlMs: 300_000, now: () => clock.t }) }),
    staleOnOutage: true,
    gate: new RetryAfterGate(60_000, 600_000),
    lockTtlMs: 1_000,
    lockWaitMs: 1_000,
    maxEntryBytes: 1 << 20,
    now: () => clock.t,
    onBackgroundError: () => undefined,
  });
}

describe('ReadThrough over a fake cache and a fake upstream', () => {
  const url = '/api/v1/projects/1/runs';

  it('answers a fresh first-tier hit synchronously, without a promise and without upstream', () => {
    const { cache, entries } = fakeCache();
    const { upstream, paths } = fakeUpstream(() => json(200, {}));
    const d = decideFor(url, caller(7));
    entries.set(d.key, makeEntry(T0));
    const served = readThrough(cache, upstream, { t: T0 }).serve(d, T0);
    expect(served).not.toBeInstanceOf(Promise);
    expect((served as Served).outcome).toEqual({ kind: 'hit', tier: 'memory' });
    expect(paths).toEqual([]);
  });

  it('takes an asynchronous answer from a lower tier on the same path', async () => {
    const { cache, entries } = fakeCache(true);
    const d = decideFor(url, caller(7));
    entries.set(d.key, makeEntry(T0));
    const served = readThrough(cache, fakeUpstream(() => json(200, {})).upstream, { t: T0 }).serve(d, T0);
    expect(served).toBeInstanceOf(Promise);
    expect((await served).outcome).toEqual({ kind: 'hit', tier: 'redis' });
  });

  it('fills a miss once, stores it under the key, and answers the next one from the cache', async () => {
    const { cache, entries } = fakeCache();
    const { upstream, paths } = fakeUpstream(() => json(200, { result: [] }));
    const rt = readThrough(cache, upstream, { t: T0 });
    const d = decideFor(`${url}?per_page=15`, caller(7));
    const first = await rt.serve(d, T0);
    expect(first.outcome).toEqual({ kind: 'miss', stored: true, upstreamStatus: 200 });
    expect(paths).toEqual(['/api/v1/projects/1/runs?per_page=15']);
    expect(entries.has(d.key)).toBe(true);
    expect((rt.serve(d, T0 + 1) as Served).outcome.kind).toBe('hit');
  });

  it('serves a stale entry while it refreshes it once in the background', async () => {
    const { cache, entries } = fakeCache();
    const { upstream, paths } = fakeUpstream(() => json(200, { result: [1] }));
    const d = decideFor(url, caller(7));
    entries.set(d.key, makeEntry(T0 - 61_000));
    const rt = readThrough(cache, upstream, { t: T0 });
    const [a, b] = [rt.serve(d, T0) as Served, rt.serve(d, T0) as Served];
    expect([a.outcome.detail, b.outcome.detail]).toEqual(['stale-while-revalidate', 'stale-while-revalidate']);
    await new Promise((r) => setTimeout(r, 5));
    expect(paths.length).toBe(1);
    expect(entries.get(d.key)!.storedAt).toBe(T0);
  });

  it('relays a refusal verbatim, never stores it, and drops what the caller may no longer see', async () => {
    const { cache, entries, deleted } = fakeCache();
    const d = decideFor(url, caller(7));
    entries.set(d.key, makeEntry(T0 - 200_000));
    const refusal = json(403, makeErrorBody('No access.'));
    const served = await readThrough(cache, fakeUpstream(() => refusal).upstream, { t: T0 }).serve(d, T0);
    expect(served).toMatchObject({ kind: 'relay', response: refusal, outcome: { kind: 'miss', upstreamStatus: 403 } });
    expect(deleted).toEqual([d.key]);
  });

  it('serves stale on an upstream failure within stale-if-error, else a JSON 502/504', async () => {
    const { cache, entries } = fakeCache();
    const failing = fakeUpstream(() => Promise.reject(new UpstreamError('timeout', 'the upstream did not answer in time'))).upstream;
    const d = decideFor(url, caller(7));
    const nothing = await readThrough(cache, failing, { t: T0 }).serve(d, T0);
    expect(nothing).toMatchObject({ kind: 'local', status: 504, outcome: { kind: 'error', detail: 'timeout' } });
    entries.set(d.key, makeEntry(T0 - 200_000));
    const stale = await readThrough(cache, failing, { t: T0 }).serve(d, T0);
    expect(stale.outcome).toEqual({ kind: 'stale', tier: 'memory', detail: 'stale-if-error' });
  });

  it('serves an entry another replica stored since the look-up as the Redis hit it is, access check included', async () => {
    const theirs = makeEntry(T0);
    const accepted: boolean[] = [];
    const lock: FillLock = {
      claim: async (_k, _ttl, acceptStored) => (accepted.push(acceptStored), acceptStored ? { entry: theirs } : { token: 't' }),
      unlock: async () => undefined,
      waitFor: async () => undefined,
      extend: async () => true,
    };
    const noAccess = json(404, makeErrorBody('No such project.'));
    const { upstream, paths } = fakeUpstream(() => noAccess);
    const noAccessRules = new AccessRules({ markAdmin() {}, clearAdmin() {}, forget() {}, deleteEntry() {}, dropUserProject() {}, refuseMember() {} });
    // Caller 7's access to project 5 (the entry's) is confirmed: a hit, nothing asked upstream.
    const confirmed = await readThrough(fakeCache().cache, upstream, { t: T0 }, noAccessRules, lock).serve(decideFor(url, caller(7)), T0);
    expect(confirmed).toMatchObject({ kind: 'entry', entry: theirs, outcome: { kind: 'hit', tier: 'redis' } });
    expect(paths).toEqual([]);
    // Caller 9's is not: confirmation is asked; refused, the request goes to the instance, never to a stored entry.
    const refused = await readThrough(fakeCache().cache, upstream, { t: T0 }, noAccessRules, lock).serve(decideFor(url, caller(9)), T0);
    expect(refused).toMatchObject({ kind: 'relay', response: noAccess });
    expect(paths).toEqual(['/api/v1/projects/5', '/api/v1/projects/1/runs']);
    expect(accepted).toEqual([true, true, false]);
  });

  it('after a 429, asks nothing more upstream for that user until Retry-After has passed', async () => {
    const { cache } = fakeCache();
    const { upstream, paths } = fakeUpstream(() => json(429, makeErrorBody('Slow down.'), { 'retry-after': '3' }));
    const clock = { t: T0 };
    const rt = readThrough(cache, upstream, clock);
    const first = await rt.serve(decideFor(url, caller(7)), T0);
    expect(first).toMatchObject({ kind: 'relay', outcome: { upstreamStatus: 429 } });
    clock.t = T0 + 1_000;
    const blocked = await rt.serve(decideFor(`${url}?per_page=15`, caller(7)), clock.t);
    expect(blocked).toMatchObject({ kind: 'local', status: 429, headers: { 'retry-after': '2' } });
    expect(paths.length).toBe(1);
    await rt.serve(decideFor(url, caller(8)), clock.t);
    expect(paths.length).toBe(2);
  });

  it('asks again with its own share of the lanes a follower coalesced onto an admin’s fill refused for that admin’s share', async () => {
    const asked: LaneCaller[] = [];
    const upstream: Upstream = {
      // User 1 is past their share of the fill lanes (fair-lane.ts); anyone else is served.
      get: async (_path, _headers, caller) => {
        asked.push(caller);
        if (caller === 1) throw new UpstreamError('queue-full', 'too many of this caller’s requests waiting for the upstream');
        return json(200, { result: [] });
      },
      close: async () => undefined,
    };
    const rt = readThrough(fakeCache().cache, upstream, { t: T0 });
    const flooder = rt.serve(decideFor('/api/v1/users', caller(1, T0 + 1)), T0);
    const other = rt.serve(decideFor('/api/v1/users', caller(4, T0 + 1)), T0);
    expect(await flooder).toMatchObject({ kind: 'local', status: 503 });
    expect(await other).toMatchObject({ kind: 'entry', outcome: { upstreamStatus: 200 } });
    expect(asked).toEqual([1, 4]);
  });

  it('does not look up what the caller may not read: an unverified admin goes upstream under their own fill key', async () => {
    const { cache, entries } = fakeCache();
    const { upstream, paths } = fakeUpstream(() => json(403, makeErrorBody('Admins only.')));
    const d = decideFor('/api/v1/users', caller(2));
    entries.set(d.key, makeEntry(T0));
    const served = await readThrough(cache, upstream, { t: T0 }).serve(d, T0);
    expect(served).toMatchObject({ kind: 'relay', outcome: { upstreamStatus: 403 } });
    expect(paths).toEqual(['/api/v1/users']);
    expect(entries.has(d.key)).toBe(true);
  });
});
