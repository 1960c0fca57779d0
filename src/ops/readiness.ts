/** One thing /readyz asks about (Redis, the upstream): its own module, so that what reports readiness needs not import the management port. */
export interface ReadinessCheck {
  readonly name: string;
  /** `ok`, or `degraded` (still ready, reported in the body), or `down` (not ready). */
  check(): { status: 'ok' | 'degraded' | 'down'; detail?: string };
  /** Called when /readyz itself is asked (not on a metrics scrape): a chance to go and look. */
  refresh?(): void;
}
