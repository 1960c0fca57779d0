/**
 * The bench's one argument parser: scenario names, `--list`, `--short`, and every knob, each
 * given as a flag (`--duration 5`) or as its environment variable (`BENCH_DURATION_S=5`); a flag
 * wins over the variable, and either wins over the scenario's default (its short default under
 * `--short`). A value that is not what the knob takes is an error, not a silent default.
 */
import { parseArgs } from 'node:util';

interface Knob {
  readonly env: string;
  readonly kind: 'number' | 'string' | 'boolean';
  readonly help: string;
}

/** Every knob of every scenario, by flag name. */
const KNOBS = {
  short: { env: 'BENCH_SHORT', kind: 'boolean', help: 'short runs: every scenario at its short defaults (checks that it runs; figures are rough)' },
  only: { env: 'BENCH_ONLY', kind: 'string', help: 'scenario names, comma-separated (the same as naming them)' },
  out: { env: 'BENCH_OUT', kind: 'string', help: 'folder of the JSON results (default bench-results)' },
  duration: { env: 'BENCH_DURATION_S', kind: 'number', help: 'measured seconds per server, split over the rounds' },
  warmup: { env: 'BENCH_WARMUP_S', kind: 'number', help: 'warm-up seconds per server before the rounds' },
  rounds: { env: 'BENCH_ROUNDS', kind: 'number', help: 'rotating rounds: servers take turns, one slice each per round' },
  'redis-duration': { env: 'BENCH_REDIS_DURATION_S', kind: 'number', help: 'redis: measured seconds per server' },
  'miss-pairs': { env: 'BENCH_MISS_PAIRS', kind: 'number', help: 'miss: distinct cold questions' },
  coalesce: { env: 'BENCH_COALESCE', kind: 'number', help: 'miss: concurrent identical cold requests' },
  'ci-agents': { env: 'BENCH_CI_AGENTS', kind: 'number', help: 'ci-burst, first-minute: agents' },
  'fleet-agents': { env: 'BENCH_FLEET_AGENTS', kind: 'number', help: 'fleet-budget, fleet-learn: agents asking cold questions' },
  'fleet-s': { env: 'BENCH_FLEET_S', kind: 'number', help: 'fleet-budget: seconds of cold questions' },
  'fleet-learn-s': { env: 'BENCH_FLEET_LEARN_S', kind: 'number', help: 'fleet-learn: seconds against the unknown limit' },
  'fleet-poll-s': { env: 'BENCH_FLEET_POLL_S', kind: 'number', help: 'fleet-refresh-ahead: seconds of polling per mode and geometry' },
  'ci-users': { env: 'BENCH_CI_USERS', kind: 'number', help: 'ci-burst: users the agents run under' },
  'capacity-s': { env: 'BENCH_CAPACITY_S', kind: 'number', help: 'capacity: measured seconds per server' },
  'capacity-stale': { env: 'BENCH_CAPACITY_STALE', kind: 'number', help: 'capacity: distinct stale lists' },
  'dash-scale': { env: 'BENCH_DASH_SCALE', kind: 'number', help: 'dashboards: every clock × this' },
  'dash-periods': { env: 'BENCH_DASH_PERIODS', kind: 'number', help: 'dashboards: freshness periods measured after the warm-up' },
  'team-scale': { env: 'BENCH_TEAM_SCALE', kind: 'number', help: 'team-dashboards: every clock × this' },
  'team-periods': { env: 'BENCH_TEAM_PERIODS', kind: 'number', help: 'team-dashboards: freshness periods measured after the warm-up' },
  misses: { env: 'BENCH_MISSES', kind: 'number', help: 'ab:hit, ab:miss: distinct cold questions per server' },
  'miss-warmup': { env: 'BENCH_WARMUP', kind: 'number', help: 'ab:miss: cold questions per server before the measured ones' },
  base: { env: 'BENCH_AB_BASE', kind: 'string', help: 'ab:*: another checkout, built (dist/cli.js), to compare this one with' },
  encrypted: { env: 'BENCH_ENCRYPTED', kind: 'boolean', help: 'ab:redis: values sealed with AES-256-GCM instead of MAC-bound' },
  'bare-proxy': { env: 'BENCH_BARE_PROXY', kind: 'boolean', help: "ab:miss: also a bare node proxy (bare-proxy.ts): node's floor" },
  'nginx-cache': { env: 'BENCH_NGINX_CACHE', kind: 'boolean', help: "ab:miss: also nginx proxy_cache (a cache's miss)" },
  'no-store': { env: 'BENCH_NO_STORE', kind: 'boolean', help: 'ab:miss: also a tm-cache whose memory tier keeps nothing' },
  'node-flags': { env: 'BENCH_NODE_FLAGS', kind: 'string', help: 'ab:miss: `;`-separated sets of node flags, one more tm-cache per set' },
  configs: { env: 'BENCH_CONFIGS', kind: 'string', help: 'ab:miss: JSON {name: YAML}, one more tm-cache per config' },
  'log-level': { env: 'BENCH_TM_LOG_LEVEL', kind: 'string', help: "tm-cache's --log-level (default warn: no access log)" },
  top: { env: 'PROFILE_TOP', kind: 'number', help: 'profile:*: frames listed' },
  'accept-encoding': { env: 'PROFILE_ACCEPT_ENCODING', kind: 'string', help: "profile:*: the load's Accept-Encoding, e.g. gzip" },
  'profile-out': { env: 'PROFILE_OUT', kind: 'string', help: 'profile:*: keep the .cpuprofile at this path' },
  'codec-modules': { env: 'CODEC_BENCH_MODULES', kind: 'string', help: 'codec: a folder where lz4-napi / zstd-napi are installed' },
} as const satisfies Record<string, Knob>;

