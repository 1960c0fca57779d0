/**
 * The one writer: every answer to a cacheable request, hit or miss, stored or relayed or made
 * here, is written by `writeServed` with node's own `writeHead`/`end`, never through fastify's
 * send pipeline. What a client sees therefore cannot depend on which stage answered.
 *
 * A stored entry is sent in the representation the client accepts (RFC 9110 §12.5.3), with its
 * ETag and a body-less 304 for a matching `If-None-Match` (RFC 9110 §13.1.2), `Age`
 * (RFC 9111 §5.1) and `Cache-Status` (RFC 9211); a HEAD gets the head only.
 *
 * The response head of a memory hit changes only when its Age or remaining ttl (whole seconds)
 * does: it is built once per second per entry and representation and reused by every hit in
 * between (node's writeHead reads the list and keeps no reference to it). Every head ends with
 * the request's `X-Request-Id`: a reused head has a slot for it, written just before writeHead.
 *
 * What was written is left in the request's exchange (`sent`, and `savedBy304`: body bytes a 304
 * saved), for the record: no object per request to say it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { makeErrorBody } from '../../api/errors.js';
import { ageSeconds, readBody, ttlSeconds, type CacheEntry } from '../../cache/entry.js';
import type { CacheOutcome } from '../../cache/outcome.js';
import { acceptsGzip, representationHeaders, type Representation } from './encoding.js';
import type { EntryGate } from '../decide.js';
import { cacheStatus, matchesIfNoneMatch, type SharedKey } from './headers.js';
import { localAnswer, relayedHeaders, type Served } from './served.js';

/** The request's exchange as the writer sees it: what it answers, and where it says what it wrote. */
export interface Reply {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  /** The clock reading the answer is dated with. */
  readonly t: number;
  readonly requestId: string;
  /** Body bytes sent, and body bytes not sent thanks to a 304: filled here. */
  sent: number;
  savedBy304: number;
  /** What gated the answer (the Decision that answered, decide.ts): a project's shared answer says so in its Cache-Status. */
  readonly answeredGate: EntryGate | undefined;
}

/** Writes `served` as the answer to the exchange's request. */
export function writeServed(x: Reply, served: Served): void {
  switch (served.kind) {
    case 'entry':
      return writeEntry(x, served.entry, served.outcome);
    case 'relay': {
      const head = relayedHeaders(served.response);
      head['cache-status'] = cacheStatus(served.outcome, undefined, x.t, sharedKeyOf(x));
      return writeBytes(x, served.response.status, head, served.response.body);
    }
    case 'local': {
      const head: Record<string, string> = { ...served.headers, 'content-type': 'application/json; charset=utf-8' };
      head['cache-status'] = cacheStatus(served.outcome, undefined, x.t, sharedKeyOf(x));
      return writeBytes(x, served.status, head, Buffer.from(JSON.stringify(served.body)));
    }
  }
}

function writeEntry(x: Reply, entry: CacheEntry, outcome: CacheOutcome): void {
  const { req, res, t, requestId } = x;
  const gzip = entry.gzip !== undefined && acceptsGzip(req.headers['accept-encoding']);
  const body = gzip ? entry.gzip : readBody(entry);
  if (body === undefined) {
    // A lazily decoded body from Redis that turns out corrupt: no entry, and nothing sent yet.
    const message = 'A stored answer could not be decoded; it will be fetched again.';
    return writeServed(x, localAnswer(502, makeErrorBody(message), { kind: 'error', detail: 'decode' }));
  }
  const etag = gzip ? entry.gzipEtag! : entry.etag;
  const ifNoneMatch = req.headers['if-none-match'];
  if (ifNoneMatch !== undefined && matchesIfNoneMatch(ifNoneMatch, etag)) {
    const head = buildHead(entry, { body, etag, gzip }, outcome, t, true, sharedKeyOf(x));
    head.push('x-request-id', requestId);
    res.writeHead(304, head);
    res.end();
    x.sent = 0;
    x.savedBy304 = body.length;
    return;
  }
  let head: string[];
  if (outcome.kind === 'hit' && outcome.tier === 'memory') {
    head = memoryHitHead(entry, gzip, body, outcome, t, sharedKeyOf(x));
    head[head.length - 1] = requestId;
  } else {
    head = buildHead(entry, { body, etag, gzip }, outcome, t, false, sharedKeyOf(x));
    head.push('x-request-id', requestId);
  }
  res.writeHead(entry.status, head);
  endWith(x, body);
}

function writeBytes(x: Reply, status: number, head: Record<string, string>, body: Buffer): void {
  head['content-length'] = String(body.length);
  head['x-request-id'] = x.requestId;
  x.res.writeHead(status, head);
  endWith(x, body);
}

/** Ends a response whose head is written: the body, unless the request was a HEAD. */
function endWith(x: Reply, body: Buffer): void {
  x.savedBy304 = 0;
  if (x.req.method === 'HEAD') {
    x.sent = 0;
    x.res.end();
  } else {
    x.sent = body.length;
    x.res.end(body);
  }
}

interface HeadCache {
  readonly age: number;
  readonly ttl: number;
  identity?: string[];
  gzip?: string[];
}

const heads = new WeakMap<CacheEntry, HeadCache>();

/** `project` for a project's shared answer: an entry is stored under one key, so its cached head (below) always says the same. */
function sharedKeyOf(x: Reply): SharedKey | undefined {
  return x.answeredGate === 'member' ? 'project' : undefined;
}

// eslint-disable-next-line max-params -- the hit path: no argument object allocated per hit
function memoryHitHead(entry: CacheEntry, gzip: boolean, body: Buffer, outcome: CacheOutcome, t: number, shared: SharedKey | undefined): string[] {
  const age = ageSeconds(entry, t);
  const ttl = ttlSeconds(entry, t);
  let cached = heads.get(entry);
  if (cached === undefined || cached.age !== age || cached.ttl !== ttl) heads.set(entry, (cached = { age, ttl }));
  // The last slot is the request id's value, written by the caller before each writeHead.
  if (gzip) return (cached.gzip ??= [...buildHead(entry, { body, etag: entry.gzipEtag!, gzip }, outcome, t, false, shared), 'x-request-id', '']);
  return (cached.identity ??= [...buildHead(entry, { body, etag: entry.etag, gzip }, outcome, t, false, shared), 'x-request-id', '']);
}

// eslint-disable-next-line max-params -- the hit path's head builder: no argument object allocated per hit
function buildHead(entry: CacheEntry, rep: Representation, outcome: CacheOutcome, t: number, notModified: boolean, shared: SharedKey | undefined): string[] {
  const out = representationHeaders(entry, rep, notModified);
  out.push('age', String(ageSeconds(entry, t)), 'cache-status', cacheStatus(outcome, entry, t, shared));
  return out;
}
