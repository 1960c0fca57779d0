/**
 * How a tier reports its failures without becoming one: every failure is counted, but a log
 * line per kind is written at most once per interval (a Redis outage at 5,000 requests/s must
 * not turn into 5,000 log lines/s). The line carries how many were suppressed since the last one.
 */

/** The part of a pino logger the tiers use (pino's Logger satisfies it). */
export interface TierLogger {
  warn(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export const silentLogger: TierLogger = { warn() {}, info() {}, error() {} };

const DEFAULT_LOG_INTERVAL_MS = 10_000;

export interface FailureCounts {
  /** Every failure of every kind since start. */
  total: number;
  byKind: Record<string, number>;
  lastError?: { kind: string; message: string; at: number };
}

export class FailureLog {
  readonly #logger: TierLogger;
  readonly #intervalMs: number;
  readonly #now: () => number;
  readonly #lastLoggedAt = new Map<string, number>();
  readonly #suppressed = new Map<string, number>();
  readonly #counts: FailureCounts = { total: 0, byKind: {} };

  constructor(logger: TierLogger, intervalMs = DEFAULT_LOG_INTERVAL_MS, now: () => number = Date.now) {
    this.#logger = logger;
    this.#intervalMs = intervalMs;
    this.#now = now;
  }

  /** Counts one failure of `kind`; logs it unless one of that kind was logged recently. */
  record(kind: string, error: unknown, context: object = {}): void {
    const at = this.#now();
    const message = error instanceof Error ? error.message : String(error);
    this.#counts.total++;
    this.#counts.byKind[kind] = (this.#counts.byKind[kind] ?? 0) + 1;
    this.#counts.lastError = { kind, message, at };
    const last = this.#lastLoggedAt.get(kind);
    if (last !== undefined && at - last < this.#intervalMs) {
      this.#suppressed.set(kind, (this.#suppressed.get(kind) ?? 0) + 1);
      return;
    }
    const suppressed = this.#suppressed.get(kind) ?? 0;
    this.#lastLoggedAt.set(kind, at);
    this.#suppressed.delete(kind);
    this.#logger.warn({ ...context, kind, err: message, suppressed }, `cache tier failure (${kind}); treated as a miss`);
  }

  counts(): FailureCounts {
    return { ...this.#counts, byKind: { ...this.#counts.byKind } };
  }
}
