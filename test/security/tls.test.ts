/**
 * TLS on the proxy and management ports (`server.tls`), with a real TLS client and a private CA
 * made by openssl: the configured certificate is served; a rotation of the files (new files
 * renamed over the old, as a script or cert-manager's Secret update does) is served from the next
 * connection on without a restart, and so is one read on SIGHUP; a new pair that does not match
 * keeps the certificate in use; with a client CA, the proxy port refuses a client without a
 * certificate; files that cannot be served stop `serve` with exit code 2 naming the setting.
 */
import { once } from 'node:events';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { Agent, request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors.js';
import { loadConfig } from '../../src/config/load.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { TestCa, type IssuedPair } from '../helpers/pki.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { spawnServe, startServe, type Serving } from '../helpers/serve.js';
import { until } from '../helpers/wait.js';

let emulator: TestEmulator;
let dir: string;
let ca: TestCa;
let first: IssuedPair;
let second: IssuedPair;
let client: IssuedPair;
const running: TestProxy[] = [];

beforeAll(async () => {
  emulator = await startTestEmulator();
  dir = mkdtempSync(join(tmpdir(), 'tm-cache-tls-'));
  ca = new TestCa(dir);
  first = ca.issue('first');
  second = ca.issue('second');
  client = ca.issue('client', 'client');
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.close()));
});
afterAll(async () => {
  await emulator?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The files of a mounted Secret: copies in a directory of their own, which the test then rotates. */
function liveFiles(pair: IssuedPair): { dir: string; cert: string; key: string } {
  const live = mkdtempSync(join(dir, 'live-'));
  const files = { dir: live, cert: join(live, 'tls.crt'), key: join(live, 'tls.key') };
  copyFileSync(pair.cert, files.cert);
  copyFileSync(pair.key, files.key);
  return files;
}

/** Writes `from` beside `to` and renames it over: readers see the old file or the new, never half of one. */
function replaceFile(from: string, to: string): void {
  copyFileSync(from, `${to}.new`);
  renameSync(`${to}.new`, to);
}

async function startTls(tls: { certFile: string; keyFile: string; clientCaFile?: string }): Promise<TestProxy> {
  const proxy = await startTestProxy(emulator.url, { server: { tls } });
  running.push(proxy);
  return proxy;
}

/** The serial number of the certificate a new TLS connection to `url` is served (checked against the CA). */
async function servedSerial(url: string): Promise<string> {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port), ca: ca.pem, servername: 'localhost' });
  try {
    await once(socket, 'secureConnect');
    return socket.getPeerCertificate().serialNumber.toUpperCase();
  } finally {
    socket.destroy();
  }
}

