/**
 * The pure header functions as tables: Cache-Status for every outcome (RFC 9211), If-None-Match
 * (RFC 9110 §13.1.2, weak comparison), client revalidation (RFC 9111 §5.2.1.4), Accept-Encoding.
 */
import { describe, expect, it } from 'vitest';
import type { CacheOutcome } from '../../src/cache/outcome.js';
import { acceptsGzip } from '../../src/proxy/respond/encoding.js';
import { cacheStatus, matchesIfNoneMatch, wantsRevalidation } from '../../src/proxy/respond/headers.js';
import { makeEntry } from '../cache/fixtures.js';

const NOW = 1_000_000;
const entry = makeEntry(NOW - 10_000); // fresh for 50 s more

describe('Cache-Status', () => {
  const rows: [string, CacheOutcome, boolean, string][] = [
    ['memory hit', { kind: 'hit', tier: 'memory' }, true, 'tm-cache; hit; ttl=50; detail=memory'],
    ['Redis hit', { kind: 'hit', tier: 'redis' }, true, 'tm-cache; hit; ttl=50; detail=redis'],
    [
      'stale while revalidating',
      { kind: 'stale', tier: 'memory', detail: 'stale-while-revalidate' },
      true,
      'tm-cache; fwd=stale; ttl=50; detail=stale-while-revalidate',
    ],
    [
      'stale on error with the status',
      { kind: 'stale', tier: 'redis', detail: 'stale-if-error', upstreamStatus: 503 },
      true,
      'tm-cache; fwd=stale; fwd-status=503; ttl=50; detail=stale-if-error',
    ],
    ['stale for the budget', { kind: 'stale', tier: 'memory', detail: 'budget' }, true, 'tm-cache; fwd=stale; ttl=50; detail=budget'],
    ['miss, stored', { kind: 'miss', stored: true, upstreamStatus: 200 }, true, 'tm-cache; fwd=uri-miss; fwd-status=200; stored; ttl=50'],
    ['miss relayed (404)', { kind: 'miss', upstreamStatus: 404 }, false, 'tm-cache; fwd=uri-miss; fwd-status=404'],
    ['client no-cache', { kind: 'miss', stored: true, upstreamStatus: 200, detail: 'no-cache' }, true, 'tm-cache; fwd=request; fwd-status=200; stored; ttl=50'],
    ['coalesced here', { kind: 'coalesced', upstreamStatus: 200 }, true, 'tm-cache; fwd=uri-miss; fwd-status=200; collapsed; ttl=50'],
    [
      'collapsed into another replica',
      { kind: 'coalesced', tier: 'redis', upstreamStatus: 200 },
      true,
      'tm-cache; fwd=uri-miss; fwd-status=200; collapsed; ttl=50; detail=redis',
    ],
    ['bypass', { kind: 'bypass', detail: 'unknown-parameter' }, false, 'tm-cache; fwd=bypass; detail=unknown-parameter'],
    ['invalid request', { kind: 'error', detail: 'invalid-request' }, false, 'tm-cache; detail=invalid-request'],
    ['upstream timeout', { kind: 'error', detail: 'timeout' }, false, 'tm-cache; fwd=uri-miss; detail=timeout'],
  ];
  it.each(rows)('%s', (_name, outcome, withEntry, expected) => {
    expect(cacheStatus(outcome, withEntry ? entry : undefined, NOW)).toBe(expected);
  });

  it('names the project scope that answered', () => {
    expect(cacheStatus({ kind: 'hit', tier: 'memory' }, entry, NOW, 'project')).toBe('tm-cache; hit; ttl=50; detail=memory; key=project');
  });
});

describe('If-None-Match', () => {
  const etag = '"abc-12"';
  const rows: [string | undefined, boolean][] = [
    [undefined, false],
    ['"abc-12"', true],
    ['W/"abc-12"', true],
    ['"x", "abc-12"', true],
    ['"x",W/"abc-12"', true],
    ['*', true],
    [' * ', true],
    ['"abc-1"', false],
    ['abc-12', false],
    ['', false],
  ];
  it.each(rows)('%j matches: %s', (header, expected) => {
    expect(matchesIfNoneMatch(header, etag)).toBe(expected);
  });
});

describe('client revalidation', () => {
  const rows: [string | undefined, string | undefined, boolean][] = [
    [undefined, undefined, false],
    ['no-cache', undefined, true],
    ['No-Cache', undefined, true],
    ['max-age=0', undefined, true],
    ['max-age=0, private', undefined, true],
    ['private, no-cache', undefined, true],
    ['max-age=60', undefined, false],
    ['no-store', undefined, false],
    ['no-cache-please', undefined, false],
    [undefined, 'no-cache', true],
    ['max-age=60', 'no-cache', false],
  ];
  it.each(rows)('Cache-Control %j, Pragma %j: %s', (cacheControl, pragma, expected) => {
    expect(wantsRevalidation(cacheControl, pragma)).toBe(expected);
  });
});

describe('Accept-Encoding', () => {
  const rows: [string | undefined, boolean][] = [
    [undefined, false],
    ['gzip', true],
    ['gzip, deflate, br', true],
    ['br;q=1.0, gzip;q=0.8', true],
    ['x-gzip', true],
    ['gzip;q=0', false],
    ['*', true],
    ['*;q=0', false],
    ['identity', false],
    ['br, *;q=0', false],
    ['GZIP', true],
  ];
  it.each(rows)('%j accepts gzip: %s', (header, expected) => {
    expect(acceptsGzip(header)).toBe(expected);
  });
});
