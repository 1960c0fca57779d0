/**
 * The stored form of a CacheEntry in Redis: a small binary header, the metadata as compact
 * JSON and the compressed body, optionally sealed with AES-256-GCM.
 *
 * Codec chosen by measurement (test/bench/codec.ts, Node 20.20, 2 cores; a 100-item list page,
 * 92,886 bytes of JSON; median of 200 synchronous calls):
 *
 *   codec            bytes  ratio  encode µs  decode µs
 *   brotli q1        14296    6.5        190        218
 *   brotli q3        12707    7.3        337         73
 *   brotli q4        12185    7.6        522         69
 *   brotli q5        10549    8.8        939         64   <- first choice
 *   brotli q6        10289    9.0       1038         61
 *   brotli q9         9988    9.3       9168         59
 *   brotli q11        8944   10.4     100377         84
 *   gzip 1 / 6 / 9   15437 / 11704 / 10923 (6.0 / 7.9 / 8.5), encode 228 / 699 / 1240, decode ~60   <- gzip 6 chosen
 *   deflateRaw 6     11686    7.9        671         42
 *   lz4 (lz4-napi)   20919    4.4         47         17
 *   zstd 1 / 3 / 6   12678 / 12370 / 11440 (7.3 / 7.5 / 8.1), encode 82 / 96 / 590, decode ~34
 *
 * Why gzip 6, not brotli q5 (the first choice, on ratio alone): the stored bytes are also a
 * representation clients accept as they are. Browsers, curl --compressed, python-requests and
 * undici all send `Accept-Encoding: gzip`; brotli is not universal. So a Redis hit for such a
 * client sends the stored bytes with `Content-Encoding: gzip` and decodes nothing, and the memory
 * tier keeps the same bytes beside the identity body for memory hits (11 KB written instead of
 * 90 KB). The ratio stays ~8x (7.9 vs 8.8); decoding, for clients that want identity, is sync
 * and sized from the stored length (~45 µs for 90 KB, against ~65 µs for brotli, and ~210 µs
 * through the async zlib API, measured by the bench profile). Encoding (~0.7 ms per 90 KB) runs
 * once per fill (withGzipVariant: at once when small, on the libuv pool when large).
 * zstd 3 would encode 10x faster at 7.5x, but zstd-napi compiles with node-gyp at install (no
 * prebuilt binary reachable), Node 20 has no built-in zstd, and no client accepts it yet; lz4 is
 * fast but only 4.4x and not an HTTP content coding.
 * Bodies under MIN_COMPRESS_BYTES are stored as they are: the saving is not worth a pass.
 */
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';
import * as zlib from 'node:zlib';
import { bodyLengthOf, gzipEtagOf, whyNotStorable, type CacheEntry, type StoredMeta } from '../entry.js';
import { openSealed, seal, sealedKeyId, type Keyring } from './keyring.js';

export type { Keyring } from './keyring.js';

/**
 * Bumped whenever the layout changes: an older or newer value is a miss, never an error.
 * 3: every value is bound to the Redis key it is stored under (AAD or MAC, below).
 */
export const FORMAT_VERSION = 3;
const GZIP_OPTIONS = { level: 6 } as const;
const MIN_COMPRESS_BYTES = 1024;
/** A decoded body is never larger: a planted "decompression bomb" fails (→ a miss) instead. */
const MAX_DECODED_BODY_BYTES = 64 * 1024 * 1024;

const FLAG_GZIP = 0b01;
/** The payload is sealed (keyring.ts), the Redis key in its associated data. */
const FLAG_SEALED = 0b10;
/** The payload is followed by an HMAC-SHA256 over the Redis key and the value (no keyring). */
const FLAG_MAC = 0b100;
const PROTECTION = FLAG_SEALED | FLAG_MAC;
/** Marks a small sealed value (JSON, secret) so it can never be mistaken for an entry. */
const FLAG_VALUE = 0b1000_0000;
const META_LENGTH_BYTES = 4;
const MAC_BYTES = 32;
/** RFC 5869 `info`: the MAC key is for this one use, never the identity HMAC secret itself. */
const MAC_KEY_INFO = 'tm-cache redis value binding v1';

const gzipAsync = promisify(zlib.gzip);

/**
 * How values are bound to the key they are stored under. With a keyring: sealed, the key in the
 * GCM associated data. Else with a MAC key: an HMAC over key and value. With neither: as they are
 * (codec benches and unit tests only: a replica always binds, redis-connection.ts `bind`).
 */
