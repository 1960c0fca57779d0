/**
 * The built command, started the way the container image starts it: `node dist/cli.js serve`,
 * configured through the environment. (`npm test` builds dist/ first.)
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_FLAGS, EMULATOR_FLAGS, SERVE_FLAGS } from '../src/cli-help.js';
import { CONFIG_OVERRIDES } from '../src/config/load.js';
import { startTestEmulator, type TestEmulator } from './helpers/emulator.js';
import { httpGet } from './helpers/proxy.js';
import { CLI, startServe } from './helpers/serve.js';


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
    const access = serve.output().split('\n').filter((l) => l.includes('"msg":"access"'));
    expect(access.length).toBeGreaterThanOrEqual(3);
    expect(access.at(-1)).toMatch(/"op":"listRuns".*"status":200.*"outcome":"miss"/);
    expect(serve.output()).not.toContain(token);
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
    const r = await run(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(pkg.version);
  });

  it('still refuses an unknown flag with exit 2 and a message', async () => {
    const r = await run(['demo', '--hepl']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown flag --hepl; allowed: --port, --management-port, --emulator-port/);
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

  it.each([['--port'], ['--management-port'], ['--emulator-port']])('names the port taken through %s and the flags that choose others, without a stack trace', async (flag) => {
    const ports: Record<string, string> = { '--port': '0', '--management-port': '0', '--emulator-port': '0', [flag]: String(taken) };
    const r = await run(['demo', ...Object.entries(ports).flat()]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`port ${taken} (set by ${flag}) is already in use`);
    for (const f of DEMO_FLAGS) expect(r.stderr).toContain(f.flag);
    expect(r.stderr).not.toMatch(/EADDRINUSE|\n\s+at /);
  });
});
