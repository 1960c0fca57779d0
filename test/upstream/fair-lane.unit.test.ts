/**
 * The fair lane against a fake below it: each "request" takes a slot, is recorded when it starts
 * (its slot granted), and ends when the test says so (its slot released). What is checked is
 * who starts, in what order, and who is refused, never how long anything took.
 */
import { describe, expect, it } from 'vitest';
import { FairLane, type LaneCaller, type LaneLimits } from '../../src/upstream/fair-lane.js';
import { UpstreamError } from '../../src/upstream/upstream-error.js';

/** A fake upstream over a lane: requests start when granted a slot and finish on `finish`. */
function fakeUpstream(limits: LaneLimits) {
  const lane = new FairLane(limits);
  const started: string[] = [];
  const running = new Map<string, LaneCaller>();
  const refused: string[] = [];
  const ask = (caller: LaneCaller, name: string): void => {
    const start = (): void => {
      started.push(name);
      running.set(name, caller);
    };
    const waiting = lane.acquire(caller);
    if (waiting === undefined) return start();
    waiting.then(start, (err: unknown) => {
      expect(err).toBeInstanceOf(UpstreamError);
      expect((err as UpstreamError).code).toBe('queue-full');
      expect((err as UpstreamError).status).toBe(503);
      refused.push(name);
    });
  };
  const finish = async (name: string): Promise<void> => {
    expect(running.has(name)).toBe(true);
    const caller = running.get(name);
    running.delete(name);
    lane.release(caller);
    await settle();
  };
  return { lane, ask, finish, started, refused };
}

/** Lets granted and refused slots' callbacks run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

const FLOODER = 1;
const VICTIM = 2;
const THIRD = 3;

describe('FairLane', () => {
  it('refuses a caller past maxPerCaller (in flight and waiting together) while others still get in', async () => {
    const up = fakeUpstream({ maxConcurrent: 2, maxQueue: 10, maxPerCaller: 4 });
    for (let i = 0; i < 6; i++) up.ask(FLOODER, `f${i}`);
    up.ask(VICTIM, 'v0');
    await settle();
    expect(up.started).toEqual(['f0', 'f1']);
    expect(up.refused).toEqual(['f4', 'f5']);
    expect(up.lane.heldBy(FLOODER)).toBe(4);
    expect(up.lane.heldBy(VICTIM)).toBe(1);
    expect(up.lane.load).toEqual({ active: 2, queued: 3 });
  });

  it('hands a freed slot round-robin between callers, each caller’s own requests in arrival order', async () => {
    const up = fakeUpstream({ maxConcurrent: 1, maxQueue: 20 });
    up.ask(FLOODER, 'f0');
    for (let i = 1; i <= 5; i++) up.ask(FLOODER, `f${i}`);
    up.ask(VICTIM, 'v1');
    up.ask(VICTIM, 'v2');
    up.ask(THIRD, 't1');
    await settle();
    for (const name of ['f0', 'f1', 'v1', 't1', 'f2', 'v2', 'f3', 'f4']) await up.finish(name);
    expect(up.started).toEqual(['f0', 'f1', 'v1', 't1', 'f2', 'v2', 'f3', 'f4', 'f5']);
  });

  it('still bounds the whole queue: past maxQueue anyone is refused at once', async () => {
    const up = fakeUpstream({ maxConcurrent: 1, maxQueue: 2, maxPerCaller: 2 });
    up.ask(FLOODER, 'f0');
    up.ask(FLOODER, 'f1');
    up.ask(VICTIM, 'v0');
    up.ask(THIRD, 't0');
    await settle();
    expect(up.started).toEqual(['f0']);
    expect(up.refused).toEqual(['t0']);
    expect(up.lane.load).toEqual({ active: 1, queued: 2 });
  });

  it('gives a caller’s share back as its requests end, and forgets callers with nothing in the lane', async () => {
    const up = fakeUpstream({ maxConcurrent: 1, maxQueue: 4, maxPerCaller: 2 });
    up.ask(FLOODER, 'f0');
    up.ask(FLOODER, 'f1');
    up.ask(FLOODER, 'f2');
    await settle();
    expect(up.refused).toEqual(['f2']);
    await up.finish('f0');
    up.ask(FLOODER, 'f3');
    await settle();
    expect(up.refused).toEqual(['f2']);
    await up.finish('f1');
    await up.finish('f3');
    expect(up.started).toEqual(['f0', 'f1', 'f3']);
    expect(up.lane.heldBy(FLOODER)).toBe(0);
    expect(up.lane.load).toEqual({ active: 0, queued: 0 });
  });

  it('without maxPerCaller, and for requests of no caller, is the plain FIFO it was', async () => {
    const up = fakeUpstream({ maxConcurrent: 1, maxQueue: 3 });
    for (let i = 0; i < 5; i++) up.ask(undefined, `n${i}`);
    await settle();
    expect(up.refused).toEqual(['n4']);
    for (const name of ['n0', 'n1', 'n2']) await up.finish(name);
    expect(up.started).toEqual(['n0', 'n1', 'n2', 'n3']);
  });

  it('lets every waiter go on wakeAll (close), and their releases leave the lane empty', async () => {
    const up = fakeUpstream({ maxConcurrent: 1, maxQueue: 4, maxPerCaller: 3 });
    up.ask(FLOODER, 'f0');
    up.ask(FLOODER, 'f1');
    up.ask(VICTIM, 'v1');
    up.lane.wakeAll();
    await settle();
    expect(up.started).toEqual(['f0', 'f1', 'v1']);
    for (const name of ['f0', 'f1', 'v1']) await up.finish(name);
    expect(up.lane.load).toEqual({ active: 0, queued: 0 });
  });
});
