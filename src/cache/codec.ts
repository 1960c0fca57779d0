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
 * once per fill, in the background on the libuv pool.
 * zstd 3 would encode 10x faster at 7.5x, but zstd-napi compiles with node-gyp at install (no
 * prebuilt binary reachable), Node 20 has no built-in zstd, and no client accepts it yet; lz4 is
 * fast but only 4.4x and not an HTTP content coding.
 * Bodies under MIN_COMPRESS_BYTES are stored as they are: the saving is not worth a pass.
 */
import { promisify } from 'node:util';
import * as zlib from 'node:zlib';
import { bodyLengthOf, gzipEtagOf, type CacheEntry } from './entry.js';
import { openSealed, seal, sealedKeyId, type Keyring } from './keyring.js';

export type { Keyring } from './keyring.js';

/** Bumped whenever the layout changes: an older or newer value is a miss, never an error. */
export const FORMAT_VERSION = 2;
export const GZIP_LEVEL = 6;
export const MIN_COMPRESS_BYTES = 1024;
/** A decoded body is never larger: a planted "decompression bomb" fails (→ a miss) instead. */
export const MAX_DECODED_BODY_BYTES = 64 * 1024 * 1024;

const FLAG_GZIP = 0b01;
/** The payload is sealed (keyring.ts); a value's sealing must match the reader's keyring. */
const FLAG_SEALED = 0b10;
/** Marks a small sealed value (JSON, secret) so it can never be mistaken for an entry. */
const FLAG_VALUE = 0b1000_0000;
const META_LENGTH_BYTES = 4;

const gzipAsync = promisify(zlib.gzip);

type EntryMeta = Omit<CacheEntry, 'body' | 'gzip'>;

/**
 * Layout: [version u8][flags u8: gzip, sealed][payload]. The payload, sealed when a keyring is given
 * (keyring.ts adds key id, IV and tag), is [metaLength u32 BE][meta JSON][body (compressed)].
 * Metadata is sealed with the body: headers and tags (project ids) are not for Redis readers.
 */
export async function encodeEntry(entry: CacheEntry, keyring?: Keyring): Promise<Buffer> {
  const withGzip = await withGzipVariant(entry);
  const compressed = withGzip.gzip !== undefined;
  const body = withGzip.gzip ?? withGzip.body;
  const meta = Buffer.from(JSON.stringify(metaOf(withGzip)));
  const plain = Buffer.allocUnsafe(META_LENGTH_BYTES + meta.length + body.length);
  plain.writeUInt32BE(meta.length, 0);
  meta.copy(plain, META_LENGTH_BYTES);
  body.copy(plain, META_LENGTH_BYTES + meta.length);
  const header = Buffer.from([FORMAT_VERSION, (compressed ? FLAG_GZIP : 0) | (keyring ? FLAG_SEALED : 0)]);
  return Buffer.concat([header, keyring ? seal(plain, keyring, header) : plain]);
}

/**
 * The entry with its gzip variant (`gzip`, `gzipEtag`), compressed on the libuv pool when it has
 * none yet; the entry itself when it has one or is too small to be worth it.
 */
export async function withGzipVariant(entry: CacheEntry): Promise<CacheEntry> {
  if (entry.gzip !== undefined || bodyLengthOf(entry) < MIN_COMPRESS_BYTES) return entry;
  const gzip = await gzipAsync(entry.body, { level: GZIP_LEVEL });
  return { ...entry, gzip, gzipEtag: gzipEtagOf(entry.etag) };
}

/**
 * The entry, or undefined for anything that is not a well-formed value of this version that
 * this keyring can open (unknown key id, tampered bytes, plaintext while a keyring is set).
 */
export async function decodeEntry(stored: Buffer, keyring?: Keyring): Promise<CacheEntry | undefined> {
  try {
    if (stored.length < 2 || stored[0] !== FORMAT_VERSION) return undefined;
    const flags = stored[1]!;
    if ((flags & ~(FLAG_GZIP | FLAG_SEALED)) !== 0) return undefined;
    const plain = openPayload(stored, keyring);
    if (!plain) return undefined;
    const metaLength = plain.readUInt32BE(0);
    const meta = parseMeta(plain.subarray(META_LENGTH_BYTES, META_LENGTH_BYTES + metaLength));
    if (!meta) return undefined;
    const rawBody = plain.subarray(META_LENGTH_BYTES + metaLength);
    if (!(flags & FLAG_GZIP)) return { ...meta, body: Buffer.from(rawBody) };
    if (meta.bodyLength === undefined || meta.bodyLength > MAX_DECODED_BODY_BYTES) return undefined;
    if (!looksLikeGzipOf(rawBody, meta.bodyLength)) return undefined;
    // A view, not a copy: the stored value was read (or decrypted) into a buffer of our own.
    return lazyEntry(meta, meta.bodyLength, rawBody);
  } catch {
    return undefined;
  }
}

