/**
 * The chart keeps the management port (/metrics, /readyz, the admin API, the status page) private
 * and sizes the heap from the memory limit. Rendered with test/helm/render.ts; the sidecar's
 * loopback listener, its exec probes and the heap option are then tried for real: `serve` started
 * with the container's rendered environment and settings file, the probe commands run as the
 * kubelet would run them, and node started with the rendered NODE_OPTIONS.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { findFreePort } from '../helpers/ports.js';
import { startServe, type Serving } from '../helpers/serve.js';
import { renderChart, type Rendered } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = join(ROOT, 'helm/tm-cache');
const REQUIRED = { upstream: { url: 'https://tm.example.com' }, image: { repository: 'registry.example.com/tm-cache' } };
const example = (name: string) => parseYaml(readFileSync(join(CHART, 'ci', name), 'utf8')) as Record<string, unknown>;
const SIDECAR = { ...REQUIRED, mode: 'sidecar' };

const tmp = mkdtempSync(join(tmpdir(), 'tm-cache-chart-mgmt-'));
const started: Serving[] = [];
afterAll(() => {
  for (const s of started) s.child.kill('SIGKILL');
  rmSync(tmp, { recursive: true, force: true });
});

type Container = { env: { name: string; value?: string }[]; ports: { name: string; containerPort: number }[]; [k: string]: any };

const containerOf = (r: Rendered) => (parseYaml(r.include('tm-cache.container')) as Container[])[0]!;
const envValue = (c: Container, name: string) => c.env.find((e) => e.name === name)?.value;
const objectsOf = (r: Rendered, kind: string) => r.objects.filter((o) => o['kind'] === kind);

/** Every Service the chart renders, by name, with the container ports its targets name. */
function servicePorts(r: Rendered): Record<string, number[]> {
  const c = containerOf(r);
  const byName = new Map(c.ports.map((p) => [p.name, p.containerPort]));
  return Object.fromEntries(
    objectsOf(r, 'Service').map((s) => [s['metadata']['name'], (s['spec']['ports'] as { targetPort: string }[]).map((p) => byName.get(p.targetPort)!)]),
  );
}

describe("the proxy's Service", () => {
  it.each([
    ['values.yaml defaults', [REQUIRED]],
    ['ci/all-features-values.yaml', [example('all-features-values.yaml')]],
  ])('carries the proxy port only; the management port is on its own ClusterIP Service (%s)', (_, overrides) => {
    const r = renderChart(CHART, overrides);
    const values = r.values as any;
    expect(servicePorts(r)).toEqual({ 'rel-tm-cache': [values.containerPorts.proxy], 'rel-tm-cache-management': [values.containerPorts.management] });
    const management = objectsOf(r, 'Service').find((s) => s['metadata']['name'] === 'rel-tm-cache-management')!;
    expect(management['spec']['type']).toBe('ClusterIP');
  });

  it('keeps the management port off it even when the proxy is exposed by a LoadBalancer', () => {
    const r = renderChart(CHART, [REQUIRED, { service: { type: 'LoadBalancer' } }]);
    const proxy = objectsOf(r, 'Service').find((s) => s['metadata']['name'] === 'rel-tm-cache')!;
    expect(proxy['spec']['type']).toBe('LoadBalancer');
    expect(servicePorts(r)['rel-tm-cache']).toEqual([8080]);
  });

  it('leaves no Service on the management port at all with managementService.enabled false', () => {
    const r = renderChart(CHART, [REQUIRED, { managementService: { enabled: false } }]);
    expect(servicePorts(r)).toEqual({ 'rel-tm-cache': [8080] });
    expect(r.outputs.get('NOTES.txt')).toContain('port-forward deploy/rel-tm-cache 9090:9090');
  });

  it("is not what the ServiceMonitor selects: its selector matches the management Service's labels only", () => {
    const r = renderChart(CHART, [example('all-features-values.yaml')]);
    const selector = r.find('ServiceMonitor')['spec']['selector']['matchLabels'] as Record<string, string>;
    const matches = (s: Record<string, any>) => Object.entries(selector).every(([k, v]) => s['metadata']['labels'][k] === v);
    expect(
      objectsOf(r, 'Service')
        .filter(matches)
        .map((s) => s['metadata']['name']),
    ).toEqual(['rel-tm-cache-management']);
  });

  it('refuses a ServiceMonitor without the management Service it scrapes through', () => {
    expect(() => renderChart(CHART, [REQUIRED, { managementService: { enabled: false }, metrics: { serviceMonitor: { enabled: true } } }])).toThrow(
      /metrics\.serviceMonitor scrapes through the management Service: set managementService\.enabled/,
    );
  });
});

