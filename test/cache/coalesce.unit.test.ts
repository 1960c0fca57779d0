import { describe, expect, it } from 'vitest';
import { Coalescer } from '../../src/cache/coalesce.js';

/** A promise the test settles by hand. */
function deferred<T>(): { promise: Promise<T>; resolve(v: T): void; reject(e: unknown): void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

describe('Coalescer', () => {
  it('runs fn once for 1,000 concurrent callers, who all get its result', async () => {
    const coalescer = new Coalescer<number>();
    const fill = deferred<number>();
    let calls = 0;
    const runs = Array.from({ length: 1000 }, () =>
      coalescer.run('k', () => {
        calls++;
        return fill.promise;
      }),
    );
    expect(coalescer.inFlight).toBe(1);
    fill.resolve(42);
    expect(await Promise.all(runs.map((r) => r.promise))).toEqual(Array(1000).fill(42));
    expect(calls).toBe(1);
    expect(runs.filter((r) => r.leader)).toHaveLength(1);
    expect(runs[0]!.leader).toBe(true);
  });

  it('gives every concurrent caller the same rejection, then releases the key', async () => {
    const coalescer = new Coalescer<number>();
    const failure = new Error('upstream down');
    const fill = deferred<number>();
    const runs = [1, 2, 3].map(() => coalescer.run('k', () => fill.promise));
    fill.reject(failure);
    const results = await Promise.allSettled(runs.map((r) => r.promise));
    expect(results.every((r) => r.status === 'rejected' && r.reason === failure)).toBe(true);
    expect(coalescer.inFlight).toBe(0);
    const next = coalescer.run('k', async () => 7);
    expect(next.leader).toBe(true);
    expect(await next.promise).toBe(7);
  });

  it('turns a synchronous throw into a shared rejection', async () => {
    const coalescer = new Coalescer<number>();
    const run = coalescer.run('k', () => {
      throw new Error('sync');
    });
    await expect(run.promise).rejects.toThrow('sync');
    expect(coalescer.isInFlight('k')).toBe(false);
  });

  it('runs different keys independently', async () => {
    const coalescer = new Coalescer<string>();
    const a = coalescer.run('a', async () => 'A');
    const b = coalescer.run('b', async () => 'B');
    expect([a.leader, b.leader]).toEqual([true, true]);
    expect(coalescer.inFlight).toBe(2);
    expect(await Promise.all([a.promise, b.promise])).toEqual(['A', 'B']);
    expect(coalescer.inFlight).toBe(0);
  });

  it('has released the key by the time callers see the result', async () => {
    const coalescer = new Coalescer<number>();
    const seen = await coalescer.run('k', async () => 1).promise.then(() => coalescer.isInFlight('k'));
    expect(seen).toBe(false);
  });
});
