/**
 * The sharing policy over fakes (callers/proofs.ts): what each act of the read-through proves for
 * a member of a project, and what it leaves alone, observed through the policy's own questions
 * (`isGranted`, `isConfirmed`, `refresher`, `lacksExpandedGrant`) and the sharing events. The
 * stores below are the real in-memory ones (no shared store), the upstream a fake that is never
 * asked; the Decisions are decide.ts's own.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { ProjectAccess } from '../../src/proxy/callers/access-confirmation.js';
import { AreaGrants, areaMask } from '../../src/proxy/callers/access-grants.js';
import type { Caller } from '../../src/proxy/callers/caller.js';
import { ProofKeeper, type SharingEvents } from '../../src/proxy/callers/proofs.js';
import { Refreshers } from '../../src/proxy/callers/refreshers.js';
import { decide, decideOwn, type Decision } from '../../src/proxy/decide.js';
import { Exchange } from '../../src/proxy/exchange.js';
import { resolveRoute } from '../../src/proxy/route-memo.js';
import { makeEntry } from '../cache/fixtures.js';

const T0 = 1_800_000_000_000;
const PROJECT = 5;
const caller = (userId: number): Caller => ({ userId, scope: `u:${userId}`, credentialId: `cred-${userId}`, verifiedUntil: T0 + 60_000, adminUntil: 0 });

function memberDecision(url: string, c: Caller, authorization = `Bearer ${c.userId}`): Decision {
  const route = resolveRoute(url);
  if (route.kind !== 'cacheable') throw new Error(`${url} is ${route.kind}`);
  const options = { honorNoCache: true, isVerifiedAdmin: () => false, sharing: 'project' as const, projectOfResource: () => undefined };
  return decide(route, c, authorization, {}, T0, options, new Exchange({} as IncomingMessage, {} as ServerResponse, 0, 'test'));
}

function keeper() {
  const clock = { t: T0 };
  const now = () => clock.t;
  const never = { get: () => Promise.reject(new Error('the fake upstream is never asked here')), close: async () => undefined };
  const projects = new ProjectAccess({ confirmMs: 60_000, upstream: never, now });
  const grants = new AreaGrants({ ttlMs: 300_000, now });
  const refreshers = new Refreshers({
    proofs: {
      isLive: () => true,
      confirmedUntil: (userId, projectId) => projects.confirmedUntil(userId, projectId),
      grantedUntil: (userId, projectId, mask) => grants.grantedUntil(userId, projectId, mask),
    },
    seenWithinMs: () => 60_000,
    confirmMs: () => 60_000,
    grantTtlMs: () => 300_000,
  });
  const events: string[] = [];
  const sharing: SharingEvents = {
    sharedHit: (userId) => void events.push(`hit ${userId}`),
    grantFill: () => void events.push('own fill'),
    stored: (userId) => void events.push(`stored ${userId}`),
  };
  const renewed: number[] = [];
  const proofs = new ProofKeeper({ projects, grants, refreshers, events: sharing, renewIdentity: (_a, c) => void renewed.push(c.userId) });
  return { proofs, clock, events, renewed };
}

const runs = `/api/v1/projects/${PROJECT}/runs`;
const milestonesWithUsers = `/api/v1/projects/${PROJECT}/milestones?expands=users`;

describe('the sharing policy, for a member of a project', () => {
  it("a member's own 200 proves the project and the operation's area, renews their identity, and makes them a refresher", () => {
    const { proofs, events, renewed } = keeper();
    const d = memberDecision(runs, caller(2));
    expect(d.gate).toBe('member');
    expect(proofs.isGranted(2, PROJECT, d.areas, T0)).toBe(false);
    proofs.answered(d, d, T0, makeEntry(T0), true, T0);
    expect(proofs.isConfirmed(2, PROJECT, T0)).toBe(true);
    expect(proofs.isGranted(2, PROJECT, d.areas, T0)).toBe(true);
    expect(renewed).toEqual([2]);
    expect(events).toEqual(['stored 2']);
    // A refresh of the team's entry for another member is asked under member 2's credential.
    const other = memberDecision(runs, caller(3));
    expect(proofs.refresher(other, T0).caller.userId).toBe(2);
  });

  it('an answer relayed to one origin alone proves as much, but is not counted as stored', () => {
    const { proofs, events } = keeper();
    const d = memberDecision(runs, caller(2));
    proofs.answered(d, d, T0, makeEntry(T0), false, T0);
    expect(proofs.isGranted(2, PROJECT, d.areas, T0)).toBe(true);
    expect(events).toEqual([]);
  });

  it("a refresh's 200 proves it for the member whose credential asked it, never for the reader", () => {
    const { proofs } = keeper();
    const reader = memberDecision(runs, caller(3));
    const asker = memberDecision(runs, caller(2));
    proofs.answered(reader, asker, T0, makeEntry(T0), true, T0);
    expect(proofs.isGranted(2, PROJECT, reader.areas, T0)).toBe(true);
    expect(proofs.isGranted(3, PROJECT, reader.areas, T0)).toBe(false);
  });

  it('a 200 that is not storable renews the identity alone', () => {
    const { proofs, renewed } = keeper();
    const d = memberDecision(runs, caller(2));
    proofs.answered(d, d, T0, undefined, false, T0);
    expect(renewed).toEqual([2]);
    expect(proofs.isConfirmed(2, PROJECT, T0)).toBe(false);
    expect(proofs.isGranted(2, PROJECT, d.areas, T0)).toBe(false);
  });

  it('a question expanding an area without a grant lacks it until that area is proven by its own operation', () => {
    const { proofs } = keeper();
    const d = memberDecision(milestonesWithUsers, caller(2));
    expect(d.areas).toBe(areaMask(d.canonical));
    // Their milestones proven (a 200 of the milestones operation), the users area is still not.
    proofs.answered(memberDecision(`/api/v1/projects/${PROJECT}/milestones`, caller(2)), d, T0, makeEntry(T0), true, T0);
    expect(proofs.lacksExpandedGrant(d, T0)).toBe(true);
    proofs.answered(memberDecision(`/api/v1/projects/${PROJECT}/users`, caller(2)), d, T0, makeEntry(T0), true, T0);
    expect(proofs.lacksExpandedGrant(d, T0)).toBe(false);
  });

  it("a member's fresh read of the team's entry is counted and makes them a refresher; a user-scope read is not", () => {
    const { proofs, events } = keeper();
    const d = memberDecision(runs, caller(4));
    proofs.answered(d, d, T0, makeEntry(T0), true, T0);
    events.length = 0;
    proofs.servedFresh(d, makeEntry(T0), T0);
    expect(events).toEqual(['hit 4']);
    const own = decideOwn(d);
    proofs.servedFresh(own, makeEntry(T0), T0);
    expect(events).toEqual(['hit 4']);
  });

  it('an answer placed in its project after its fill earns the caller the grant there', () => {
    const { proofs } = keeper();
    const d = memberDecision(runs, caller(6));
    proofs.placed(d, 9, T0, T0);
    expect(proofs.isGranted(6, 9, d.areas, T0)).toBe(true);
    expect(proofs.isGranted(6, PROJECT, d.areas, T0)).toBe(false);
  });
});

describe('a proof under way', () => {
  it('is one per member, project and area: another question of that area waits on it, another area or member does not, and it is dropped once settled', async () => {
    const { proofs } = keeper();
    const first = memberDecision(runs, caller(2));
    let settle!: () => void;
    const proof = new Promise<void>((resolve) => (settle = resolve));
    expect(proofs.provingNow(first)).toBeUndefined();
    proofs.proving(first, proof);
    expect(proofs.provingNow(memberDecision(`${runs}?per_page=50`, caller(2)))).toBe(proof);
    expect(proofs.provingNow(memberDecision(`/api/v1/projects/${PROJECT}/milestones`, caller(2)))).toBeUndefined();
    expect(proofs.provingNow(memberDecision(runs, caller(3)))).toBeUndefined();
    settle();
    await proof;
    await Promise.resolve();
    expect(proofs.provingNow(first)).toBeUndefined();
  });
});

describe('a question expanding an area the member holds no grant for (answered from their own key)', () => {
  it("its 200 proves the operation's area, never the expanded one", () => {
    const { proofs } = keeper();
    const own = decideOwn(memberDecision(milestonesWithUsers, caller(2)));
    proofs.answered(own, own, T0, makeEntry(T0), true, T0);
    expect(proofs.isGranted(2, PROJECT, areaMask(memberDecision(`/api/v1/projects/${PROJECT}/milestones`, caller(2)).canonical), T0)).toBe(true);
    expect(proofs.isGranted(2, PROJECT, own.areas, T0)).toBe(false);
    expect(proofs.lacksExpandedGrant(memberDecision(milestonesWithUsers, caller(2)), T0)).toBe(true);
  });

  it('may prove that area while the member lacks it and no proof of it is under way', () => {
    const { proofs } = keeper();
    const d = memberDecision(milestonesWithUsers, caller(2));
    expect(proofs.mayProve(d, T0)).toBe(true);
    proofs.proving(d, new Promise(() => undefined));
    expect(proofs.mayProve(d, T0)).toBe(false);
    const granted = decideOwn(memberDecision(milestonesWithUsers, caller(3)));
    proofs.answered(granted, granted, T0, makeEntry(T0), true, T0);
    expect(proofs.mayProve(granted, T0)).toBe(false);
  });
});

describe("a member's proofs of a project under way", () => {
  it('are what a due confirmation of the project waits on: the latest of any area, per member and project, dropped once settled', async () => {
    const { proofs } = keeper();
    const project = memberDecision(`/api/v1/projects/${PROJECT}`, caller(2));
    expect(proofs.provingProject(project)).toBeUndefined();
    let settle!: () => void;
    const proof = new Promise<void>((resolve) => (settle = resolve));
    proofs.proving(memberDecision(runs, caller(2)), proof);
    expect(proofs.provingProject(project)).toBe(proof);
    expect(proofs.provingProject(memberDecision(`/api/v1/projects/${PROJECT}`, caller(3)))).toBeUndefined();
    settle();
    await proof;
    await Promise.resolve();
    expect(proofs.provingProject(project)).toBeUndefined();
  });
});

describe('decideOwn', () => {
  it("answers a member's question from their own key in a new Decision: the first is never rewritten, the request is the same", () => {
    const d = memberDecision(milestonesWithUsers, caller(2));
    const before = { gate: d.gate, scope: d.scope, key: d.key, fillKey: d.fillKey };
    const own = decideOwn(d);
    expect({ gate: d.gate, scope: d.scope, key: d.key, fillKey: d.fillKey }).toEqual(before);
    expect(own).toMatchObject({ gate: 'project', scope: 'u:2', key: d.ownKey, fillKey: d.ownKey, projectId: PROJECT, areas: d.areas });
    expect(own.request).toBe(d.request);
  });
});