describe('networkPolicy', () => {
  it('is off by default', () => {
    expect(objectsOf(renderChart(CHART, [REQUIRED]), 'NetworkPolicy')).toEqual([]);
  });

  it('opens the proxy port to anyone, and the management port to nobody, when only enabled', () => {
    const policy = renderChart(CHART, [REQUIRED, { networkPolicy: { enabled: true } }]).find('NetworkPolicy');
    expect(policy['spec']).toEqual({
      podSelector: { matchLabels: { 'app.kubernetes.io/name': 'tm-cache', 'app.kubernetes.io/instance': 'rel' } },
      policyTypes: ['Ingress'],
      ingress: [{ ports: [{ port: 'tmc-proxy', protocol: 'TCP' }] }],
    });
  });

  it("opens the proxy port to proxyFrom and the management port to managementFrom only, by the container's port names", () => {
    const proxyFrom = [{ namespaceSelector: { matchLabels: { team: 'qa' } } }];
    const managementFrom = [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }];
    const r = renderChart(CHART, [REQUIRED, { networkPolicy: { enabled: true, proxyFrom, managementFrom } }]);
    expect(r.find('NetworkPolicy')['spec']['ingress']).toEqual([
      { ports: [{ port: 'tmc-proxy', protocol: 'TCP' }], from: proxyFrom },
      { ports: [{ port: 'tmc-management', protocol: 'TCP' }], from: managementFrom },
    ]);
    expect(containerOf(r).ports.map((p) => p.name)).toEqual(['tmc-proxy', 'tmc-management']);
    expect(r.outputs.get('NOTES.txt')).toContain('reachable only from networkPolicy.managementFrom');
  });

  it("is refused in mode sidecar, where the pods and their policy are the application's", () => {
    expect(() => renderChart(CHART, [SIDECAR, { networkPolicy: { enabled: true } }])).toThrow(/networkPolicy\.enabled is for mode standalone/);
  });
});

describe('mode sidecar', () => {
  it('listens for management on 127.0.0.1 by default and probes it from inside the container', () => {
    const c = containerOf(renderChart(CHART, [SIDECAR]));
    expect(envValue(c, 'TM_CACHE_MANAGEMENT_HOST')).toBe('127.0.0.1');
    expect(envValue(c, 'TM_CACHE_HOST')).toBe('127.0.0.1');
    for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) expect(c[probe]['exec']['command'].slice(0, 2)).toEqual(['node', '-e']);
  });

  it("listens on the pod's IP, probed over HTTP, only when sidecar.managementHost asks for it", () => {
    const c = containerOf(renderChart(CHART, [SIDECAR, { sidecar: { managementHost: '0.0.0.0' } }]));
    expect(envValue(c, 'TM_CACHE_MANAGEMENT_HOST')).toBe('0.0.0.0');
    expect(c['readinessProbe']['httpGet']).toEqual({ path: '/readyz', port: 'tmc-management' });
  });

  it("is scraped by a PodMonitor selecting the application's pods, on the sidecar's management port by name", () => {
    const r = renderChart(CHART, [example('sidecar-values.yaml')]);
    const monitor = r.find('PodMonitor');
    expect(monitor['spec']).toEqual({
      selector: { matchLabels: { app: 'test-runner' } },
      namespaceSelector: { matchNames: ['ci'] },
      podMetricsEndpoints: [{ port: 'tmc-management', path: '/metrics', interval: '30s', scrapeTimeout: '10s' }],
    });
    expect(containerOf(r).ports.map((p) => p.name)).toContain('tmc-management');
  });

  it("alerts by the PodMonitor's job (<namespace>/<name>) unless a selector is given", () => {
    const r = renderChart(CHART, [example('sidecar-values.yaml'), { metrics: { prometheusRule: { selector: '' }, podMonitor: { namespaces: [] } } }]);
    expect(r.find('PodMonitor')['spec']['namespaceSelector']).toEqual({ matchNames: ['ns'] });
    for (const rule of r.find('PrometheusRule')['spec']['groups'][0]['rules'] as { expr: string }[]) expect(rule.expr).toContain('{job="ns/rel-tm-cache"');
  });

  it.each([
    [
      'a PodMonitor of a loopback management port',
      [SIDECAR, { metrics: { podMonitor: { enabled: true, podSelector: { app: 'x' } } } }],
      /metrics\.podMonitor cannot scrape a management port on 127\.0\.0\.1: set sidecar\.managementHost=0\.0\.0\.0/,
    ],
    [
      'a PodMonitor without podSelector',
      [SIDECAR, { sidecar: { managementHost: '0.0.0.0' }, metrics: { podMonitor: { enabled: true } } }],
      /metrics\.podMonitor\.podSelector is required/,
    ],
    ['a ServiceMonitor', [SIDECAR, { metrics: { serviceMonitor: { enabled: true } } }], /metrics\.serviceMonitor is for mode standalone/],
    [
      'another management address',
      [SIDECAR, { sidecar: { managementHost: '10.1.2.3' } }],
      /sidecar\.managementHost: "10\.1\.2\.3" is not one of 127\.0\.0\.1, 0\.0\.0\.0/,
    ],
  ])('refuses %s, saying what to do', (_, overrides, error) => {
    expect(() => renderChart(CHART, overrides)).toThrow(error);
  });

  it('refuses a PodMonitor in mode standalone (the ServiceMonitor is its monitor)', () => {
    expect(() => renderChart(CHART, [REQUIRED, { metrics: { podMonitor: { enabled: true, podSelector: { app: 'x' } } } }])).toThrow(
      /metrics\.podMonitor is for mode sidecar/,
    );
  });
});

