/**
 * One fill in flight per key (request coalescing, "collapsed forwarding"): the first caller
 * for a key becomes the leader and runs `fn`; everyone who asks for the same key while it runs
 * shares its promise, so they get the same result or the same rejection. The key is released
 * as soon as the promise settles, rejection included, so a failed fill is never remembered:
 * the next caller simply leads a new one.
 */
export interface CoalescedRun<T> {
  readonly promise: Promise<T>;
  /** True for the one caller whose `fn` runs; the others were coalesced onto it. */
  readonly leader: boolean;
}

export class Coalescer<T> {
  readonly #inFlight = new Map<string, Promise<T>>();

  /** How many keys have a fill running right now. */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  isInFlight(key: string): boolean {
    return this.#inFlight.has(key);
  }

  /** The run in flight for `key`, to wait on without joining it; undefined when none is. */
  running(key: string): Promise<T> | undefined {
    return this.#inFlight.get(key);
  }

  run(key: string, fn: () => Promise<T>): CoalescedRun<T> {
    const running = this.#inFlight.get(key);
    if (running) return { promise: running, leader: false };
    // Waiters are handed the promise that settles after the key is released, never before:
    // 1. fn settles; 2. the key is released (below); 3. the waiters resume. Released after them
    // instead, a caller that asks again from step 3 (a retry after a failure, a refresh) would
    // join the run that is over and get its result again rather than lead a new one (prow's
    // ghcache deletes its entry before the Broadcast for a like reason).
    const promise = startSafely(fn).finally(() => {
      // Only release our own run: by now a later leader may have registered under the key.
      if (this.#inFlight.get(key) === promise) this.#inFlight.delete(key);
    });
    this.#inFlight.set(key, promise);
    return { promise, leader: true };
  }
}

/** A synchronous throw inside `fn` becomes a rejection shared like any other. */
function startSafely<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    return Promise.reject(error);
  }
}
