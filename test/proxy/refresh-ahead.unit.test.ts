/**
 * Refresh-ahead's timing (src/proxy/refresh-ahead.ts) against fakes below it: what memory holds,
 * whether a refresh may start, and the refresh itself (counted). A fake clock: timers and Date
 * move only when the test moves them.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { CacheEntry } from '../../src/cache/entry.js';
import type { Decision } from '../../src/proxy/decide.js';
import { RefreshAhead } from '../../src/proxy/refresh-ahead.js';
import { UpstreamError } from '../../src/upstream/client.js';
import { makeEntry } from '../cache/fixtures.js';

const T0 = 1_800_000_000_000;
const TTL_MS = 60_000;
const KEY = 'u:7|v1|listRuns|1|per_page=15';
const decision = { key: KEY, fillKey: KEY } as Decision;

function rig() {
  const held = new Map<string, CacheEntry>();
  const refreshes: { key: string; settle: (err?: unknown) => void }[] = [];
  let mayStart = true;
  const ahead = new RefreshAhead({
    startAt: 0.75,
    held: (key) => held.get(key),
    mayStart: () => mayStart,
    refresh: (d) => new Promise<void>((resolve, reject) => refreshes.push({ key: d.key, settle: (err) => (err === undefined ? resolve() : reject(err)) })),
    failed: (err) => err instanceof UpstreamError && err.code === 'budget-spent',
  });
  const store = (entry: CacheEntry) => (held.set(KEY, entry), entry);
  const read = (entry: CacheEntry) => ahead.polled(decision, entry, Date.now());
  /** A fresh hit as the read-through reports it, whatever the entry's age. */
  const hit = (entry: CacheEntry) => ahead.hit(decision, entry, Date.now());
  return { ahead, held, refreshes, store, read, hit, pause: (paused: boolean) => void (mayStart = !paused) };
}

beforeEach(() => {
  vi.useFakeTimers({ now: T0, toFake: ['setTimeout', 'clearTimeout', 'Date', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('refresh-ahead timing', () => {
  it('starts the refresh a tenth of the freshness before expiry until one was measured, then a few landing times before it', async () => {
    const r = rig();
    const first = r.store(makeEntry(T0));
    await vi.advanceTimersByTimeAsync(46_000);
    r.read(first);
    await vi.advanceTimersByTimeAsync(TTL_MS * 0.9 - 46_000 - 1);
    expect(r.refreshes).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(r.refreshes).toHaveLength(1);
    // It lands 20 ms later: from then on the lead is three landings (60 ms), at least 50 ms.
    await vi.advanceTimersByTimeAsync(20);
    const second = r.store(makeEntry(Date.now()));
    r.refreshes[0]!.settle();
    await vi.advanceTimersByTimeAsync(46_000);
    r.read(second);
    await vi.advanceTimersByTimeAsync(second.freshUntil - 60 - 1 - Date.now());
    expect(r.refreshes).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(r.refreshes).toHaveLength(2);
  });

  it('keeps refreshing a key polled just too slowly to be read in every last part: the next answer counts reads over twice that part', async () => {
    const r = rig();
    const first = r.store(makeEntry(T0));
    await vi.advanceTimersByTimeAsync(TTL_MS * 0.76);
    r.hit(first);
    await vi.advanceTimersByTimeAsync(TTL_MS * 0.9 - TTL_MS * 0.76);
    expect(r.refreshes).toHaveLength(1);
    // The refresh lands: the next answer, read at 0.6 of its freshness (before its last quarter) and not again before expiry.
    const second = r.store(makeEntry(Date.now()));
    r.refreshes[0]!.settle();
    await vi.advanceTimersByTimeAsync(TTL_MS * 0.6);
    r.hit(second);
    await vi.advanceTimersByTimeAsync(TTL_MS * 0.4 - 1);
    expect(r.refreshes).toHaveLength(2);
    // That one lands too, and its answer is read only early (0.3): no longer polled, not refreshed again.
    const third = r.store(makeEntry(Date.now()));
    r.refreshes[1]!.settle();
    await vi.advanceTimersByTimeAsync(TTL_MS * 0.3);
    r.hit(third);
    await vi.advanceTimersByTimeAsync(TTL_MS * 2);
    expect(r.refreshes).toHaveLength(2);
  });

  it('schedules one refresh per answer: later reads, and its gzip variant swapped in, add none', async () => {
    const r = rig();
    const entry = r.store(makeEntry(T0));
    await vi.advanceTimersByTimeAsync(46_000);
    r.read(entry);
    r.read(entry);
    const gzipped = r.store({ ...entry, gzip: Buffer.from('gz'), gzipEtag: '"gz"' });
    r.read(gzipped);
    await vi.advanceTimersByTimeAsync(TTL_MS);
    expect(r.refreshes).toHaveLength(1);
  });

  it('refreshes at once when read already within the lead of expiry', async () => {
    const r = rig();
    const entry = r.store(makeEntry(T0));
    await vi.advanceTimersByTimeAsync(TTL_MS * 0.95);
    r.read(entry);
    expect(r.refreshes).toHaveLength(1);
  });

  it('sends nothing when, by then, memory holds another answer or none (replaced, evicted, purged)', async () => {
    const r = rig();
    const entry = r.store(makeEntry(T0));
    await vi.advanceTimersByTimeAsync(46_000);
    r.read(entry);
    r.store(makeEntry(Date.now()));
    await vi.advanceTimersByTimeAsync(TTL_MS);
    expect(r.refreshes).toHaveLength(0);

    const next = r.store(makeEntry(Date.now()));
    await vi.advanceTimersByTimeAsync(46_000);
    r.read(next);
    r.held.delete(KEY);
    await vi.advanceTimersByTimeAsync(TTL_MS);
    expect(r.refreshes).toHaveLength(0);
  });

  it('lets a later read try again, at once, after a refresh skipped for want of a budget token or while it may not start', async () => {
    const r = rig();
    const entry = r.store(makeEntry(T0));
    await vi.advanceTimersByTimeAsync(46_000);
    r.read(entry);
    await vi.advanceTimersByTimeAsync(TTL_MS * 0.9 - 46_000);
    expect(r.refreshes).toHaveLength(1);
    r.refreshes[0]!.settle(new UpstreamError('budget-spent', 'no token'));
    await vi.advanceTimersByTimeAsync(100);
    r.read(entry);
    expect(r.refreshes).toHaveLength(2);
    // Another failure is not retried by reads: the entry goes stale, and is refreshed as such.
    r.refreshes[1]!.settle(new UpstreamError('timeout', 'slow'));
    await vi.advanceTimersByTimeAsync(100);
    r.read(entry);
    expect(r.refreshes).toHaveLength(2);

    const next = r.store(makeEntry(Date.now()));
    await vi.advanceTimersByTimeAsync(46_000);
    r.pause(true);
    r.read(next);
    await vi.advanceTimersByTimeAsync(TTL_MS * 0.9 - 46_000);
    expect(r.refreshes).toHaveLength(2);
    r.pause(false);
    r.read(next);
    expect(r.refreshes).toHaveLength(3);
  });

  it('cancels what is scheduled when closed, and schedules nothing after', async () => {
    const r = rig();
    const entry = r.store(makeEntry(T0));
    await vi.advanceTimersByTimeAsync(46_000);
    r.read(entry);
    r.ahead.close();
    await vi.advanceTimersByTimeAsync(TTL_MS);
    r.read(entry);
    await vi.advanceTimersByTimeAsync(TTL_MS);
    expect(r.refreshes).toHaveLength(0);
  });
});
