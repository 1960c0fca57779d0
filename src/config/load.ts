/**
 * Configuration sources → one validated, deeply frozen `Config`.
 *
 * Sources, lowest precedence first:
 *   1. `DEFAULT_CONFIG` (schema.ts). `config/default.yaml` documents it and is never read at
 *      runtime: a test checks the two are equal.
 *   2. The YAML file named by `--config FILE` (or `TM_CACHE_CONFIG`): a partial override,
 *      deep-merged. Fixed-shape sections merge key by key; open maps (`encryptionKeys`,
 *      `byResource`) and lists are replaced whole by the source that sets them. An unknown key
 *      is an error naming its path (`cache.memroy`).
 *   3. Environment variables (`TM_CACHE_*`, see `CONFIG_OVERRIDES`). An empty variable counts as
 *      unset: templated environments (Compose, Helm) often render unset values as "".
 *   4. Command-line flags (`--port 8080` or `--port=8080`); an unknown flag is an error.
 *
 * Validation happens once, on the merged result, and reports every problem at once; each names
 * the setting, where the value came from, the value (secrets as `<redacted>`) and what is allowed.
 * The CLI prints `ConfigError.message` and exits 2. After that, the code trusts the `Config`.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parse as parseYaml, YAMLError } from 'yaml';
import { OPERATIONS, type ResourceName } from '../api/catalogue.js';
import { DEFAULT_CONFIG, type Config } from './schema.js';

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  /** Each problem found, one sentence each; `message` joins them. */
  readonly problems: readonly string[];

  constructor(message: string, problems: readonly string[] = [message], options?: ErrorOptions) {
    super(message, options);
    this.problems = problems;
  }

  static fromProblems(problems: readonly string[]): ConfigError {
    const message =
      problems.length === 1
        ? `invalid configuration: ${problems[0]}`
        : `invalid configuration (${problems.length} problems):\n${problems.map((p) => `  - ${p}`).join('\n')}`;
    return new ConfigError(message, problems);
  }
}

export interface LoadConfigOptions {
  /** The flags after the subcommand, e.g. `['--port', '8080', '--upstream=https://tm.example.com']`. */
  readonly argv: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  /** Directory a relative `--config` path is resolved against; default `process.cwd()`. */
  readonly cwd?: string;
}

/** One setting that a flag and/or an environment variable can set. */
export interface ConfigOverride {
  /** Dotted path in `Config`, e.g. `server.port`. */
  readonly setting: string;
  readonly flag?: string;
  readonly env?: string;
  /** How the raw text becomes a value: kept as text, read as an integer, or `id:key,...`. */
  readonly parse: 'text' | 'integer' | 'keyList';
  readonly secret?: boolean;
}

/** Where the config file is named; not a setting of `Config` itself. */
export const CONFIG_FILE_FLAG = '--config';
export const CONFIG_FILE_ENV = 'TM_CACHE_CONFIG';

/** Every setting reachable by flag or environment variable (the CLI's help can print this table). */
export const CONFIG_OVERRIDES: readonly ConfigOverride[] = [
  { setting: 'upstream.url', flag: '--upstream', env: 'TM_CACHE_UPSTREAM', parse: 'text' },
  { setting: 'server.host', flag: '--host', env: 'TM_CACHE_HOST', parse: 'text' },
  { setting: 'server.port', flag: '--port', env: 'TM_CACHE_PORT', parse: 'integer' },
  { setting: 'server.managementHost', flag: '--management-host', env: 'TM_CACHE_MANAGEMENT_HOST', parse: 'text' },
  { setting: 'server.managementPort', flag: '--management-port', env: 'TM_CACHE_MANAGEMENT_PORT', parse: 'integer' },
  { setting: 'server.logLevel', flag: '--log-level', env: 'TM_CACHE_LOG_LEVEL', parse: 'text' },
  { setting: 'cache.redis.url', flag: '--redis', env: 'TM_CACHE_REDIS', parse: 'text' },
  { setting: 'identity.ttlMs', env: 'TM_CACHE_IDENTITY_TTL_MS', parse: 'integer' },
  { setting: 'identity.hmacSecret', env: 'TM_CACHE_HMAC_SECRET', parse: 'text', secret: true },
  { setting: 'cache.redis.encryptionKeys', env: 'TM_CACHE_REDIS_ENCRYPTION_KEYS', parse: 'keyList', secret: true },
  { setting: 'cache.redis.encryptionKeyId', env: 'TM_CACHE_REDIS_ENCRYPTION_KEY_ID', parse: 'text' },
];

