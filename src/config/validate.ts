/**
 * Checking the merged sources against the schema (schema.ts) with Ajv, and phrasing what is wrong.
 *
 * One pass, with allErrors, over the merged tree: the merge keeps what the schema does not know
 * (unknown keys, a value where a section belongs), so that Ajv reports it along with everything
 * else. Every problem names the setting, its source (`origin`), the value (secrets as
 * `<redacted>`) and what is allowed, derived from the schema: its keywords, the unit in the name,
 * or its `allowed` annotation.
 */
import { Ajv } from 'ajv';
import { ConfigSchema } from './schema.js';
import { decodeSecret, REDACTED, redactUrl } from './secrets.js';

/** The parts of a schema node this module reads (JSON Schema plus the annotations of schema.ts). */
export interface SchemaNode {
  readonly type?: string;
  readonly properties?: Readonly<Record<string, SchemaNode>>;
  readonly additionalProperties?: SchemaNode | boolean;
  readonly propertyNames?: object;
  readonly enum?: readonly string[];
  readonly minimum?: number;
  readonly maximum?: number;
  readonly allowed?: string;
  readonly note?: string;
  readonly allowedKeys?: string;
  readonly secret?: boolean;
  readonly flag?: string;
  readonly env?: string;
}

/** Dotted setting path → the label of the source that set it last; absent: the default. */
export type Origin = ReadonlyMap<string, string>;
type Tree = Record<string, unknown>;

export const ROOT = ConfigSchema as unknown as SchemaNode;

const FORMATS = {
  'upstream-url': (v: string) => v === '' || urlWith(v, ['http:', 'https:'], (u) => u.username === '' && u.password === '' && u.search === '' && u.hash === ''),
  'redis-url': (v: string) => v === '' || urlWith(v, ['redis:', 'rediss:'], (u) => /^(\/\d*)?$/.test(u.pathname)),
  'host-port': (v: string) => {
    const match = /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]/]+):(\d{1,5})$/.exec(v);
    return match !== null && Number(match[2]) >= 1 && Number(match[2]) <= 65_535;
  },
  'hmac-secret': (v: string) => v === '' || (decodeSecret(v)?.length ?? 0) >= 32,
  'encryption-key': (v: string) => decodeSecret(v)?.length === 32,
};

function urlWith(text: string, protocols: readonly string[], also: (url: URL) => boolean): boolean {
  if (!URL.canParse(text)) return false;
  const url = new URL(text);
  return protocols.includes(url.protocol) && url.hostname !== '' && also(url);
}

const ajv = new Ajv({ allErrors: true, formats: FORMATS, keywords: ['flag', 'env', 'secret', 'allowed', 'note', 'allowedKeys'] });
const validator = ajv.compile(ConfigSchema);

export const kindOf = (schema: SchemaNode) => (schema.type !== 'object' ? 'leaf' : schema.properties !== undefined ? 'section' : 'map');

/** The schema of a section's field or of an open map's value; undefined for an unknown field. */
function childOf(schema: SchemaNode, key: string): SchemaNode | undefined {
  if (schema.properties !== undefined) return Object.hasOwn(schema.properties, key) ? schema.properties[key] : undefined;
  return typeof schema.additionalProperties === 'object' ? schema.additionalProperties : undefined;
}

/** Every problem of the merged tree, one per setting (or unknown key), in schema order. */
export function validateMerged(merged: Tree, origin: Origin): string[] {
  if (validator(merged)) return [];
  const problems = new Map<string, string>();
  for (const error of validator.errors ?? []) {
    if (error.propertyName !== undefined) continue; // why a key is refused: `propertyNames` says it
    const at = settingAt(
      error.instancePath
        .split('/')
        .slice(1)
        .map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~')),
      merged,
    );
    const params = error.params as { additionalProperty?: string; propertyName?: string };
    const unknown = params.additionalProperty ?? params.propertyName;
    const path = unknown === undefined ? at.path : at.path === '' ? unknown : `${at.path}.${unknown}`;
    if (problems.has(path)) continue;
    problems.set(path, unknown === undefined ? describeProblem(path, at.value, allowedOf(at.schema, path), origin, at.schema) : unknownKey(path, at, origin));
  }
  return [...problems.values()];
}