type KnobName = keyof typeof KNOBS;
type NumberKnob = { [K in KnobName]: (typeof KNOBS)[K]['kind'] extends 'number' ? K : never }[KnobName];
type StringKnob = { [K in KnobName]: (typeof KNOBS)[K]['kind'] extends 'string' ? K : never }[KnobName];
type BooleanKnob = { [K in KnobName]: (typeof KNOBS)[K]['kind'] extends 'boolean' ? K : never }[KnobName];

export class UsageError extends Error {}

export interface BenchArgs {
  /** Scenario names, as given (positional, then `--only`), duplicates left out. */
  readonly scenarios: readonly string[];
  readonly list: boolean;
  readonly help: boolean;
  readonly options: Options;
}

/** The knobs' values, read once from the command line and the environment. */
export class Options {
  readonly #values: ReadonlyMap<KnobName, string | boolean>;

  constructor(values: ReadonlyMap<KnobName, string | boolean>) {
    this.#values = values;
  }

  get short(): boolean {
    return this.flag('short');
  }

  /** The knob's number if given, else `full` (or `short` under `--short`, when a scenario has one). */
  number(name: NumberKnob, full: number, short = full): number {
    const raw = this.#values.get(name);
    return raw === undefined ? (this.short ? short : full) : Number(raw);
  }

  string(name: StringKnob): string | undefined {
    const raw = this.#values.get(name);
    return typeof raw === 'string' && raw !== '' ? raw : undefined;
  }

  flag(name: BooleanKnob): boolean {
    return this.#values.get(name) === true;
  }

  /** What was set, flag or environment: recorded with the results. */
  given(): Record<string, string | boolean> {
    return Object.fromEntries(this.#values);
  }
}

const TRUE = new Set(['1', 'true', 'yes', 'on']);
const FALSE = new Set(['0', 'false', 'no', 'off', '']);

/** Parses `argv` (what follows `run.ts`) and the `BENCH_*` variables of `env`. Throws UsageError. */
export function parseBenchArgs(argv: readonly string[], env: NodeJS.ProcessEnv = {}): BenchArgs {
  const flags: Record<string, { type: 'string' | 'boolean' }> = { list: { type: 'boolean' }, help: { type: 'boolean' } };
  for (const [name, knob] of Object.entries(KNOBS)) flags[name] = { type: knob.kind === 'boolean' ? 'boolean' : 'string' };
  let parsed: { values: Record<string, string | boolean | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({ args: [...argv], options: flags, allowPositionals: true, strict: true }) as typeof parsed;
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  const values = new Map<KnobName, string | boolean>();
  for (const [name, knob] of Object.entries(KNOBS) as [KnobName, Knob][]) {
    const fromFlag = parsed.values[name];
    const fromEnv = env[knob.env];
    let value: string | boolean | undefined = fromFlag;
    if (value === undefined && fromEnv !== undefined) {
      if (knob.kind !== 'boolean') value = fromEnv;
      else if (TRUE.has(fromEnv.toLowerCase())) value = true;
      else if (!FALSE.has(fromEnv.toLowerCase())) throw new UsageError(`${knob.env}=${fromEnv}: expected 1 or 0`);
    }
    if (value === undefined || value === '') continue;
    if (knob.kind === 'number' && !(Number.isFinite(Number(value)) && Number(value) > 0)) {
      throw new UsageError(`${fromFlag === undefined ? knob.env : `--${name}`} ${String(value)}: expected a positive number`);
    }
    values.set(name, value);
  }
  const only = (values.get('only') as string | undefined)?.split(',') ?? [];
  const scenarios = [...new Set([...parsed.positionals, ...only].map((s) => s.trim()).filter((s) => s !== ''))];
  return { scenarios, list: parsed.values['list'] === true, help: parsed.values['help'] === true, options: new Options(values) };
}

/** The knobs, for `--help`. */
export function knobHelp(): string[] {
  return Object.entries(KNOBS).map(([name, k]) => `  --${name}${k.kind === 'boolean' ? '' : ' <value>'}`.padEnd(28) + `${k.env.padEnd(24)} ${k.help}`);
}
