/**
 * What reached the API: counted per route template ("GET /api/v1/runs/{run_id}") and per token,
 * so a proxy test can tell a cache hit (nothing arrived) from a fill (one request arrived).
 */
export interface StatsSnapshot {
  readonly total: number;
  readonly by_route: Record<string, number>;
  readonly by_token: Record<string, number>;
}

/** Key for requests that name no token at all. */
export const NO_TOKEN = '(none)';
/** Route key for /api/v1 paths that match no operation. */
export const UNMATCHED_ROUTE = '(unmatched)';
/** Route key for catalogued paths whose id is malformed (`/runs/abc`): one key, not one per typo. */
export const MALFORMED_ROUTE = '(malformed)';

export class RequestStats {
  private total = 0;
  private byRoute = new Map<string, number>();
  private byToken = new Map<string, number>();

  record(routeKey: string, token: string | undefined): void {
    this.total++;
    bump(this.byRoute, routeKey);
    bump(this.byToken, token ?? NO_TOKEN);
  }

  reset(): void {
    this.total = 0;
    this.byRoute.clear();
    this.byToken.clear();
  }

  /** Keys sorted, so the snapshot itself is deterministic. */
  snapshot(): StatsSnapshot {
    return { total: this.total, by_route: sorted(this.byRoute), by_token: sorted(this.byToken) };
  }
}

function bump(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

function sorted(map: Map<string, number>): Record<string, number> {
  return Object.fromEntries([...map].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}
