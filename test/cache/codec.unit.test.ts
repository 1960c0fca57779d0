import { randomBytes } from 'node:crypto';
import { gunzipSync, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import {
  decodeEntry,
  decodeValue,
  deriveMacKey,
  encodeEntry,
  encodeValue,
  FORMAT_VERSION,
  openEntry,
  openValue,
  storedKeyId,
  type ValueGuard,
} from '../../src/cache/redis/codec.js';
import { assertKeyring, type Keyring } from '../../src/cache/redis/keyring.js';
import { gzipEtagOf, readBody, type CacheEntry } from '../../src/cache/entry.js';
import { makeEntry, makeListPageBody } from './fixtures.js';

const k1 = randomBytes(32);
const k2 = randomBytes(32);
const ring1: Keyring = { keys: { k1 }, current: 'k1' };
const ring12: Keyring = { keys: { k1, k2 }, current: 'k2' };
const now = 1_700_000_000_000;
/** Without a keyring, values are MAC'd under a key derived from the HMAC secret. */
const macKey = deriveMacKey(randomBytes(32));
const KEY = 'tmc:{u:5|v1|listProjects||}';
const guardOf = (keyring?: Keyring): ValueGuard => (keyring ? { keyring } : { macKey });
const enc = (entry: CacheEntry, keyring?: Keyring): Promise<Buffer> => encodeEntry(entry, guardOf(keyring), KEY);
const dec = (stored: Buffer, keyring?: Keyring): Promise<CacheEntry | undefined> => decodeEntry(stored, guardOf(keyring), KEY);
const encV = (plain: Buffer, keyring?: Keyring): Buffer => encodeValue(plain, guardOf(keyring), KEY);
const decV = (stored: Buffer, keyring?: Keyring): Buffer | undefined => decodeValue(stored, guardOf(keyring), KEY);

describe('codec', () => {
  it('round-trips an entry, every field equal, with and without a keyring', async () => {
    const entry = makeEntry(now, { body: makeListPageBody(100) });
    for (const keyring of [undefined, ring1]) {
      const decoded = await dec(await enc(entry, keyring), keyring);
      const { body, gzip, gzipEtag, bodyLength, ...stored } = decoded!;
      expect(body.equals(entry.body)).toBe(true);
      expect(stored).toEqual(omitBody(entry));
      // Stored gzip-encoded: the variant served as it is to clients that accept gzip.
      expect(gunzipSync(gzip!).equals(entry.body)).toBe(true);
      expect(gzipEtag).toBe(gzipEtagOf(entry.etag));
      expect(bodyLength).toBe(entry.body.length);
    }
  });

  it('decodes the identity body only when it is asked for', async () => {
    const entry = makeEntry(now, { body: makeListPageBody(100) });
    const decoded = (await dec(await enc(entry)))!;
    // An accessor, not a field: nothing is decoded until `body` is read.
    expect(Object.getOwnPropertyDescriptor(decoded, 'body')).toBeUndefined();
    expect(typeof Object.getOwnPropertyDescriptor(Object.getPrototypeOf(decoded), 'body')?.get).toBe('function');
    expect(decoded.body).toBe(decoded.body); // decoded once, then kept
  });

  it('decodes the same identity bytes whether the value is MAC-bound, sealed or unprotected', async () => {
    const entry = makeEntry(now, { body: makeListPageBody(100) });
    // MAC-bound and sealed values are inflated from their raw deflate stream (the tag vouches for
    // the bytes); an unprotected one goes through gunzip and its CRC-32.
    for (const guard of [{ macKey }, { keyring: ring1 }, {}] as ValueGuard[]) {
      const decoded = (await decodeEntry(await encodeEntry(entry, guard, KEY), guard, KEY))!;
      expect(decoded.body.equals(entry.body)).toBe(true);
      expect(decoded.body.length).toBe(entry.body.length);
    }
  });

  it('an authentic value whose gzip stream is corrupt, or decodes to another length, is no entry', async () => {
    const body = makeListPageBody(100);
    const corrupt = gzipSync(body);
    corrupt.fill(0xff, 40, 80); // inside the deflate stream; header and trailer (ISIZE) intact
    const shorter = gzipSync(body.subarray(0, body.length - 10));
    shorter.writeUInt32LE(body.length, shorter.length - 4); // ISIZE claims the full length
    for (const gzip of [corrupt, shorter]) {
      // Written through the codec itself, so the MAC is valid: only decoding can catch it.
      const entry: CacheEntry = { ...makeEntry(now, { body }), gzip, gzipEtag: '"x-gz"' };
      const decoded = await dec(await enc(entry));
      expect(decoded).toBeDefined();
      expect(readBody(decoded!)).toBeUndefined();
    }
  });

  it('refuses a gzip body whose trailer does not match the announced length', async () => {
    const entry = makeEntry(now, { body: makeListPageBody(100) });
    const stored = await enc(entry);
    const tampered = Buffer.from(stored);
    tampered.writeUInt32LE(1, tampered.length - 4);
    expect(await dec(tampered)).toBeUndefined();
  });

  it('shrinks a 100-item JSON list page several times', async () => {
    const body = makeListPageBody(100);
    const stored = await enc(makeEntry(now, { body }));
    expect(body.length / stored.length).toBeGreaterThan(5);
  });

  it('stores a small body as it is and still round-trips it', async () => {
    const entry = makeEntry(now, { body: Buffer.from('{}') });
    const stored = await enc(entry);
    expect(stored.includes(Buffer.from('{}'))).toBe(true);
    expect((await dec(stored))!.body.toString()).toBe('{}');
  });

  it('leaves no plaintext in a sealed value, and opens it only with the key', async () => {
    const entry = makeEntry(now, { body: Buffer.from('{"name":"secret plan for login smoke"}'.repeat(50)) });
    const sealed = await enc(entry, ring1);
    for (const fragment of ['secret plan', 'project:5', 'content-type', entry.etag]) {
      expect(sealed.includes(Buffer.from(fragment))).toBe(false);
    }
    expect(await dec(sealed)).toBeUndefined();
    expect(await dec(sealed, { keys: { k1: k2 }, current: 'k1' })).toBeUndefined();
  });

  it('opens values sealed with an older key after rotation; new values carry the current key id', async () => {
    const entry = makeEntry(now);
    const old = await enc(entry, ring1);
    const fresh = await enc(entry, ring12);
    expect([storedKeyId(old), storedKeyId(fresh)]).toEqual(['k1', 'k2']);
    expect((await dec(old, ring12))?.etag).toBe(entry.etag);
    expect((await dec(fresh, ring12))?.etag).toBe(entry.etag);
    expect(await dec(fresh, ring1)).toBeUndefined();
  });

  it('answers undefined, never throws, for anything it cannot trust', async () => {
    const sealed = await enc(makeEntry(now), ring1);
    const plain = await enc(makeEntry(now));
    const tampered = Buffer.from(sealed);
    tampered[tampered.length - 20]! ^= 1;
    const cases: Array<[string, Buffer, Keyring | undefined]> = [
      ['a flipped ciphertext bit', tampered, ring1],
      ['another format version', Buffer.concat([Buffer.from([FORMAT_VERSION + 1]), sealed.subarray(1)]), ring1],
      ['an unknown flag', Buffer.concat([Buffer.from([FORMAT_VERSION, 0x40]), plain.subarray(2)]), undefined],
      ['a plaintext value while a keyring is set', plain, ring1],
      ['a truncated value', sealed.subarray(0, 10), ring1],
      ['an empty value', Buffer.alloc(0), undefined],
      ['random bytes', randomBytes(200), undefined],
      ['a small value in place of an entry', encV(Buffer.from('{}')), undefined],
    ];
    for (const [, stored, keyring] of cases) expect(await dec(stored, keyring)).toBeUndefined();
  });

  it('seals small values the same way', () => {
    const sealed = encV(Buffer.from('{"userId":7}'), ring1);
    expect(sealed.includes(Buffer.from('userId'))).toBe(false);
    expect(decV(sealed, ring12)?.toString()).toBe('{"userId":7}');
    expect(decV(sealed)).toBeUndefined();
    expect(decV(encV(Buffer.from('x')))?.toString()).toBe('x');
  });

  it('binds every value to its key: under another key it is tampered, with or without a keyring', async () => {
    for (const keyring of [undefined, ring1]) {
      const guard = guardOf(keyring);
      const stored = await enc(makeEntry(now), keyring);
      expect((await openEntry(stored, guard, KEY)).kind).toBe('ok');
      expect(await openEntry(stored, guard, 'tmc:{admin|v1|listUsers||}')).toMatchObject({ kind: 'rejected', reason: 'tampered' });
      const value = encV(Buffer.from('{"userId":1}'), keyring);
      expect(openValue(value, guard, 'tmc:json:identity:other')).toMatchObject({ kind: 'rejected', reason: 'tampered' });
    }
    // A MAC key derived from another secret does not verify either.
    expect(await openEntry(await enc(makeEntry(now)), { macKey: deriveMacKey(randomBytes(32)) }, KEY)).toMatchObject({ reason: 'tampered' });
  });

  it('refuses, as invalid, an authentic entry that tm-cache would never have stored', async () => {
    const cases: Array<Partial<CacheEntry>> = [
      { status: 99 },
      { status: 500 },
      { headers: { 'content-type': 'application/json\r\nx-injected: 1' } },
      { headers: { 'set-cookie': 'a=b' } },
      { etag: 'W/"weak"' },
      { freshUntil: now - 1 },
    ];
    for (const change of cases) {
      const stored = await enc({ ...makeEntry(now), ...change });
      expect(await openEntry(stored, { macKey }, KEY), JSON.stringify(change)).toMatchObject({ kind: 'rejected', reason: 'invalid' });
    }
  });

  it("reads back the instance's CORS headers an entry keeps (cache.storedHeaders), and refuses one with a control character", async () => {
    const cors = {
      'access-control-allow-origin': 'https://dash.example.com',
      'access-control-allow-credentials': 'true',
      'access-control-expose-headers': 'ETag',
    };
    const entry = makeEntry(now);
    const opened = await openEntry(await enc({ ...entry, headers: { ...entry.headers, ...cors } }), { macKey }, KEY);
    expect(opened.kind).toBe('ok');
    expect(opened.kind === 'ok' ? opened.value.headers : {}).toMatchObject(cors);
    const planted = await enc({ ...entry, headers: { ...entry.headers, 'access-control-allow-origin': 'https://a\r\nset-cookie: x=1' } });
    expect(await openEntry(planted, { macKey }, KEY)).toMatchObject({ kind: 'rejected', reason: 'invalid' });
  });

  it('refuses a keyring with a short key or a missing current id, naming it', () => {
    expect(() => assertKeyring({ keys: { a: randomBytes(16) }, current: 'a' })).toThrow(/"a" must be 32 bytes/);
    expect(() => assertKeyring({ keys: { a: k1 }, current: 'b' })).toThrow(/current "b"/);
  });
});

function omitBody(entry: CacheEntry): Omit<CacheEntry, 'body'> {
  const { body: _body, ...rest } = entry;
  return rest;
}