export const NO_UPSTREAM_MESSAGE =
  'no upstream: set --upstream URL or TM_CACHE_UPSTREAM, or run `tm-cache demo` to try it against the built-in emulator';

/** `serve` needs an upstream; `loadConfig` leaves that decision to the command. */
export function assertUpstream(config: Config): void {
  if (config.upstream.url === '') throw new ConfigError(NO_UPSTREAM_MESSAGE);
}

export function loadConfig(options: LoadConfigOptions): Config {
  const cwd = options.cwd ?? process.cwd();
  const flags = parseFlags(options.argv);
  const problems: string[] = [];

  const layers: Layer[] = [];
  const file = flags.configFile ?? nonEmpty(options.env[CONFIG_FILE_ENV]);
  if (file !== undefined) {
    const source = flags.configFile !== undefined ? CONFIG_FILE_FLAG : CONFIG_FILE_ENV;
    layers.push(readConfigFile(resolve(cwd, file), source, problems));
  }
  layers.push(envLayer(options.env, problems), flagLayer(flags.values, problems));
  if (problems.length > 0) throw ConfigError.fromProblems(problems);

  const merged = structuredClone(DEFAULT_CONFIG) as unknown as Tree;
  const origin = new Map<string, string>();
  for (const layer of layers) mergeInto(merged, layer.values, CONFIG_SPEC, '', layer.label, origin, layer.labels);

  const upstream = merged['upstream'] as Tree;
  if (typeof upstream['url'] === 'string') upstream['url'] = normalizeUpstreamUrl(upstream['url']);

  validate(merged, CONFIG_SPEC, '', origin, problems);
  if (problems.length === 0) checkRelations(merged as unknown as Config, origin, problems);
  if (problems.length > 0) throw ConfigError.fromProblems(problems);

  fillResourceRules(merged);
  return deepFreeze(merged) as unknown as Config;
}

/**
 * Key material of a secret: hex (even length) first, else standard or URL-safe base64, padded or
 * not. `undefined` when it is neither. The Redis tier decodes `encryptionKeys` and `hmacSecret`
 * with this same function, so what passes validation is what gets used.
 */
export function decodeSecret(text: string): Buffer | undefined {
  if (text.length > 0 && text.length % 2 === 0 && /^[0-9a-fA-F]+$/.test(text)) return Buffer.from(text, 'hex');
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) return undefined;
  const bytes = Buffer.from(text.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  const canonical = (s: string) => s.replace(/-/g, '+').replace(/_/g, '/').replace(/=+$/, '');
  return bytes.length > 0 && canonical(bytes.toString('base64')) === canonical(text) ? bytes : undefined;
}

/** `https://tm.example.com/api/v1/` → `https://tm.example.com`: the proxy adds `/api/v1` itself. */
export function normalizeUpstreamUrl(url: string): string {
  let result = url.trim().replace(/\/+$/, '');
  if (result.endsWith('/api/v1')) result = result.slice(0, -'/api/v1'.length).replace(/\/+$/, '');
  return result;
}

// ---------------------------------------------------------------------------------------------
// Sources

type Tree = Record<string, unknown>;

interface Layer {
  /** How messages name the source: `--port`, `TM_CACHE_PORT`, `config file /etc/x.yaml`. */
  readonly label: string;
  readonly values: Tree;
  /** Per-setting labels, when the source has one name per setting (flags, env). */
  readonly labels?: ReadonlyMap<string, string>;
}

interface ParsedFlags {
  readonly configFile: string | undefined;
  /** Flag name → raw value, in order; a repeated flag: the last one wins. */
  readonly values: ReadonlyMap<string, string>;
}

const FLAGS = new Map(CONFIG_OVERRIDES.filter((o) => o.flag !== undefined).map((o) => [o.flag!, o]));

