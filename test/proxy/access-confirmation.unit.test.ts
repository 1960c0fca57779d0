/**
 * ProjectAccess over a fake upstream and a fake shared store: the mechanism of access
 * confirmations (coalescing, expiry counted from the question, sharing, revocation), apart from
 * the end-to-end tests in test/security/.
 */
import { describe, expect, it } from 'vitest';
import type { CacheEntry } from '../../src/cache/entry.js';
import { ProjectAccess, projectOf } from '../../src/proxy/callers/access-confirmation.js';
import type { SharedStore } from '../../src/proxy/callers/identity.js';
import { UpstreamError, type Upstream, type UpstreamResponse } from '../../src/upstream/client.js';
import { makeEntry } from '../cache/fixtures.js';
import type { Caller } from '../../src/proxy/callers/caller.js';

const T0 = 1_800_000_000_000;
const CONFIRM_MS = 30_000;
const caller: Caller = { userId: 2, scope: 'u:2', credentialId: 'cred-2', verifiedUntil: T0 + 60_000, adminUntil: 0 };
const answer = (status: number): UpstreamResponse => ({ status, headers: { 'content-type': 'application/json' }, body: Buffer.from('{}') });

function fakeShared(): SharedStore & { values: Map<string, unknown> } {
  const values = new Map<string, unknown>();
  return {
    values,
    getJson: async <T>(ns: string, key: string) => values.get(`${ns}:${key}`) as T | undefined,
    setJson: async (ns: string, key: string, value: unknown) => void values.set(`${ns}:${key}`, value),
    setJsonMany: async (ns: string, many: readonly (readonly [string, unknown])[]) => {
      for (const [key, value] of many) values.set(`${ns}:${key}`, value);
    },
  };
}

function setup(respond: () => Promise<UpstreamResponse>) {
  const clock = { t: T0 };
  const paths: string[] = [];
  const upstream: Upstream = { get: async (path) => (paths.push(path), respond()), close: async () => undefined };
  const shared = fakeShared();
  const renewed: [authorization: string, caller: Caller, askedAt: number][] = [];
  const renewIdentity = (authorization: string, who: Caller, askedAt: number): void => void renewed.push([authorization, who, askedAt]);
  const access = new ProjectAccess({ confirmMs: CONFIRM_MS, upstream, shared, renewIdentity, now: () => clock.t });
  return { clock, paths, shared, access, renewed };
}

describe('ProjectAccess', () => {
  it('confirms with one coalesced GET /projects/{id}, valid for projectConfirmMs from the question', async () => {
    const { clock, paths, access } = setup(async () => answer(200));
    const results = await Promise.all([access.confirm(caller, 'A', 5), access.confirm(caller, 'A', 5)]);
    expect(results.map((r) => r.kind)).toEqual(['confirmed', 'confirmed']);
    expect(paths).toEqual(['/api/v1/projects/5']);
    expect(access.isConfirmed(2, 5, clock.t + CONFIRM_MS - 1)).toBe(true);
    expect(access.isConfirmed(2, 5, clock.t + CONFIRM_MS)).toBe(false);
    expect(access.isConfirmed(3, 5, clock.t)).toBe(false);
  });

  it("renews the credential's identity from the question on a 200, and only then", async () => {
    const ok = setup(async () => {
      ok.clock.t += 150;
      return answer(200);
    });
    await ok.access.confirm(caller, 'Bearer A', 5);
    expect(ok.renewed).toEqual([['Bearer A', caller, T0]]);

    const refused = setup(async () => answer(403));
    await refused.access.confirm(caller, 'Bearer A', 5);
    const failed = setup(async () => answer(503));
    await failed.access.confirm(caller, 'Bearer A', 5);
    const shared = setup(async () => answer(200));
    shared.shared.values.set('project-access:2:5', T0 + 10_000);
    await shared.access.confirm(caller, 'Bearer A', 5);
    expect([refused.renewed, failed.renewed, shared.renewed]).toEqual([[], [], []]);
  });

  it('takes a confirmation another replica shared, until its own expiry, without asking upstream', async () => {
    const { clock, paths, shared, access } = setup(async () => answer(200));
    shared.values.set('project-access:2:5', T0 + 10_000);
    expect((await access.confirm(caller, 'A', 5)).kind).toBe('confirmed');
    expect(paths).toEqual([]);
    expect(access.isConfirmed(2, 5, T0 + 10_001)).toBe(false);
    clock.t = T0 + 10_001;
    await access.confirm(caller, 'A', 5);
    expect(paths).toEqual(['/api/v1/projects/5']);
  });

  it.each([403, 404])('forgets the confirmation on a %i, here and in the shared store', async (status) => {
    const { clock, shared, access } = setup(async () => answer(status));
    access.renew(2, 5, T0 - CONFIRM_MS); // lapsed
    shared.values.set('project-access:2:5', T0 - 1);
    const result = await access.confirm(caller, 'A', 5);
    expect(result).toMatchObject({ kind: 'refused', response: { status } });
    expect(access.isConfirmed(2, 5, clock.t)).toBe(false);
    expect(shared.values.get('project-access:2:5')).toBe(0);
  });

  it.each([
    ['a 503', async () => answer(503), 'reset'],
    [
      'a 200 that is not JSON (an SSO page)',
      async () => ({ status: 200, headers: { 'content-type': 'text/html' }, body: Buffer.from('<html></html>') }),
      'bad-answer',
    ],
    ['a refused connection', async () => Promise.reject(new UpstreamError('connect', 'refused')), 'connect'],
    ['a full queue', async () => Promise.reject(new UpstreamError('queue-full', 'full')), 'queue-full'],
  ])('gives no verdict on %s', async (_name, respond, code) => {
    const { clock, access } = setup(respond);
    const result = await access.confirm(caller, 'A', 5);
    expect(result).toMatchObject({ kind: 'failed', error: { code } });
    expect(access.isConfirmed(2, 5, clock.t)).toBe(false);
  });

  it('reads an entry’s project from its tags once per entry', () => {
    const entry: CacheEntry = makeEntry(T0, { tags: ['run:7', 'project:12', 'u:2|project:12'] });
    expect(projectOf(entry)).toBe(12);
    expect(projectOf(makeEntry(T0, { tags: ['project', 'user:3'] }))).toBeUndefined();
  });
});
