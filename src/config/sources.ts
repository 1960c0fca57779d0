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
import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { parseDocument, YAMLError, type YAMLWarning } from 'yaml';
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

/**
 * The config file, read without ever waiting on something that is not a file: opened
 * non-blocking (a FIFO's open would wait for a writer) and refused unless the opened descriptor is
 * a regular file (checked on the descriptor, so the path cannot be swapped in between).
 * `readConfigFileAsync` is what a running process uses (a reload): the event loop keeps serving.
 */
export function readConfigFile(path: string, source: string, problems: string[]): Layer {
  let text: string;
  let fd: number | undefined;
  try {
    fd = openSync(path, OPEN_FLAGS);
    if (!fstatSync(fd).isFile()) return notRegular(path, source, problems);
    text = readFileSync(fd, 'utf8');
  } catch (error) {
    return unreadable(path, source, error, problems);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  return parseConfigText(text, path, problems);
}

export async function readConfigFileAsync(path: string, source: string, problems: string[]): Promise<Layer> {
  let text: string;
  let handle: FileHandle | undefined;
  try {
    handle = await open(path, OPEN_FLAGS);
    if (!(await handle.stat()).isFile()) return notRegular(path, source, problems);
    text = await handle.readFile('utf8');
  } catch (error) {
    return unreadable(path, source, error, problems);
  } finally {
    await handle?.close();
  }
  return parseConfigText(text, path, problems);
}

/** Read-only, and non-blocking so that opening a FIFO returns at once (and is then refused). */
const OPEN_FLAGS = constants.O_RDONLY | (constants.O_NONBLOCK ?? 0);

const emptyLayer = (path: string): Layer => ({ label: `config file ${path}`, values: {} });

function notRegular(path: string, source: string, problems: string[]): Layer {
  problems.push(`config file (from ${source}): ${JSON.stringify(path)} is not a regular file (a FIFO, a device or a directory); allowed: a YAML file`);
  return emptyLayer(path);
}

function unreadable(path: string, source: string, error: unknown, problems: string[]): Layer {
  const reason = (error as NodeJS.ErrnoException).code ?? String(error);
  problems.push(`config file (from ${source}): cannot read ${JSON.stringify(path)}: ${reason}`);
  return emptyLayer(path);
}

/**
 * The file's YAML as a layer. A YAML warning is an error too: an unresolved tag (`token: !abc`)
 * would otherwise make the value silently empty (an admin token gone, the admin API off).
 */
function parseConfigText(text: string, path: string, problems: string[]): Layer {
  const empty = emptyLayer(path);
  const { label } = empty;
  let parsed: unknown;
  try {
    // prettyErrors off: the pretty form quotes the offending line, which may hold a secret.
    // logLevel 'error': the library prints no warning itself (its text quotes the tag, which may be a secret).
    const doc = parseDocument(text, { prettyErrors: false, logLevel: 'error' });
    if (doc.errors.length > 0) throw doc.errors[0];
    if (doc.warnings.length > 0) {
      problems.push(
        ...doc.warnings.map((warning) => `${label}: YAML warning${lineOf(text, warning)} (${warning.code}), refused as an error${hintOf(warning)}`),
      );
      return empty;
    }
    parsed = doc.toJS();
  } catch (error) {
    problems.push(`${label}: not valid YAML${lineOf(text, error)}: ${yamlReason(error)}`);
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
function yamlReason(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const generic = message.split(/[:"'!*&`]/, 1)[0]!.trim();
  const code = error instanceof YAMLError ? ` (${error.code})` : '';
  return `${generic === '' ? 'cannot be parsed' : generic}${code}`;
}

function lineOf(text: string, error: unknown): string {
  return error instanceof YAMLError ? ` at line ${text.slice(0, error.pos[0]).split('\n').length}` : '';
}

/** What to do about a warning; never its message, which quotes the text (a secret, maybe). */
function hintOf(warning: YAMLWarning): string {
  return warning.code === 'TAG_RESOLVE_FAILED' ? ': a value starting with ! is read as a YAML tag; quote it ("!...")' : '';
}

export function envLayer(env: NodeJS.ProcessEnv, problems: string[]): Layer {
  return overrideLayer(
    'environment',
    (o) => o.env,
    (name) => nonEmpty(env[name]),
    problems,
  );
}

export function flagLayer(flags: ReadonlyMap<string, string>, problems: string[]): Layer {
  return overrideLayer(
    'flags',
    (o) => o.flag,
    (flag) => flags.get(flag),
    problems,
  );
}

/** The overrides whose variable or flag (`nameOf`) has a value (`rawOf`), labelled with that name. */
function overrideLayer(
  label: string,
  nameOf: (o: ConfigOverride) => string | undefined,
  rawOf: (name: string) => string | undefined,
  problems: string[],
): Layer {
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

/** Text → the type of the setting: an integer, true/false, an `id:key,...` list for an open map, else text. */
function parseRaw(raw: string, { setting, schema }: ConfigOverride, source: string, problems: string[]): unknown {
  if (schema.type === 'integer') return /^[+-]?\d+$/.test(raw) ? Number(raw) : raw;
  if (schema.type === 'boolean') return raw === 'true' ? true : raw === 'false' ? false : raw;
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
// eslint-disable-next-line max-params -- a recursion's state: the tree walked, where it is, and what it records; an object would be rebuilt at every level
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