export interface ValueGuard {
  readonly keyring?: Keyring | undefined;
  readonly macKey?: Buffer | undefined;
}

/**
 * What a stored value turned out to be: the value; `foreign` (another version, key id or kind of
 * protection: maybe another replica's during a rollout or rotation, so left in place); or
 * `rejected`, a value of our own form that fails authentication (`tampered`: not written for
 * this key, or altered, or written under another secret) or validation (`invalid`). Either is a
 * miss, counted; neither is deleted (redis-connection.ts `refuse`).
 */
export type Decoded<T> =
  | { readonly kind: 'ok'; readonly value: T }
  | { readonly kind: 'foreign' }
  | { readonly kind: 'rejected'; readonly reason: 'tampered' | 'invalid'; readonly detail: string };

const FOREIGN = Object.freeze({ kind: 'foreign' as const });
const rejected = (reason: 'tampered' | 'invalid', detail: string): Decoded<never> => ({ kind: 'rejected', reason, detail });

/** RFC 5869 `info` of the identity HMAC secret when it is derived from an encryption key. */
const IDENTITY_SECRET_INFO = 'tm-cache identity hmac secret v1';

/**
 * The identity HMAC secret of replicas configured with encryption keys but no
 * `identity.hmacSecret`: derived (HKDF-SHA256) from the current encryption key, so every replica
 * with the same keys computes the same one, and Redis never holds it. Rotating the current key
 * changes it: identities are then looked up again once (configure `identity.hmacSecret` to keep
 * them across a rotation).
 */
export function deriveIdentitySecret(encryptionKey: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', encryptionKey, Buffer.alloc(0), IDENTITY_SECRET_INFO, 32));
}

/** The MAC key for values, from the identity HMAC secret: HKDF-SHA256 (RFC 5869), no salt, a label. */
export function deriveMacKey(secret: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', secret, Buffer.alloc(0), MAC_KEY_INFO, 32));
}

/**
 * Layout: [version u8][flags u8: gzip, sealed | mac][payload][mac?]. The payload, sealed when a
 * keyring is given (keyring.ts adds key id, IV and tag), is [metaLength u32 BE][meta JSON][body
 * (compressed)]. Metadata is sealed with the body: headers and tags (project ids) are not for
 * Redis readers. `boundTo` is the Redis key the value is written under.
 */
export async function encodeEntry(entry: CacheEntry, guard: ValueGuard, boundTo: string): Promise<Buffer> {
  const withGzip = await withGzipVariant(entry);
  const compressed = withGzip.gzip !== undefined;
  const body = withGzip.gzip ?? withGzip.body;
  const meta = Buffer.from(JSON.stringify(metaOf(withGzip)));
  const plain = Buffer.allocUnsafe(META_LENGTH_BYTES + meta.length + body.length);
  plain.writeUInt32BE(meta.length, 0);
  meta.copy(plain, META_LENGTH_BYTES);
  body.copy(plain, META_LENGTH_BYTES + meta.length);
  return protect(plain, compressed ? FLAG_GZIP : 0, guard, boundTo);
}

/** Will `withGzipVariant` make a variant of this entry (none yet, and large enough to be worth it)? */
export function lacksGzipVariant(entry: CacheEntry): boolean {
  return entry.gzip === undefined && bodyLengthOf(entry) >= MIN_COMPRESS_BYTES;
}

/**
 * Bodies up to this size are compressed on the event loop (`gzipSync`), larger ones on the libuv
 * pool. zlib's asynchronous path costs about 100–140 µs of main-thread CPU per call whatever the
 * size (a deflate state allocated, stream machinery, the hop to the pool and back), more than
 * compressing a typical answer outright: `gzipSync` of 1.4 KB took 34 µs and of 9 KB 51 µs against
 * 150–176 µs for the asynchronous call, while 38 KB blocks the loop about 160 µs and 158 KB about
 * 600 µs (measured with node 20 on this project's machines; level 6).
 */
const SYNC_GZIP_MAX_BYTES = 32 * 1024;

/**
 * The entry with its gzip variant (`gzip`, `gzipEtag`) when it has none yet: compressed at once
 * when small (SYNC_GZIP_MAX_BYTES), on the libuv pool when large; the entry itself when it has
 * one or is too small to be worth it.
 */