function parseFlags(argv: readonly string[]): ParsedFlags {
  const values = new Map<string, string>();
  let configFile: string | undefined;
  const allowed = `${[...FLAGS.keys(), CONFIG_FILE_FLAG].join(', ')} (as --flag value or --flag=value)`;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      throw ConfigError.fromProblems([`unexpected argument ${JSON.stringify(arg)}; allowed: ${allowed}`]);
    }
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg : arg.slice(0, eq);
    if (name !== CONFIG_FILE_FLAG && !FLAGS.has(name)) {
      throw ConfigError.fromProblems([`unknown flag ${name}; allowed: ${allowed}`]);
    }
    let value: string;
    if (eq !== -1) {
      value = arg.slice(eq + 1);
    } else {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) {
        throw ConfigError.fromProblems([`flag ${name} needs a value: ${name} VALUE or ${name}=VALUE`]);
      }
      value = next;
      i++;
    }
    if (name === CONFIG_FILE_FLAG) configFile = value;
    else values.set(name, value);
  }
  return { configFile, values };
}

function readConfigFile(path: string, source: string, problems: string[]): Layer {
  const label = `config file ${path}`;
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? String(error);
    problems.push(`config file (from ${source}): cannot read ${JSON.stringify(path)}: ${reason}`);
    return { label, values: {} };
  }
  let parsed: unknown;
  try {
    // prettyErrors off: the pretty form quotes the offending line, which may hold a secret.
    parsed = parseYaml(text, { prettyErrors: false });
  } catch (error) {
    const where = error instanceof YAMLError ? ` at line ${lineOf(text, error.pos[0])}` : '';
    problems.push(`${label}: not valid YAML${where}: ${(error as Error).message}`);
    return { label, values: {} };
  }
  if (parsed === null || parsed === undefined) return { label, values: {} };
  if (!isPlainObject(parsed)) {
    problems.push(`${label}: received ${describeType(parsed)}; allowed: a mapping of settings (see config/default.yaml)`);
    return { label, values: {} };
  }
  checkShape(parsed, CONFIG_SPEC, '', label, problems);
  return { label, values: parsed };
}

function lineOf(text: string, offset: number): number {
  return text.slice(0, offset).split('\n').length;
}

function envLayer(env: NodeJS.ProcessEnv, problems: string[]): Layer {
  const values: Tree = {};
  const labels = new Map<string, string>();
  for (const override of CONFIG_OVERRIDES) {
    if (override.env === undefined) continue;
    const raw = nonEmpty(env[override.env]);
    if (raw === undefined) continue;
    setPath(values, override.setting, parseRaw(raw, override, override.env, problems));
    labels.set(override.setting, override.env);
  }
  return { label: 'environment', values, labels };
}

function flagLayer(flags: ReadonlyMap<string, string>, problems: string[]): Layer {
  const values: Tree = {};
  const labels = new Map<string, string>();
  for (const [flag, raw] of flags) {
    const override = FLAGS.get(flag)!;
    setPath(values, override.setting, parseRaw(raw.trim(), override, flag, problems));
    labels.set(override.setting, flag);
  }
  return { label: 'flags', values, labels };
}

/**
 * Text → value. What does not look like the expected type is kept as text, so validation reports
 * it like any other wrong value, naming the flag or variable it came from.
 */
function parseRaw(raw: string, override: ConfigOverride, source: string, problems: string[]): unknown {
  switch (override.parse) {
    case 'text':
      return raw;
    case 'integer':
      return /^[+-]?\d+$/.test(raw) ? Number(raw) : raw;
    case 'keyList':
      return parseKeyList(raw, source, problems);
  }
}

/** `id1:key1,id2:key2` → `{ id1: key1, id2: key2 }`. Never echoes a key. */
function parseKeyList(raw: string, source: string, problems: string[]): Record<string, string> {
  const keys: Record<string, string> = {};
  const allowed = 'comma-separated id:key pairs, e.g. k2:<64 hex chars>,k1:<base64 of 32 bytes>';
  for (const item of raw.split(',').map((s) => s.trim()).filter((s) => s !== '')) {
    const colon = item.indexOf(':');
    const id = colon === -1 ? '' : item.slice(0, colon).trim();
    const key = colon === -1 ? '' : item.slice(colon + 1).trim();
    if (id === '' || key === '') {
      problems.push(`cache.redis.encryptionKeys (from ${source}): received ${REDACTED}; allowed: ${allowed}`);
      return {};
    }
    if (Object.hasOwn(keys, id)) {
      problems.push(`cache.redis.encryptionKeys (from ${source}): key id ${JSON.stringify(id)} appears twice; allowed: ${allowed}`);
      return {};
    }
    keys[id] = key;
  }
  return keys;
}

