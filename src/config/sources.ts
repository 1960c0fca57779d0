/**
 * The sources of settings as layers of partial trees, and their merge over the defaults.
 *
 * - A config file: YAML, a mapping of settings (what it holds is judged after the merge).
 * - Environment variables and flags: the settings whose schema names an `env` or a `flag`
 *   (`CONFIG_OVERRIDES`). An empty variable counts as unset: templated environments (Compose,
 *   Helm) often render unset values as "". Text that does not look like the expected type is
 *   kept as text, so validation reports it like any other wrong value, naming its source.
 * The merge goes section by section; a leaf, a list or an open map is replaced whole by the
 * source that sets it, and `origin` remembers which source that was. It keeps unknown keys
 * for validation to report.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml, YAMLError } from 'yaml';
import { KEY_LIST_FORMAT, parseKeyList } from './secrets.js';
import { describeType, isPlainObject, kindOf, ROOT, type SchemaNode } from './validate.js';

type Tree = Record<string, unknown>;

export interface Layer {
  /** How messages name the source: `--port`, `TM_CACHE_PORT`, `config file /etc/x.yaml`. */
  readonly label: string;
  readonly values: Tree;
  /** Per-setting labels, when the source has one name per setting (flags, env). */
  readonly labels?: ReadonlyMap<string, string>;
}

/** One setting that a flag and/or an environment variable can set: its schema names them. */
export interface ConfigOverride {
  /** Dotted path in `Config`, e.g. `server.port`. */
  readonly setting: string;
  readonly flag?: string;
  readonly env?: string;
  readonly schema: SchemaNode;
}

function* overridesOf(schema: SchemaNode, path: string): Generator<ConfigOverride> {
  if (kindOf(schema) === 'section') {
    for (const [key, child] of Object.entries(schema.properties!)) yield* overridesOf(child, path === '' ? key : `${path}.${key}`);
  } else if (schema.flag !== undefined || schema.env !== undefined) {
    yield { setting: path, flag: schema.flag, env: schema.env, schema };
  }
}

/** Every setting reachable by flag or environment variable, in schema order. */
export const CONFIG_OVERRIDES: readonly ConfigOverride[] = [...overridesOf(ROOT, '')];

export function readConfigFile(path: string, source: string, problems: string[]): Layer {
  const label = `config file ${path}`;
  const empty = { label, values: {} };
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? String(error);
    problems.push(`config file (from ${source}): cannot read ${JSON.stringify(path)}: ${reason}`);
    return empty;
  }
  let parsed: unknown;
  try {
    // prettyErrors off: the pretty form quotes the offending line, which may hold a secret.
    parsed = parseYaml(text, { prettyErrors: false });
  } catch (error) {
    const where = error instanceof YAMLError ? ` at line ${text.slice(0, error.pos[0]).split('\n').length}` : '';
    problems.push(`${label}: not valid YAML${where}: ${yamlReason(error)}`);
    return empty;
  }
  if (parsed === null || parsed === undefined) return empty;
  if (!isPlainObject(parsed)) {
    problems.push(`${label}: received ${describeType(parsed)}; allowed: a mapping of settings (see config/default.yaml)`);
    return empty;
  }
  return { label, values: parsed };
}

/**
 * What a YAML parse error may say: its generic part and code. The parser's messages quote the
 * text they stumbled on (an alias name, a tag, a scalar), which may be a secret the file holds:
 * everything from the first quoted or YAML-syntax fragment on is cut (`Unresolved alias (...):
 * <the alias>`, `Unresolved plain scalar "<text>"`, `The !<tag> tag has no suffix`).
 */
export function yamlReason(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const generic = message.split(/[:"'!*&`]/, 1)[0]!.trim();
  const code = error instanceof YAMLError ? ` (${error.code})` : '';
  return `${generic === '' ? 'cannot be parsed' : generic}${code}`;
}

export function envLayer(env: NodeJS.ProcessEnv, problems: string[]): Layer {
  return overrideLayer('environment', (o) => o.env, (name) => nonEmpty(env[name]), problems);
}

export function flagLayer(flags: ReadonlyMap<string, string>, problems: string[]): Layer {
  return overrideLayer('flags', (o) => o.flag, (flag) => flags.get(flag), problems);
}

/** The overrides whose variable or flag (`nameOf`) has a value (`rawOf`), labelled with that name. */
function overrideLayer(label: string, nameOf: (o: ConfigOverride) => string | undefined, rawOf: (name: string) => string | undefined, problems: string[]): Layer {
  const values: Tree = {};
  const labels = new Map<string, string>();
  for (const override of CONFIG_OVERRIDES) {
    const name = nameOf(override);
    const raw = name === undefined ? undefined : rawOf(name);
    if (raw === undefined) continue;
    setPath(values, override.setting, parseRaw(raw, override, name!, problems));
    labels.set(override.setting, name!);
  }
  return { label, values, labels };
}

/** Text → the type of the setting: an integer, an `id:key,...` list for an open map, else text. */
function parseRaw(raw: string, { setting, schema }: ConfigOverride, source: string, problems: string[]): unknown {
  if (schema.type === 'integer') return /^[+-]?\d+$/.test(raw) ? Number(raw) : raw;
  if (kindOf(schema) !== 'map') return raw;
  const parsed = parseKeyList(raw);
  if ('keys' in parsed) return parsed.keys;
  problems.push(`${setting} (from ${source}): ${parsed.problem}; allowed: ${KEY_LIST_FORMAT}`);
  return {};
}

export function nonEmpty(value: string | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed === undefined || trimmed === '' ? undefined : trimmed;
}

function setPath(tree: Tree, path: string, value: unknown): void {
  const parts = path.split('.');
  let node = tree;
  for (const part of parts.slice(0, -1)) node = (node[part] ??= {}) as Tree;
  node[parts.at(-1)!] = value;
}

/** Merges layers over the defaults, lowest first. Returns the tree and who set what. */
export function mergeLayers(defaults: unknown, layers: readonly Layer[]): { merged: Tree; origin: Map<string, string> } {
  const merged = structuredClone(defaults) as Tree;
  const origin = new Map<string, string>();
  for (const layer of layers) mergeInto(merged, layer.values, ROOT, '', layer, origin);
  return { merged, origin };
}

/** Sections merge key by key; anything else, known or not, replaces what was there (validation judges it). */
function mergeInto(target: Tree, values: Tree, schema: SchemaNode, path: string, layer: Layer, origin: Map<string, string>): void {
  for (const [key, value] of Object.entries(values)) {
    const childSchema = Object.hasOwn(schema.properties!, key) ? schema.properties![key]! : undefined;
    const childPath = path === '' ? key : `${path}.${key}`;
    if (childSchema !== undefined && kindOf(childSchema) === 'section' && isPlainObject(value)) {
      // A lower layer left no mapping here (`redis:` with nothing under it is null): keep what it
      // left, so validation names that source and value, rather than merging into nothing.
      if (isPlainObject(target[key])) mergeInto(target[key], value, childSchema, childPath, layer, origin);
      continue;
    }
    // defineProperty: a `__proto__` key of the file stays a key (an unknown one), not a prototype.
    Object.defineProperty(target, key, { value: structuredClone(value), enumerable: true, writable: true, configurable: true });
    for (const known of [...origin.keys()]) if (known.startsWith(`${childPath}.`)) origin.delete(known);
    origin.set(childPath, layer.labels?.get(childPath) ?? layer.label);
  }
}
