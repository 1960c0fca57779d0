/**
 * The shared fill against fakes below it (a producer, a look-up, a lock role), as prow's ghcache
 * coalescer is tested over a fake request executor: coalescing here, one replica producing under
 * the lock, the others waiting for its value. Entries, identities and confirmations are its jobs;
 * their policies have their own tests (fill, identity-replicas, access-confirmation).
 */
import { describe, expect, it } from 'vitest';
import { SharedFill, type LockClaim, type SharedFillJob, type SharedLock } from '../../src/cache/shared-fill.js';

/** A promise the test settles by hand. */
function deferred<T>(): { promise: Promise<T>; resolve(v: T): void; reject(e: unknown): void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

const tick = (): Promise<void> => new Promise((r) => setTimeout(r, 5));

/** A lock role that answers `claim` as told and records every call. */
function fakeLock(claim: LockClaim<string>, waited?: string): SharedLock<string> & { log: string[] } {
  const log: string[] = [];
  return {
    log,
    claim: async (key, ttlMs, acceptStored, _budget, owner) => (log.push(`claim ${key}${owner ? ` as ${owner}` : ''} ${ttlMs} ${acceptStored}`), claim),
    unlock: async (key, token, owner) => void log.push(`unlock ${key}${owner ? ` as ${owner}` : ''} ${token}`),
    waitFor: async (key, timeoutMs, _budget, owner) => (log.push(`wait ${key}${owner ? ` as ${owner}` : ''} ${timeoutMs}`), waited),
    extend: async (key, token, ttlMs, owner) => (log.push(`extend ${key}${owner ? ` as ${owner}` : ''} ${token} ${ttlMs}`), true),
  };
}

/** A job whose producer answers `produced` (and shares `write`), counting calls. */
function job(
  over: Partial<SharedFillJob<string, string>> = {},
  produced = 'mine',
  write?: Promise<void>,
): SharedFillJob<string, string> & { produced: number } {
  const j: SharedFillJob<string, string> & { produced: number } = {
    key: 'k',
    lockKey: 'k',
    produced: 0,
    adopt: (value, how) => `${how}:${value}`,
    produce: async (share) => {
      j.produced++;
      share(write);
      return produced;
    },
    ...over,
  };
  return j;
}

const locked = { lockTtlMs: 700, lockWaitMs: 300 };

describe('SharedFill: coalescing on this replica', () => {
  it('runs one producer for concurrent runs of one key, and hands every caller its result', async () => {
    const fill = new SharedFill<string, string>();
    const result = deferred<string>();
    let calls = 0;
    const j = job({ produce: () => (calls++, result.promise) });
    const runs = [fill.run(j), fill.run(j), fill.run({ ...j, key: 'other' })];
    expect(runs.map((r) => r.leader)).toEqual([true, false, true]);
    expect(fill.isRunning('k')).toBe(true);
    result.resolve('one');
    expect(await Promise.all(runs.map((r) => r.promise))).toEqual(['one', 'one', 'one']);
    expect(calls).toBe(2);
    expect(fill.isRunning('k')).toBe(false);
  });

  it('shares a rejection with every waiter and remembers nothing of it', async () => {
    const fill = new SharedFill<string, string>();
    let fail = true;
    const j = job({ produce: async () => (fail ? Promise.reject(new Error('boom')) : 'ok') });
    const [a, b] = [fill.run(j), fill.run(j)];
    await expect(a.promise).rejects.toThrow('boom');
    await expect(b.promise).rejects.toThrow('boom');
    fail = false;
    expect(await fill.run(j).promise).toBe('ok');
  });

  it('releases the key before any waiter resumes: a run started by a waiter leads a new one', async () => {
    // 1. the leader's producer settles; 2. the key is released; 3. only then do waiters resume.
    // Were the key released after (ghcache's numbered race), a run started in step 3 would join
    // a run that is over, and wait for a result nobody will produce again.
    const fill = new SharedFill<string, string>();
    let calls = 0;
    const j = job({ produce: async () => `run ${++calls}` });
    const first = fill.run(j);
    const waiter = fill.run(j).promise.then(() => fill.run(j));
    expect(await first.promise).toBe('run 1');
    const again = await waiter;
    expect(again.leader).toBe(true);
    expect(await again.promise).toBe('run 2');
  });

  it('runs a job alone, not coalesced, when asked', async () => {
    const fill = new SharedFill<string, string>();
    const j = job();
    await Promise.all([fill.runAlone(j), fill.runAlone(j)]);
    expect(j.produced).toBe(2);
  });
});

describe('SharedFill: what is already shared', () => {
  it('answers with what the look-up found, taking no lock and producing nothing', async () => {
    const lock = fakeLock({ token: 't' });
    const fill = new SharedFill<string, string>({ lock, ...locked });
    const j = job({ lookup: async () => 'shared' });
    expect(await fill.run(j).promise).toBe('shared');
    expect(j.produced).toBe(0);
    expect(lock.log).toEqual([]);
  });

  it('goes on to the lock when the look-up finds nothing usable', async () => {
    const lock = fakeLock({ token: 't' });
    const fill = new SharedFill<string, string>({ lock, ...locked });
    const j = job({ lookup: async () => undefined });
    expect(await fill.run(j).promise).toBe('mine');
    await tick();
    expect(lock.log).toEqual(['claim k 700 false', 'unlock k t']);
  });
});

describe('SharedFill: one replica produces under the lock', () => {
  it('claims with lockTtlMs, produces, and unlocks only once the shared write landed, without holding the result back', async () => {
    const lock = fakeLock({ token: 't' });
    const write = deferred<void>();
    const fill = new SharedFill<string, string>({ lock, ...locked });
    expect(await fill.run(job({}, 'mine', write.promise)).promise).toBe('mine');
    await tick();
    expect(lock.log).toEqual(['claim k 700 false']);
    write.resolve();
    await tick();
    expect(lock.log).toEqual(['claim k 700 false', 'unlock k t']);
  });

  it('holds the result until the write landed and the lock is released, for a job that asks', async () => {
    const lock = fakeLock({ token: 't' });
    const write = deferred<void>();
    const fill = new SharedFill<string, string>({ lock, ...locked });
    let settled = false;
    const result = fill.run(job({ answerAfterShare: true }, 'mine', write.promise)).promise.finally(() => (settled = true));
    await tick();
    expect(settled).toBe(false);
    write.resolve();
    expect(await result).toBe('mine');
    expect(lock.log).toEqual(['claim k 700 false', 'unlock k t']);
  });

  it('unlocks at once when producing fails, and the failure is the result', async () => {
    const lock = fakeLock({ token: 't' });
    const fill = new SharedFill<string, string>({ lock, ...locked });
    await expect(fill.run(job({ produce: () => Promise.reject(new Error('upstream down')) })).promise).rejects.toThrow('upstream down');
    await tick();
    expect(lock.log).toEqual(['claim k 700 false', 'unlock k t']);
  });

  it('waits lockWaitMs for the replica holding the lock, and adopts its value without producing', async () => {
    const lock = fakeLock(undefined, 'theirs');
    const fill = new SharedFill<string, string>({ lock, ...locked });
    const j = job();
    expect(await fill.run(j).promise).toBe('waited:theirs');
    expect(j.produced).toBe(0);
    expect(lock.log).toEqual(['claim k 700 false', 'wait k 300']);
  });

  it('produces by itself, holding no lock, when the wait brings nothing or nothing usable', async () => {
    for (const [waited, adopt] of [
      [undefined, undefined],
      ['refused', () => undefined],
    ] as const) {
      const lock = fakeLock(undefined, waited);
      const fill = new SharedFill<string, string>({ lock, ...locked });
      const j = job(adopt ? { adopt } : {});
      expect(await fill.run(j).promise).toBe('mine');
      await tick();
      expect(lock.log).toEqual(['claim k 700 false', 'wait k 300']);
    }
  });

  it('adopts the value another replica stored since the look-up, when the job accepts one, without waiting or unlocking', async () => {
    const lock = fakeLock({ entry: 'stored' });
    const fill = new SharedFill<string, string>({ lock, ...locked });
    const j = job({ acceptStored: true });
    expect(await fill.run(j).promise).toBe('stored:stored');
    await tick();
    expect(j.produced).toBe(0);
    expect(lock.log).toEqual(['claim k 700 true']);
  });

  it('produces by itself, without the lock, when the stored value is not usable', async () => {
    const lock = fakeLock({ entry: 'stale' });
    const fill = new SharedFill<string, string>({ lock, ...locked });
    const j = job({ acceptStored: true, adopt: () => undefined });
    expect(await fill.run(j).promise).toBe('mine');
    await tick();
    expect(lock.log).toEqual(['claim k 700 true']);
  });

  it('neither locks nor waits for a job without a lock key, nor without a lock role (memory only)', async () => {
    const lock = fakeLock({ token: 't' });
    const withRole = new SharedFill<string, string>({ lock, ...locked });
    expect(await withRole.run(job({ lockKey: undefined })).promise).toBe('mine');
    expect(lock.log).toEqual([]);
    const memoryOnly = new SharedFill<string, string>({ lock: undefined, ...locked });
    expect(await memoryOnly.run(job()).promise).toBe('mine');
  });

  it("takes and waits on an owner's lock of the key, never the key's own, for a job that names one", async () => {
    const free = fakeLock({ token: 't' });
    expect(await new SharedFill<string, string>({ lock: free, ...locked }).run(job({ lockOwner: 'u:5' })).promise).toBe('mine');
    await tick();
    expect(free.log).toEqual(['claim k as u:5 700 false', 'unlock k as u:5 t']);
    const held = fakeLock(undefined, 'theirs');
    expect(await new SharedFill<string, string>({ lock: held, ...locked }).run(job({ lockOwner: 'u:5' })).promise).toBe('waited:theirs');
    expect(held.log).toEqual(['claim k as u:5 700 false', 'wait k as u:5 300']);
  });

  it("waits once on the lock of a waitKey, never claiming it: its value adopted, else on to the job's own lock", async () => {
    const theirs = fakeLock({ token: 't' }, 'theirs');
    expect(await new SharedFill<string, string>({ lock: theirs, ...locked }).run(job({ waitKey: 'team' })).promise).toBe('waited:theirs');
    expect(theirs.log).toEqual(['wait team 300']);
    const none = fakeLock({ token: 't' });
    const j = job({ waitKey: 'team', lockOwner: 'u:5' });
    expect(await new SharedFill<string, string>({ lock: none, ...locked }).run(j).promise).toBe('mine');
    await tick();
    expect(none.log).toEqual(['wait team 300', 'claim k as u:5 700 false', 'unlock k as u:5 t']);
  });
});

describe('SharedFill: the lock follows its producer', () => {
  it('renews the lock every half TTL while its producer is at work (waiting for a budget token, or the instance), and not after', async () => {
    const lock = fakeLock({ token: 't1' });
    const fill = new SharedFill<string, string>({ lock, lockTtlMs: 40, lockWaitMs: 300 });
    const result = deferred<string>();
    const run = fill.run(job({ produce: () => result.promise }));
    await new Promise((r) => setTimeout(r, 110));
    const renewals = lock.log.filter((l) => l.startsWith('extend')).length;
    expect(renewals).toBeGreaterThanOrEqual(2);
    expect(lock.log).toContain('extend k t1 40');
    result.resolve('mine');
    expect(await run.promise).toBe('mine');
    await new Promise((r) => setTimeout(r, 60));
    expect(lock.log.filter((l) => l.startsWith('extend')).length).toBe(renewals);
    expect(lock.log.at(-1)).toBe('unlock k t1');
  });

  it('follows another replica’s fill while its lock is held for followMs, not lockWaitMs', async () => {
    const lock = fakeLock(undefined, 'theirs');
    const fill = new SharedFill<string, string>({ lock, lockTtlMs: 700, lockWaitMs: 300, followMs: 10_300 });
    expect(await fill.run(job()).promise).toBe('waited:theirs');
    expect(lock.log).toEqual(['claim k 700 false', 'wait k 10300']);
  });

  it('waits on a lock it never claims (waitKey) lockWaitMs only', async () => {
    const lock = fakeLock({ token: 't2' });
    const fill = new SharedFill<string, string>({ lock, lockTtlMs: 700, lockWaitMs: 300, followMs: 10_300 });
    await fill.run(job({ waitKey: 'team' })).promise;
    expect(lock.log[0]).toBe('wait team 300');
  });
});
