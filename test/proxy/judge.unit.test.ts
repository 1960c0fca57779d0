/**
 * The read-through's verdicts (judge.ts), as a table: what a decided request holding an entry of
 * a given age, from a caller of a given standing, is answered with. The actions on each verdict
 * are tested in read-through.unit.test.ts and end to end.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { decide, type Decision } from '../../src/proxy/decide.js';
import { Exchange } from '../../src/proxy/exchange.js';
import { judge, type Facts, type Found, type Occasion, type Verdict } from '../../src/proxy/judge.js';
import { resolveRoute } from '../../src/proxy/route-memo.js';
import { makeEntry } from '../cache/fixtures.js';
import type { Caller } from '../../src/proxy/callers/caller.js';

const T0 = 1_800_000_000_000;
const CONFIRM_MS = 60_000;

const caller: Caller = { userId: 7, scope: 'u:7', credentialId: 'cred-7', verifiedUntil: T0 + 60_000, adminUntil: T0 + 60_000 };

function decided(url: string, headers: Record<string, string> = {}, sharing: 'user' | 'project' = 'user'): Decision {
  const route = resolveRoute(url);
  if (route.kind !== 'cacheable') throw new Error(`${url} is ${route.kind}`);
  return decide(
    route,
    caller,
    'Bearer t',
    headers,
    T0,
    { honorNoCache: true, isVerifiedAdmin: (c, t) => t < c.adminUntil, sharing, projectOfResource: () => undefined },
    new Exchange({} as IncomingMessage, {} as ServerResponse, 0, 'test'),
  );
}

/** The fixture's entries live 60 s fresh, 120 s within stale-while-revalidate, 300 s within stale-if-error. */
const RUNS = '/api/v1/projects/5/runs';
const PROJECTS = '/api/v1/projects';
const USERS = '/api/v1/users';
const ME = '/api/v1/user';
const NO_CACHE = { 'cache-control': 'no-cache' };
/** An entry of project 5, and one that names no project (`GET /projects`). */
const OF_PROJECT = ['project:5', 'run:1000'];
const OF_NONE = ['op:listProjects'];

interface Case {
  readonly url: string;
  readonly headers?: Record<string, string>;
  /** Age of the held entry (ms), or none held. */
  readonly ageMs: number | undefined;
  readonly tags?: readonly string[];
  /** Is caller 7's access to project 5 confirmed? */
  readonly confirmed: boolean;
  readonly blockedMs?: number;
  readonly occasion?: Occasion;
  /** `cache.sharing: project`: does caller 7 hold grants for the answer's areas? */
  readonly granted?: boolean;
}

function facts(c: Case): Facts {
  return {
    gate: { blockedMs: () => c.blockedMs ?? 0 },
    proofs: {
      isConfirmed: (userId, projectId) => c.confirmed && userId === 7 && projectId === 5,
      isConfirmedByFill: (storedAt, now) => now < storedAt + CONFIRM_MS,
      isGranted: (userId, projectId, mask) => mask === 0 || ((c.granted ?? true) && userId === 7 && projectId === 5),
    },
  };
}

function verdictFor(c: Case): Verdict {
  const found: Found | undefined =
    c.ageMs === undefined ? undefined : { entry: makeEntry(T0 - c.ageMs, { tags: [...(c.tags ?? OF_PROJECT)] }), tier: 'memory' };
  const sharing = c.granted === undefined ? 'user' : 'project';
  return judge(decided(c.url, c.headers, sharing), found, T0, facts(c), c.occasion ?? 'lookup');
}

