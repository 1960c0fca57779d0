/**
 * SIGHUP reloads `tm-cache serve` in place (the real process): the config file and environment
 * are read again, what can change at runtime is applied and logged, what needs a restart is
 * named; a bad file changes nothing and never stops the process.
 */
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet } from '../helpers/proxy.js';
import { findFreePort } from '../helpers/ports.js';
import { serving, spawnServe, startServe, type Serving } from '../helpers/serve.js';
import { until } from '../helpers/wait.js';

const FIRST = 'first-admin-token-0123456789';
const SECOND = 'second-admin-token-9876543210';
let emulator: TestEmulator;
let dir: string;
let file: string;
let serve: Serving;

const statsWith = async (token: string): Promise<number> => {
  const res = await request(`${serve.management}/admin/stats`, { headers: { authorization: `Bearer ${token}` } });
  await res.body.dump();
  return res.statusCode;
};
const logLines = (msg: string) =>
  serve
    .output()
    .split('\n')
    .filter((l) => l.includes(`"msg":"${msg}"`))
    .map((l) => JSON.parse(l));

beforeAll(async () => {
  emulator = await startTestEmulator();
  dir = mkdtempSync(join(tmpdir(), 'tm-cache-reload-'));
  file = join(dir, 'config.yaml');
  writeFileSync(file, `admin:\n  token: ${FIRST}\n`);
  serve = await startServe({ TM_CACHE_UPSTREAM: emulator.url, TM_CACHE_PORT: '0', TM_CACHE_MANAGEMENT_PORT: '0', TM_CACHE_CONFIG: file });
});
afterAll(async () => {
  if (serve && serve.child.exitCode === null) {
    // SIGKILL if SIGTERM is not enough: a process whose event loop is blocked never handles it.
    const killer = setTimeout(() => serve.child.kill('SIGKILL'), 5_000);
    serve.child.kill('SIGTERM');
    await once(serve.child, 'exit');
    clearTimeout(killer);
  }
  await emulator?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('SIGHUP', () => {
  it('applies the admin token, freshness rules and access log at once, and names what needs a restart', async () => {
    expect(await statsWith(FIRST)).toBe(200);
    writeFileSync(
      file,
      [
        'admin:',
        `  token: ${SECOND}`,
        'cache:',
        '  freshness:',
        '    default: { ttlMs: 2000, staleWhileRevalidateMs: 0 }',
        'log:',
        '  access: errors',
        'server:',
        '  shutdownGraceMs: 500',
        '',
      ].join('\n'),
    );
    serve.child.kill('SIGHUP');
    await until(() => logLines('reloaded').length === 1);
    const [reloaded] = logLines('reloaded');
    expect(reloaded.applied).toEqual(
      expect.arrayContaining(['admin.token', 'cache.freshness.default.ttlMs', 'cache.freshness.default.staleWhileRevalidateMs', 'log.access']),
    );
    expect(reloaded.needRestart).toEqual(['server.shutdownGraceMs']);
    // The token's value never reaches the log.
    expect(serve.output()).not.toContain(SECOND);
    expect(serve.output()).not.toContain(FIRST);
    expect(serve.child.exitCode).toBeNull();

    expect(await statsWith(FIRST)).toBe(401);
    expect(await statsWith(SECOND)).toBe(200);
    // New entries follow the new rule: fresh for 2 s (Cache-Status ttl in seconds).
    const m = emulator.tokens.member(0);
    const path = `${serve.url}/api/v1/projects/${m.project_ids[0]}/milestones`;
    await httpGet(path, m.token);
    expect((await httpGet(path, m.token)).headers['cache-status']).toMatch(/hit; ttl=[12];/);
    // log.access=errors: successful requests leave no access line.
    expect(logLines('access')).toEqual([]);
  });

  it('keeps the running configuration when the file is invalid or unreadable, and says why', async () => {
    for (const [content, named] of [
      ['cache:\n  memory: { maxBytes: -1 }\n', 'cache.memory.maxBytes'],
      ['admin: [unclosed\n', 'config file'],
      ['admin:\n  token: short\n', 'admin.token'],
    ] as const) {
      const before = logLines('reload refused: the running configuration is kept').length;
      writeFileSync(file, content);
      serve.child.kill('SIGHUP');
      await until(() => logLines('reload refused: the running configuration is kept').length === before + 1);
      expect(logLines('reload refused: the running configuration is kept').at(-1).problems).toContain(named);
      expect(serve.child.exitCode).toBeNull();
      expect(await statsWith(SECOND)).toBe(200);
    }
    rmSync(file);
    serve.child.kill('SIGHUP');
    await until(() => logLines('reload refused: the running configuration is kept').length === 4);
    expect(await statsWith(SECOND)).toBe(200);
  });

  it('refuses a file with a YAML warning (an unresolved tag) as invalid, and never logs the value', async () => {
    const tagged = 'abcdef-0123456789-tag-as-token';
    const before = logLines('reload refused: the running configuration is kept').length;
    writeFileSync(file, `admin:\n  token: !${tagged}\n`);
    serve.child.kill('SIGHUP');
    await until(() => logLines('reload refused: the running configuration is kept').length === before + 1);
    expect(logLines('reload refused: the running configuration is kept').at(-1).problems).toContain('YAML warning at line 2');
    expect(serve.output()).not.toContain(tagged);
    expect(await statsWith(SECOND)).toBe(200);
  });

  it('says what a reload did at warn whatever the level, even a reload to error, and counts each result', async () => {
    writeFileSync(file, `admin:\n  token: ${SECOND}\nserver:\n  logLevel: error\n`);
    serve.child.kill('SIGHUP');
    await until(() => logLines('reloaded').length === 2);
    expect(logLines('reloaded').at(-1)).toMatchObject({ level: 40, result: 'applied', applied: expect.arrayContaining(['server.logLevel']) });
    serve.child.kill('SIGHUP');
    await until(() => logLines('reloaded: nothing changed').length === 1);
    expect(logLines('reloaded: nothing changed')[0]).toMatchObject({ level: 40, result: 'unchanged' });
    // The runs above: one applied and five refused (an invalid value, bad YAML, a short token, a missing file, a YAML warning).
    const metrics = await (await request(`${serve.management}/metrics`)).body.text();
    const count = (result: string) => Number(new RegExp(`^tm_cache_reloads_total\\{result="${result}"\\} (\\d+)$`, 'm').exec(metrics)?.[1]);
    expect({ applied: count('applied'), unchanged: count('unchanged'), refused: count('refused'), restart_needed: count('restart_needed') }).toEqual({
      applied: 2,
      unchanged: 1,
      refused: 5,
      restart_needed: 0,
    });
  });

  // Last: before the fix, this one blocked the process's event loop for good.
  it('refuses a config path that is a FIFO, naming it, and keeps serving meanwhile', async () => {
    rmSync(file, { force: true });
    execFileSync('mkfifo', [file]);
    const before = logLines('reload refused: the running configuration is kept').length;
    serve.child.kill('SIGHUP');
    await until(() => logLines('reload refused: the running configuration is kept').length === before + 1);
    expect(logLines('reload refused: the running configuration is kept').at(-1).problems).toContain(`${JSON.stringify(file)} is not a regular file`);
    expect(await statsWith(SECOND)).toBe(200);
    expect(serve.child.exitCode).toBeNull();
  });
});

describe('SIGHUP while start-up waits for Redis', () => {
  it('does not stop the process: the reload is applied once it serves', async () => {
    const redisPort = await findFreePort(); // nothing listens there: start-up waits connectTimeoutMs
    const startFile = join(dir, 'waiting.yaml');
    writeFileSync(startFile, 'cache:\n  redis:\n    connectTimeoutMs: 6000\n');
    const spawned = spawnServe({
      TM_CACHE_UPSTREAM: emulator.url,
      TM_CACHE_PORT: '0',
      TM_CACHE_MANAGEMENT_PORT: '0',
      TM_CACHE_CONFIG: startFile,
      TM_CACHE_REDIS: `redis://127.0.0.1:${redisPort}/0`,
      TM_CACHE_HMAC_SECRET: 'c3'.repeat(40),
    });
    try {
      // A failed connection attempt is logged while start-up waits for Redis.
      await until(() => spawned.output().includes('"tier":"redis"') || spawned.child.exitCode !== null);
      spawned.child.kill('SIGHUP');
      const started = await serving(spawned);
      await until(() => started.output().includes('"msg":"reloaded: nothing changed"'));
      expect(spawned.child.exitCode).toBeNull();
      expect(spawned.child.signalCode).toBeNull();
    } finally {
      if (spawned.child.exitCode === null && spawned.child.signalCode === null) {
        spawned.child.kill('SIGKILL');
        await once(spawned.child, 'exit');
      }
    }
  });
});
