/**
 * helm/tm-cache/values.schema.json, which helm checks the merged values against before it renders
 * anything (JSON Schema draft-07, here with Ajv): values.yaml and every example of ci/ pass, a
 * typo'd key anywhere the chart owns is refused naming it, every value of values.yaml is declared,
 * and the `config` part is tm-cache's own settings schema, less what the chart sets itself.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv, type ErrorObject } from 'ajv';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { CONFIG_OVERRIDES } from '../../src/config/load.js';
import { coalesceValues, renderChart } from './render.js';
import { CHART_SET_SETTINGS, SCHEMA_FILE, expectedSchemaText } from './values-schema.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = join(ROOT, 'helm/tm-cache');
const schema = JSON.parse(readFileSync(SCHEMA_FILE, 'utf8')) as Record<string, any>;
const defaults = parseYaml(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as Record<string, unknown>;
const EXAMPLES = readdirSync(join(CHART, 'ci'))
  .filter((name) => name.endsWith('.yaml'))
  .sort();
const example = (name: string) => parseYaml(readFileSync(join(CHART, 'ci', name), 'utf8')) as Record<string, unknown>;

// strict: an unknown keyword or a misplaced one is an error in the schema itself, not silently ignored.
const validate = new Ajv({ strict: true, allErrors: true }).compile(schema);

/** The errors helm would report for values given over values.yaml (helm validates the merged values). */
function errorsOf(...overrides: object[]): string[] {
  const values = overrides.reduce<unknown>((v, o) => coalesceValues(v, o), defaults);
  if (validate(values)) return [];
  return (validate.errors ?? []).map((e: ErrorObject) => {
    const extra = (e.params as { additionalProperty?: string }).additionalProperty;
    return `${e.instancePath || '/'}: ${e.message}${extra === undefined ? '' : ` (${extra})`}`;
  });
}

/** The schema node that declares a dotted path of values, following $ref; undefined when nothing declares it by name. */
function declared(path: readonly string[]): Record<string, any> | undefined {
  let node: Record<string, any> | undefined = schema;
  for (const key of path) {
    while (node?.['$ref'] !== undefined) node = schema['definitions'][String(node['$ref']).replace('#/definitions/', '')];
    const next: Record<string, any> | undefined = node?.['properties']?.[key];
    // An open map (labels, annotations, selectors) declares its keys by their value's schema.
    node = next ?? (typeof node?.['additionalProperties'] === 'object' ? node['additionalProperties'] : undefined);
    if (node === undefined) return undefined;
  }
  return node;
}

function keyPaths(node: unknown, path: string[] = []): string[][] {
  if (typeof node !== 'object' || node === null || Array.isArray(node)) return [path];
  return [path, ...Object.entries(node).flatMap(([k, v]) => keyPaths(v, [...path, k]))].filter((p) => p.length > 0);
}

