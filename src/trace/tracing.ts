/**
 * Tracing, off unless configured: the one switch every traced stage reads. OpenTelemetry is on
 * when the standard environment names where spans go (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_ENDPOINT`) and `OTEL_SDK_DISABLED` is not `true`; only then is the SDK
 * loaded (otel.ts, a dynamic import), so a default start pays nothing for it.
 *
 * Off, `tracing` is undefined and a stage's whole cost is reading it: a memory hit reads it once,
 * when the request arrives (pipeline.ts), and the record reads the exchange's `trace` once at the
 * end (ops/recorder.ts). On, every request gets a server span (the client's `traceparent` its
 * parent) and the stages below add children of the active span: the identity look-up, the fill
 * (linked to the requests that waited on it), the wait for a budget token, the upstream request
 * (which carries the fill's `traceparent`) and every Redis round trip. Outside a request's trace
 * (the budget's leases, the bus, probes) nothing is traced: `child` answers undefined.
 *
 * Nothing here imports the SDK: types only, erased at build.
 */
import type { IncomingMessage } from 'node:http';
import type { Attributes, Span } from '@opentelemetry/api';
import type { Logger } from 'pino';

export type { Attributes, Span };

/** A request's server span, as the record ends it (ops/recorder.ts). */
export interface RequestTrace {
  /** A request the pipeline answered: its outcome, tier and scope in the access log's words. */
  answered(answer: AnsweredRequest): void;
  /** A request forwarded upstream (`passthrough`, or `bypass` for an unknown parameter), once its response is done. */
  forwarded(operation: string, outcome: 'passthrough' | 'bypass', status: number): void;
}

/** What the record knows of an answered request, for its span's attributes. */
export interface AnsweredRequest {
  readonly operation: string;
  readonly status: number;
  /** The cache outcome (cache/outcome.ts), read as it is: trace/ imports nothing of the layers it traces. */
  readonly outcome: {
    readonly kind: string;
    readonly tier?: string | undefined;
    readonly detail?: string | undefined;
    readonly upstreamStatus?: number | undefined;
  };
  /** `user`, `project` or `admin`: the kind of scope that answered (the access log's `scope`). */
  readonly scope: string | undefined;
  readonly userId: number | undefined;
}

export type ChildKind = 'internal' | 'client';

export interface Tracing {
  /** A request's server span, child of the client's `traceparent` when it sent a valid one. */
  request(req: IncomingMessage): RequestTrace;
  /** Runs `fn` with the request's span active: the stages' spans below are its children. */
  within<T>(trace: RequestTrace, fn: () => T): T;
  /** A child of the active span, started now; undefined outside a request's trace. */
  child(name: string, kind: ChildKind, attributes?: Attributes): Span | undefined;
  /** Runs `fn` with `span` active. */
  withSpan<T>(span: Span, fn: () => T): T;
  /** The W3C `traceparent` header naming `span` (what the upstream request carries). */
  traceparent(span: Span): string;
  /** Links the active span (a request waiting on a coalesced run) from `span` (the run). */
  linkActive(span: Span): void;
  /** Ends `span`; a thrown value marks it failed. */
  end(span: Span, error?: unknown): void;
  /** Exports what is left and stops. */
  shutdown(): Promise<void>;
}

/** The switch: undefined unless tracing is on (startTracing). A live binding: read it where it is used, never copy it at import. */
export let tracing: Tracing | undefined;

/** Is tracing asked for by this environment? (An endpoint for spans, and the SDK not disabled.) */
function tracingWanted(env: NodeJS.ProcessEnv): boolean {
  if (env['OTEL_SDK_DISABLED']?.trim().toLowerCase() === 'true') return false;
  if (env['OTEL_TRACES_EXPORTER']?.trim().toLowerCase() === 'none') return false;
  return nonEmpty(env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']) || nonEmpty(env['OTEL_EXPORTER_OTLP_ENDPOINT']);
}

/** Turns tracing on if the environment asks for it (the SDK loaded only then); a second call while on keeps the first. */
export async function startTracing(env: NodeJS.ProcessEnv, logger: Logger, version: string): Promise<void> {
  if (tracing !== undefined || !tracingWanted(env)) return;
  const { startOtel } = await import('./otel.js');
  tracing = startOtel(env, logger, version);
}

/** Exports the spans still buffered and turns tracing off (the proxy's drain calls it last). */
export async function stopTracing(): Promise<void> {
  const running = tracing;
  tracing = undefined;
  await running?.shutdown();
}

/**
 * Runs `fn` in a child span of the active one, ended when its promise settles (failed if it
 * rejects). Without tracing, or outside a request's trace, just `fn()`.
 */
export function traced<T>(name: string, kind: ChildKind, attributes: Attributes, fn: (span: Span | undefined) => Promise<T>): Promise<T> {
  const t = tracing;
  const span = t?.child(name, kind, attributes);
  if (t === undefined || span === undefined) return fn(undefined);
  return t
    .withSpan(span, () => fn(span))
    .then(
      (value) => (t.end(span), value),
      (error: unknown) => {
        t.end(span, error);
        throw error;
      },
    );
}

function nonEmpty(value: string | undefined): boolean {
  return value !== undefined && value.trim() !== '';
}
