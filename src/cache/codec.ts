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
 *   brotli q5        10549    8.8        939         64   <- chosen
 *   brotli q6        10289    9.0       1038         61
 *   brotli q9         9988    9.3       9168         59
 *   brotli q11        8944   10.4     100377         84
 *   gzip 1 / 6 / 9   15437 / 11704 / 10923 (6.0 / 7.9 / 8.5), encode 228 / 699 / 1240, decode ~60
 *   deflateRaw 6     11686    7.9        671         42
 *   lz4 (lz4-napi)   20919    4.4         47         17
 *   zstd 1 / 3 / 6   12678 / 12370 / 11440 (7.3 / 7.5 / 8.1), encode 82 / 96 / 590, decode ~34
 *
 * Why brotli q5: the body is encoded once per fill, off the response path (the Redis write is
 * fire-and-forget and zlib's async API runs on the libuv pool), and decoded once per replica
 * before promotion into memory; so ratio (Redis memory, network bytes) matters more than encode
 * time. q5 is where brotli's ratio jumps (8.8x) at ~1 ms per 90 KB; q6+ costs more for ~2%.
 * zstd 3 would encode 10x faster at 7.5x, but zstd-napi compiles with node-gyp at install (no
 * prebuilt binary reachable) and Node 20 has no built-in zstd; lz4 is fast but only 4.4x.
 * Bodies under MIN_COMPRESS_BYTES are stored as they are: the saving is not worth a pass.
 */
import { promisify } from 'node:util';
import * as zlib from 'node:zlib';
import type { CacheEntry } from './entry.js';
import { openSealed, seal, sealedKeyId, type Keyring } from './keyring.js';

export type { Keyring } from './keyring.js';

/** Bumped whenever the layout changes: an older or newer value is a miss, never an error. */
export const FORMAT_VERSION = 1;
export const BROTLI_QUALITY = 5;
export const MIN_COMPRESS_BYTES = 1024;
/** A decoded body is never larger: a planted "decompression bomb" fails (→ a miss) instead. */
export const MAX_DECODED_BODY_BYTES = 64 * 1024 * 1024;

const FLAG_BROTLI = 0b01;
/** The payload is sealed (keyring.ts); a value's sealing must match the reader's keyring. */
const FLAG_SEALED = 0b10;
/** Marks a small sealed value (JSON, secret) so it can never be mistaken for an entry. */
const FLAG_VALUE = 0b1000_0000;
const META_LENGTH_BYTES = 4;

const brotliCompress = promisify(zlib.brotliCompress);
const brotliDecompress = promisify(zlib.brotliDecompress);

type EntryMeta = Omit<CacheEntry, 'body'>;

/**
 * Layout: [version u8][flags u8: brotli, sealed][payload]. The payload, sealed when a keyring is given
 * (keyring.ts adds key id, IV and tag), is [metaLength u32 BE][meta JSON][body (compressed)].
 * Metadata is sealed with the body: headers and tags (project ids) are not for Redis readers.
 */
export async function encodeEntry(entry: CacheEntry, keyring?: Keyring): Promise<Buffer> {
  const compress = entry.body.length >= MIN_COMPRESS_BYTES;
  const body = compress ? await compressBody(entry.body) : entry.body;
  const meta = Buffer.from(JSON.stringify(metaOf(entry)));
  const plain = Buffer.allocUnsafe(META_LENGTH_BYTES + meta.length + body.length);
  plain.writeUInt32BE(meta.length, 0);
  meta.copy(plain, META_LENGTH_BYTES);
  body.copy(plain, META_LENGTH_BYTES + meta.length);
  const header = Buffer.from([FORMAT_VERSION, (compress ? FLAG_BROTLI : 0) | (keyring ? FLAG_SEALED : 0)]);
  return Buffer.concat([header, keyring ? seal(plain, keyring, header) : plain]);
}

/**
 * The entry, or undefined for anything that is not a well-formed value of this version that
 * this keyring can open (unknown key id, tampered bytes, plaintext while a keyring is set).
 */
export async function decodeEntry(stored: Buffer, keyring?: Keyring): Promise<CacheEntry | undefined> {
  try {
    if (stored.length < 2 || stored[0] !== FORMAT_VERSION) return undefined;
    const flags = stored[1]!;
    if ((flags & ~(FLAG_BROTLI | FLAG_SEALED)) !== 0) return undefined;
    const plain = openPayload(stored, keyring);
    if (!plain) return undefined;
    const metaLength = plain.readUInt32BE(0);
    const meta = parseMeta(plain.subarray(META_LENGTH_BYTES, META_LENGTH_BYTES + metaLength));
    if (!meta) return undefined;
    const rawBody = plain.subarray(META_LENGTH_BYTES + metaLength);
    const body =
      flags & FLAG_BROTLI ? await brotliDecompress(rawBody, { maxOutputLength: MAX_DECODED_BODY_BYTES }) : Buffer.from(rawBody);
    return { ...meta, body };
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

async function compressBody(body: Buffer): Promise<Buffer> {
  return brotliCompress(body, {
    params: {
      [zlib.constants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY,
      [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT,
      [zlib.constants.BROTLI_PARAM_SIZE_HINT]: body.length,
    },
  });
}

function metaOf(entry: CacheEntry): EntryMeta {
  const { status, headers, etag, storedAt, freshUntil, staleWhileRevalidateUntil, staleIfErrorUntil, tags } = entry;
  return { status, headers, etag, storedAt, freshUntil, staleWhileRevalidateUntil, staleIfErrorUntil, tags };
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