// ---- the rendered container, run ----------------------------------------------------------

const run = (command: readonly string[], env: Record<string, string>) =>
  new Promise<number>((done) => {
    // The image's `node` is the node running these tests.
    const child = execFile(command[0] === 'node' ? process.execPath : command[0]!, command.slice(1), {
      env: { PATH: process.env['PATH'] ?? '', ...env },
      timeout: 20_000,
    });
    child.on('exit', (code) => done(code ?? -1));
  });

/** An address of this machine other than loopback, to knock on from "the pod network"; undefined when it has none. */
const outsideAddress = Object.values(networkInterfaces())
  .flat()
  .find((a) => a !== undefined && a.family === 'IPv4' && !a.internal)?.address;

const reachable = (host: string, port: number) =>
  new Promise<boolean>((done) => {
    const socket = connect({ host, port });
    socket.once('connect', () => {
      socket.destroy();
      done(true);
    });
    socket.once('error', () => done(false));
  });

/** Starts `serve` as the rendered container would run: its literal environment and the ConfigMap's settings file. */
async function serveRendered(r: Rendered): Promise<{ serving: Serving; env: Record<string, string>; container: Container }> {
  const container = containerOf(r);
  const env = Object.fromEntries(container.env.flatMap((e) => (e.value === undefined ? [] : [[e.name, e.value]])));
  const file = join(tmp, `config-${started.length}.yaml`);
  const configMap = r.objects.find((o) => o['kind'] === 'ConfigMap' && o['data']?.['config.yaml'] !== undefined)!;
  writeFileSync(file, configMap['data']['config.yaml'] as string);
  expect(container['args']).toEqual(['serve', '--config', '/etc/tm-cache/config.yaml']);
  const serving = await startServe({ ...env, TM_CACHE_UPSTREAM: 'http://127.0.0.1:9' }, ['--config', file]);
  started.push(serving);
  return { serving, env, container };
}

async function portsFor(overrides: object[]): Promise<Rendered> {
  const containerPorts = { proxy: await findFreePort(), management: await findFreePort() };
  return renderChart(CHART, [...overrides, { containerPorts }]);
}

describe('a sidecar as rendered, run', () => {
  it('listens for management on loopback only, and its exec probes pass against it and fail once it is gone', async () => {
    const r = await portsFor([SIDECAR]);
    const { serving, env, container } = await serveRendered(r);
    const port = Number(env['TM_CACHE_MANAGEMENT_PORT']);
    expect(serving.management).toBe(`http://127.0.0.1:${port}`);
    expect(await reachable('127.0.0.1', port)).toBe(true);
    if (outsideAddress !== undefined) expect(await reachable(outsideAddress, port)).toBe(false);
    const probes = ['startupProbe', 'livenessProbe', 'readinessProbe'].map((p) => container[p]['exec']['command'] as string[]);
    for (const command of probes) expect(await run(command, env)).toBe(0);
    serving.child.kill('SIGKILL');
    await new Promise((done) => serving.child.once('exit', done));
    for (const command of probes) expect(await run(command, env)).toBe(1);
  });

  it('listens on every interface when sidecar.managementHost is 0.0.0.0 (the contrast: the check above can see a reachable port)', async () => {
    if (outsideAddress === undefined) return;
    const r = await portsFor([SIDECAR, { sidecar: { managementHost: '0.0.0.0' } }]);
    const { env } = await serveRendered(r);
    expect(await reachable(outsideAddress, Number(env['TM_CACHE_MANAGEMENT_PORT']))).toBe(true);
    // The proxy itself stays on loopback in a sidecar either way.
    expect(await reachable(outsideAddress, Number(env['TM_CACHE_PORT']))).toBe(false);
  });
});

