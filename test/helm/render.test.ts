/**
 * The chart rendered (test/helm/render.ts stands in for `helm template`) with values.yaml's
 * defaults and with each example of helm/tm-cache/ci/: every manifest parses, the settings file and
 * the environment it renders are accepted by tm-cache's own loader, ports agree everywhere, the
 * pod is locked down, draining adds up, and the modes render what they promise.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from '../../src/config/errors.js';
import { loadConfig } from '../../src/config/load.js';
import { DEFAULT_CONFIG, type Config } from '../../src/config/schema.js';
import { renderChart, renderText, type Rendered } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = join(ROOT, 'helm/tm-cache');
/** What the chart cannot do without: the instance's URL and the image (there is no public one). */
const UPSTREAM = { upstream: { url: 'https://tm.example.com' }, image: { repository: 'registry.example.com/tm-cache' } };
const example = (name: string) => parseYaml(readFileSync(join(CHART, 'ci', name), 'utf8')) as Record<string, unknown>;
const EXAMPLES = ['all-features-values.yaml', 'cluster-values.yaml', 'sentinel-values.yaml', 'sidecar-values.yaml'];

const tmp = mkdtempSync(join(tmpdir(), 'tm-cache-chart-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

type Container = { name: string; env: { name: string; value?: string; valueFrom?: any }[]; ports: { name: string; containerPort: number }[]; [k: string]: any };

/** The tm-cache container as the chart renders it: the Deployment's, or the one NOTES prints (mode sidecar). */
function containerOf(r: Rendered): Container {
  const items = parseYaml(r.include('tm-cache.container')) as Container[];
  if (r.values['mode'] === 'standalone') {
    const deployed = r.find('Deployment')['spec']['template']['spec']['containers'][0] as Container;
    expect(deployed).toEqual(items[0]);
  }
  return items[0]!;
}

/** The environment of the container, with secret references resolved from the chart's Secret (as the kubelet would). */
const EXISTING_SECRET: Record<string, string> = { 'hmac-secret': 'cd'.repeat(32) };

function envOf(r: Rendered, container: Container): Record<string, string> {
  const secret = r.objects.find((o) => o['kind'] === 'Secret');
  const data = (secret?.['data'] ?? {}) as Record<string, string>;
  const env: Record<string, string> = {};
  for (const e of container.env) {
    if (e.value !== undefined) env[e.name] = e.value;
    const ref = e.valueFrom?.secretKeyRef;
    if (ref !== undefined && secret?.['metadata']['name'] === ref.name && data[ref.key] !== undefined) {
      env[e.name] = Buffer.from(data[ref.key]!, 'base64').toString('utf8');
    }
    // An existing Secret (not rendered) holds at least the secret a shared Redis needs.
    if (ref !== undefined && secret === undefined && EXISTING_SECRET[ref.key] !== undefined) env[e.name] = EXISTING_SECRET[ref.key]!;
  }
  return env;
}

/** Loads the rendered settings file and environment with tm-cache's own loader, as `serve` in the pod does. */
function loadRendered(r: Rendered): Config {
  const configMap = r.objects.find((o) => o['kind'] === 'ConfigMap' && o['data']?.['config.yaml'] !== undefined)!;
  const file = join(tmp, `config-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, configMap['data']['config.yaml'] as string);
  return loadConfig({ argv: ['--config', file], env: envOf(r, containerOf(r)) });
}

describe('the renderer', () => {
  it('prints a values.yaml number as helm does (a float64: 1000000 is 1e+06) and an int plainly', () => {
    expect(renderText('{{ .Values.n }} {{ int .Values.n }} {{ .Values.p }} {{ mul .Values.n 2 }}', { n: 1_000_000, p: 8080 })).toBe(
      '1e+06 1000000 8080 2000000',
    );
  });

  it('refuses what helm refuses: comparing a values.yaml number with an int, a field of a missing value, an unknown function', () => {
    expect(() => renderText('{{ gt .Values.n 1 }}', { n: 2 })).toThrow(/incompatible types/);
    expect(renderText('{{ gt (int .Values.n) 1 }}', { n: 2 })).toBe('true');
    expect(() => renderText('{{ .Values.a.b }}', {})).toThrow(/nil pointer evaluating .*a\.b/);
    expect(() => renderText('{{ frobnicate 1 }}', {})).toThrow(/"frobnicate" not defined/);
    expect(() => renderText('{{ printf "%d" .Values.n }}', { n: 2 })).toThrow(/%d/);
  });

  it('trims around {{- -}}, keeps quoted braces, and evaluates if/else if/with/range/define/variables', () => {
    const text = `a  {{- /* c */ -}}  b {{ "{{" }}x{{ "}}" }}
{{- define "t" }}[{{ . }}]{{ end }}
{{- $n := 0 }}{{ range $k, $v := .Values.m }}{{ $n = add $n 1 }}{{ $k }}={{ $v }};{{ end }}
{{- with .Values.none }}no{{ else }} {{ $n }}{{ end }}
{{- if eq .Values.s "x" }} one{{ else if eq .Values.s "y" }} two{{ else }} three{{ end }} {{ include "t" .Values.s | quote }}`;
    expect(renderText(text, { m: { b: 2, a: 1 }, none: '', s: 'y' })).toBe('ab {{x}}a=1;b=2; 2 two "[y]"');
  });

  it("has the Sprig functions the chart's sizing and monitors use: dig, get, list, sub, lt, toString, regexMatch, regexReplaceAll", () => {
    const values = { r: { limits: { memory: '512Mi' } }, n: 9090 };
    expect(renderText('{{ dig "limits" "memory" "none" .Values.r }} {{ dig "requests" "cpu" "none" .Values.r }}', values)).toBe('512Mi none');
    expect(renderText('{{ get (dict "Mi" 1048576) "Mi" }} {{ get (dict "Mi" 1) "Gi" | quote }} {{ list 1 "a" }}', values)).toBe('1048576 "" [1 a]');
    expect(renderText('{{ sub 10 3 }} {{ lt 2 3 }} {{ lt (int .Values.n) 80 }} {{ toString .Values.n }}', values)).toBe('7 true false 9090');
    expect(
      renderText('{{ regexMatch "^[0-9]+(Mi|Gi)?$" "512Mi" }} {{ regexMatch "^[0-9]+(Mi|Gi)?$" "0.5Gi" }} {{ regexReplaceAll "[^0-9]" "512Mi" "" }}', values),
    ).toBe('true false 512');
  });

  it('throws on an unclosed block', () => {
    expect(() => renderText('{{ if .Values.a }}x', { a: 1 })).toThrow(/without end/);
  });
});

const LOOPBACK_SIDECAR = [example('sidecar-values.yaml'), { sidecar: { managementHost: '127.0.0.1' }, metrics: { podMonitor: { enabled: false } } }];
const RENDERINGS: [string, readonly object[]][] = [
  ['values.yaml defaults', [UPSTREAM]],
  ...EXAMPLES.map((name): [string, object[]] => [`ci/${name}`, [example(name)]]),
  ['ci/sidecar-values.yaml with the management port on loopback', LOOPBACK_SIDECAR],
];

describe.each(RENDERINGS)('the chart rendered with %s', (_, overrides) => {
  const r = renderChart(CHART, overrides);

  it('renders Kubernetes objects that parse, each with a kind, an apiVersion and a name', () => {
    expect(r.objects.length).toBeGreaterThan(1);
    for (const o of r.objects) {
      expect(o['apiVersion']).toBeTypeOf('string');
      expect(o['kind']).toBeTypeOf('string');
      expect(o['metadata']['name']).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
    }
  });

  it('renders a settings file and environment that tm-cache itself accepts, as the values say', () => {
    const config = loadRendered(r);
    const values = r.values as any;
    expect(config.server.port).toBe(values.containerPorts.proxy);
    expect(config.server.managementPort).toBe(values.containerPorts.management);
    expect(config.server.managementHost).toBe(values.mode === 'sidecar' ? values.sidecar.managementHost : '0.0.0.0');
    expect(config.server.host).toBe(values.mode === 'sidecar' ? '127.0.0.1' : '0.0.0.0');
    expect(config.server.shutdownGraceMs).toBe(values.config.server.shutdownGraceMs);
    expect((config as any).health?.requireUpstream).toBe(values.config.health.requireUpstream);
    expect(config.cache.redis.mode).toBe(values.config.cache.redis.mode);
    expect(config.cache.redis.nodes).toEqual(values.config.cache.redis.nodes);
    expect(config.cache.redis.sentinels).toEqual(values.config.cache.redis.sentinels);
    expect(config.cache.redis.url).toBe(values.secret.existingSecret === '' ? values.redis.url : '');
  });

  it('runs tm-cache locked down: non-root, read-only root filesystem, no capabilities, no privilege escalation, RuntimeDefault seccomp', () => {
    const c = containerOf(r);
    expect(c['securityContext']).toMatchObject({
      runAsNonRoot: true,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
    if (r.values['mode'] === 'standalone') {
      const pod = r.find('Deployment')['spec']['template']['spec'];
      expect(pod['securityContext']).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
      expect(pod['automountServiceAccountToken']).toBe(false);
    }
  });

  it('probes the management port that TM_CACHE_MANAGEMENT_PORT names: startup and liveness /healthz, readiness /readyz', () => {
    const c = containerOf(r);
    const env = envOf(r, c);
    const management = c.ports.find((p) => p.containerPort === Number(env['TM_CACHE_MANAGEMENT_PORT']))!;
    const proxy = c.ports.find((p) => p.containerPort === Number(env['TM_CACHE_PORT']))!;
    expect(management).toBeDefined();
    expect(proxy).toBeDefined();
    const probes = { startupProbe: '/healthz', livenessProbe: '/healthz', readinessProbe: '/readyz' };
    for (const [probe, path] of Object.entries(probes)) {
      if (env['TM_CACHE_MANAGEMENT_HOST'] === '127.0.0.1') {
        // The kubelet cannot reach a loopback listener: the probe asks from inside the container.
        expect(c[probe]['httpGet']).toBeUndefined();
        expect(c[probe]['exec']['command'].join(' ')).toContain(`http://127.0.0.1:${management.containerPort}${path}`);
      } else expect(c[probe]['httpGet']).toEqual({ path, port: management.name });
    }
    if (r.values['mode'] !== 'standalone') return;
    const values = r.values as any;
    const service = r.objects.find((o) => o['kind'] === 'Service' && o['metadata']['name'] === 'rel-tm-cache')!;
    expect(service['spec']['ports']).toEqual([{ name: 'proxy', port: values.service.port, targetPort: proxy.name, protocol: 'TCP' }]);
    const managementService = r.objects.find((o) => o['kind'] === 'Service' && o['metadata']['name'] === 'rel-tm-cache-management')!;
    expect(managementService['spec']['ports']).toEqual([
      { name: 'management', port: values.managementService.port, targetPort: management.name, protocol: 'TCP' },
    ]);
    const monitor = r.objects.find((o) => o['kind'] === 'ServiceMonitor');
    if (monitor !== undefined) expect(monitor['spec']['endpoints'][0]['port']).toBe('management');
  });

  it('stops draining before the kubelet kills the pod: grace period > preStop sleep + shutdownGraceMs', () => {
    const values = r.values as any;
    const c = containerOf(r);
    expect(c['lifecycle']['preStop']['exec']['command']).toEqual(['sleep', String(values.preStopSleepSeconds)]);
    expect(values.terminationGracePeriodSeconds).toBeGreaterThan(values.preStopSleepSeconds + values.config.server.shutdownGraceMs / 1000);
    if (values.mode === 'standalone') {
      expect(r.find('Deployment')['spec']['template']['spec']['terminationGracePeriodSeconds']).toBe(values.terminationGracePeriodSeconds);
    }
  });
});

