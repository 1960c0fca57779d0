/**
 * The `config` part of helm/tm-cache/values.schema.json, derived from tm-cache's own settings
 * schema (src/config/schema.ts), so that a typo in the chart's `config` value fails at
 * `helm install` rather than as a pod that exits 2 at start. schema.test.ts checks that the file
 * holds exactly this; after a settings change, regenerate it:
 *
 *   npx tsx test/helm/values-schema.ts --write
 *
 * What is kept: the JSON Schema draft-07 keywords helm validates with (type, properties,
 * additionalProperties, items, enum, pattern, minimum, maximum, propertyNames). What is dropped:
 * `required` (the value is a partial override: any setting may be left out), `default`, the
 * project's annotations (flag, env, secret, allowed, note, allowedKeys) and its own formats,
 * which helm does not know (tm-cache still checks them at start).
 *
 * Left out of `config` altogether: the settings the chart sets through environment variables,
 * which would win over the file (a port written there would be silently ignored), and the
 * secrets, which must not land in a ConfigMap. Each has a value of its own (CHART_SET_SETTINGS).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigSchema } from '../../src/config/schema.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const SCHEMA_FILE = join(ROOT, 'helm/tm-cache/values.schema.json');

/** Settings the chart sets by environment (or from its Secret), and the value that says each instead. */
export const CHART_SET_SETTINGS: Readonly<Record<string, string>> = {
  'upstream.url': 'upstream.url',
  'server.host': 'mode (0.0.0.0 standalone, 127.0.0.1 sidecar)',
  'server.port': 'containerPorts.proxy',
  'server.managementHost': 'mode and sidecar.managementHost',
  'server.managementPort': 'containerPorts.management',
  'server.logLevel': 'logLevel',
  'cache.redis.url': 'redis.url (kept in the Secret)',
  'identity.hmacSecret': 'secret.hmacSecret',
  'admin.token': 'secret.adminToken',
  'admin.viewerToken': 'secret.adminViewerToken',
  'cache.redis.password': 'secret.redisPassword',
  'cache.redis.sentinelPassword': 'secret.redisSentinelPassword',
  'cache.redis.encryptionKeys': 'secret.redisEncryptionKeys',
};

const KEPT = ['type', 'enum', 'pattern', 'minimum', 'maximum'] as const;

type Schema = Record<string, unknown>;

/** One node of tm-cache's schema as helm should validate it; `path` is the setting's dotted path. */
function forHelm(node: Schema, path: string): Schema {
  const out: Schema = {};
  for (const key of KEPT) if (key in node) out[key] = node[key];
  const properties = node['properties'] as Record<string, Schema> | undefined;
  if (properties !== undefined) {
    out['properties'] = Object.fromEntries(
      Object.entries(properties)
        .map(([name, child]): [string, Schema] => [name, forHelm(child, path === '' ? name : `${path}.${name}`)])
        .filter(([name]) => CHART_SET_SETTINGS[path === '' ? name : `${path}.${name}`] === undefined),
    );
  }
  const additional = node['additionalProperties'];
  if (typeof additional === 'boolean') out['additionalProperties'] = additional;
  else if (typeof additional === 'object' && additional !== null) out['additionalProperties'] = forHelm(additional as Schema, `${path}.*`);
  if (typeof node['items'] === 'object' && node['items'] !== null) out['items'] = forHelm(node['items'] as Schema, `${path}[]`);
  if (typeof node['propertyNames'] === 'object' && node['propertyNames'] !== null) out['propertyNames'] = forHelm(node['propertyNames'] as Schema, path);
  return out;
}

/** The schema of the chart's `config` value. */
export function configSchemaForHelm(): Schema {
  return {
    description:
      "tm-cache's settings file (a partial override of config/default.yaml), generated from src/config/schema.ts; the settings the chart sets itself are values of their own.",
    ...forHelm(JSON.parse(JSON.stringify(ConfigSchema)) as Schema, ''),
  };
}

/** values.schema.json as it should be: the hand-written chart part with the generated `config`. */
export function expectedSchemaText(): string {
  const schema = JSON.parse(readFileSync(SCHEMA_FILE, 'utf8')) as { properties: Record<string, unknown> };
  schema.properties['config'] = configSchemaForHelm();
  return `${JSON.stringify(schema, null, 2)}\n`;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url) && process.argv.includes('--write')) {
  writeFileSync(SCHEMA_FILE, expectedSchemaText());
  console.log(`wrote ${SCHEMA_FILE}`);
}