/** A GET over a new connection that trusts the test CA, with a client certificate when given. */
async function getOverTls(url: string, token?: string, clientPair?: IssuedPair): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  const connectOptions = { ca: ca.pem, ...(clientPair ? { cert: readPem(clientPair.cert), key: readPem(clientPair.key) } : {}) };
  const dispatcher = new Agent({ connect: connectOptions });
  try {
    const res = await request(url, { dispatcher, headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
    return { status: res.statusCode, headers: res.headers, body: await res.body.text() };
  } finally {
    await dispatcher.close();
  }
}

const readPem = (path: string): string => readFileSync(path, 'utf8');

async function metric(proxy: TestProxy, line: string): Promise<number> {
  const { body } = await getOverTls(`${proxy.managementUrl}/metrics`);
  const found = body.split('\n').find((l) => l.startsWith(`${line} `));
  return found === undefined ? NaN : Number(found.slice(line.length + 1));
}

function milestonesOf(proxy: TestProxy): { url: string; token: string } {
  const member = emulator.tokens.member(0);
  return { url: `${proxy.url}/api/v1/projects/${member.project_ids[0]}/milestones`, token: member.token };
}

describe('TLS on the proxy and management ports', () => {
  it('serves both ports over HTTPS with the configured certificate, and caches as over HTTP', async () => {
    const proxy = await startTls({ certFile: first.cert, keyFile: first.key });
    expect(proxy.url).toMatch(/^https:\/\//);
    expect(proxy.managementUrl).toMatch(/^https:\/\//);
    expect(await servedSerial(proxy.url)).toBe(first.serial);
    expect(await servedSerial(proxy.managementUrl)).toBe(first.serial);

    const { url, token } = milestonesOf(proxy);
    expect((await getOverTls(url, token)).status).toBe(200);
    const again = await getOverTls(url, token);
    expect(again.status).toBe(200);
    expect(again.headers['cache-status']).toMatch(/hit/);
    expect((await getOverTls(`${proxy.managementUrl}/healthz`)).status).toBe(200);
  });

  it('serves renewed files from the next connection on, without a restart', async () => {
    const live = liveFiles(first);
    const proxy = await startTls({ certFile: live.cert, keyFile: live.key });
    expect(await servedSerial(proxy.url)).toBe(first.serial);

    replaceFile(second.cert, live.cert);
    replaceFile(second.key, live.key);
    await until(async () => (await servedSerial(proxy.url)) === second.serial);
    expect(await servedSerial(proxy.managementUrl)).toBe(second.serial);
    const { url, token } = milestonesOf(proxy);
    expect((await getOverTls(url, token)).status).toBe(200);
    expect(await metric(proxy, 'tm_cache_tls_reloads_total{result="applied"}')).toBeGreaterThanOrEqual(1);
  });

  it('keeps the certificate in use when the new files do not make a pair, and counts the refusal', async () => {
    const live = liveFiles(first);
    const proxy = await startTls({ certFile: live.cert, keyFile: live.key });
    expect(await metric(proxy, 'tm_cache_tls_reloads_total{result="refused"}')).toBe(0);

    // The new certificate with the old key: a rotation caught half-way, or a wrong Secret.
    replaceFile(second.cert, live.cert);
    await until(async () => (await metric(proxy, 'tm_cache_tls_reloads_total{result="refused"}')) >= 1);
    expect(await servedSerial(proxy.url)).toBe(first.serial);
    // Not PEM at all.
    const refused = await metric(proxy, 'tm_cache_tls_reloads_total{result="refused"}');
    writeFileSync(join(live.dir, 'junk'), 'not a certificate\n');
    replaceFile(join(live.dir, 'junk'), live.cert);
    await until(async () => (await metric(proxy, 'tm_cache_tls_reloads_total{result="refused"}')) > refused);
    expect(await servedSerial(proxy.url)).toBe(first.serial);
    const { url, token } = milestonesOf(proxy);
    expect((await getOverTls(url, token)).status).toBe(200);
    expect(await metric(proxy, 'tm_cache_tls_reloads_total{result="applied"}')).toBe(0);
  });

  it('with a client CA, refuses a client without a certificate on the proxy port and serves one with it', async () => {
    const proxy = await startTls({ certFile: first.cert, keyFile: first.key, clientCaFile: ca.cert });
    const { url, token } = milestonesOf(proxy);
    await expect(getOverTls(url, token)).rejects.toThrow();
    // A certificate from another CA is refused too.
    const stranger = new TestCa(dir, 'other-ca').issue('stranger', 'client');
    await expect(getOverTls(url, token, stranger)).rejects.toThrow();
    expect((await getOverTls(url, token, client)).status).toBe(200);
    // The management port answers probes, which present no certificate.
    expect((await getOverTls(`${proxy.managementUrl}/healthz`)).status).toBe(200);
  });
});

describe('TLS settings', () => {
  const base = { TM_CACHE_UPSTREAM: 'https://tm.example.com' };
  const problemOf = (env: Record<string, string>, argv: string[] = []): string => {
    try {
      loadConfig({ argv, env: { ...base, ...env } });
    } catch (error) {
      if (error instanceof ConfigError) return error.message;
      throw error;
    }
    return 'loaded';
  };

  it('are set by environment variables and flags', () => {
    const fromEnv = loadConfig({
      argv: [],
      env: {
        ...base,
        TM_CACHE_TLS_CERT_FILE: first.cert,
        TM_CACHE_TLS_KEY_FILE: first.key,
        TM_CACHE_TLS_CLIENT_CA_FILE: ca.cert,
        TM_CACHE_TLS_MANAGEMENT: 'false',
      },
    });
    expect(fromEnv.server.tls).toEqual({ certFile: first.cert, keyFile: first.key, clientCaFile: ca.cert, management: false });
    const fromFlags = loadConfig({ argv: ['--tls-cert-file', first.cert, `--tls-key-file=${first.key}`, '--tls-client-ca-file', ca.cert], env: base });
    expect(fromFlags.server.tls).toEqual({ certFile: first.cert, keyFile: first.key, clientCaFile: ca.cert, management: true });
  });

  it.each([
    ['a certificate without a key', { TM_CACHE_TLS_CERT_FILE: 'CERT' }, 'server.tls.keyFile'],
    ['a key without a certificate', { TM_CACHE_TLS_KEY_FILE: 'KEY' }, 'server.tls.certFile: received ""'],
    ['a client CA without TLS', { TM_CACHE_TLS_CLIENT_CA_FILE: 'CA' }, 'server.tls.clientCaFile (from TM_CACHE_TLS_CLIENT_CA_FILE)'],
    [
      'a file that is not there',
      { TM_CACHE_TLS_CERT_FILE: '/nonexistent/tls.crt', TM_CACHE_TLS_KEY_FILE: 'KEY' },
      'server.tls.certFile (from TM_CACHE_TLS_CERT_FILE): "/nonexistent/tls.crt" cannot be read (ENOENT)',
    ],
    [
      'a certificate file that holds no certificate',
      { TM_CACHE_TLS_CERT_FILE: 'KEY', TM_CACHE_TLS_KEY_FILE: 'KEY' },
      'server.tls.certFile (from TM_CACHE_TLS_CERT_FILE): "KEY" holds no PEM certificate',
    ],
    [
      'a key file that holds no key',
      { TM_CACHE_TLS_CERT_FILE: 'CERT', TM_CACHE_TLS_KEY_FILE: 'CERT' },
      'server.tls.keyFile (from TM_CACHE_TLS_KEY_FILE): "CERT" holds no unencrypted PEM private key',
    ],
    [
      'the key of another certificate',
      { TM_CACHE_TLS_CERT_FILE: 'CERT', TM_CACHE_TLS_KEY_FILE: 'OTHER_KEY' },
      'is not the private key of the certificate in server.tls.certFile',
    ],
    [
      'a client CA file that holds no certificate',
      { TM_CACHE_TLS_CERT_FILE: 'CERT', TM_CACHE_TLS_KEY_FILE: 'KEY', TM_CACHE_TLS_CLIENT_CA_FILE: 'KEY' },
      'server.tls.clientCaFile (from TM_CACHE_TLS_CLIENT_CA_FILE): "KEY" holds no PEM certificate',
    ],
    [
      'a management setting that is not true or false',
      { TM_CACHE_TLS_MANAGEMENT: 'yes' },
      'server.tls.management (from TM_CACHE_TLS_MANAGEMENT): received "yes"; allowed: true or false',
    ],
  ])('refuse %s, naming the setting', (_, env, named) => {
    const paths: Record<string, string> = { CERT: first.cert, KEY: first.key, OTHER_KEY: second.key, CA: ca.cert };
    const resolved = Object.fromEntries(Object.entries(env).map(([k, v]) => [k, paths[v] ?? v]));
    const message = problemOf(resolved);
    expect(message).toContain(named.replace(/"(CERT|KEY)"/, (_m, p: string) => JSON.stringify(paths[p])));
    // What a file holds is never shown.
    expect(message).not.toContain('PRIVATE KEY-----\n');
  });

  it('stop `serve` with exit code 2 naming the setting', async () => {
    const spawned = spawnServe({
      TM_CACHE_UPSTREAM: emulator.url,
      TM_CACHE_PORT: '0',
      TM_CACHE_MANAGEMENT_PORT: '0',
      TM_CACHE_TLS_CERT_FILE: first.cert,
      TM_CACHE_TLS_KEY_FILE: second.key,
    });
    try {
      await until(() => spawned.child.exitCode !== null);
    } finally {
      // One that started anyway must not outlive the test.
      if (spawned.child.exitCode === null) spawned.child.kill('SIGKILL');
    }
    expect(spawned.child.exitCode).toBe(2);
    expect(spawned.output()).toContain('server.tls.keyFile (from TM_CACHE_TLS_KEY_FILE)');
  });
});

describe('TLS certificates on SIGHUP', () => {
  let serve: Serving | undefined;
  afterAll(async () => {
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGKILL');
      await once(serve.child, 'exit');
    }
  });

  it('a running `serve` reads renewed files on SIGHUP and serves them from the next connection on', async () => {
    // The configured paths are links into `real/`, as in a mounted Secret: a change inside `real/`
    // is no change of the watched directory, so only the SIGHUP can make it served.
    const mount = mkdtempSync(join(dir, 'mount-'));
    const real = join(mount, 'real');
    mkdirSync(real);
    copyFileSync(first.cert, join(real, 'tls.crt'));
    copyFileSync(first.key, join(real, 'tls.key'));
    const links = join(mount, 'links');
    mkdirSync(links);
    symlinkSync(join(real, 'tls.crt'), join(links, 'tls.crt'));
    symlinkSync(join(real, 'tls.key'), join(links, 'tls.key'));
    serve = await startServe({
      TM_CACHE_UPSTREAM: emulator.url,
      TM_CACHE_PORT: '0',
      TM_CACHE_MANAGEMENT_PORT: '0',
      TM_CACHE_TLS_CERT_FILE: join(links, 'tls.crt'),
      TM_CACHE_TLS_KEY_FILE: join(links, 'tls.key'),
    });
    expect(serve.url).toMatch(/^https:\/\//);
    expect(await servedSerial(serve.url)).toBe(first.serial);

    replaceFile(second.cert, join(real, 'tls.crt'));
    replaceFile(second.key, join(real, 'tls.key'));
    serve.child.kill('SIGHUP');
    await until(async () => (await servedSerial(serve!.url)) === second.serial);
    expect(await servedSerial(serve.management)).toBe(second.serial);
    // The log says which certificate is served now, and why.
    const reloaded = () =>
      serve!
        .output()
        .split('\n')
        .filter((l) => l.includes('"msg":"TLS certificate reloaded'))
        .map((l) => JSON.parse(l));
    await until(() => reloaded().length > 0);
    expect(reloaded()).toEqual([
      expect.objectContaining({ cause: 'SIGHUP', result: 'applied', serving: expect.objectContaining({ serialNumber: second.serial }) }),
    ]);
    expect(serve.child.exitCode).toBeNull();
  });
});