// ---- sizing ---------------------------------------------------------------------------------

const nodeOptionsOf = (overrides: object[]) => envValue(containerOf(renderChart(CHART, [REQUIRED, ...overrides])), 'NODE_OPTIONS');
const MiB = 1024 * 1024;

describe('sizing', () => {
  it('gives Node the memory limit less the memory tier and sizing.overheadMiB as its heap: 512Mi - 256 MiB - 96 MiB = 160 MiB by default', () => {
    expect(nodeOptionsOf([])).toBe('--max-old-space-size=160');
  });

  it.each([['1Gi'], ['1024Mi'], ['1073741824'], ['1048576Ki']])('reads the limit %s as 1024 MiB', (memory) => {
    expect(nodeOptionsOf([{ resources: { limits: { memory } } }])).toBe(`--max-old-space-size=${1024 - 256 - 96}`);
  });

  it('follows config.cache.memory.maxBytes (rounded up to whole MiB) and sizing.overheadMiB', () => {
    expect(nodeOptionsOf([{ resources: { limits: { memory: '2Gi' } }, config: { cache: { memory: { maxBytes: 1024 * MiB + 1 } } } }])).toBe(
      `--max-old-space-size=${2048 - 1025 - 96}`,
    );
    expect(nodeOptionsOf([{ sizing: { overheadMiB: 64 } }])).toBe(`--max-old-space-size=${512 - 256 - 64}`);
  });

  it('sets no heap without a memory limit, or with sizing.heapFromLimit false', () => {
    expect(nodeOptionsOf([{ resources: { limits: null } }])).toBeUndefined();
    expect(nodeOptionsOf([{ sizing: { heapFromLimit: false } }])).toBeUndefined();
  });

  it('refuses a limit that cannot hold the memory tier, the overhead and the least heap, naming the values and the least limit', () => {
    expect(() => renderChart(CHART, [REQUIRED, { resources: { limits: { memory: '256Mi' } } }])).toThrow(
      'resources.limits.memory (256 MiB) cannot hold config.cache.memory.maxBytes (256 MiB) + sizing.overheadMiB (96) + sizing.minHeapMiB (128): raise the limit to at least 480Mi or lower maxBytes',
    );
    expect(() => renderChart(CHART, [REQUIRED, { resources: { limits: { memory: '480Mi' } } }])).not.toThrow();
    expect(() => renderChart(CHART, [REQUIRED, { resources: { limits: { memory: '1Gi' } }, config: { cache: { memory: { maxBytes: 1024 * MiB } } } }])).toThrow(
      /at least 1248Mi/,
    );
    // The check holds with heapFromLimit off too: the memory tier must fit in the limit either way.
    expect(() => renderChart(CHART, [REQUIRED, { sizing: { heapFromLimit: false }, resources: { limits: { memory: '300Mi' } } }])).toThrow(/at least 480Mi/);
  });

  it('refuses a fractional memory limit it cannot read, naming it', () => {
    expect(() => renderChart(CHART, [REQUIRED, { resources: { limits: { memory: '0.5Gi' } } }])).toThrow(
      'resources.limits.memory: "0.5Gi" is not a whole memory quantity such as 512Mi or 1Gi',
    );
  });

  it('passes an option node honours: its heap limit becomes that size', async () => {
    const nodeOptions = nodeOptionsOf([])!;
    const limit = await new Promise<number>((done, fail) =>
      execFile(
        process.execPath,
        ['-e', 'console.log(require("v8").getHeapStatistics().heap_size_limit)'],
        { env: { NODE_OPTIONS: nodeOptions } },
        (error, out) => (error ? fail(error) : done(Number(out.trim()))),
      ),
    );
    // heap_size_limit is the old generation plus the young one (a few MiB): 160 MiB and a little, far below Node's own default.
    expect(limit / MiB).toBeGreaterThanOrEqual(160);
    expect(limit / MiB).toBeLessThan(160 + 64);
  });
});