describe('values.yaml defaults', () => {
  const r = renderChart(CHART, [UPSTREAM]);

  it('render a standalone Deployment of 2 pods, its Service and management Service, ServiceAccount, ConfigMap, Secret and a PodDisruptionBudget; no monitoring objects', () => {
    expect(r.objects.map((o) => o['kind']).sort()).toEqual([
      'ConfigMap',
      'Deployment',
      'PodDisruptionBudget',
      'Secret',
      'Service',
      'Service',
      'ServiceAccount',
    ]);
    expect(r.find('PodDisruptionBudget')['spec']).toMatchObject({ minAvailable: 1 });
  });

  it("hold in `config` only settings at tm-cache's own defaults: the chart changes nothing silently", () => {
    const differing: string[] = [];
    const walk = (node: unknown, defaults: unknown, path: string): void => {
      if (typeof node === 'object' && node !== null && !Array.isArray(node)) {
        for (const [k, v] of Object.entries(node)) walk(v, (defaults as Record<string, unknown> | undefined)?.[k], path === '' ? k : `${path}.${k}`);
      } else if (JSON.stringify(node) !== JSON.stringify(defaults)) differing.push(`${path}: ${JSON.stringify(node)} (tm-cache: ${JSON.stringify(defaults)})`);
    };
    walk(r.values['config'], DEFAULT_CONFIG, '');
    expect(differing).toEqual([]);
  });

  it('refuse to render without upstream.url, naming it', () => {
    expect(() => renderChart(CHART, [{ image: UPSTREAM.image }])).toThrow(/upstream\.url is required/);
  });

  it('refuse to render without image.repository, saying there is no public image and how to build and push one', () => {
    const refusal =
      /image\.repository is required: there is no public tm-cache image\. Build it from the repository's Dockerfile and push it .*docker build -t registry\.example\.com\/tm-cache:0\.1\.0 \. && docker push .*--set image\.repository=/;
    expect(() => renderChart(CHART, [{ upstream: UPSTREAM.upstream }])).toThrow(refusal);
    expect(() => renderChart(CHART, [example('sidecar-values.yaml'), { image: { repository: '' } }])).toThrow(refusal);
  });

  it("pull image.repository at the chart's appVersion unless image.tag says otherwise", () => {
    expect(containerOf(renderChart(CHART, [UPSTREAM]))['image']).toBe('registry.example.com/tm-cache:0.1.0');
    expect(containerOf(renderChart(CHART, [UPSTREAM, { image: { tag: '0.1.0-rc1' } }]))['image']).toBe('registry.example.com/tm-cache:0.1.0-rc1');
  });

  it('refuse a grace period that would cut draining short, naming both values', () => {
    expect(() => renderChart(CHART, [UPSTREAM, { terminationGracePeriodSeconds: 15 }])).toThrow(
      /terminationGracePeriodSeconds \(15\) must exceed preStopSleepSeconds \+ config\.server\.shutdownGraceMs \(15 s\)/,
    );
    expect(() => renderChart(CHART, [UPSTREAM, { terminationGracePeriodSeconds: 16 }])).not.toThrow();
  });

  it('refuse an unknown mode', () => {
    expect(() => renderChart(CHART, [UPSTREAM, { mode: 'daemonset' }])).toThrow(/mode: "daemonset" is not one of standalone, sidecar/);
  });

  it('render a PodDisruptionBudget only when more than one pod runs', () => {
    const kinds = (values: object) => renderChart(CHART, [UPSTREAM, values]).objects.map((o) => o['kind']);
    expect(kinds({ replicaCount: 1 })).not.toContain('PodDisruptionBudget');
    expect(kinds({ autoscaling: { enabled: true, minReplicas: 1 } })).not.toContain('PodDisruptionBudget');
    expect(kinds({ autoscaling: { enabled: true, minReplicas: 2 } })).toContain('PodDisruptionBudget');
    expect(kinds({ podDisruptionBudget: { enabled: false } })).not.toContain('PodDisruptionBudget');
  });
});

