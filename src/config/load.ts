/**
 * Configuration sources → one validated, deeply frozen `Config`.
 *
 * Sources, lowest precedence first:
 *   1. The defaults of the schema (`DEFAULT_CONFIG`, schema.ts). `config/default.yaml` documents
 *      them and is never read at runtime: a test checks the two are equal.
 *   2. The YAML file named by `--config FILE` (or `TM_CACHE_CONFIG`): a partial override,
 *      deep-merged. An unknown key is an error naming its path (`cache.memroy`).
 *   3. Environment variables (`TM_CACHE_*`, see `CONFIG_OVERRIDES`); an empty one counts as unset.
 *   4. Command-line flags (`--port 8080` or `--port=8080`); an unknown flag is an error.
 *
 * Validation happens once, on the merged result, and reports every problem at once; each names
 * the setting, where the value came from, the value (secrets as `<redacted>`) and what is allowed.
 * The TLS files (`server.tls`) are read and checked too (tls-files.ts): a pair that cannot be
 * served fails the load, at start as on a reload.
 * The CLI prints `ConfigError.message` and exits 2. After that, the code trusts the `Config`.
 */
import { resolve } from 'node:path';
import { parseFlags } from './flags.js';
import { relationProblems } from './relations.js';
import { DEFAULT_CONFIG, deepFreeze, type Config } from './schema.js';
import { CONFIG_OVERRIDES, envLayer, flagLayer, mergeLayers, nonEmpty, readConfigFile, readConfigFileAsync, type Layer } from './sources.js';
import { readTlsMaterial, usesTls } from './tls-files.js';
import { validateMerged, type Origin } from './validate.js';
import { ConfigError } from './errors.js';

export { CONFIG_OVERRIDES, type ConfigOverride } from './sources.js';

export interface LoadConfigOptions {
  /** The flags after the subcommand, e.g. `['--port', '8080', '--upstream=https://tm.example.com']`. */
  readonly argv: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  /** Directory a relative `--config` path is resolved against; default `process.cwd()`. */
  readonly cwd?: string;
}

/** Where the config file is named; not a setting of `Config` itself. */
export const CONFIG_FILE_FLAG = '--config';
export const CONFIG_FILE_ENV = 'TM_CACHE_CONFIG';
const FLAGS = [...CONFIG_OVERRIDES.flatMap((o) => (o.flag === undefined ? [] : [o.flag])), CONFIG_FILE_FLAG];

const NO_UPSTREAM_MESSAGE = 'no upstream: set --upstream URL or TM_CACHE_UPSTREAM, or run `tm-cache demo` to try it against the built-in emulator';

/** `serve` needs an upstream; `loadConfig` leaves that decision to the command. */
export function assertUpstream(config: Config): void {
  if (config.upstream.url === '') throw new ConfigError(NO_UPSTREAM_MESSAGE);
}

/** Loads at start-up (the demo, tests): the file is read synchronously, nothing else runs yet. */
export function loadConfig(options: LoadConfigOptions): Config {
  const sources = sourcesOf(options);
  const problems: string[] = [];
  const file = sources.file && readConfigFile(sources.file.path, sources.file.source, problems);
  return buildConfig(options, sources.flags, file, problems);
}

/** Loads without blocking the event loop (`serve`, at start and on every reload). */
export async function loadConfigAsync(options: LoadConfigOptions): Promise<Config> {
  const sources = sourcesOf(options);
  const problems: string[] = [];
  const file = sources.file && (await readConfigFileAsync(sources.file.path, sources.file.source, problems));
  return buildConfig(options, sources.flags, file, problems);
}

interface Sources {
  readonly flags: ReadonlyMap<string, string>;
  /** The config file, if one is named, and who named it (`--config` or `TM_CACHE_CONFIG`). */
  readonly file?: { readonly path: string; readonly source: string } | undefined;
}

function sourcesOf(options: LoadConfigOptions): Sources {
  const flags = parseFlags(options.argv, FLAGS);
  if (flags.problems.length > 0) throw ConfigError.fromProblems(flags.problems);
  const fileFlag = flags.values.get(CONFIG_FILE_FLAG);
  const file = fileFlag ?? nonEmpty(options.env[CONFIG_FILE_ENV]);
  if (file === undefined) return { flags: flags.values };
  const source = fileFlag !== undefined ? CONFIG_FILE_FLAG : CONFIG_FILE_ENV;
  return { flags: flags.values, file: { path: resolve(options.cwd ?? process.cwd(), file), source } };
}

/** The file layer (read already, its problems in `problems`), the environment and the flags, merged and validated. */
function buildConfig(options: LoadConfigOptions, flags: ReadonlyMap<string, string>, file: Layer | undefined, problems: string[]): Config {
  const layers: Layer[] = file === undefined ? [] : [file];
  layers.push(envLayer(options.env, problems), flagLayer(flags, problems));
  if (problems.length > 0) throw ConfigError.fromProblems(problems);

  const { merged, origin } = mergeLayers(DEFAULT_CONFIG, layers);
  const upstream = merged['upstream'] as { url: unknown };
  if (typeof upstream.url === 'string') upstream.url = normalizeUpstreamUrl(upstream.url);

  problems.push(...validateMerged(merged, origin));
  if (problems.length === 0) problems.push(...relationProblems(merged as unknown as Config, origin));
  if (problems.length === 0) problems.push(...tlsFileProblems(merged as unknown as Config, origin));
  if (problems.length > 0) throw ConfigError.fromProblems(problems);
  return deepFreeze(fillResourceRules(merged as unknown as Config));
}

/** The TLS files are read and checked here too, so that a reload with a bad pair is refused as a whole. */
function tlsFileProblems(config: Config, origin: Origin): readonly string[] {
  if (!usesTls(config.server.tls)) return [];
  const read = readTlsMaterial(config.server.tls, origin);
  return 'problems' in read ? read.problems : [];
}

/** `https://tm.example.com/api/v1/` → `https://tm.example.com`: the proxy adds `/api/v1` itself. */
export function normalizeUpstreamUrl(url: string): string {
  let result = url.trim().replace(/\/+$/, '');
  if (result.endsWith('/api/v1')) result = result.slice(0, -'/api/v1'.length).replace(/\/+$/, '');
  return result;
}

/** A per-resource rule that leaves a field out takes it from `freshness.default`. */
function fillResourceRules(config: Config): Config {
  const { freshness } = config.cache;
  const byResource = freshness.byResource as Record<string, object>;
  for (const [name, rule] of Object.entries(byResource)) byResource[name] = { ...freshness.default, ...rule };
  return config;
}