function nonEmpty(value: string | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed === undefined || trimmed === '' ? undefined : trimmed;
}

function setPath(tree: Tree, path: string, value: unknown): void {
  const parts = path.split('.');
  let node = tree;
  for (const part of parts.slice(0, -1)) {
    node[part] ??= {};
    node = node[part] as Tree;
  }
  node[parts.at(-1)!] = value;
}

// ---------------------------------------------------------------------------------------------
// The shape of Config, with what each setting allows

interface LeafSpec {
  readonly kind: 'leaf';
  /** What is allowed, phrased to follow "allowed: ". */
  readonly allowed: string;
  readonly accepts: (value: unknown) => boolean;
  /** Never shown in messages. */
  readonly secret?: boolean;
  /** How the value is shown in messages; default JSON. */
  readonly show?: (value: unknown) => string;
}
interface GroupSpec {
  readonly kind: 'group';
  readonly fields: Readonly<Record<string, Spec>>;
  /** Fields may be left out (a per-resource rule falls back to `freshness.default`). */
  readonly partial?: boolean;
}
interface RecordSpec {
  readonly kind: 'record';
  /** What keys are allowed, phrased to follow "allowed: ". */
  readonly allowedKeys: string;
  readonly acceptsKey: (key: string) => boolean;
  readonly value: Spec;
}
type Spec = LeafSpec | GroupSpec | RecordSpec;

/** setTimeout fires at once for delays above 2^31 − 1 ms, so no duration may exceed it. */
const MAX_TIMER_MS = 2_147_483_647;
const REDACTED = '<redacted>';

const group = (fields: Record<string, Spec>, partial = false): GroupSpec => ({ kind: 'group', fields, partial });

function integer(min: number, max: number, unit = ''): LeafSpec {
  const suffix = unit === '' ? '' : ` (${unit})`;
  const allowed =
    max === Number.MAX_SAFE_INTEGER ? `an integer ≥ ${min}${suffix}` : `an integer from ${min} to ${max}${suffix}`;
  return { kind: 'leaf', allowed, accepts: (v) => Number.isSafeInteger(v) && (v as number) >= min && (v as number) <= max };
}
const durationMs = (min: number) => integer(min, MAX_TIMER_MS, 'milliseconds');
const count = (min: number) => integer(min, Number.MAX_SAFE_INTEGER);
const bytes = (min: number) => integer(min, Number.MAX_SAFE_INTEGER, 'bytes');
const port = integer(0, 65_535, '0 picks a free port');
const boolean: LeafSpec = { kind: 'leaf', allowed: 'true or false', accepts: (v) => typeof v === 'boolean' };

function oneOf(values: readonly string[]): LeafSpec {
  return { kind: 'leaf', allowed: `one of ${values.join(', ')}`, accepts: (v) => typeof v === 'string' && values.includes(v) };
}

const host: LeafSpec = {
  kind: 'leaf',
  allowed: 'a host name or IP address to listen on, e.g. 127.0.0.1 or 0.0.0.0',
  accepts: (v) => typeof v === 'string' && /^[^\s/]+$/.test(v),
};

function stringLeaf(allowed: string, accepts: (v: string) => boolean = () => true): LeafSpec {
  return { kind: 'leaf', allowed, accepts: (v) => typeof v === 'string' && accepts(v) };
}

/** Hides the user-info of a URL (`redis://:password@host`), parseable or not. */
export function redactUrl(url: string): string {
  return url.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/)[^/?#]*@/, `$1${REDACTED}@`);
}
const showUrl = (v: unknown) => (typeof v === 'string' ? JSON.stringify(redactUrl(v)) : show(v));

function parseUrl(value: string): URL | undefined {
  try {
    return new URL(value);
  } catch {
    return undefined;
  }
}

