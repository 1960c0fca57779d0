/**
 * What tm-cache knows of the upstream instance: its last known state (up: it answered, whatever
 * the status; down: no answer — refused, reset, timed out), the last transport error, and recent
 * 429s. Learned from the cache's own traffic (`observeUpstream` wraps the upstream client) and
 * from passthrough failures; when nothing was heard for `health.upstreamProbeMs`, /readyz asks
 * once itself (an unauthenticated GET /api/v1/user: any HTTP answer means reachable).
 *
 * `/readyz` reports the state either way; with `health.requireUpstream` a known-down upstream
 * makes the replica not ready (docs/operating.md, "Health").
 */
import { matchRoute } from '../api/route.js';
import type { LaneCaller, UpstreamLane, UpstreamResponse } from '../upstream/client.js';
import { toUpstreamError } from '../upstream/client.js';
import type { ReadinessCheck } from './readiness.js';

export type UpstreamState = 'up' | 'down' | 'unknown';

const RECENT_429_MS = 5 * 60_000;

export class UpstreamHealth {
  state: UpstreamState = 'unknown';
  lastError: string | null = null;
  lastCheckedAt: number | null = null;
  last429At: number | null = null;
  /** Times of the 429s of the last five minutes (oldest first). */
  readonly #recent429: number[] = [];
  #probing = false;

  constructor(private readonly o: { now: () => number; probeMs: number; probe: () => Promise<unknown>; requireUpstream: () => boolean }) {}

  /** An answer (any status) or a failure (`status` undefined, with the error's code). */
  record(status: number | undefined, error?: string): void {
    const now = this.o.now();
    this.lastCheckedAt = now;
    if (status === undefined) {
      this.state = 'down';
      this.lastError = error ?? 'no answer';
      return;
    }
    this.state = 'up';
    if (status === 429) {
      this.last429At = now;
      this.#recent429.push(now);
      if (this.#recent429.length > 10_000) this.#recent429.shift();
    }
  }

  recent429(): number {
    const since = this.o.now() - RECENT_429_MS;
    while (this.#recent429.length > 0 && this.#recent429[0]! < since) this.#recent429.shift();
    return this.#recent429.length;
  }

  /** Asks the upstream itself when what is known is older than `probeMs` (one probe at a time). */
  refresh(): void {
    if (this.#probing) return;
    if (this.lastCheckedAt !== null && this.o.now() - this.lastCheckedAt < this.o.probeMs) return;
    this.#probing = true;
    this.o
      .probe()
      .then(
        (res) => this.record((res as UpstreamResponse).status),
        // A probe the fleet's budget had no token for was never sent: it says nothing of the instance.
        (err: unknown) => (toUpstreamError(err).code === 'budget-spent' ? undefined : this.record(undefined, describe(err))),
      )
      .finally(() => {
        this.#probing = false;
      });
  }

  /** The readiness check: the state in the body always; not ready only when required and known down. */
  readiness(): ReadinessCheck {
    return {
      name: 'upstream',
      refresh: () => this.refresh(),
      check: () => {
        const detail = this.state === 'down' ? `unreachable: ${this.lastError}` : this.state;
        if (this.state === 'down') return { status: this.o.requireUpstream() ? 'down' : 'degraded', detail };
        return { status: 'ok', detail };
      },
    };
  }
}

/** An upstream failure as a short phrase for /readyz and /admin/stats: what failed, never where. */
function describe(err: unknown): string {
  const failure = toUpstreamError(err);
  return `${failure.code}: ${failure.message}`;
}

/** `caller`: the user the request was made for (fills, refreshes, confirmations); none for an identity look-up. */
export interface UpstreamObserver {
  (operation: string, status: number | undefined, seconds: number, caller: LaneCaller): void;
}

/**
 * The upstream client, observed: every request's duration and status (or failure) goes to
 * `observe` (metrics) and to `health`. The operation is found from the path alone.
 */
export function observeUpstream(upstream: UpstreamLane, health: UpstreamHealth, observe: UpstreamObserver): UpstreamLane {
  return {
    get: async (path, headers, caller, priority) => {
      const started = performance.now();
      try {
        const res = await upstream.get(path, headers, caller, priority);
        observe(operationOfPath(path), res.status, (performance.now() - started) / 1_000, caller);
        health.record(res.status);
        return res;
      } catch (err) {
        const failure = toUpstreamError(err);
        // No token from the fleet's budget: nothing was sent, nothing learned of the instance.
        if (failure.code === 'budget-spent') throw err;
        observe(operationOfPath(path), undefined, (performance.now() - started) / 1_000, caller);
        // tm-cache's own full queue says nothing about the instance.
        if (failure.code !== 'queue-full' && failure.code !== 'closed') health.record(undefined, describe(err));
        throw err;
      }
    },
    close: () => upstream.close(),
    get load() {
      return upstream.load;
    },
  };
}

/** The catalogue operation of an upstream request path (query ignored), for a bounded label. */
function operationOfPath(path: string): string {
  const end = path.indexOf('?');
  try {
    return matchRoute(end === -1 ? path : path.slice(0, end))?.op.id ?? 'other';
  } catch {
    return 'other';
  }
}
