/**
 * What tm-cache reads back from Redis is validated before it is written to a socket, and no
 * failure while writing leaves a request unanswered.
 *
 * The planted entries here are authentic (written through a replica's own Redis tier, as a
 * writer holding the keys would: a buggy or compromised replica) but are not something tm-cache
 * stores: a status other than 200, a header value with CR/LF or NUL, a header it never stores, a
 * malformed ETag, times out of order. A victim replica with nothing in memory must answer each
 * request at once with the instance's own answer, and store that answer over the entry.
 */
import { request } from 'undici';
import { beforeAll, describe, expect, it } from 'vitest';
import type { CacheEntry } from '../../src/cache/entry.js';
import { KEY_VERSION } from '../../src/cache/key.js';
import type { Config } from '../../src/config/schema.js';
import type { TokenInfo } from '../helpers/emulator.js';
import { httpGet, type DeepPartial, type TestProxy, type TestResponse } from '../helpers/proxy.js';
import { redisTierOf, replicasOverEmulatorAndRedis } from '../helpers/replicas.js';

/** A request that is not answered within this is a hang (a fill from the emulator takes milliseconds). */
const ANSWER_WITHIN_MS = 1_000;

const env = replicasOverEmulatorAndRedis();
let member: TokenInfo;
beforeAll(() => {
  member = env.emulator.tokens.member(0);
});

/** A replica sharing the test's Redis (or, with `redis: false`, memory only), connected. */
async function replica(redis = true): Promise<TestProxy> {
  const p = await env.replica(redis ? withRedis() : {});
  if (redis) expect(await redisTierOf(p).connection.ready(5_000)).toBe(true);
  return p;
}

// Derived answers off: the planted entries are pages of one list, which a page held (in memory or
// recorded in Redis) would answer derived; what is tested is the Redis tier's own reading.
const withRedis = (): DeepPartial<Config> => ({
  identity: { hmacSecret: Buffer.alloc(32, 5).toString('hex') },
  cache: { redis: { url: env.redis.url, commandTimeoutMs: 1_000 }, derive: { enabled: false } },
});

/** GET that fails the test if no complete answer arrives in time, instead of waiting forever. */
const upstreamJson = async (path: string): Promise<unknown> => (await httpGet(env.emulator.url + path, member.token)).json();

async function getWithin(url: string, token: string): Promise<TestResponse> {
  const res = await request(url, { headers: { authorization: `Bearer ${token}` }, headersTimeout: ANSWER_WITHIN_MS, bodyTimeout: ANSWER_WITHIN_MS });
  const body = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, headers: res.headers, body, json: () => JSON.parse(body.toString('utf8')) };
}

function plantedEntry(change: Record<string, unknown>): CacheEntry {
  const now = Date.now();
  const etag = '"planted-etag"';
  const entry = {
    status: 200,
    headers: { 'content-type': 'application/json', etag, 'cache-control': 'private', vary: 'Authorization, Accept-Encoding' },
    body: Buffer.from('{"planted":true}'),
    etag,
    storedAt: now,
    freshUntil: now + 60_000,
    staleWhileRevalidateUntil: now + 120_000,
    staleIfErrorUntil: now + 300_000,
    tags: [],
  };
  return { ...entry, ...change, headers: { ...entry.headers, ...(change['headers'] as object | undefined) } } as CacheEntry;
}

const PLANTED: Array<[string, Record<string, unknown>]> = [
  ['status 99', { status: 99 }],
  ['status 500', { status: 500 }],
  ['a content-type with CR LF', { headers: { 'content-type': 'application/json\r\nx-injected: 1' } }],
  ['a header value with NUL', { headers: { vary: 'Authorization\u0000' } }],
  ['a header tm-cache never stores', { headers: { 'set-cookie': 'session=planted' } }],
  ['a malformed ETag', { etag: '"unterminated', headers: { etag: '"unterminated' } }],
  ['times out of order', { storedAt: Date.now() + 3_600_000 }],
];

describe('an entry read back from Redis that tm-cache would not have stored', () => {
  it.each(PLANTED.map(([what, change], i) => [what, change, i + 2] as const))(
    'is a miss answered at once (%s), counted and replaced by the refill',
    async (_what, change, page) => {
      const path = `/api/v1/projects?page=${page}`;
      const key = `u:${member.user_id}|${KEY_VERSION}|listProjects||page=${page}`;
      await redisTierOf(await replica()).set(key, plantedEntry(change));

      const victim = await replica();
      const res = await getWithin(victim.url + path, member.token);
      expect(res.status).toBe(200);
      expect(res.headers['cache-status']).toMatch(/fwd=uri-miss/);
      expect(res.json()).toEqual(await upstreamJson(path));
      // Counted on every read (the look-up, and the fill lock's look for an entry stored meanwhile).
      expect(redisTierOf(victim).connection.stats().byKind['invalid']).toBeGreaterThanOrEqual(1);
      // Replaced in Redis: the next fresh replica reads the victim's refill, not the planted entry.
      const next = await replica();
      expect((await getWithin(next.url + path, member.token)).json()).not.toEqual({ planted: true });
    },
  );
});

describe('a request whose stored answer node refuses to write', () => {
  const bad = plantedEntry({ headers: { 'content-type': 'application/json\r\nx-injected: 1' } });

  it('is answered by the instance when the entry came asynchronously (a lower tier)', async () => {
    const p = await replica(false);
    // As if a tier had let it through: the pipeline must still answer (writeHead throws).
    Object.assign(p.cache, { get: () => Promise.resolve({ entry: bad, tier: 'redis' }) });
    const res = await getWithin(`${p.url}/api/v1/projects?page=20`, member.token);
    expect(res.status).toBe(200);
    expect(res.headers['x-injected']).toBeUndefined();
    expect(res.json()).toEqual(await upstreamJson('/api/v1/projects?page=20'));
  });

  it('is answered by the instance when the entry came synchronously (memory)', async () => {
    const p = await replica(false);
    await p.get('/api/v1/projects?page=21', member.token); // the caller is known: the sync path
    Object.assign(p.cache, { get: () => ({ entry: bad, tier: 'memory' }) });
    const res = await getWithin(`${p.url}/api/v1/projects?page=21`, member.token);
    expect(res.status).toBe(200);
    expect(res.headers['x-injected']).toBeUndefined();
    expect(res.json()).toEqual(await upstreamJson('/api/v1/projects?page=21'));
  });
});