const upstreamUrl: LeafSpec = {
  kind: 'leaf',
  allowed:
    'an absolute http:// or https:// URL of the instance without credentials, query or fragment, e.g. https://tm.example.com; or empty',
  accepts: (v) => {
    if (v === '') return true;
    const url = typeof v === 'string' ? parseUrl(v) : undefined;
    return (
      url !== undefined &&
      (url.protocol === 'http:' || url.protocol === 'https:') &&
      url.hostname !== '' &&
      url.username === '' &&
      url.password === '' &&
      url.search === '' &&
      url.hash === ''
    );
  },
  show: showUrl,
};

const redisUrl: LeafSpec = {
  kind: 'leaf',
  allowed: 'a redis:// or rediss:// URL such as redis://[:password@]host[:port][/db], or empty (memory tier only)',
  accepts: (v) => {
    if (v === '') return true;
    const url = typeof v === 'string' ? parseUrl(v) : undefined;
    return (
      url !== undefined &&
      (url.protocol === 'redis:' || url.protocol === 'rediss:') &&
      url.hostname !== '' &&
      /^(\/\d*)?$/.test(url.pathname)
    );
  },
  show: showUrl,
};

function isHostPort(value: unknown): boolean {
  if (typeof value !== 'string') return false;
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]/]+):(\d{1,5})$/.exec(value);
  return match !== null && Number(match[2]) >= 1 && Number(match[2]) <= 65_535;
}
const hostPortList: LeafSpec = {
  kind: 'leaf',
  allowed: 'a list of host:port strings, e.g. [redis-0:6379, "[::1]:6379"]',
  accepts: (v) => Array.isArray(v) && v.every(isHostPort),
};

const hmacSecret: LeafSpec = {
  kind: 'leaf',
  allowed: 'empty (generated and shared through Redis), or at least 32 bytes as hex or base64 (e.g. `openssl rand -hex 32`)',
  accepts: (v) => {
    if (v === '') return true;
    const decoded = typeof v === 'string' ? decodeSecret(v) : undefined;
    return decoded !== undefined && decoded.length >= 32;
  },
  secret: true,
};

const encryptionKey: LeafSpec = {
  kind: 'leaf',
  allowed: 'a quoted string of exactly 32 bytes: 64 hex chars or base64 (e.g. `openssl rand -base64 32`)',
  accepts: (v) => typeof v === 'string' && decodeSecret(v)?.length === 32,
  secret: true,
};

const KEY_ID_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

/** The resources of the catalogue: a `byResource` key must be one of them. */
export const RESOURCE_NAMES: readonly ResourceName[] = [...new Set(OPERATIONS.map((op) => op.resource))].sort();

const freshnessRule = (partial: boolean) =>
  group({ ttlMs: durationMs(0), staleWhileRevalidateMs: durationMs(0) }, partial);

const CONFIG_SPEC: GroupSpec = group({
  upstream: group({
    url: upstreamUrl,
    connectTimeoutMs: durationMs(1),
    headersTimeoutMs: durationMs(1),
    bodyTimeoutMs: durationMs(1),
    connections: count(1),
    maxConcurrent: count(1),
    maxQueue: count(0),
    defaultRetryAfterMs: durationMs(1),
  }),
  server: group({
    host,
    port,
    managementHost: host,
    managementPort: port,
    shutdownGraceMs: durationMs(0),
    logLevel: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
  }),
  // ttlMs ≥ 1: a memo with ttl 0 means "no expiry" to lru-cache, the opposite of the intent.
  identity: group({ ttlMs: durationMs(1), hmacSecret, maxEntries: count(1) }),
  access: group({ ttlMs: durationMs(1) }),
  cache: group({
    strict: boolean,
    honorClientNoCache: boolean,
    staleIfErrorMs: durationMs(0),
    freshness: group({
      default: freshnessRule(false),
      settled: freshnessRule(false),
      byResource: {
        kind: 'record',
        allowedKeys: `resource names: ${RESOURCE_NAMES.join(', ')}`,
        acceptsKey: (key) => (RESOURCE_NAMES as readonly string[]).includes(key),
        value: freshnessRule(true),
      },
    }),
    memory: group({ maxBytes: bytes(1), maxEntryBytes: bytes(1) }),
    redis: group({
      url: redisUrl,
      mode: oneOf(['standalone', 'cluster', 'sentinel']),
      nodes: hostPortList,
      sentinels: hostPortList,
      sentinelName: stringLeaf('a string (empty only outside sentinel mode)'),
      keyPrefix: stringLeaf('a string without whitespace', (v) => !/\s/.test(v)),
      commandTimeoutMs: durationMs(1),
      connectTimeoutMs: durationMs(1),
      lockWaitMs: durationMs(0),
      encryptionKeys: {
        kind: 'record',
        allowedKeys: 'key ids of 1 to 64 letters, digits, _ . -',
        acceptsKey: (key) => KEY_ID_PATTERN.test(key),
        value: encryptionKey,
      },
      encryptionKeyId: stringLeaf('empty, or one of the ids of cache.redis.encryptionKeys'),
    }),
  }),
});

