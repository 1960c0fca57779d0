/**
 * The stored form of one cached answer.
 *
 * An entry holds the exact bytes to send and the headers precomputed at fill time, so that a
 * memory-tier hit is a lookup followed by a write (node's `writeHead` with the header list, then
 * `end` with the stored bytes: src/proxy/hit-path.ts): no serialization, no hashing.
 */
export interface CacheEntry {
  /** HTTP status of the stored answer. Only successful (2xx) answers are ever stored. */
  readonly status: number;
  /** Response headers to send as they are (content-type, etag, ...); never Set-Cookie, never hop-by-hop. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body, exactly as upstream sent it (decompressed identity bytes). */
  readonly body: Buffer;
  /** Strong validator for the body: a quoted string, e.g. `"b3f1...-1a2b"`. */
  readonly etag: string;
  /** When the answer was received from upstream (ms since epoch); `Age` is computed from it. */
  readonly storedAt: number;
  /** Until when (ms since epoch) the entry is fresh and may be served without asking upstream. */
  readonly freshUntil: number;
  /** Until when a stale entry may be served while it is refreshed in the background (RFC 5861 §3). */
  readonly staleWhileRevalidateUntil: number;
  /** Until when a stale entry may be served because upstream fails (RFC 5861 §4). */
  readonly staleIfErrorUntil: number;
  /**
   * Invalidation tags: `project:5`, `run:12`, ... A write that names a project drops every entry
   * tagged with it, in every tier and (through Redis) on every replica.
   */
  readonly tags: readonly string[];
  /**
   * The body gzip-encoded, once known: produced in the background after a fill, or read as it is
   * from Redis (where bodies are stored gzip-encoded). Clients that accept gzip are sent these
   * bytes with `Content-Encoding: gzip`, so neither side decodes or encodes on a hit.
   */
  readonly gzip?: Buffer | undefined;
  /** Strong validator of the gzip variant (a different representation needs its own, RFC 9110 §8.8.3). */
  readonly gzipEtag?: string | undefined;
  /**
   * Length of `body`, for entries whose body is decoded lazily (from Redis): the memory tier can
   * account for it without decoding it. Absent: `body.length`.
   */
  readonly bodyLength?: number | undefined;
  /**
   * Refresh-ahead's trace (proxy/refresh-ahead.ts), in this process only (never stored in Redis):
   * false on an answer a refresh-ahead stored for a key polled in the period before; set true by
   * its first fresh read. Absent on every other entry.
   */
  readSinceRefresh?: boolean | undefined;
}

/** The length of the identity body, without decoding a lazily decoded one. */
export function bodyLengthOf(entry: CacheEntry): number {
  return entry.bodyLength ?? entry.body.length;
}

/**
 * The identity body, or undefined when it cannot be decoded (a lazily decoded body from Redis
 * whose stream is corrupt): callers treat that as no entry rather than fail the request.
 */
export function readBody(entry: CacheEntry): Buffer | undefined {
  try {
    return entry.body;
  } catch {
    return undefined;
  }
}

/** The ETag of the gzip variant of a body whose ETag is `etag`: `"abc"` → `"abc-gz"`. */
export function gzipEtagOf(etag: string): string {
  return `${etag.slice(0, -1)}-gz"`;
}

/** The last moment an entry is of any use: after it, every tier may drop it. */
export function expiresAt(entry: CacheEntry): number {
  return Math.max(entry.freshUntil, entry.staleWhileRevalidateUntil, entry.staleIfErrorUntil);
}

export function isFresh(entry: CacheEntry, now: number): boolean {
  return now < entry.freshUntil;
}

/**
 * Refresh-ahead (read-through.ts): has `startAt` (0–1) of the entry's freshness elapsed? Plain
 * arithmetic on two numbers the entry holds: no allocation on the hit path.
 */
export function isDueForRefreshAhead(entry: CacheEntry, now: number, startAt: number): boolean {
  return now >= entry.storedAt + (entry.freshUntil - entry.storedAt) * startAt;
}

export function isUsableWhileRevalidating(entry: CacheEntry, now: number): boolean {
  return now < entry.staleWhileRevalidateUntil;
}

export function isUsableOnError(entry: CacheEntry, now: number): boolean {
  return now < entry.staleIfErrorUntil;
}

/** Age in whole seconds (RFC 9111 §5.1). */
export function ageSeconds(entry: CacheEntry, now: number): number {
  return Math.max(0, Math.floor((now - entry.storedAt) / 1000));
}