type Setting = { readonly path: string; readonly schema: SchemaNode; readonly value: unknown };

/** Follows keys down sections and open maps; a list or a leaf is one setting, whatever index failed. */
function settingAt(keys: readonly string[], tree: Tree): Setting {
  let schema = ROOT;
  let value: unknown = tree;
  const path: string[] = [];
  for (const key of keys) {
    const child = kindOf(schema) === 'leaf' ? undefined : childOf(schema, key);
    if (child === undefined) break;
    [schema, value] = [child, (value as Tree)[key]];
    path.push(key);
  }
  return { path: path.join('.'), schema, value };
}

/** Only a config file can hold a key the schema does not know: a typo, most likely. */
function unknownKey(path: string, parent: Setting, origin: Origin): string {
  const source = originOf(path, origin) ?? 'default';
  if (parent.schema.properties === undefined) return `unknown key ${path} (in ${source}); allowed: ${parent.schema.allowedKeys}`;
  const where = parent.path === '' ? 'top level' : parent.path;
  return `unknown setting ${path} (in ${source}); allowed at ${where}: ${Object.keys(parent.schema.properties).join(', ')}`;
}

/** What a setting allows, phrased to follow "allowed: ". */
function allowedOf(schema: SchemaNode, path: string): string {
  if (schema.allowed !== undefined) return schema.allowed;
  if (schema.enum !== undefined) return `one of ${schema.enum.join(', ')}`;
  if (schema.type === 'boolean') return 'true or false';
  if (schema.type === 'object') {
    return schema.properties !== undefined ? `a mapping with keys ${Object.keys(schema.properties).join(', ')}` : `a mapping of ${schema.allowedKeys}`;
  }
  if (schema.type !== 'integer') return `a ${schema.type}`;
  const unit = path.endsWith('Ms') ? 'milliseconds' : path.endsWith('Bytes') ? 'bytes' : schema.note;
  const range = schema.maximum === Number.MAX_SAFE_INTEGER ? `an integer ≥ ${schema.minimum}` : `an integer from ${schema.minimum} to ${schema.maximum}`;
  return unit === undefined ? range : `${range} (${unit})`;
}

export function describeProblem(path: string, value: unknown, allowed: string, origin: Origin, schema?: SchemaNode): string {
  const source = originOf(path, origin);
  const from = source === undefined ? '' : ` (from ${source})`;
  const shown = schema?.secret ? REDACTED : schema !== undefined && kindOf(schema) !== 'leaf' ? describeType(value) : show(value);
  return `${path}${from}: received ${shown}; allowed: ${allowed}${hint(path, value, source)}`;
}

/** Kubernetes injects `<SERVICE>_PORT=tcp://ip:port` for every Service, e.g. one named tm-cache. */
function hint(path: string, value: unknown, source: string | undefined): string {
  if (source === 'TM_CACHE_PORT' && typeof value === 'string' && value.startsWith('tcp://')) {
    return ' (this looks like a Kubernetes service link variable of a Service named tm-cache: set enableServiceLinks: false on the pod, or set TM_CACHE_PORT explicitly)';
  }
  return path.endsWith('Ms') && typeof value === 'number' && !Number.isInteger(value) ? ' (durations are whole milliseconds)' : '';
}

/** The source of a setting, or of the section or open map that was replaced with it. */
export function originOf(path: string, origin: Origin): string | undefined {
  for (let p = path; p !== ''; p = p.includes('.') ? p.slice(0, p.lastIndexOf('.')) : '') {
    const source = origin.get(p);
    if (source !== undefined) return source;
  }
  return undefined;
}

/** A value as messages show it: JSON, cut short, credentials of a URL hidden. */
function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  const json = JSON.stringify(typeof value === 'string' ? redactUrl(value) : value);
  return json.length > 120 ? `${json.slice(0, 117)}...` : json;
}

export function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'a mapping' : `${typeof value} ${show(value)}`;
}

export function isPlainObject(value: unknown): value is Tree {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