describe("settings the chart renders are checked by tm-cache's loader", () => {
  it('so a key tm-cache does not know fails, naming it', () => {
    const r = renderChart(CHART, [UPSTREAM, { config: { cache: { memroy: { maxBytes: 1 } } } }]);
    expect(() => loadRendered(r)).toThrow(ConfigError);
    expect(() => loadRendered(r)).toThrow(/unknown setting cache\.memroy/);
  });

  it('and so does a value of the wrong kind', () => {
    const r = renderChart(CHART, [UPSTREAM, { config: { server: { shutdownGraceMs: '10s' } }, terminationGracePeriodSeconds: 30 }]);
    expect(() => loadRendered(r)).toThrow(/server\.shutdownGraceMs.*"10s"/);
  });

  it('and a cluster without nodes', () => {
    const r = renderChart(CHART, [UPSTREAM, { config: { cache: { redis: { mode: 'cluster' } } }, secret: { hmacSecret: 'ab'.repeat(32) } }]);
    expect(() => loadRendered(r)).toThrow(/cache\.redis\.nodes/);
  });
});

describe('a shared Redis', () => {
  it.each([
    ['redis.url', { redis: { url: 'redis://redis:6379' } }],
    ['cluster mode', { config: { cache: { redis: { mode: 'cluster', nodes: ['r:6379'] } } } }],
  ])('without a secret is refused at render (%s), saying how to make one', (_, values) => {
    expect(() => renderChart(CHART, [UPSTREAM, values])).toThrow(/needs secret\.hmacSecret .*openssl rand -base64 32/);
  });

  it('renders with secret.redisEncryptionKeys alone, and tm-cache accepts it', () => {
    const keys = { secret: { redisEncryptionKeys: `k1:${'ef'.repeat(32)}` }, config: { cache: { redis: { encryptionKeyId: 'k1' } } } };
    const r = renderChart(CHART, [UPSTREAM, { redis: { url: 'redis://redis:6379' } }, keys]);
    expect(loadRendered(r).cache.redis.encryptionKeyId).toBe('k1');
  });
});

