/**
 * The OpenTelemetry SDK behind tracing.ts, loaded only when tracing is on. Everything comes from
 * the standard environment, read by the SDK itself: where spans go and how
 * (`OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `_HEADERS`, `_TIMEOUT`: OTLP over HTTP, JSON), which
 * traces are kept (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`; parent-based always-on by
 * default, so a client's sampled flag is followed), the batching (`OTEL_BSP_*`) and the resource
 * (`OTEL_SERVICE_NAME`, default `tm-cache`; `OTEL_RESOURCE_ATTRIBUTES`).
 *
 * Nothing is registered globally: the tracer, the context (AsyncLocalStorage) and the W3C
 * propagator are this module's own, so no other library's instrumentation is switched on by it.
 * Attribute names follow the HTTP, database and error semantic conventions; tm-cache's own are
 * `tm_cache.*`. No attribute carries a credential, a query string or a cache key.
 */
import type { IncomingMessage } from 'node:http';
import { SpanKind, SpanStatusCode, ROOT_CONTEXT, trace, type Attributes, type Context, type Span, type TextMapGetter, type Tracer } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';
import { API_PREFIX, OPERATIONS } from '../api/catalogue.js';
import type { AnsweredRequest, ChildKind, RequestTrace, Tracing } from './tracing.js';

/** `http.route` of each operation: its path template under the API prefix. */
const ROUTES: ReadonlyMap<string, string> = new Map(OPERATIONS.map((op) => [op.id, `${API_PREFIX}${op.path}`]));

const HEADERS: TextMapGetter<IncomingMessage['headers']> = {
  keys: (headers) => Object.keys(headers),
  get: (headers, key) => headers[key],
};

/** The longest the drain waits for the last spans to be exported. */
const LAST_EXPORT_MS = 5_000;

const KINDS: Readonly<Record<ChildKind, SpanKind>> = { internal: SpanKind.INTERNAL, client: SpanKind.CLIENT };

export function startOtel(env: NodeJS.ProcessEnv, logger: Logger, version: string): Tracing {
  const resource = resourceFromAttributes({ 'service.name': 'tm-cache', 'service.version': version }).merge(detectResources({ detectors: [envDetector] }));
  const provider = new BasicTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())] });
  const contexts = new AsyncLocalStorageContextManager().enable();
  const tracing = new OtelTracing(provider.getTracer('tm-cache', version), contexts, async () => {
    // A collector that is down costs the spans still batched, never the drain: no rejection, and
    // no longer than LAST_EXPORT_MS however long the exporter would retry.
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${LAST_EXPORT_MS} ms`)), LAST_EXPORT_MS)));
    await Promise.race([provider.shutdown(), late])
      .catch((err: unknown) => logger.warn({ err: err instanceof Error ? err.message : String(err) }, 'tracing: the last spans were not exported'))
      .finally(() => clearTimeout(timer));
    contexts.disable();
  });
  logger.info({ endpoint: endpointOrigin(env), service: resource.attributes['service.name'] }, 'tracing on: spans exported over OTLP/HTTP');
  return tracing;
}

/** Where spans go, for the start-up line: the origin only (no path, no user info, never a header). */
function endpointOrigin(env: NodeJS.ProcessEnv): string {
  const url = env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']?.trim() || env['OTEL_EXPORTER_OTLP_ENDPOINT']?.trim() || '';
  try {
    return new URL(url).origin;
  } catch {
    return 'unreadable';
  }
}

class OtelTracing implements Tracing {
  readonly #propagator = new W3CTraceContextPropagator();

  constructor(
    private readonly tracer: Tracer,
    private readonly contexts: AsyncLocalStorageContextManager,
    readonly shutdown: () => Promise<void>,
  ) {}

  request(req: IncomingMessage): RequestTrace {
    const parent = this.#propagator.extract(ROOT_CONTEXT, req.headers, HEADERS);
    const method = req.method ?? 'GET';
    const span = this.tracer.startSpan(
      method,
      { kind: SpanKind.SERVER, attributes: { 'http.request.method': method, 'url.path': pathOf(req.url), 'url.scheme': 'http' } },
      parent,
    );
    return new OtelRequest(span, trace.setSpan(parent, span), method);
  }

  within<T>(requestTrace: RequestTrace, fn: () => T): T {
    return this.contexts.with((requestTrace as OtelRequest).context, fn);
  }

  child(name: string, kind: ChildKind, attributes?: Attributes): Span | undefined {
    const active = this.contexts.active();
    if (trace.getSpan(active) === undefined) return undefined;
    return this.tracer.startSpan(name, { kind: KINDS[kind], attributes }, active);
  }

  withSpan<T>(span: Span, fn: () => T): T {
    return this.contexts.with(trace.setSpan(this.contexts.active(), span), fn);
  }

  traceparent(span: Span): string {
    const carrier: Record<string, string> = {};
    this.#propagator.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, { set: (c, key, value) => (c[key] = value) });
    return carrier['traceparent'] ?? '';
  }

  linkActive(span: Span): void {
    const waiting = trace.getSpan(this.contexts.active());
    if (waiting !== undefined) span.addLink({ context: waiting.spanContext() });
  }

  end(span: Span, error?: unknown): void {
    if (error !== undefined) {
      span.setAttribute('error.type', errorType(error));
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    }
    span.end();
  }
}

class OtelRequest implements RequestTrace {
  constructor(
    readonly span: Span,
    readonly context: Context,
    private readonly method: string,
  ) {}

  answered(a: AnsweredRequest): void {
    const { span } = this;
    const route = ROUTES.get(a.operation);
    if (route !== undefined) {
      span.updateName(`${this.method} ${route}`);
      span.setAttribute('http.route', route);
    }
    span.setAttributes({
      'http.response.status_code': a.status,
      'tm_cache.operation': a.operation,
      'tm_cache.outcome': a.outcome.kind,
      'tm_cache.tier': a.outcome.tier,
      'tm_cache.scope': a.scope,
      'tm_cache.detail': a.outcome.detail,
      'tm_cache.upstream_status': a.outcome.upstreamStatus,
      'tm_cache.user_id': a.userId,
    });
    this.#end(a.status);
  }

  forwarded(operation: string, outcome: 'passthrough' | 'bypass', status: number): void {
    this.span.setAttributes({ 'http.response.status_code': status, 'tm_cache.operation': operation, 'tm_cache.outcome': outcome });
    this.#end(status);
  }

  /** A server span fails on a 5xx only: a 4xx is the client's (the HTTP semantic conventions). */
  #end(status: number): void {
    if (status >= 500) this.span.setAttribute('error.type', String(status)).setStatus({ code: SpanStatusCode.ERROR });
    this.span.end();
  }
}

/** The path without its query (it may carry what a trace must not keep). */
function pathOf(url: string | undefined): string {
  if (url === undefined) return '';
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/** An error's code (UpstreamError's `timeout`, a socket's `ECONNRESET`), else its class name. */
function errorType(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return code;
  return error instanceof Error ? error.name : 'error';
}