/** The key id an entry or value was sealed with; undefined when it is not sealed. */
export function storedKeyId(stored: Buffer): string | undefined {
  return stored.length > 2 && stored[1]! & FLAG_SEALED ? sealedKeyId(stored.subarray(2)) : undefined;
}

/** A small value (JSON, a secret) in the same envelope as entries: versioned, sealed if a keyring is set. */
export function encodeValue(plain: Buffer, keyring?: Keyring): Buffer {
  const header = Buffer.from([FORMAT_VERSION, FLAG_VALUE | (keyring ? FLAG_SEALED : 0)]);
  return Buffer.concat([header, keyring ? seal(plain, keyring, header) : plain]);
}

export function decodeValue(stored: Buffer, keyring?: Keyring): Buffer | undefined {
  if (stored.length < 2 || stored[0] !== FORMAT_VERSION || (stored[1]! & ~FLAG_SEALED) !== FLAG_VALUE) return undefined;
  return openPayload(stored, keyring);
}

/**
 * The plaintext after the 2-byte header. Sealing must match the keyring: with one, an unsealed
 * value could have been planted by anyone with write access to Redis (cache poisoning); without
 * one, a sealed value cannot be read. Either way: undefined, a miss.
 */
function openPayload(stored: Buffer, keyring: Keyring | undefined): Buffer | undefined {
  const sealed = (stored[1]! & FLAG_SEALED) !== 0;
  if (sealed !== (keyring !== undefined)) return undefined;
  const payload = stored.subarray(2);
  return keyring ? openSealed(payload, keyring, stored.subarray(0, 2)) : payload;
}

/**
 * An entry read from Redis: the gzip bytes as stored, and the identity body decoded only when
 * something asks for it (a client without gzip), then kept. A gzip client never pays the decode.
 * The stream is checked up front as far as is free (magic bytes, and the trailer's ISIZE against
 * the announced length); a stream that still fails to decode makes the getter throw, which
 * `readBody` (entry.ts) turns into "no entry" for the callers that serve it.
 */
function lazyEntry(meta: EntryMeta, bodyLength: number, gzip: Buffer): CacheEntry {
  return new StoredEntry(meta, bodyLength, gzip);
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

  constructor(
    meta: EntryMeta,
    readonly bodyLength: number,
    readonly gzip: Buffer,
  ) {
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
    // chunkSize = the known length: one output buffer, no copy (a third faster than the default).
    this.#body ??= zlib.gunzipSync(this.gzip, { chunkSize: Math.max(this.bodyLength, 64), maxOutputLength: MAX_DECODED_BODY_BYTES });
    return this.#body;
  }
}

/** RFC 1952: magic 1f 8b, and the last 4 bytes (ISIZE) are the decoded length mod 2^32. */
function looksLikeGzipOf(bytes: Buffer, length: number): boolean {
  return bytes.length >= 18 && bytes[0] === 0x1f && bytes[1] === 0x8b && bytes.readUInt32LE(bytes.length - 4) === length % 2 ** 32;
}

function metaOf(entry: CacheEntry): EntryMeta {
  const { status, headers, etag, storedAt, freshUntil, staleWhileRevalidateUntil, staleIfErrorUntil, tags, gzipEtag } = entry;
  return { status, headers, etag, storedAt, freshUntil, staleWhileRevalidateUntil, staleIfErrorUntil, tags, gzipEtag, bodyLength: bodyLengthOf(entry) };
}

/** Checks the shape rather than trusting it: a value of the right version can still be wrong. */
function parseMeta(bytes: Buffer): EntryMeta | undefined {
  const meta = JSON.parse(bytes.toString('utf8')) as Partial<EntryMeta> | null;
  if (!meta || typeof meta !== 'object') return undefined;
  const times = [meta.storedAt, meta.freshUntil, meta.staleWhileRevalidateUntil, meta.staleIfErrorUntil];
  if (typeof meta.status !== 'number' || typeof meta.etag !== 'string') return undefined;
  if (!times.every((t) => typeof t === 'number')) return undefined;
  if (!meta.headers || typeof meta.headers !== 'object' || !Array.isArray(meta.tags)) return undefined;
  return meta as EntryMeta;
}