describe('secrets', () => {
  it("go into the chart's Secret and reach the container by key, the admin token as TM_CACHE_ADMIN_TOKEN", () => {
    const r = renderChart(CHART, [example('all-features-values.yaml')]);
    const env = envOf(r, containerOf(r));
    const values = r.values as any;
    expect(env).toMatchObject({
      TM_CACHE_ADMIN_TOKEN: values.secret.adminToken,
      TM_CACHE_HMAC_SECRET: values.secret.hmacSecret,
      TM_CACHE_REDIS: values.redis.url,
      TM_CACHE_REDIS_ENCRYPTION_KEYS: values.secret.redisEncryptionKeys,
      TM_CACHE_REDIS_ENCRYPTION_KEY_ID: 'k2',
    });
    for (const o of r.objects.filter((x) => x['kind'] === 'ConfigMap')) expect(JSON.stringify(o)).not.toContain(values.secret.adminToken);
  });

  it('come from an existing Secret instead when one is named: no Secret is made, every key is read from it', () => {
    const r = renderChart(CHART, [example('cluster-values.yaml')]);
    expect(r.objects.map((o) => o['kind'])).not.toContain('Secret');
    const refs = containerOf(r).env.flatMap((e) => (e.valueFrom === undefined ? [] : [e.valueFrom.secretKeyRef]));
    expect(refs.map((ref) => [ref.name, ref.key, ref.optional]).sort()).toEqual([
      ['tm-cache-secrets', 'admin-token', true],
      ['tm-cache-secrets', 'admin-viewer-token', true],
      ['tm-cache-secrets', 'hmac-secret', true],
      ['tm-cache-secrets', 'redis-encryption-keys', true],
      ['tm-cache-secrets', 'redis-password', true],
      ['tm-cache-secrets', 'redis-sentinel-password', true],
      ['tm-cache-secrets', 'redis-url', true],
    ]);
  });

  it("give Sentinel (or a Cluster) its passwords: the servers' and the sentinels', by environment, and the config loads with them", () => {
    const r = renderChart(CHART, [example('sentinel-values.yaml')]);
    const values = r.values as any;
    expect(envOf(r, containerOf(r))).toMatchObject({
      TM_CACHE_REDIS_PASSWORD: values.secret.redisPassword,
      TM_CACHE_REDIS_SENTINEL_PASSWORD: values.secret.redisSentinelPassword,
    });
    const redis = loadRendered(r).cache.redis;
    expect(redis).toMatchObject({ mode: 'sentinel', tls: true, password: values.secret.redisPassword, sentinelPassword: values.secret.redisSentinelPassword });
    for (const o of r.objects.filter((x) => x['kind'] === 'ConfigMap')) expect(JSON.stringify(o)).not.toContain(values.secret.redisPassword);
  });

  it('refuse a password given twice, in redis.url and in secret.redisPassword, when the config loads', () => {
    const r = renderChart(CHART, [example('all-features-values.yaml'), { secret: { redisPassword: 'another-fake-password' } }]);
    expect(() => loadRendered(r)).toThrow(/cache\.redis\.url .*a URL without a password, since cache\.redis\.password gives one/);
  });
});