describe('judge', () => {
  it.each<[string, Case, Verdict['kind']]>([
    ['a fresh entry, access confirmed', { url: RUNS, ageMs: 0, confirmed: true }, 'fresh'],
    ['a stale entry within stale-while-revalidate', { url: RUNS, ageMs: 90_000, confirmed: true }, 'stale-while-revalidate'],
    ['an entry past stale-while-revalidate', { url: RUNS, ageMs: 200_000, confirmed: true }, 'fill'],
    ['nothing held', { url: RUNS, ageMs: undefined, confirmed: true }, 'fill'],
    ['nothing held, and access not confirmed (nothing to confirm)', { url: RUNS, ageMs: undefined, confirmed: false }, 'fill'],
    ['a fresh entry, the client asking to revalidate', { url: RUNS, headers: NO_CACHE, ageMs: 0, confirmed: true }, 'fill-from-instance'],
    ['nothing held, the client asking to revalidate', { url: RUNS, headers: NO_CACHE, ageMs: undefined, confirmed: true }, 'fill-from-instance'],
    ['a fresh entry of a project whose access lapsed', { url: RUNS, ageMs: 0, confirmed: false }, 'confirm-access'],
    [
      'a fresh entry of a project whose access lapsed, the client asking to revalidate',
      { url: RUNS, headers: NO_CACHE, ageMs: 0, confirmed: false },
      'confirm-access',
    ],
    ['a fresh entry of a project whose access was just confirmed', { url: RUNS, ageMs: 0, confirmed: false, occasion: 'access-confirmed' }, 'fresh'],
    ['an entry naming no project, within projectConfirmMs of its fill', { url: PROJECTS, ageMs: 30_000, tags: OF_NONE, confirmed: false }, 'fresh'],
    ['an entry naming no project, past projectConfirmMs from its fill', { url: PROJECTS, ageMs: 61_000, tags: OF_NONE, confirmed: false }, 'fill-unconfirmed'],
    ['an admin-only answer (gated by admin verification, not by projects)', { url: USERS, ageMs: 0, confirmed: false }, 'fresh'],
    ['GET /user (names no project)', { url: ME, ageMs: 0, confirmed: false }, 'fresh'],
    ['an entry another replica stored, fresh', { url: RUNS, ageMs: 0, confirmed: true, occasion: 'stored-earlier' }, 'fresh'],
    [
      'an entry another replica stored, of a project whose access lapsed',
      { url: RUNS, ageMs: 0, confirmed: false, occasion: 'stored-earlier' },
      'confirm-access',
    ],
    [
      'an entry another replica stored, past stale-while-revalidate',
      { url: RUNS, ageMs: 200_000, confirmed: true, occasion: 'stored-earlier' },
      'fill-from-instance',
    ],
    ['nothing served after access was refused', { url: RUNS, ageMs: undefined, confirmed: false, occasion: 'access-refused' }, 'fill-from-instance'],
    ['a fresh entry for a rate-limited caller', { url: RUNS, ageMs: 0, confirmed: true, blockedMs: 5_000 }, 'fresh'],
    [
      'a stale entry within stale-while-revalidate for a rate-limited caller',
      { url: RUNS, ageMs: 90_000, confirmed: true, blockedMs: 5_000 },
      'stale-while-revalidate',
    ],
    ['nothing held for a rate-limited caller', { url: RUNS, ageMs: undefined, confirmed: true, blockedMs: 5_000 }, 'rate-limited'],
  ])('%s: %s', (_name, c, kind) => {
    expect(verdictFor(c).kind).toBe(kind);
  });

  it.each<[string, Case, Found['tier'] | undefined]>([
    ['past stale-while-revalidate, within stale-if-error', { url: RUNS, ageMs: 200_000, confirmed: true, blockedMs: 5_000 }, 'memory'],
    ['past stale-if-error', { url: RUNS, ageMs: 400_000, confirmed: true, blockedMs: 5_000 }, undefined],
    ['fresh, the client asking to revalidate', { url: RUNS, headers: NO_CACHE, ageMs: 0, confirmed: true, blockedMs: 5_000 }, 'memory'],
    ['fresh, access lapsed: never the entry', { url: RUNS, ageMs: 0, confirmed: false, blockedMs: 5_000 }, undefined],
    [
      'naming no project, past projectConfirmMs: never the entry',
      { url: PROJECTS, ageMs: 61_000, tags: OF_NONE, confirmed: false, blockedMs: 5_000 },
      undefined,
    ],
    ['access refused', { url: RUNS, ageMs: undefined, confirmed: false, blockedMs: 5_000, occasion: 'access-refused' }, undefined],
  ])('a rate-limited caller holding an entry %s: rate-limited, stale from %s', (_name, c, staleTier) => {
    const verdict = verdictFor(c);
    expect(verdict).toMatchObject({ kind: 'rate-limited', blockedMs: 5_000 });
    expect(verdict.kind === 'rate-limited' ? verdict.stale?.tier : 'not rate-limited').toBe(staleTier);
  });

  it.each<[string, Case, Verdict['kind']]>([
    ['a fresh shared entry, confirmed and granted', { url: RUNS, ageMs: 0, confirmed: true, granted: true }, 'fresh'],
    ['a fresh shared entry, confirmed, no grant held here', { url: RUNS, ageMs: 0, confirmed: true, granted: false }, 'find-grants'],
    [
      'a fresh shared entry, no grant here nor in the shared store',
      { url: RUNS, ageMs: 0, confirmed: true, granted: false, occasion: 'grants-looked-up' },
      'fill-own',
    ],
    ['a fresh shared entry, granted, access lapsed', { url: RUNS, ageMs: 0, confirmed: false, granted: true }, 'confirm-access'],
    ['a fresh shared entry, access just confirmed, granted', { url: RUNS, ageMs: 0, confirmed: false, granted: true, occasion: 'access-confirmed' }, 'fresh'],
    [
      'a fresh shared entry, access just confirmed, no grant',
      { url: RUNS, ageMs: 0, confirmed: false, granted: false, occasion: 'access-confirmed' },
      'find-grants',
    ],
    ['a shared entry, access refused', { url: RUNS, ageMs: undefined, confirmed: false, granted: true, occasion: 'access-refused' }, 'fill-own'],
    ['nothing held, proven: coalesced with the members', { url: RUNS, ageMs: undefined, confirmed: true, granted: true }, 'fill'],
    ['nothing held, not confirmed: filled under their own token', { url: RUNS, ageMs: undefined, confirmed: false, granted: true }, 'fill-own'],
    ['nothing held, no grant: filled under their own token', { url: RUNS, ageMs: undefined, confirmed: true, granted: false }, 'fill-own'],
    [
      'a shared entry, access lapsed, rate-limited: never the entry',
      { url: RUNS, ageMs: 0, confirmed: false, granted: true, blockedMs: 5_000 },
      'rate-limited',
    ],
    ['a project answer needing only the confirmation', { url: '/api/v1/projects/5', ageMs: 0, confirmed: true, granted: false }, 'fresh'],
  ])('cache.sharing: project, %s: %s', (_name, c, kind) => {
    expect(verdictFor(c).kind).toBe(kind);
  });

  it("names the project to confirm: the entry's", () => {
    expect(verdictFor({ url: RUNS, ageMs: 0, tags: ['project:9'], confirmed: false })).toEqual({ kind: 'confirm-access', projectId: 9 });
  });

  it('answers a fresh hit with one shared verdict: nothing allocated per hit', () => {
    const c: Case = { url: RUNS, ageMs: 0, confirmed: true };
    expect(verdictFor(c)).toBe(verdictFor(c));
    expect(Object.isFrozen(verdictFor(c))).toBe(true);
  });
});
