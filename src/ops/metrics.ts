/**
 * Prometheus metrics. Labels are bounded sets (outcome kind, tier, operation id): never a
 * credential, a user id or a URL.
 */
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { CacheOutcome } from '../cache/outcome.js';

export interface Metrics {
  readonly registry: Registry;
  recordOutcome(outcome: CacheOutcome, operation: string): void;
  /** Registers a gauge read at scrape time. */
  gauge(name: string, help: string, read: () => number): void;
}

export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'tm_cache_process_' });
  // The hit path increments a plain number found through nested maps (no label string, no hash);
  // the Prometheus counter is brought up to date when it is scraped.
  interface Tally {
    readonly labels: { outcome: string; tier: string; operation: string };
    count: number;
  }
  const tallies = new Map<string, Map<string, Map<string, Tally>>>();
  new Counter({
    name: 'tm_cache_requests_total',
    help: 'Cacheable requests by outcome (hit, stale, miss, coalesced, bypass, error), tier and operation.',
    labelNames: ['outcome', 'tier', 'operation'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const byTier of tallies.values()) {
        for (const byOperation of byTier.values()) for (const tally of byOperation.values()) this.inc(tally.labels, tally.count);
      }
    },
  });
  return {
    registry,
    recordOutcome(outcome, operation) {
      const tier = outcome.tier ?? 'none';
      let byTier = tallies.get(outcome.kind);
      if (byTier === undefined) tallies.set(outcome.kind, (byTier = new Map()));
      let byOperation = byTier.get(tier);
      if (byOperation === undefined) byTier.set(tier, (byOperation = new Map()));
      let tally = byOperation.get(operation);
      if (tally === undefined) byOperation.set(operation, (tally = { labels: { outcome: outcome.kind, tier, operation }, count: 0 }));
      tally.count++;
    },
    gauge(name, help, read) {
      new Gauge({ name, help, registers: [registry], collect() { this.set(read()); } });
    },
  };
}
