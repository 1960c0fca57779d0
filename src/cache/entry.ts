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