describe('mode sidecar', () => {
  const r = renderChart(CHART, [example('sidecar-values.yaml')]);
  const notes = r.outputs.get('NOTES.txt')!;

  it('renders only what sidecars need: the ConfigMap and the Secret (and the enabled PodMonitor, alerts and dashboard), no Deployment or Service', () => {
    expect(r.objects.map((o) => o['kind']).sort()).toEqual(['ConfigMap', 'ConfigMap', 'PodMonitor', 'PrometheusRule', 'Secret']);
  });

  it('prints in NOTES the container to paste (loopback proxy on the chosen port) and how to make it a native sidecar', () => {
    expect(notes).toContain('restartPolicy: Always');
    expect(notes).toContain('initContainers');
    expect(notes).toContain('http://127.0.0.1:18080/api/v1');
    const c = containerOf(r);
    expect(notes).toContain(
      r
        .include('tm-cache.container')
        .split('\n')
        .map((l) => `  ${l}`)
        .join('\n'),
    );
    expect(envOf(r, c)).toMatchObject({ TM_CACHE_HOST: '127.0.0.1', TM_CACHE_PORT: '18080', TM_CACHE_MANAGEMENT_PORT: '18081' });
  });

  it("alerts with the configured selector and leaves out the alerts about a Service's replicas", () => {
    const rules = r.find('PrometheusRule')['spec']['groups'][0]['rules'] as { alert: string; expr: string }[];
    expect(rules.map((rule) => rule.alert)).not.toContain('TmCacheNoReplicaReady');
    for (const rule of rules) expect(rule.expr).toContain('namespace="ci",container="tm-cache"');
  });
});

