/**
 * A seeded PRNG (mulberry32) and the few draws the dataset needs. Math.random is never used for
 * data: the same seed must give byte-identical responses.
 */
export class Prng {
  private state: number;

  constructor(seed: number) {
    // Spread small seeds (1, 2, 42) over the state space so neighbouring seeds diverge at once.
    this.state = (Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ 0xc2b2ae35) >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Integer in [min, max], both inclusive. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }

  /** Index drawn with the given relative weights. */
  weighted(weights: readonly number[]): number {
    let total = 0;
    for (const w of weights) total += w;
    let r = this.next() * total;
    for (let i = 0; i < weights.length; i++) {
      r -= weights[i]!;
      if (r < 0) return i;
    }
    return weights.length - 1;
  }

  /** Up to `max` distinct items, in the order of `items` (so output stays sorted when input is). */
  subset<T>(items: readonly T[], max: number, p = 0.5): T[] {
    if (max <= 0 || !this.chance(p)) return [];
    const n = this.int(1, Math.min(max, items.length));
    const chosen = new Set<number>();
    while (chosen.size < n) chosen.add(this.int(0, items.length - 1));
    return [...chosen].sort((a, b) => a - b).map((i) => items[i]!);
  }
}