export async function withGzipVariant(entry: CacheEntry): Promise<CacheEntry> {
  const length = bodyLengthOf(entry);
  if (entry.gzip !== undefined || length < MIN_COMPRESS_BYTES) return entry;
  const gzip = length <= SYNC_GZIP_MAX_BYTES ? zlib.gzipSync(entry.body, GZIP_OPTIONS) : await gzipAsync(entry.body, GZIP_OPTIONS);
  return { ...entry, gzip, gzipEtag: gzipEtagOf(entry.etag) };
}

/**
 * What a reader makes of an authentic entry's metadata before it believes it (claims.ts): the
 * metadata, bounded, or why it is refused.
 */
export type ClaimCheck = (meta: StoredMeta) => StoredMeta | string;

/**
 * The entry stored under `boundTo`, checked: written for that key under this guard, something
 * tm-cache would have stored (entry.ts whyNotStorable) before it can reach a socket, and with
 * what it claims bounded by `claims` (the reader's configuration). Synchronous: nothing in it waits
 * (the MAC or tag check and the metadata are a few µs; the body is inflated only when asked for),
 * and a promise here would cost every Redis-tier hit a microtask turn.
 */
export function openEntry(stored: Buffer, guard: ValueGuard, boundTo: string, claims?: ClaimCheck): Decoded<CacheEntry> {
  if (stored.length < 2 || stored[0] !== FORMAT_VERSION) return FOREIGN;
  const flags = stored[1]!;
  if ((flags & ~(FLAG_GZIP | PROTECTION)) !== 0) return FOREIGN;
  const opened = openPayload(stored, guard, boundTo);
  if (!Buffer.isBuffer(opened)) return opened;
  try {
    return parseEntry(opened, (flags & FLAG_GZIP) !== 0, (flags & PROTECTION) !== 0, claims);
  } catch (error) {
    return rejected('invalid', error instanceof Error ? error.message : String(error));
  }
}

/** As `openEntry`, the entry or undefined (tests, benches). */
export async function decodeEntry(stored: Buffer, guard: ValueGuard, boundTo: string): Promise<CacheEntry | undefined> {
  const decoded = openEntry(stored, guard, boundTo);
  return decoded.kind === 'ok' ? decoded.value : undefined;
}

/** `authenticated`: the value passed its MAC or GCM tag (openPayload), so its bytes are the ones written. */
function parseEntry(plain: Buffer, gzipped: boolean, authenticated: boolean, claims: ClaimCheck | undefined): Decoded<CacheEntry> {
  const metaLength = plain.readUInt32BE(0);
  if (META_LENGTH_BYTES + metaLength > plain.length) return rejected('invalid', 'metadata length');
  const parsed = parseMeta(plain.subarray(META_LENGTH_BYTES, META_LENGTH_BYTES + metaLength));
  const meta = typeof parsed === 'string' || claims === undefined ? parsed : claims(parsed);
  if (typeof meta === 'string') return rejected('invalid', meta);
  const rawBody = plain.subarray(META_LENGTH_BYTES + metaLength);
  if (!gzipped) return { kind: 'ok', value: { ...meta, body: Buffer.from(rawBody) } };
  if (meta.bodyLength === undefined || meta.bodyLength > MAX_DECODED_BODY_BYTES) return rejected('invalid', 'bodyLength');
  if (!looksLikeGzipOf(rawBody, meta.bodyLength)) return rejected('invalid', 'gzip stream');
  // A view, not a copy: the stored value was read (or decrypted) into a buffer of our own.
  return { kind: 'ok', value: lazyEntry(meta, meta.bodyLength, rawBody, authenticated) };
}

/** The key id an entry or value was sealed with; undefined when it is not sealed. */
export function storedKeyId(stored: Buffer): string | undefined {
  return stored.length > 2 && stored[1]! & FLAG_SEALED ? sealedKeyId(stored.subarray(2)) : undefined;
}

/** A small value (JSON, a secret) in the same envelope as entries: versioned, bound to `boundTo`. */
export function encodeValue(plain: Buffer, guard: ValueGuard, boundTo: string): Buffer {
  return protect(plain, FLAG_VALUE, guard, boundTo);
}

export function openValue(stored: Buffer, guard: ValueGuard, boundTo: string): Decoded<Buffer> {
  if (stored.length < 2 || stored[0] !== FORMAT_VERSION || (stored[1]! & ~PROTECTION) !== FLAG_VALUE) return FOREIGN;
  const opened = openPayload(stored, guard, boundTo);
  return Buffer.isBuffer(opened) ? { kind: 'ok', value: opened } : opened;
}