describe('monitoring (all features on)', () => {
  const r = renderChart(CHART, [example('all-features-values.yaml')]);

  it("ships the dashboard file unchanged in a ConfigMap labelled for Grafana's sidecar", () => {
    const dashboard = r.objects.find((o) => o['kind'] === 'ConfigMap' && o['metadata']['name'].endsWith('-dashboard'))!;
    expect(dashboard['metadata']['labels']).toMatchObject({ grafana_dashboard: '1' });
    expect(dashboard['metadata']['annotations']).toEqual({ grafana_folder: 'Caches' });
    expect(dashboard['data']['tm-cache.json']).toBe(readFileSync(join(CHART, 'dashboards/tm-cache.json'), 'utf8').replace(/\n$/, ''));
  });

  it("keeps the two dashboards one: ops/grafana-dashboard.json is the chart's file, byte for byte", () => {
    expect(readFileSync(join(ROOT, 'ops/grafana-dashboard.json'), 'utf8')).toBe(readFileSync(join(CHART, 'dashboards/tm-cache.json'), 'utf8'));
  });

  it("alerts on hit ratio, upstream 5xx and 429, Redis degraded, the fleet budget, the certificate and no ready replica, for this release's series", () => {
    const rule = r.find('PrometheusRule');
    expect(rule['metadata']['labels']).toMatchObject({ release: 'kube-prometheus-stack' });
    const rules = rule['spec']['groups'][0]['rules'] as { alert: string; expr: string; labels: object; annotations: { description: string } }[];
    expect(rules.map((x) => x.alert)).toEqual([
      'TmCacheHitRatioLow',
      'TmCacheUpstream5xx',
      'TmCacheUpstream429',
      'TmCacheRedisDegraded',
      'TmCacheFleetPaused',
      'TmCacheBudgetRefusals',
      'TmCacheLockoutNear',
      'TmCacheBudgetRateLow',
      'TmCacheCertificateExpiring',
      'TmCacheNoReplicaReady',
      'TmCacheScrapeFailing',
    ]);
    for (const x of rules) {
      expect(x.expr).toContain('namespace="ns",job="rel-tm-cache-management"');
      expect(x.labels).toMatchObject({ team: 'qa-infra' });
    }
    expect(rules[0]!.annotations.description).toContain('{{ $value | humanizePercentage }}');
    expect(rules[0]!.expr).toMatch(/< 0\.5\s+and sum\(rate\(tm_cache_requests_total\{[^}]*outcome!="passthrough"\}\[15m\]\)\) > 1$/);
  });

  it("scrapes the management port with a ServiceMonitor selecting the release's management Service", () => {
    const monitor = r.find('ServiceMonitor');
    expect(monitor['spec']['selector']['matchLabels']).toEqual({
      'app.kubernetes.io/name': 'tm-cache',
      'app.kubernetes.io/instance': 'rel',
      'app.kubernetes.io/component': 'management',
    });
    expect(monitor['spec']['endpoints']).toEqual([{ port: 'management', path: '/metrics', interval: '30s', scrapeTimeout: '10s' }]);
  });
});

