/**
 * What someone who can read Redis learns (the README's threat model): after real traffic of an
 * admin and a member through a replica, every key and value in Redis is read with an ordinary
 * client, as `redis-cli --scan` and `GET` would.
 *
 * - With encryption keys: key names (user ids, operations, queries, tags, credential HMACs), and
 *   nothing of any body, email or token.
 * - Without: the bodies too.
 * - Never a token in the clear, in any form, nor any secret: the HMAC secret is configured (or
 *   derived from the encryption keys), never kept in Redis (redis-secret.test.ts).
 */
import { inflateRawSync } from 'node:zlib';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import type { TokenInfo } from '../helpers/emulator.js';
import type { DeepPartial } from '../helpers/proxy.js';
import { replicasOverEmulatorAndRedis } from '../helpers/replicas.js';
import { until } from '../helpers/wait.js';

const env = replicasOverEmulatorAndRedis();
const ENCRYPTION_KEY = Buffer.alloc(32, 4).toString('hex');
const HMAC_SECRET = Buffer.alloc(32, 5);

interface Dump {
  readonly keys: string[];
  /** Every value's bytes, and for values that gunzip (anywhere in them), those bytes too. */
  readonly text: string;
  readonly values: Map<string, Buffer>;
}

async function dump(prefix: string): Promise<Dump> {
  const keys = (await env.client.keys(`${prefix}*`)).sort();
  const values = new Map<string, Buffer>();
  const texts: string[] = [];
  for (const key of keys) {
    const type = await env.client.type(key);
    // Strings (entries, identities), sets (tags), sorted sets (the keys of the pages derived
    // answers may come from, with their freshness), and the fleet budget's hash (rates and
    // times, no caller's data): all read.
    const value =
      type === 'string'
        ? await env.client.getBuffer(key)
        : type === 'hash'
          ? Buffer.from(
              Object.entries(await env.client.hgetall(key))
                .flat()
                .join('\n'),
            )
          : type === 'zset'
            ? Buffer.from((await env.client.zrange(key, 0, -1, 'WITHSCORES')).join('\n'))
            : Buffer.from((await env.client.smembers(key)).join('\n'));
    if (value === null) continue;
    values.set(key, value);
    texts.push(value.toString('latin1'), ...gunzipEverywhere(value));
  }
  return { keys, values, text: texts.join('\n') };
}

/**
 * A reader inflates every gzip member it finds (1f 8b 08, a 10-byte header, then deflate):
 * compressed is not secret. Raw inflate stops at the end of the deflate data, whatever follows.
 */
function gunzipEverywhere(value: Buffer): string[] {
  const out: string[] = [];
  for (let i = value.indexOf(0x1f); i >= 0 && i < value.length - 10; i = value.indexOf(0x1f, i + 1)) {
    if (value[i + 1] !== 0x8b || value[i + 2] !== 0x08) continue;
    try {
      out.push(inflateRawSync(value.subarray(i + 10)).toString('utf8'));
    } catch {
      // not a gzip member here
    }
  }
  return out;
}

/**
 * One replica's traffic, with command and connect timeouts no loaded CI machine reaches: a
 * timed-out command spends the request's Redis budget (budget.ts), and a replica not connected
 * within its connect timeout serves from memory alone; either way its writes would never land.
 */
async function traffic(prefix: string, overrides: DeepPartial<Config>): Promise<{ admin: TokenInfo; member: TokenInfo; email: string }> {
  const p = await env.replica({
    ...overrides,
    cache: { redis: { url: env.redis.url, keyPrefix: prefix, commandTimeoutMs: 5_000, connectTimeoutMs: 10_000, ...overrides.cache?.redis } },
  });
  const [admin, member] = [env.emulator.tokens.admin(), env.emulator.tokens.member(0)];
  const users = await p.get('/api/v1/users', admin.token);
  expect(users.status).toBe(200);
  expect((await p.get(`/api/v1/projects/${member.project_ids[0]}/runs?expands=users`, member.token)).status).toBe(200);
  // Redis writes never delay a response: wait for the entries (with their project tags) to land.
  const wanted: Record<string, number> = { '{*listRuns*': 1, '{*listUsers*': 1, 'json:identity:*': 2, 'tag:project:*': 1 };
  const seen: Record<string, number> = {};
  const landed = async () => {
    for (const pattern of Object.keys(wanted)) seen[pattern] = (await env.client.keys(`${prefix}${pattern}`)).length;
    return Object.entries(wanted).every(([pattern, count]) => seen[pattern]! >= count);
  };
  // A bound for a loaded CI machine, not a timing assertion; on failure, say what was missing.
  await until(landed, 30_000).catch((err: Error) => {
    throw new Error(`${err.message}: wanted ${JSON.stringify(wanted)} under ${prefix}, saw ${JSON.stringify(seen)}`);
  });
  const email = (users.json().result as { email: string }[])[0]!.email;
  return { admin, member, email };
}

describe('someone who can read Redis', () => {
  let sealed: Dump;
  let plain: Dump;
  let plainConfigured: Dump;
  let who: { admin: TokenInfo; member: TokenInfo; email: string };

  beforeAll(async () => {
    who = await traffic('sealed:', { cache: { redis: { encryptionKeys: { k1: ENCRYPTION_KEY }, encryptionKeyId: 'k1' } } });
    sealed = await dump('sealed:');
    await traffic('plain:', { identity: { hmacSecret: HMAC_SECRET.toString('hex') } });
    plain = await dump('plain:');
    await traffic('configured:', {
      identity: { hmacSecret: HMAC_SECRET.toString('hex') },
      cache: { redis: { encryptionKeys: { k1: ENCRYPTION_KEY }, encryptionKeyId: 'k1' } },
    });
    plainConfigured = await dump('configured:');
  });

  it('with encryption keys, learns key names (user ids, operations, queries, tags, credential HMACs) and no body, email or token', () => {
    expect(sealed.keys.some((k) => k.includes(`u:${who.member.user_id}|v1|listRuns|`))).toBe(true);
    expect(sealed.keys.some((k) => k.startsWith('sealed:tag:project:'))).toBe(true);
    expect(sealed.keys.some((k) => k.startsWith('sealed:json:identity:'))).toBe(true);
    expect(sealed.text).not.toContain(who.email);
    expect(sealed.text).not.toContain('"result"');
    expect(sealed.text).not.toContain(`"user_id":${who.member.user_id}`);
  });

  it('without encryption keys, reads the bodies (emails included)', () => {
    expect(plain.text).toContain(who.email);
    expect(plain.text).toContain('"result"');
  });

  it('finds no HMAC secret in Redis in any configuration (encryption keys alone, identity.hmacSecret, both)', () => {
    for (const d of [sealed, plain, plainConfigured]) expect(d.keys.filter((k) => k.includes('secret'))).toEqual([]);
    const secrets = [HMAC_SECRET, Buffer.from(ENCRYPTION_KEY, 'hex')];
    for (const d of [sealed, plain, plainConfigured]) {
      for (const value of d.values.values()) for (const secret of secrets) expect(value.includes(secret)).toBe(false);
    }
  });

  it('never finds a token, in any form', () => {
    for (const d of [sealed, plain, plainConfigured]) {
      for (const token of [who.admin.token, who.member.token]) {
        expect(d.text).not.toContain(token);
        expect(d.keys.join('\n')).not.toContain(token);
      }
    }
  });
});