describe('values.schema.json', () => {
  it("is JSON Schema draft-07, as helm reads it, and compiles in Ajv's strict mode", () => {
    expect(schema['$schema']).toBe('http://json-schema.org/draft-07/schema#');
    expect(validate).toBeTypeOf('function');
  });

  it('accepts values.yaml as it stands', () => {
    expect(errorsOf()).toEqual([]);
  });

  it.each(EXAMPLES)('accepts ci/%s over values.yaml', (name) => {
    expect(errorsOf(example(name))).toEqual([]);
  });

  it('declares every value of values.yaml by name, down to the leaves', () => {
    expect(
      keyPaths(defaults)
        .filter((path) => declared(path) === undefined)
        .map((p) => p.join('.')),
    ).toEqual([]);
  });

  it('refuses an unknown top-level key rather than ignoring it', () => {
    expect(errorsOf({ replicaCont: 3 })).toEqual(['/: must NOT have additional properties (replicaCont)']);
  });

  it.each([
    ['image.repo', { image: { repo: 'r/tm-cache' } }, '/image', 'repo'],
    ['service.managementPort (moved to managementService.port)', { service: { managementPort: 9100 } }, '/service', 'managementPort'],
    ['metrics.serviceMonitor.enable', { metrics: { serviceMonitor: { enable: true } } }, '/metrics/serviceMonitor', 'enable'],
    ['networkPolicy.managmentFrom', { networkPolicy: { managmentFrom: [] } }, '/networkPolicy', 'managmentFrom'],
    ['securityContext.readOnlyRootFileSystem', { securityContext: { readOnlyRootFileSystem: true } }, '/securityContext', 'readOnlyRootFileSystem'],
    ['probes.readiness.periodSecond', { probes: { readiness: { periodSecond: 5 } } }, '/probes/readiness', 'periodSecond'],
    ['config.cache.memroy', { config: { cache: { memroy: { maxBytes: 1 } } } }, '/config/cache', 'memroy'],
    ['config.cache.redis.lockWait', { config: { cache: { redis: { lockWait: 10 } } } }, '/config/cache/redis', 'lockWait'],
  ])('refuses the typo %s, naming it and where', (_, values, where, key) => {
    expect(errorsOf(values)).toContain(`${where}: must NOT have additional properties (${key})`);
  });

  it.each([
    ['mode', { mode: 'daemonset' }, '/mode: must be equal to one of the allowed values'],
    ['sidecar.managementHost', { sidecar: { managementHost: '10.0.0.1' } }, '/sidecar/managementHost: must be equal to one of the allowed values'],
    ['a port', { containerPorts: { proxy: 80800 } }, '/containerPorts/proxy: must be <= 65535'],
    ['a memory limit written as a number', { resources: { limits: { memory: 536870912 } } }, '/resources/limits/memory: must be string'],
    ['a setting of the wrong kind', { config: { server: { shutdownGraceMs: '10s' } } }, '/config/server/shutdownGraceMs: must be integer'],
    [
      'an unknown resource in freshness.byResource',
      { config: { cache: { freshness: { byResource: { runz: { ttlMs: 1 } } } } } },
      '/config/cache/freshness/byResource: property name must be valid',
    ],
  ])('refuses a wrong value of %s', (_, values, error) => {
    expect(errorsOf(values)).toContain(error);
  });

  it('refuses in `config` the settings the chart sets itself (they would be overridden, or put a secret in a ConfigMap)', () => {
    expect(errorsOf({ config: { server: { port: 8081 } } })).toContain('/config/server: must NOT have additional properties (port)');
    expect(errorsOf({ config: { admin: { token: 'x'.repeat(24) } } })).toContain('/config/admin: must NOT have additional properties (token)');
    expect(errorsOf({ config: { cache: { redis: { url: 'redis://r:6379' } } } })).toContain('/config/cache/redis: must NOT have additional properties (url)');
  });

  it("holds in `config` exactly tm-cache's settings schema less those (regenerate: npx tsx test/helm/values-schema.ts --write)", () => {
    expect(readFileSync(SCHEMA_FILE, 'utf8')).toBe(expectedSchemaText());
  });

  it('leaves out of `config` exactly the settings the rendered container sets by environment', () => {
    const settingOf = new Map(CONFIG_OVERRIDES.flatMap((o) => (o.env === undefined ? [] : [[o.env, o.setting] as const])));
    const r = renderChart(CHART, [{ ...example('all-features-values.yaml'), extraEnv: [] }]);
    const container = r.find('Deployment')['spec']['template']['spec']['containers'][0] as { env: { name: string }[] };
    const set = container.env
      .map((e) => settingOf.get(e.name))
      // The key id is not secret and may be written in `config` too (redis.encryptionKeyId sets it only when not empty).
      .filter((s): s is string => s !== undefined && s !== 'cache.redis.encryptionKeyId');
    expect([...new Set(set)].sort()).toEqual(Object.keys(CHART_SET_SETTINGS).sort());
  });
});