// ---------------------------------------------------------------------------------------------
// Shape, merge, validation

/** A config file may only hold keys the schema knows, with sections where sections belong. */
function checkShape(value: unknown, spec: Spec, path: string, label: string, problems: string[]): void {
  if (spec.kind === 'leaf') return; // its value is validated after the merge
  if (!isPlainObject(value)) {
    const allowed = spec.kind === 'group' ? `a mapping with keys ${Object.keys(spec.fields).join(', ')}` : `a mapping of ${spec.allowedKeys}`;
    problems.push(`${path} (from ${label}): received ${describeType(value)}; allowed: ${allowed}`);
    return;
  }
  for (const [key, child] of Object.entries(value)) {
    const childPath = path === '' ? key : `${path}.${key}`;
    if (spec.kind === 'group') {
      const childSpec = spec.fields[key];
      if (childSpec === undefined) {
        const where = path === '' ? 'top level' : path;
        problems.push(`unknown setting ${childPath} (in ${label}); allowed at ${where}: ${Object.keys(spec.fields).join(', ')}`);
      } else {
        checkShape(child, childSpec, childPath, label, problems);
      }
    } else if (!spec.acceptsKey(key)) {
      problems.push(`unknown key ${childPath} (in ${label}); allowed: ${spec.allowedKeys}`);
    } else {
      checkShape(child, spec.value, childPath, label, problems);
    }
  }
}

/** Sections merge key by key; leaves and open maps are replaced whole. Remembers who set what. */
function mergeInto(target: Tree, layer: Tree, spec: GroupSpec, path: string, label: string, origin: Map<string, string>, labels?: ReadonlyMap<string, string>): void {
  for (const [key, value] of Object.entries(layer)) {
    const childSpec = spec.fields[key]!;
    const childPath = path === '' ? key : `${path}.${key}`;
    if (childSpec.kind === 'group') {
      mergeInto(target[key] as Tree, value as Tree, childSpec, childPath, label, origin, labels);
    } else {
      target[key] = structuredClone(value);
      for (const known of [...origin.keys()]) if (known.startsWith(`${childPath}.`)) origin.delete(known);
      origin.set(childPath, labels?.get(childPath) ?? label);
    }
  }
}

function validate(value: unknown, spec: Spec, path: string, origin: ReadonlyMap<string, string>, problems: string[]): void {
  switch (spec.kind) {
    case 'leaf':
      if (!spec.accepts(value)) problems.push(describeProblem(path, value, spec.allowed, origin, spec));
      return;
    case 'group':
      for (const [key, childSpec] of Object.entries(spec.fields)) {
        const child = (value as Tree)[key];
        if (child === undefined && spec.partial) continue;
        validate(child, childSpec, path === '' ? key : `${path}.${key}`, origin, problems);
      }
      return;
    case 'record':
      for (const [key, child] of Object.entries(value as Tree)) validate(child, spec.value, `${path}.${key}`, origin, problems);
      return;
  }
}

