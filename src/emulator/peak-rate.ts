/**
 * The most arrivals in any sliding one-second window, exactly: the busiest window can always be
 * taken to end at an arrival, so counting, at each arrival, those of the second before it
 * (half-open: (t - 1 s, t]) and keeping the largest count is the answer. The times of the last
 * second sit in a ring, so each arrival costs O(1) amortized and memory grows only to the peak.
 */
const WINDOW_MS = 1000;
const INITIAL_SLOTS = 64;

export class PeakRate {
  private times = new Float64Array(INITIAL_SLOTS);
  private head = 0;
  private count = 0;
  private latestMs = -Infinity;
  private peak = 0;

  record(nowMs: number): void {
    // A clock stepping back is taken as no time passing, so the ring stays in time order.
    const t = Math.max(nowMs, this.latestMs);
    this.latestMs = t;
    while (this.count > 0 && this.times[this.head]! <= t - WINDOW_MS) {
      this.head = (this.head + 1) % this.times.length;
      this.count--;
    }
    if (this.count === this.times.length) this.grow();
    this.times[(this.head + this.count) % this.times.length] = t;
    this.count++;
    if (this.count > this.peak) this.peak = this.count;
  }

  peakPerSecond(): number {
    return this.peak;
  }

  /** Forgets every arrival (and gives back what a past peak grew). */
  reset(): void {
    this.times = new Float64Array(INITIAL_SLOTS);
    this.head = 0;
    this.count = 0;
    this.latestMs = -Infinity;
    this.peak = 0;
  }

  /** Doubles the ring, oldest first. */
  private grow(): void {
    const bigger = new Float64Array(this.times.length * 2);
    for (let i = 0; i < this.count; i++) bigger[i] = this.times[(this.head + i) % this.times.length]!;
    this.times = bigger;
    this.head = 0;
  }
}