describe('TLS from a kubernetes.io/tls Secret', () => {
  const TLS = { tls: { secretName: 'tmc-cert', clientCaSecretName: 'tmc-client-ca' } };

  it('mounts the Secret, points tm-cache at its files, and probes and scrapes the management port over HTTPS', () => {
    const r = renderChart(CHART, [UPSTREAM, TLS, { metrics: { serviceMonitor: { enabled: true } } }]);
    const c = containerOf(r);
    expect(envOf(r, c)).toMatchObject({
      TM_CACHE_TLS_CERT_FILE: '/etc/tm-cache-tls/tls.crt',
      TM_CACHE_TLS_KEY_FILE: '/etc/tm-cache-tls/tls.key',
      TM_CACHE_TLS_MANAGEMENT: 'true',
      TM_CACHE_TLS_CLIENT_CA_FILE: '/etc/tm-cache-client-ca/ca.crt',
    });
    expect(c['volumeMounts']).toEqual(
      expect.arrayContaining([
        { name: 'tm-cache-tls', mountPath: '/etc/tm-cache-tls', readOnly: true },
        { name: 'tm-cache-client-ca', mountPath: '/etc/tm-cache-client-ca', readOnly: true },
      ]),
    );
    const volumes = r.find('Deployment')['spec']['template']['spec']['volumes'];
    expect(volumes).toEqual(
      expect.arrayContaining([
        { name: 'tm-cache-tls', secret: { secretName: 'tmc-cert' } },
        { name: 'tm-cache-client-ca', secret: { secretName: 'tmc-client-ca' } },
      ]),
    );
    for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) expect(c[probe]['httpGet']['scheme'], probe).toBe('HTTPS');
    const endpoint = r.find('ServiceMonitor')['spec']['endpoints'][0];
    expect(endpoint).toMatchObject({ scheme: 'https', tlsConfig: { insecureSkipVerify: true } });
  });

  it('keeps the management port plain with tls.management false, and renders no TLS without a Secret name', () => {
    const plain = containerOf(renderChart(CHART, [UPSTREAM, { tls: { secretName: 'tmc-cert', management: false } }]));
    expect(plain.env).toEqual(expect.arrayContaining([{ name: 'TM_CACHE_TLS_MANAGEMENT', value: 'false' }]));
    expect(plain['readinessProbe']['httpGet']['scheme']).toBeUndefined();
    const none = containerOf(renderChart(CHART, [UPSTREAM]));
    expect(none.env.map((e) => e.name).filter((n) => n.startsWith('TM_CACHE_TLS_'))).toEqual([]);
  });

  it('probes a loopback sidecar over HTTPS from inside the container', () => {
    const c = containerOf(renderChart(CHART, [...LOOPBACK_SIDECAR, TLS]));
    expect(c['readinessProbe']['exec']['command'].join(' ')).toMatch(
      /require\('https'\)\.get\(\{ host: '127\.0\.0\.1', port: \d+, path: '\/readyz', rejectUnauthorized: false \}/,
    );
  });
});
