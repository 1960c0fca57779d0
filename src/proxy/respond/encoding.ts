/**
 * Content negotiation for cached answers (RFC 9110 §12.5.3): a client that accepts gzip gets the
 * stored gzip variant with `Content-Encoding: gzip`; any other gets the identity body.
 *
 * Clients send the same Accept-Encoding on every request, so the verdict is memoized per header
 * value: the hit path pays one Map lookup, not a parse.
 */
import { LRUCache } from 'lru-cache';
import { lacksGzipVariant } from '../../cache/redis/codec.js';
import type { CacheEntry } from '../../cache/entry.js';

/** Distinct Accept-Encoding values remembered; past that the least recently seen is forgotten (never all at once). */
const MAX_VERDICTS = 1_000;
const verdicts = new LRUCache<string, boolean>({ max: MAX_VERDICTS });

/** Does this Accept-Encoding value accept gzip? `gzip`, `x-gzip` or `*` with a q above 0. */
export function acceptsGzip(header: string | undefined): boolean {
  if (header === undefined) return false;
  let verdict = verdicts.get(header);
  if (verdict === undefined) {
    verdict = parseAcceptsGzip(header);
    verdicts.set(header, verdict);
  }
  return verdict;
}

function parseAcceptsGzip(header: string): boolean {
  let star: boolean | undefined;
  for (const part of header.toLowerCase().split(',')) {
    const [coding = '', ...params] = part.split(';').map((p) => p.trim());
    const q = params.find((p) => p.startsWith('q='));
    const accepted = q === undefined || Number(q.slice(2)) > 0;
    if (coding === 'gzip' || coding === 'x-gzip') return accepted;
    if (coding === '*') star = accepted;
  }
  return star ?? false;
}

/**
 * Must this answer wait for the entry's gzip variant? Only for a client that accepts gzip, of an
 * entry that will have one and has none yet (a fill's own answer, a hit before the compression
 * started at the fill has landed): sent identity now, it would come with another ETag than every
 * later answer, and a browser's If-None-Match would miss once per freshness period.
 */
export function waitsForGzipVariant(entry: CacheEntry, acceptEncoding: string | undefined): boolean {
  return lacksGzipVariant(entry) && acceptsGzip(acceptEncoding);
}

/** One representation of an entry: the bytes to send, their validator, their coding. */
export interface Representation {
  readonly body: Buffer;
  readonly etag: string;
  readonly gzip: boolean;
}

/**
 * The response headers of a representation as a flat [name, value, ...] list (node's cheapest
 * form for writeHead): the stored ones with the representation's ETag, its coding and length.
 */
export function representationHeaders(entry: CacheEntry, rep: Representation, notModified: boolean): string[] {
  const out: string[] = [];
  const stored = entry.headers;
  for (const name in stored) out.push(name, name === 'etag' ? rep.etag : stored[name]!);
  if (rep.gzip) out.push('content-encoding', 'gzip');
  if (!notModified) out.push('content-length', String(rep.body.length));
  return out;
}
