/**
 * The built command, started the way the container image starts it: `node dist/cli.js serve`,
 * configured through the environment. (`npm test` builds dist/ first.)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from './helpers/emulator.js';
import { httpGet } from './helpers/proxy.js';

const CLI = new URL('../dist/cli.js', import.meta.url).pathname;

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

/** Starts `serve` and resolves once it logs that it is serving, with the URLs it listens on. */
async function startServe(env: Record<string, string>): Promise<{ child: ChildProcess; url: string; management: string; output: () => string }> {
  const child = spawn(process.execPath, [CLI, 'serve'], { env: { PATH: process.env['PATH'] ?? '', ...env } });
  let output = '';
  child.stderr.on('data', (d) => (output += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start:\n${output}`)), 15_000);
    child.once('exit', (code) => reject(new Error(`serve exited with ${code}:\n${output}`)));
    child.stdout.on('data', (d: Buffer) => {
      output += d;
      const line = output.split('\n').find((l) => l.includes('tm-cache serving'));
      if (line) {
        clearTimeout(timer);
        const { url, management } = JSON.parse(line) as { url: string; management: string };
        resolve({ child, url, management, output: () => output });
      }
    });
  });
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
    expect(metrics).toMatch(/tm_cache_requests_total\{outcome="hit",tier="memory",operation="listRuns"\} 1/);

    await emulator.faults({ latency_ms: 400 });
    const inFlight = httpGet(`${serve.url}/api/v1/projects/${project_ids[0]}/runs?per_page=25`, token);
    await new Promise((r) => setTimeout(r, 100));
    serve.child.kill('SIGTERM');
    const [res, [code]] = await Promise.all([inFlight, once(serve.child, 'exit') as Promise<[number]>]);
    await emulator.clearFaults();
    expect(res.status).toBe(200);
    expect(code).toBe(0);
    // One debug line per request, and never the credential.
    expect(serve.output()).toMatch(/"operation":"listRuns"/);
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