/** As `openValue`, the plaintext or undefined (tests). */
export function decodeValue(stored: Buffer, guard: ValueGuard, boundTo: string): Buffer | undefined {
  const decoded = openValue(stored, guard, boundTo);
  return decoded.kind === 'ok' ? decoded.value : undefined;
}

function protect(plain: Buffer, flags: number, guard: ValueGuard, boundTo: string): Buffer {
  if (guard.keyring) {
    const header = Buffer.from([FORMAT_VERSION, flags | FLAG_SEALED]);
    return Buffer.concat([header, seal(plain, guard.keyring, associatedData(header, boundTo))]);
  }
  const header = Buffer.from([FORMAT_VERSION, flags | (guard.macKey ? FLAG_MAC : 0)]);
  return Buffer.concat(guard.macKey ? [header, plain, macOf(guard.macKey, header, boundTo, plain)] : [header, plain]);
}

/**
 * The plaintext after the 2-byte header, if the value was written for `boundTo` under this guard.
 * The kind of protection must be the reader's own: with a keyring, a value without one could
 * have been planted by anyone with write access to Redis (cache poisoning); without one, a sealed
 * value cannot be read. Either is `foreign`, as is a key id this keyring does not hold.
 */
function openPayload(stored: Buffer, guard: ValueGuard, boundTo: string): Buffer | Decoded<never> {
  const mode = stored[1]! & PROTECTION;
  if (mode !== (guard.keyring ? FLAG_SEALED : guard.macKey ? FLAG_MAC : 0)) return FOREIGN;
  const header = stored.subarray(0, 2);
  const payload = stored.subarray(2);
  if (guard.keyring) {
    const keyId = sealedKeyId(payload);
    if (keyId === undefined || !Object.hasOwn(guard.keyring.keys, keyId)) return FOREIGN;
    return openSealed(payload, guard.keyring, associatedData(header, boundTo)) ?? rejected('tampered', 'authentication tag');
  }
  if (!guard.macKey) return payload;
  if (payload.length < MAC_BYTES) return rejected('tampered', 'truncated');
  const plain = payload.subarray(0, payload.length - MAC_BYTES);
  const mac = payload.subarray(payload.length - MAC_BYTES);
  return timingSafeEqual(mac, macOf(guard.macKey, header, boundTo, plain)) ? plain : rejected('tampered', 'mac');
}

/**
 * GCM associated data (NIST SP 800-38D §5.2.1.1: authenticated, not encrypted): the header and
 * the Redis key, length-prefixed so that no (key, key id) pair can read as another. A value
 * copied under another key fails its tag.
 */
function associatedData(header: Buffer, boundTo: string): Buffer {
  const key = Buffer.from(boundTo);
  const length = Buffer.allocUnsafe(4);
  length.writeUInt32BE(key.length, 0);
  return Buffer.concat([header, length, key]);
}

/** HMAC-SHA256 over header, length-prefixed Redis key and payload: the unencrypted binding. */
function macOf(macKey: Buffer, header: Buffer, boundTo: string, plain: Buffer): Buffer {
  return createHmac('sha256', macKey).update(associatedData(header, boundTo)).update(plain).digest();
}

/**
 * An entry read from Redis: the gzip bytes as stored, and the identity body decoded only when
 * something asks for it (a client without gzip), then kept. A gzip client never pays the decode.
 * The stream is checked up front as far as is free (magic bytes, and the trailer's ISIZE against
 * the announced length); a stream that still fails to decode makes the getter throw, which
 * `readBody` (entry.ts) turns into "no entry" for the callers that serve it.
 */
function lazyEntry(meta: StoredMeta, bodyLength: number, gzip: Buffer, authenticated: boolean): CacheEntry {
  return new StoredEntry(meta, bodyLength, gzip, authenticated);
}

/**
 * A class rather than an object literal with a getter: V8 keeps instances of one shape on its
 * fast path, where a literal with an accessor and a spread would be a dictionary-mode object.
 */
class StoredEntry implements CacheEntry {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly etag: string;
  readonly storedAt: number;
  readonly freshUntil: number;
  readonly staleWhileRevalidateUntil: number;
  readonly staleIfErrorUntil: number;
  readonly tags: readonly string[];
  readonly gzipEtag: string;
  #body: Buffer | undefined;

  readonly #authenticated: boolean;

