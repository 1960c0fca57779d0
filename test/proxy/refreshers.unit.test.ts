/**
 * Whose credential a shared entry's refresh is asked under (src/proxy/callers/refreshers.ts): the
 * member it saves the most requests of their own, over fake proofs and a fixed clock.
 */
import { describe, expect, it } from 'vitest';
import type { Caller } from '../../src/proxy/callers/caller.js';
import { Refreshers } from '../../src/proxy/callers/refreshers.js';

const T0 = 1_000_000;
const PROJECT = 4;
const RUNS = 1;
const CONFIRM_MS = 30_000;
const GRANT_TTL_MS = 300_000;

interface Proof {
  readonly confirmedUntil: number;
  readonly grantedUntil: number;
  readonly verifiedUntil?: number;
  readonly live?: boolean;
}

/** Members 1..n seen at T0 with `proofs[i]`; the choice of a refresh of the runs area at `now`. */
function chooser(proofs: readonly Proof[]) {
  const byUser = new Map(proofs.map((p, i) => [i + 1, p]));
  const refreshers = new Refreshers({
    proofs: {
      isLive: (credential) => byUser.get(credential.caller.userId)?.live ?? true,
      confirmedUntil: (userId) => byUser.get(userId)!.confirmedUntil,
      grantedUntil: (userId) => byUser.get(userId)!.grantedUntil,
    },
    seenWithinMs: () => 60_000,
    confirmMs: () => CONFIRM_MS,
    grantTtlMs: () => GRANT_TTL_MS,
  });
  proofs.forEach((p, i) => {
    const caller = { userId: i + 1, scope: `u:${i + 1}`, verifiedUntil: p.verifiedUntil ?? T0 + 60_000 } as unknown as Caller;
    refreshers.seen(PROJECT, caller, `Bearer t${i + 1}`, T0);
  });
  return { refreshers, choose: (now = T0) => refreshers.choose(PROJECT, RUNS, now)?.caller.userId };
}

const GRANT_FAR = T0 + 200_000;

describe('Refreshers.choose', () => {
  it.each<[string, Proof[], number | undefined]>([
    [
      'no grant about to lapse: the member whose confirmation is due soonest',
      [
        { confirmedUntil: T0 + 20_000, grantedUntil: GRANT_FAR },
        { confirmedUntil: T0 + 5_000, grantedUntil: GRANT_FAR },
      ],
      2,
    ],
    [
      // Member 1: 5 s of 30 left of their confirmation, 250 s of 300 of their grant (5/6 + 1/6 of a request saved); member 2: 15 s and 60 s (1/2 + 4/5).
      'a grant of the refreshed area near its end outweighs a confirmation due a little sooner',
      [
        { confirmedUntil: T0 + 5_000, grantedUntil: T0 + 250_000 },
        { confirmedUntil: T0 + 15_000, grantedUntil: T0 + 60_000 },
      ],
      2,
    ],
    [
      'grants alike: the confirmation due soonest',
      [
        { confirmedUntil: T0 + 25_000, grantedUntil: T0 + 100_000 },
        { confirmedUntil: T0 + 8_000, grantedUntil: T0 + 100_000 },
      ],
      2,
    ],
    [
      'an identity due before the confirmation counts as due',
      [
        { confirmedUntil: T0 + 10_000, grantedUntil: GRANT_FAR },
        { confirmedUntil: T0 + 28_000, grantedUntil: GRANT_FAR, verifiedUntil: T0 + 3_000 },
      ],
      2,
    ],
    [
      'never a member whose confirmation lapsed',
      [
        { confirmedUntil: T0 - 1, grantedUntil: T0 + 1_000 },
        { confirmedUntil: T0 + 29_000, grantedUntil: GRANT_FAR },
      ],
      2,
    ],
    [
      'never a member without the grant',
      [
        { confirmedUntil: T0 + 1_000, grantedUntil: 0 },
        { confirmedUntil: T0 + 29_000, grantedUntil: GRANT_FAR },
      ],
      2,
    ],
    [
      'never a credential no longer live',
      [
        { confirmedUntil: T0 + 1_000, grantedUntil: T0 + 1_000, live: false },
        { confirmedUntil: T0 + 29_000, grantedUntil: GRANT_FAR },
      ],
      2,
    ],
    ['nobody qualifies: none', [{ confirmedUntil: 0, grantedUntil: GRANT_FAR }], undefined],
  ])('%s', (_name, proofs, chosen) => {
    expect(chooser(proofs).choose()).toBe(chosen);
  });

  it('prefers a member without a refresh under way, whatever it saves, until released', () => {
    const { refreshers, choose } = chooser([
      { confirmedUntil: T0 + 1_000, grantedUntil: T0 + 1_000 },
      { confirmedUntil: T0 + 29_000, grantedUntil: GRANT_FAR },
    ]);
    const first = refreshers.choose(PROJECT, RUNS, T0)!;
    expect(first.caller.userId).toBe(1);
    expect(choose()).toBe(2);
    refreshers.release(first);
    // Member 2's pending refresh now ranks them last.
    expect(choose()).toBe(1);
  });
});
