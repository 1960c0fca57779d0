/**
 * What reached the API: counted per route template ("GET /api/v1/runs/{run_id}") and per token,
 * so a proxy test can tell a cache hit (nothing arrived) from a fill (one request arrived); the
 * busiest second, so a bench can tell whether a fleet kept within a budget; and what the
 * rate_limit fault refused. Every request counts, whatever a fault did to it.
 */
import type { Escalation } from './rate-limit.js';
import { PeakRate } from './peak-rate.js';

export interface StatsSnapshot {
  readonly total: number;
  /** Most requests received in any sliding one-second window since the last reset. */
  readonly peak_per_s: number;
  /** 429s answered by the rate_limit fault (its lockout's included). */
  readonly rate_limited: number;
  /** Lockout periods begun. */
  readonly lockouts: number;
  readonly by_route: Record<string, number>;
  readonly by_token: Record<string, number>;
}

/** Key for requests that name no token at all. */
const NO_TOKEN = '(none)';
/** Route key for /api/v1 paths that match no operation. */
export const UNMATCHED_ROUTE = '(unmatched)';
/** Route key for catalogued paths whose id is malformed (`/runs/abc`): one key, not one per typo. */
export const MALFORMED_ROUTE = '(malformed)';

export class RequestStats {
  private total = 0;
  private readonly peak = new PeakRate();
  private rateLimited = 0;
  private lockouts = 0;
  private byRoute = new Map<string, number>();
  private byToken = new Map<string, number>();

  /** A request arrived at `nowMs` (the emulator's wall clock). */
  record(routeKey: string, token: string | undefined, nowMs: number): void {
    this.total++;
    this.peak.record(nowMs);
    bump(this.byRoute, routeKey);
    bump(this.byToken, token ?? NO_TOKEN);
  }

  /** The rate_limit fault answered 429. */
  recordRateLimited(escalation: Escalation): void {
    this.rateLimited++;
    if (escalation === 'lockout_begins') this.lockouts++;
  }

  reset(): void {
    this.total = 0;
    this.peak.reset();
    this.rateLimited = 0;
    this.lockouts = 0;
    this.byRoute.clear();
    this.byToken.clear();
  }

  /** Keys sorted, so the snapshot itself is deterministic. */
  snapshot(): StatsSnapshot {
    return {
      total: this.total,
      peak_per_s: this.peak.peakPerSecond(),
      rate_limited: this.rateLimited,
      lockouts: this.lockouts,
      by_route: sorted(this.byRoute),
      by_token: sorted(this.byToken),
    };
  }
}

function bump(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

function sorted(map: Map<string, number>): Record<string, number> {
  return Object.fromEntries([...map].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}