/** Rules that involve more than one setting; run only when every setting is valid on its own. */
function checkRelations(config: Config, origin: ReadonlyMap<string, string>, problems: string[]): void {
  const { memory, redis } = config.cache;
  // Of two settings in conflict, blame the one somebody set, not a default they never saw.
  if (memory.maxEntryBytes > memory.maxBytes) {
    problems.push(
      originOf('cache.memory.maxEntryBytes', origin) === undefined
        ? describeProblem('cache.memory.maxBytes', memory.maxBytes, `at least cache.memory.maxEntryBytes (${memory.maxEntryBytes}); lower that too`, origin)
        : describeProblem('cache.memory.maxEntryBytes', memory.maxEntryBytes, `at most cache.memory.maxBytes (${memory.maxBytes})`, origin),
    );
  }
  const { port: proxyPort, managementPort } = config.server;
  if (proxyPort !== 0 && proxyPort === managementPort) {
    problems.push(
      originOf('server.managementPort', origin) === undefined
        ? describeProblem('server.port', proxyPort, `a port other than server.managementPort (${managementPort}), or 0`, origin)
        : describeProblem('server.managementPort', managementPort, `a port other than server.port (${proxyPort}), or 0`, origin),
    );
  }
  const keyIds = Object.keys(redis.encryptionKeys);
  if (keyIds.length > 0 && !keyIds.includes(redis.encryptionKeyId)) {
    problems.push(describeProblem('cache.redis.encryptionKeyId', redis.encryptionKeyId, `one of the ids of cache.redis.encryptionKeys: ${keyIds.join(', ')}`, origin));
  }
  if (keyIds.length === 0 && redis.encryptionKeyId !== '') {
    problems.push(describeProblem('cache.redis.encryptionKeyId', redis.encryptionKeyId, 'empty, since cache.redis.encryptionKeys is empty (set TM_CACHE_REDIS_ENCRYPTION_KEYS or encryptionKeys)', origin));
  }
  if (redis.url !== '' && redis.mode === 'sentinel') {
    if (redis.sentinels.length === 0) {
      problems.push(describeProblem('cache.redis.sentinels', redis.sentinels, 'at least one host:port when cache.redis.mode is sentinel', origin));
    }
    if (redis.sentinelName === '') {
      problems.push(describeProblem('cache.redis.sentinelName', redis.sentinelName, 'the name of the master the sentinels watch when cache.redis.mode is sentinel', origin));
    }
  }
}

/** A per-resource rule that leaves a field out takes it from `freshness.default`. */
function fillResourceRules(merged: Tree): void {
  const freshness = (merged['cache'] as Tree)['freshness'] as Tree;
  const fallback = freshness['default'] as Tree;
  const byResource = freshness['byResource'] as Record<string, Tree>;
  for (const [name, rule] of Object.entries(byResource)) byResource[name] = { ...fallback, ...rule };
}

function describeProblem(path: string, value: unknown, allowed: string, origin: ReadonlyMap<string, string>, spec?: LeafSpec): string {
  const source = originOf(path, origin);
  const from = source === undefined ? '' : ` (from ${source})`;
  const shown = spec?.secret ? REDACTED : (spec?.show ?? show)(value);
  return `${path}${from}: received ${shown}; allowed: ${allowed}${hint(path, value, source)}`;
}

/** Kubernetes injects `<SERVICE>_PORT=tcp://ip:port` for every Service, e.g. one named tm-cache. */
function hint(path: string, value: unknown, source: string | undefined): string {
  if (source === 'TM_CACHE_PORT' && typeof value === 'string' && value.startsWith('tcp://')) {
    return ' (this looks like a Kubernetes service link variable of a Service named tm-cache: set enableServiceLinks: false on the pod, or set TM_CACHE_PORT explicitly)';
  }
  return path.endsWith('Ms') && typeof value === 'number' && !Number.isInteger(value) ? ' (durations are whole milliseconds)' : '';
}

function originOf(path: string, origin: ReadonlyMap<string, string>): string | undefined {
  for (let p = path; p !== ''; p = p.includes('.') ? p.slice(0, p.lastIndexOf('.')) : '') {
    const source = origin.get(p);
    if (source !== undefined) return source;
  }
  return undefined;
}

function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  const json = JSON.stringify(value);
  return json.length > 120 ? `${json.slice(0, 117)}...` : json;
}

function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'a mapping' : `${typeof value} ${show(value)}`;
}

function isPlainObject(value: unknown): value is Tree {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}
