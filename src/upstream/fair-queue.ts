/**
 * Waiters taken round-robin between callers: one FIFO per caller, and the callers with a waiter
 * in turn order. The fair lane (fair-lane.ts) waits for a connection slot through one; the fleet
 * budget (fleet-budget.ts) waits for a token through one per priority. Taking the next waiter is
 * the oldest of the caller whose turn it is, not the oldest of all, so another caller's few waiters
 * do not wait behind a flooder's hundreds (deficit-free round-robin).
 *
 * A Map iterates in insertion order: taking the first caller and re-adding it when it still waits
 * moves it to the back of the turns, O(1) per turn.
 */

/**
 * Whose share a request takes: a user id; a string for a requester not verified as a user (a
 * passthrough request's credential or client address, an unknown credential's client address:
 * see callers/requester.ts); undefined for requests made on nobody's behalf.
 */
export type LaneCaller = number | string | undefined;

export class FairQueue<T> {
  /** Callers with at least one waiter, in turn order, each with its waiters in arrival order. */
  private readonly turns = new Map<LaneCaller, T[]>();
  private count = 0;

  /** Waiters of every caller. */
  get size(): number {
    return this.count;
  }

  /** Waiters of `caller` (0 when none). */
  sizeOf(caller: LaneCaller): number {
    return this.turns.get(caller)?.length ?? 0;
  }

  /** Adds a waiter at the back of its caller's FIFO; a caller new to the turns goes last. */
  push(caller: LaneCaller, waiter: T): void {
    const fifo = this.turns.get(caller);
    if (fifo === undefined) this.turns.set(caller, [waiter]);
    else fifo.push(waiter);
    this.count++;
  }

  /** The oldest waiter of the caller whose turn it is (that caller goes to the back if it still waits); undefined when empty. */
  shift(): T | undefined {
    const first = this.turns.entries().next();
    if (first.done === true) return undefined;
    const [caller, fifo] = first.value;
    const waiter = fifo.shift()!;
    this.turns.delete(caller);
    if (fifo.length > 0) this.turns.set(caller, fifo);
    this.count--;
    return waiter;
  }

  /** Removes one waiter (one that gave up); false if it was not waiting. Keeps the caller's turn. */
  delete(caller: LaneCaller, waiter: T): boolean {
    const fifo = this.turns.get(caller);
    const at = fifo?.indexOf(waiter) ?? -1;
    if (fifo === undefined || at < 0) return false;
    fifo.splice(at, 1);
    if (fifo.length === 0) this.turns.delete(caller);
    this.count--;
    return true;
  }

  /** Removes and answers every waiter, in turn order (on close, or when none of them can be served any more). */
  drain(): T[] {
    const all: T[] = [];
    for (let waiter = this.shift(); waiter !== undefined; waiter = this.shift()) all.push(waiter);
    return all;
  }
}