/** Remaining freshness in whole seconds; negative when stale. Shown as `ttl=` in Cache-Status. */
export function ttlSeconds(entry: CacheEntry, now: number): number {
  return Math.floor((entry.freshUntil - now) / 1000);
}

/**
 * What tm-cache ever stores (src/proxy/storable.ts makeEntry): a 200, with these headers only.
 * An entry read back from a shared store is checked against them before it can reach a socket
 * (CONVENTIONS: "A value knows where it belongs"): node's writeHead throws on anything else.
 */
const STORED_STATUSES: ReadonlySet<number> = new Set([200]);
/**
 * Headers of the instance's answer that `cache.storedHeaders` may keep in an entry, beside the
 * ones tm-cache makes itself: what a browser dashboard needs to read a cross-origin answer (CORS,
 * Fetch §3.2.3: the Access-Control-Allow-* and Expose-Headers of the actual answer), and its
 * language. A closed list: a shared store's reader accepts exactly these, whatever its own
 * setting (an older or newer replica's entry stays valid), and no header that frames the
 * message (length, coding, cookies) can ever be replayed from a cache.
 */
export const KEEPABLE_HEADER_NAMES = [
  'access-control-allow-origin',
  'access-control-allow-credentials',
  'access-control-expose-headers',
  'access-control-allow-methods',
  'access-control-allow-headers',
  'access-control-max-age',
  'content-language',
] as const;
export type KeepableHeaderName = (typeof KEEPABLE_HEADER_NAMES)[number];
/** `cache.storedHeaders`' default: the CORS headers a browser checks on an answer. */
export const DEFAULT_STORED_HEADERS: readonly KeepableHeaderName[] = KEEPABLE_HEADER_NAMES.filter((name) => name.startsWith('access-control-'));
const STORED_HEADER_NAMES: ReadonlySet<string> = new Set(['content-type', 'etag', 'cache-control', 'vary', ...KEEPABLE_HEADER_NAMES]);

/** RFC 9110 §5.5 field-value, VCHAR only (no obs-text), inner SP/HTAB: no CR, LF or NUL can pass. */
export const FIELD_VALUE = /^[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?$/;
/** RFC 9110 §8.8.3 strong entity-tag: DQUOTE *etagc DQUOTE, etagc without obs-text. */
const STRONG_ETAG = /^"[\x21\x23-\x7e]*"$/;

/** The entry's metadata as read back from a store, before it is trusted. */
export type StoredMeta = Omit<CacheEntry, 'body' | 'gzip'>;

/**
 * Why `meta` is not something tm-cache would have stored, or undefined when it is: status,
 * header names and values, ETags, times in order, tags. Paid once per read from Redis, never on
 * a memory hit (the entry then lives in memory already checked).
 */
export function whyNotStorable(meta: StoredMeta): string | undefined {
  if (!STORED_STATUSES.has(meta.status)) return `status ${String(meta.status)}`;
  if (!isStrongEtag(meta.etag) || (meta.gzipEtag !== undefined && !isStrongEtag(meta.gzipEtag))) return 'etag';
  const headers = meta.headers;
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) return 'headers';
  for (const [name, value] of Object.entries(headers)) {
    if (!STORED_HEADER_NAMES.has(name)) return `header ${JSON.stringify(name.slice(0, 40))}`;
    if (typeof value !== 'string' || !FIELD_VALUE.test(value)) return `header ${name} value`;
  }
  if (headers['etag'] !== undefined && headers['etag'] !== meta.etag) return 'etag header';
  if (!timesInOrder(meta)) return 'times';
  // Tags only ever name what an invalidation drops; they are never written to a socket.
  if (!Array.isArray(meta.tags) || !meta.tags.every((tag) => typeof tag === 'string')) return 'tags';
  const length = meta.bodyLength;
  if (length !== undefined && !(Number.isSafeInteger(length) && length >= 0)) return 'bodyLength';
  return undefined;
}

function isStrongEtag(etag: unknown): boolean {
  return typeof etag === 'string' && etag.length <= 200 && STRONG_ETAG.test(etag);
}

/** Stored, then fresh, then usable stale: finite and in that order (policy.ts never writes otherwise). */
function timesInOrder(meta: StoredMeta): boolean {
  const { storedAt, freshUntil, staleWhileRevalidateUntil, staleIfErrorUntil } = meta;
  const times = [storedAt, freshUntil, staleWhileRevalidateUntil, staleIfErrorUntil];
  if (!times.every((t) => typeof t === 'number' && Number.isFinite(t) && t >= 0)) return false;
  return storedAt <= freshUntil && freshUntil <= staleWhileRevalidateUntil && freshUntil <= staleIfErrorUntil;
}
