/**
 * Prometheus metrics. Labels are bounded sets (outcome kind, tier, operation id): never a
 * credential, a user id or a URL.
 */
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { CacheOutcome } from '../proxy/read-through.js';

export interface Metrics {
  readonly registry: Registry;
  recordOutcome(outcome: CacheOutcome, operation: string): void;
  /** Registers a gauge read at scrape time. */
  gauge(name: string, help: string, read: () => number): void;
}

export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'tm_cache_process_' });
  const requests = new Counter({
    name: 'tm_cache_requests_total',
    help: 'Cacheable requests by outcome (hit, stale, miss, coalesced, bypass, error), tier and operation.',
    labelNames: ['outcome', 'tier', 'operation'] as const,
    registers: [registry],
  });
  // Children are resolved once per label combination: the hit path then only increments.
  const children = new Map<string, Counter.Internal>();
  return {
    registry,
    recordOutcome(outcome, operation) {
      const id = `${outcome.kind}|${outcome.tier ?? ''}|${operation}`;
      let child = children.get(id);
      if (child === undefined) {
        child = requests.labels({ outcome: outcome.kind, tier: outcome.tier ?? 'none', operation });
        children.set(id, child);
      }
      child.inc();
    },
    gauge(name, help, read) {
      new Gauge({ name, help, registers: [registry], collect() { this.set(read()); } });
    },
  };
}