  constructor(
    meta: StoredMeta,
    readonly bodyLength: number,
    readonly gzip: Buffer,
    authenticated: boolean,
  ) {
    this.#authenticated = authenticated;
    this.status = meta.status;
    this.headers = meta.headers;
    this.etag = meta.etag;
    this.storedAt = meta.storedAt;
    this.freshUntil = meta.freshUntil;
    this.staleWhileRevalidateUntil = meta.staleWhileRevalidateUntil;
    this.staleIfErrorUntil = meta.staleIfErrorUntil;
    this.tags = meta.tags;
    this.gzipEtag = meta.gzipEtag ?? gzipEtagOf(meta.etag);
  }

  get body(): Buffer {
    this.#body ??= gunzipKnownLength(this.gzip, this.bodyLength, this.#authenticated);
    return this.#body;
  }
}

/**
 * The identity bytes of a gzip member whose decoded length is known (and was checked against its
 * ISIZE), inflated into one output buffer: chunkSize is the length plus one byte, so that zlib
 * ends the stream with room to spare and neither allocates a second chunk nor concatenates (with
 * exactly the length it would allocate a spare chunk of that size, unused, on every decode).
 * An authenticated value (MAC or AES-GCM tag over these very bytes) is inflated as the raw
 * deflate stream inside the gzip wrapper (RFC 1952 §2.3: a 10-byte header when FLG is 0, as zlib
 * writes it; CRC-32 and ISIZE after), without recomputing the CRC-32 of the output: the tag is
 * the stronger check of the same bytes. Anything else goes through gunzip, CRC-32 checked.
 * Throws when the stream is corrupt or decodes to another length (readBody: no entry).
 */
function gunzipKnownLength(gzip: Buffer, length: number, authenticated: boolean): Buffer {
  const options = { chunkSize: Math.max(length + 1, zlib.constants.Z_MIN_CHUNK), maxOutputLength: MAX_DECODED_BODY_BYTES };
  const plainHeader = authenticated && gzip.length >= 18 && gzip[2] === 8 && gzip[3] === 0;
  const body = plainHeader ? zlib.inflateRawSync(gzip.subarray(10, gzip.length - 8), options) : zlib.gunzipSync(gzip, options);
  if (body.length !== length) throw new Error(`stored body decoded to ${body.length} bytes, ${length} announced`);
  return body;
}

/** RFC 1952: magic 1f 8b, and the last 4 bytes (ISIZE) are the decoded length mod 2^32. */
function looksLikeGzipOf(bytes: Buffer, length: number): boolean {
  return bytes.length >= 18 && bytes[0] === 0x1f && bytes[1] === 0x8b && bytes.readUInt32LE(bytes.length - 4) === length % 2 ** 32;
}

function metaOf(entry: CacheEntry): StoredMeta {
  const { status, headers, etag, storedAt, freshUntil, staleWhileRevalidateUntil, staleIfErrorUntil, tags, gzipEtag } = entry;
  return { status, headers, etag, storedAt, freshUntil, staleWhileRevalidateUntil, staleIfErrorUntil, tags, gzipEtag, bodyLength: bodyLengthOf(entry) };
}

/**
 * Metadata already parsed and found valid, by its exact text: a Redis-tier hit on a value read
 * before (an entry too large for memory, or evicted from it, read again and again) skips the
 * JSON parse and the checks, which cost about as much as the MAC check of a small entry, and the
 * garbage. Only authentic bytes get here (openPayload runs first), and the same text always
 * parses to the same metadata, so an answer from the memo is the answer a parse would give; it
 * is frozen, so no reader can change what the next one gets. Bounded in count and in text
 * length: past META_MEMO_ENTRIES the oldest goes (a Map iterates in insertion order). A refill
 * writes new times, so a new text: old ones age out.
 */
const metaMemo = new Map<string, StoredMeta>();
const META_MEMO_ENTRIES = 1_000;
const META_MEMO_MAX_CHARS = 4_096;

/** Checks the shape rather than trusting it: a value of the right version can still be wrong. */
function parseMeta(bytes: Buffer): StoredMeta | string {
  const text = bytes.toString('utf8');
  const known = metaMemo.get(text);
  if (known !== undefined) return known;
  const meta = JSON.parse(text) as StoredMeta | null;
  if (!meta || typeof meta !== 'object' || Array.isArray(meta)) return 'metadata';
  const invalid = whyNotStorable(meta);
  if (invalid !== undefined) return invalid;
  if (text.length <= META_MEMO_MAX_CHARS) {
    Object.freeze(meta.headers);
    Object.freeze(meta.tags);
    if (metaMemo.size >= META_MEMO_ENTRIES) metaMemo.delete(metaMemo.keys().next().value!);
    metaMemo.set(text, Object.freeze(meta));
  }
  return meta;
}
