/**
 * The fill mechanism against fakes below it (a fetch function, a store, a lock): coalescing,
 * the cross-replica lock, storing. No access rules here: that is the read-through's policy.
 */
import { describe, expect, it } from 'vitest';
import type { CacheEntry } from '../../src/cache/entry.js';
import { Filler, type FillJob, type FillLock, type Fetched } from '../../src/cache/fill.js';
import { makeEntry } from './fixtures.js';

function fakeStore() {
  const sets: string[] = [];
  const backfilled: string[] = [];
  let release: () => void = () => undefined;
  const written = new Promise<void>((r) => (release = r));
  return {
    sets,
    backfilled,
    release: () => release(),
    store: {
      set: (key: string) => (sets.push(key), written),
      backfill: (key: string) => void backfilled.push(key),
    },
  };
}

function job(fetched: () => Promise<Fetched<string>>, over: Partial<FillJob<string>> = {}): FillJob<string> & { calls: number } {
  const j: FillJob<string> & { calls: number } = {
    key: 'k',
    fillKey: 'k',
    shareable: true,
    acceptStored: true,
    calls: 0,
    fetch: (): Promise<Fetched<string>> => (j.calls++, fetched()),
    ...over,
  };
  return j;
}

const entry = (bytes = 10): CacheEntry => makeEntry(Date.now(), { body: Buffer.alloc(bytes, 1) });
const options = { lockTtlMs: 700, lockWaitMs: 300, maxEntryBytes: 100 };

describe('Filler', () => {
  it('runs one fetch for concurrent fills of one fill key, and hands every caller its result', async () => {
    const s = fakeStore();
    const filler = new Filler<string>({ store: s.store, ...options });
    const e = entry();
    const j = job(async () => ({ kind: 'entry', entry: e }));
    const runs = [filler.run(j), filler.run(j), filler.run(j)];
    expect(runs.map((r) => r.leader)).toEqual([true, false, false]);
    const results = await Promise.all(runs.map((r) => r.promise));
    expect(j.calls).toBe(1);
    expect(results.every((r) => r.kind === 'entry' && r.entry === e && r.stored)).toBe(true);
    expect(s.sets).toEqual(['k']);
  });

  it('stores entries up to maxEntryBytes, answers larger ones unstored, and never stores anything else', async () => {
    const s = fakeStore();
    const filler = new Filler<string>({ store: s.store, ...options });
    expect(await filler.runAlone(job(async () => ({ kind: 'entry', entry: entry(100) })))).toMatchObject({ stored: true });
    expect(await filler.runAlone(job(async () => ({ kind: 'entry', entry: entry(101) })))).toMatchObject({ stored: false });
    expect(await filler.runAlone(job(async () => ({ kind: 'other', value: '403' })))).toEqual({ kind: 'other', value: '403' });
    expect(s.sets).toEqual(['k']);
  });

  it('shares a failed fetch with its waiters and does not remember it', async () => {
    const filler = new Filler<string>({ store: fakeStore().store, ...options });
    let fail = true;
    const j = job(async () => {
      if (fail) throw new Error('boom');
      return { kind: 'other', value: 'ok' };
    });
    const [a, b] = [filler.run(j), filler.run(j)];
    await expect(a.promise).rejects.toThrow('boom');
    await expect(b.promise).rejects.toThrow('boom');
    fail = false;
    expect(await filler.run(j).promise).toEqual({ kind: 'other', value: 'ok' });
    expect(j.calls).toBe(2);
  });

  it('takes the cross-replica lock with lockTtlMs and releases it only once the shared write landed', async () => {
    const s = fakeStore();
    const log: string[] = [];
    const lock: FillLock = {
      claim: async (key, ttlMs) => (log.push(`lock ${key} ${ttlMs}`), { token: 'token' }),
      unlock: async (key, token) => void log.push(`unlock ${key} ${token}`),
      waitFor: async () => undefined,
      extend: async () => true,
    };
    const filler = new Filler<string>({ store: s.store, lock, ...options });
    await filler.runAlone(job(async () => ({ kind: 'entry', entry: entry() })));
    await new Promise((r) => setTimeout(r, 10));
    expect(log).toEqual(['lock k 700']);
    s.release();
    await new Promise((r) => setTimeout(r, 10));
    expect(log).toEqual(['lock k 700', 'unlock k token']);
  });

  it('waits lockWaitMs for another replica holding the lock, and keeps its entry without fetching', async () => {
    const s = fakeStore();
    const theirs = entry();
    const waits: number[] = [];
    const lock: FillLock = {
      claim: async () => undefined,
      unlock: async () => undefined,
      waitFor: async (_k, ms) => (waits.push(ms), theirs),
      extend: async () => true,
    };
    const filler = new Filler<string>({ store: s.store, lock, ...options });
    const j = job(async () => ({ kind: 'entry', entry: entry() }));
    expect(await filler.runAlone(j)).toEqual({ kind: 'entry', entry: theirs, stored: true, collapsed: true });
    expect(j.calls).toBe(0);
    expect(waits).toEqual([300]);
    expect(s.backfilled).toEqual(['k']);
  });

  it('keeps the entry another replica stored since this one looked, without fetching, waiting or unlocking', async () => {
    const s = fakeStore();
    const theirs = entry();
    const log: string[] = [];
    const accepted: boolean[] = [];
    const lock: FillLock = {
      claim: async (_k, _ttl, acceptStored) => (accepted.push(acceptStored), acceptStored ? { entry: theirs } : { token: 't' }),
      unlock: async () => void log.push('unlock'),
      waitFor: async () => (log.push('wait'), undefined),
      extend: async () => true,
    };
    const filler = new Filler<string>({ store: s.store, lock, ...options });
    const j = job(async () => ({ kind: 'entry', entry: entry() }));
    expect(await filler.runAlone(j)).toEqual({ kind: 'entry', entry: theirs, stored: true, storedEarlier: true });
    expect(j.calls).toBe(0);
    expect(log).toEqual([]);
    await filler.runAlone(job(async () => ({ kind: 'entry', entry: entry() }), { acceptStored: false }));
    expect(accepted).toEqual([true, false]);
    expect(s.backfilled).toEqual(['k']);
  });

  it('fills itself when the other replica never delivers, and never locks for a fill the caller may not share', async () => {
    const tried: string[] = [];
    const lock: FillLock = {
      claim: async (k) => void tried.push(k) as undefined,
      unlock: async () => undefined,
      waitFor: async () => undefined,
      extend: async () => true,
    };
    const filler = new Filler<string>({ store: fakeStore().store, lock, ...options });
    const j = job(async () => ({ kind: 'other', value: 'x' }));
    await filler.runAlone(j);
    expect(j.calls).toBe(1);
    await filler.runAlone(job(async () => ({ kind: 'other', value: 'x' }), { shareable: false }));
    await filler.runAlone(job(async () => ({ kind: 'other', value: 'x' }), { fillKey: 'u:1|k' }));
    expect(tried).toEqual(['k']);
  });
});
