/**
 * The built command, started the way the container image starts it: `node dist/cli.js serve`,
 * configured through the environment. (`npm test` builds dist/ first.)
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_FLAGS, EMULATOR_FLAGS, SERVE_FLAGS } from '../src/cli-help.js';
import { CONFIG_OVERRIDES } from '../src/config/load.js';
import { startTestEmulator, type TestEmulator } from './helpers/emulator.js';
import { httpGet } from './helpers/proxy.js';
import { CLI, startServe } from './helpers/serve.js';
import { until } from './helpers/wait.js';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

async function run(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { PATH: process.env['PATH'] ?? '', ...env } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stdout, stderr };
}

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does)');
});

describe('tm-cache serve', () => {
  let emulator: TestEmulator;
  beforeAll(async () => {
    emulator = await startTestEmulator();
  });
  afterAll(async () => {
    await emulator?.close();
  });

  it('serves from the environment, answers health and readiness, and drains in-flight requests on SIGTERM', async () => {
    const serve = await startServe({
      TM_CACHE_UPSTREAM: emulator.url,
      TM_CACHE_PORT: '0',
      TM_CACHE_MANAGEMENT_PORT: '0',
      TM_CACHE_LOG_LEVEL: 'debug',
    });
    const { token, project_ids } = emulator.tokens.member(0);
    const path = `/api/v1/projects/${project_ids[0]}/runs?per_page=15`;
    expect((await httpGet(serve.url + path, token)).status).toBe(200);
    expect((await httpGet(serve.url + path, token)).headers['cache-status']).toMatch(/hit/);
    expect((await httpGet(`${serve.management}/healthz`)).json()).toEqual({ status: 'ok' });
    expect((await httpGet(`${serve.management}/readyz`)).status).toBe(200);
    const metrics = (await httpGet(`${serve.management}/metrics`)).body.toString();
    expect(metrics).toMatch(/tm_cache_requests_total\{outcome="hit",tier="memory",operation="listRuns",status_class="2xx"\} 1/);

    await emulator.faults({ latency_ms: 400 });
    const inFlight = httpGet(`${serve.url}/api/v1/projects/${project_ids[0]}/runs?per_page=25`, token);
    await new Promise((r) => setTimeout(r, 100));
    serve.child.kill('SIGTERM');
    const [res, [code]] = await Promise.all([inFlight, once(serve.child, 'exit') as Promise<[number]>]);
    await emulator.clearFaults();
    expect(res.status).toBe(200);
    expect(code).toBe(0);
    // One access line per request (the in-flight one too, written before exit), never the credential.
    const access = serve
      .output()
      .split('\n')
      .filter((l) => l.includes('"msg":"access"'));
    expect(access.length).toBeGreaterThanOrEqual(3);
    expect(access.at(-1)).toMatch(/"op":"listRuns".*"status":200.*"outcome":"miss"/);
    expect(serve.output()).not.toContain(token);
  });

  it('with stdout a regular file, writes every access line whole, the last batch on SIGTERM', { timeout: 60_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tm-cache-stdout-'));
    const file = join(dir, 'stdout.log');
    const fd = openSync(file, 'a');
    const child = spawn(process.execPath, [CLI, 'serve'], {
      stdio: ['ignore', fd, 'pipe'],
      env: { PATH: process.env['PATH'] ?? '', TM_CACHE_UPSTREAM: emulator.url, TM_CACHE_PORT: '0', TM_CACHE_MANAGEMENT_PORT: '0', TM_CACHE_LOG_LEVEL: 'info' },
    });
    closeSync(fd);
    try {
      const lines = (): string[] => readFileSync(file, 'utf8').split('\n');
      let serving: string | undefined;
      await until(() => (serving = lines().find((l) => l.includes('tm-cache serving'))) !== undefined);
      const { url } = JSON.parse(serving!) as { url: string };
      const { token, project_ids } = emulator.tokens.member(0);
      // More than one 64 KiB batch of lines (~300 bytes each): lines cross the buffers' ends.
      const requests = 400;
      for (let i = 0; i < requests; i++) expect((await httpGet(`${url}/api/v1/projects/${project_ids[0]}/runs?per_page=15`, token)).status).toBe(200);
      child.kill('SIGTERM');
      const [code] = (await once(child, 'exit')) as [number];
      expect(code).toBe(0);
      const written = readFileSync(file, 'utf8');
      expect(written.endsWith('\n')).toBe(true);
      // Every line is one whole JSON object, and every request has its line, the last ones too.
      const parsed = written
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { msg: string; outcome?: string });
      const access = parsed.filter((l) => l.msg === 'access');
      expect(access).toHaveLength(requests);
      expect(access.filter((l) => l.outcome === 'hit')).toHaveLength(requests - 1);
      expect(written).not.toContain(token);
    } finally {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses to start without an upstream and says how to set one or run the demo', async () => {
    const r = await run(['serve']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/TM_CACHE_UPSTREAM/);
    expect(r.stderr).toMatch(/tm-cache demo/);
  });

  it.each([
    [['serve', '--upstream', 'http://127.0.0.1:1', '--port', '99999'], /server\.port.*99999.*0 to 65535/],
    [['serve', '--upstream', 'ftp://example'], /upstream\.url/],
    [['serve', '--upstream', 'http://127.0.0.1:1', '--bogus', '1'], /--bogus/],
    [['emulator', '--scale', 'huge'], /--scale.*huge.*small, medium, large/],
    [['emulator', '--bogus', '1'], /unknown flag --bogus/],
    [['demo', '--port'], /flag --port needs a value/],
    [['frobnicate'], /unknown command/],
  ])('exits 2 naming the setting for %j', async (args, message) => {
    const r = await run(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });

  it('exits 2 for an invalid cache.sharing, naming the setting and the allowed values', async () => {
    const r = await run(['serve', '--upstream', 'http://127.0.0.1:1'], { TM_CACHE_SHARING: 'team' });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/cache\.sharing.*team.*user, project/);
  });

  it.each([
    ['cluster', 'cache.redis.nodes'],
    ['sentinel', 'cache.redis.sentinels'],
  ])('exits 2 at start when mode %s has no servers to find, naming %s', async (mode, setting) => {
    const dir = mkdtempSync(join(tmpdir(), 'tm-cache-cli-'));
    try {
      const file = join(dir, 'tm.yaml');
      writeFileSync(file, `cache:\n  redis:\n    mode: ${mode}\n`);
      const r = await run(['serve', '--upstream', 'http://127.0.0.1:1'], { TM_CACHE_CONFIG: file });
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`${setting}: received []; allowed: at least one host:port when cache.redis.mode is ${mode}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('tm-cache --help, <command> --help, --version', () => {
  it.each([['--help'], ['-h'], ['help'], []])('prints the commands on stdout and exits 0 for %j', async (...args) => {
    const r = await run(args);
    expect(r.code).toBe(0);
    for (const command of ['serve', 'emulator', 'demo', '--version']) expect(r.stdout).toContain(command);
    expect(r.stderr).toBe('');
  });

  it.each([
    ['serve', SERVE_FLAGS],
    ['emulator', EMULATOR_FLAGS],
    ['demo', DEMO_FLAGS],
  ] as const)('%s --help and -h list every flag the command accepts, one line each, and exit 0', async (command, flags) => {
    for (const help of ['--help', '-h']) {
      const r = await run([command, help]);
      expect(r.code).toBe(0);
      expect(r.stderr).toBe('');
      expect(r.stdout).toContain(`Usage: tm-cache ${command}`);
      const flagLines = r.stdout.split('\n').filter((l) => /^ {2}--?\w/.test(l));
      expect(flagLines.map((l) => l.trim().split(/[\s,]/)[0])).toEqual([...flags.map((f) => f.flag), '-h']);
    }
  });

  it('serve --help lists every flag the config loader accepts', async () => {
    const r = await run(['serve', '--help']);
    const accepted = [...CONFIG_OVERRIDES.flatMap((o) => (o.flag === undefined ? [] : [o.flag])), '--config'];
    for (const flag of accepted) expect(r.stdout).toMatch(new RegExp(`^ {2}${flag} `, 'm'));
  });

  it('--version prints the version of package.json', async () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const args of [['--version'], ['serve', '--version'], ['emulator', '--version'], ['demo', '--version']]) {
      const r = await run(args);
      expect(r.code, args.join(' ')).toBe(0);
      expect(r.stdout.trim(), args.join(' ')).toBe(pkg.version);
    }
  });

  it('still refuses an unknown flag with exit 2 and a message', async () => {
    const r = await run(['demo', '--hepl']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown flag --hepl; allowed: --port, --management-port, --emulator-port/);
  });
});

/** `tm-cache demo` on free ports, running until stopped; its stdout (first screen, then access lines). */
async function startDemo(env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [CLI, 'demo', '--port', '0', '--management-port', '0', '--emulator-port', '0'], {
    env: { PATH: process.env['PATH'] ?? '', ...env },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const exited = once(child, 'exit');
  await Promise.race([until(() => stdout.includes('Ctrl-C stops both'), 30_000), exited.then(() => Promise.reject(new Error(`demo exited: ${stderr}`)))]);
  const line = (label: string) => new RegExp(`^ {2}${label} +(\\S+)`, 'm').exec(stdout)?.[1] ?? '';
  return {
    output: () => stdout,
    proxy: line('proxy').replace(/\/api\/v1$/, ''),
    statusPage: line('status page'),
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

describe('tm-cache demo', () => {
  it('prints a one-click sign-in link to the status page, which hint lines are cached, and writes the access log', { timeout: 60_000 }, async () => {
    const demo = await startDemo();
    try {
      const link = new URL(demo.statusPage);
      const token = /^#token=(\S{16,})$/.exec(link.hash)?.[1];
      expect(token, demo.statusPage).toBeDefined();
      const page = await httpGet(`${link.origin}/`);
      expect(page.status).toBe(200);
      expect((await httpGet(`${link.origin}/admin/stats`, token)).status).toBe(200);
      // Each curl line is preceded by what it shows: cached or not.
      const hints = demo
        .output()
        .split('\n')
        .filter((l) => /^ {2}# /.test(l));
      expect(hints.filter((h) => /# cached/.test(h)).length).toBeGreaterThanOrEqual(2);
      expect(hints.filter((h) => /# not cached/.test(h)).length).toBeGreaterThanOrEqual(2);
      // The first hint's request, twice: a miss then a hit, each an access log line on stdout.
      const first = /curl -si -H 'Authorization: Bearer (\S+)' '(\S+)'/.exec(demo.output())!;
      const url = first[2]!;
      expect(url.startsWith(demo.proxy)).toBe(true);
      expect((await httpGet(url, first[1])).headers['cache-status']).toMatch(/stored/);
      expect((await httpGet(url, first[1])).headers['cache-status']).toMatch(/hit/);
      await until(
        () =>
          demo
            .output()
            .split('\n')
            .filter((l) => l.includes('"msg":"access"')).length >= 2,
        10_000,
      );
      expect(demo.output()).toMatch(/"outcome":"hit","tier":"memory"/);
    } finally {
      await demo.stop();
    }
  });

  it("honours TM_CACHE_* over its own settings: a token of one's own (never printed), a viewer token, the access log off", { timeout: 60_000 }, async () => {
    const own = 'my-own-admin-token-for-the-demo';
    const viewer = 'my-own-viewer-token-for-the-demo';
    const demo = await startDemo({ TM_CACHE_ADMIN_TOKEN: own, TM_CACHE_ADMIN_VIEWER_TOKEN: viewer, TM_CACHE_LOG_ACCESS: 'off' });
    try {
      expect(demo.output()).not.toContain(own);
      expect(demo.output()).not.toContain(viewer);
      expect(demo.output()).toMatch(/status page +http:\/\/127\.0\.0\.1:\d+\/ +\(sign in with your TM_CACHE_ADMIN_TOKEN\)/);
      expect(demo.output()).toMatch(/access log +off \(log\.access off/);
      const origin = new URL(demo.statusPage).origin;
      expect((await httpGet(`${origin}/admin/stats`, own)).status).toBe(200);
      expect((await httpGet(`${origin}/admin/stats`, viewer)).status).toBe(200);
      const first = /curl -si -H 'Authorization: Bearer (\S+)' '(\S+)'/.exec(demo.output())!;
      expect((await httpGet(first[2]!, first[1])).status).toBe(200);
      await demo.stop(); // flushes what the log holds
      expect(demo.output()).not.toContain('"msg":"access"');
    } finally {
      await demo.stop();
    }
  });
});

describe('tm-cache demo on a taken port', () => {
  let blocker: Server;
  let taken: number;
  beforeAll(async () => {
    blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    taken = (blocker.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => blocker.close(() => resolve())));

  it.each([['--port'], ['--management-port'], ['--emulator-port']])(
    'names the port taken through %s and the flags that choose others, without a stack trace',
    async (flag) => {
      const ports: Record<string, string> = { '--port': '0', '--management-port': '0', '--emulator-port': '0', [flag]: String(taken) };
      const r = await run(['demo', ...Object.entries(ports).flat()]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`port ${taken} (set by ${flag}) is already in use`);
      for (const f of DEMO_FLAGS) expect(r.stderr).toContain(f.flag);
      expect(r.stderr).not.toMatch(/EADDRINUSE|\n\s+at /);
    },
  );
});
