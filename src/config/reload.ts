/**
 * What a reload (SIGHUP) may change while running, and what needs a restart.
 *
 * Reloadable: settings read per request or per new entry, whose change cannot leave anything
 * half-applied — freshness rules (new entries follow them), the log level and access log, the
 * admin token, identity and access TTLs, Retry-After defaults, health.requireUpstream. Everything
 * else (listeners, the upstream pool, Redis, memory bounds, secrets that key stored values) stays
 * as started until a restart; a reload names those settings in its log line. The TLS files keep
 * their paths until a restart, but what they hold is read again on every reload (a new
 * certificate is served from the next connection on: proxy/certificates.ts).
 */
import type { Logger } from 'pino';
import type { Config } from './schema.js';

/** Setting paths (or their sections, ending in `.`) that a reload applies. */
const RELOADABLE: readonly string[] = [
  'cache.freshness.',
  'cache.staleIfErrorMs',
  'server.logLevel',
  'log.',
  'admin.token',
  'admin.viewerToken',
  'identity.ttlMs',
  'identity.refusedTtlMs',
  'access.ttlMs',
  'access.projectConfirmMs',
  'access.grantTtlMs',
  'upstream.defaultRetryAfterMs',
  'upstream.maxRetryAfterMs',
  'health.requireUpstream',
];

function isReloadable(path: string): boolean {
  return RELOADABLE.some((p) => (p.endsWith('.') ? path.startsWith(p) : path === p));
}

/** The leaf settings whose values differ, as dotted paths (an open map counts as one leaf per key). */
function changedSettings(a: unknown, b: unknown, prefix = ''): string[] {
  if (isPlainObject(a) && isPlainObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => changedSettings(a[k], b[k], prefix === '' ? k : `${prefix}.${k}`));
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [prefix];
}

export interface ReloadPlan {
  /** Changed settings a reload applies now. */
  readonly applied: string[];
  /** Changed settings kept as they are until a restart. */
  readonly needRestart: string[];
}

function planReload(current: Config, next: Config): ReloadPlan {
  const changed = changedSettings(current, next);
  return { applied: changed.filter(isReloadable), needRestart: changed.filter((p) => !isReloadable(p)) };
}

/** `current` with every reloadable setting taken from `next` (a new object; both stay as they are). */
export function applyReloadable(current: Config, next: Config): Config {
  const out = structuredClone(current) as unknown as Record<string, unknown>;
  for (const path of planReload(current, next).applied) {
    const parts = path.split('.');
    let source: unknown = next;
    let target = out;
    for (let i = 0; i < parts.length - 1; i++) {
      source = (source as Record<string, unknown>)[parts[i]!];
      target = (target[parts[i]!] ??= {}) as Record<string, unknown>;
    }
    const leaf = parts[parts.length - 1]!;
    const value = (source as Record<string, unknown>)[leaf];
    if (value === undefined) delete target[leaf];
    else target[leaf] = structuredClone(value);
  }
  return out as unknown as Config;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** How a reload ended, as the log line and `tm_cache_reloads_total{result}` say it. */
export type ReloadResult = 'applied' | 'restart_needed' | 'unchanged' | 'refused';

/** What a reload needs of the running proxy. */
export interface Reconfigurable {
  readonly config: Config;
  reconfigure(next: Config): void;
  /** Counts how a reload ended (metrics). */
  countReload?(result: ReloadResult): void;
}

function resultOf(plan: ReloadPlan): ReloadResult {
  return plan.applied.length > 0 ? 'applied' : plan.needRestart.length > 0 ? 'restart_needed' : 'unchanged';
}

/**
 * The logger for what an operator's own act did (a reload, a certificate rotation): such lines are
 * written at warn whatever the level, so that a reload to `error` still says it happened. Only
 * `silent` silences them, as it was asked to.
 */
export function noticeLogger(logger: Logger): Logger {
  return logger.level === 'silent' || logger.isLevelEnabled('warn') ? logger : logger.child({}, { level: 'warn' });
}

/**
 * SIGHUP: reads the sources again (`load`: config file, environment, the original flags), applies
 * what can change at runtime and logs what changed and what needs a restart. A file that does not
 * load or validate changes nothing: its problems are logged (never a value) and the running config stays.
 * Either way the line is written at warn or above (`noticeLogger`), after the new log level is set.
 */
async function reload(load: () => Promise<Config>, running: Reconfigurable, logger: Logger): Promise<ReloadPlan | undefined> {
  let next: Config;
  try {
    next = await load();
  } catch (err) {
    noticeLogger(logger).error(
      { result: 'refused', problems: err instanceof Error ? err.message : String(err) },
      'reload refused: the running configuration is kept',
    );
    running.countReload?.('refused');
    return undefined;
  }
  const plan = planReload(running.config, next);
  running.reconfigure(next);
  const result = resultOf(plan);
  noticeLogger(logger).warn(
    { result, applied: plan.applied, needRestart: plan.needRestart },
    result === 'unchanged' ? 'reloaded: nothing changed' : 'reloaded',
  );
  running.countReload?.(result);
  return plan;
}

/**
 * SIGHUPs for the whole life of `serve`, installed before anything waits: a SIGHUP without a
 * handler ends the process, and start-up may wait for Redis (`cache.redis.connectTimeoutMs`).
 * One that comes before the proxy runs is applied once it does (the file may have changed since
 * start-up read it); reloads run one after the other, so an older file never wins over a newer.
 */
export class SignalledReloads {
  #running: { readonly proxy: Reconfigurable; readonly logger: Logger } | undefined;
  #pending = false;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly load: () => Promise<Config>) {}

  /** A SIGHUP. */
  request(): void {
    const running = this.#running;
    if (running === undefined) return void (this.#pending = true);
    this.#queue = this.#queue.then(() => reload(this.load, running.proxy, running.logger));
  }

  /** Start-up is done: a SIGHUP received meanwhile is applied now. */
  started(proxy: Reconfigurable, logger: Logger): void {
    this.#running = { proxy, logger };
    if (this.#pending) {
      this.#pending = false;
      logger.info('a SIGHUP came during start-up: reloading now');
      this.request();
    }
  }
}
