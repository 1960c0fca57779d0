/**
 * The container image's HEALTHCHECK, run as the image runs it: the runtime stage of the
 * Dockerfile is read here (its ENV, WORKDIR, ENTRYPOINT + CMD and the HEALTHCHECK's own command
 * line and timeout), `serve` is started with its ENTRYPOINT and CMD from the repository root (the
 * image's /app: dist/ and config/), and the HEALTHCHECK's exact command is run beside it with the
 * container's environment. Healthy: exit 0; the server gone: exit 1. So a HEALTHCHECK that asks
 * plain HTTP of a TLS port, or the default port of a moved one, fails here. (`npm test` builds dist/.)
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findFreePort } from './helpers/ports.js';
import { TestCa, type IssuedPair } from './helpers/pki.js';
import { CLI, serving, type Serving } from './helpers/serve.js';

const ROOT = new URL('..', import.meta.url).pathname;
const DOCKERFILE = join(ROOT, 'Dockerfile');

interface RuntimeStage {
  readonly env: Readonly<Record<string, string>>;
  readonly workdir: string;
  /** ENTRYPOINT followed by CMD, as `docker run image` starts the container. */
  readonly start: readonly string[];
  readonly healthcheck: { readonly command: readonly string[]; readonly timeoutMs: number };
}

/** The instructions of the Dockerfile's last stage, continuation lines joined and comments dropped. */
function runtimeStage(text: string): RuntimeStage {
  const lines = text
    .replace(/\\\r?\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const stage = lines.slice(lines.findLastIndex((l) => /^FROM\s/i.test(l)));
  const instruction = (name: string) => stage.filter((l) => l.toUpperCase().startsWith(`${name} `)).map((l) => l.slice(name.length).trim());
  const execForm = (args: string): string[] => (args.startsWith('[') ? (JSON.parse(args) as string[]) : ['/bin/sh', '-c', args]);
  const env = Object.fromEntries(
    instruction('ENV').flatMap((args) => [...args.matchAll(/(\w+)=("[^"]*"|\S+)/g)].map((m) => [m[1]!, m[2]!.replace(/^"|"$/g, '')])),
  );
  const healthcheck = instruction('HEALTHCHECK').at(-1);
  if (healthcheck === undefined) throw new Error('the Dockerfile has no HEALTHCHECK');
  const [, options = '', command = ''] = /^(.*?)\bCMD\s+(.*)$/.exec(healthcheck) ?? [];
  const timeout = /--timeout=(\d+)s/.exec(options)?.[1] ?? '30';
  return {
    env,
    workdir: instruction('WORKDIR').at(-1) ?? '/',
    start: [...execForm(instruction('ENTRYPOINT').at(-1) ?? '[]'), ...execForm(instruction('CMD').at(-1) ?? '[]')],
    healthcheck: { command: execForm(command), timeoutMs: Number(timeout) * 1000 },
  };
}

const image = runtimeStage(readFileSync(DOCKERFILE, 'utf8'));

/** A command line of the image, run here: `node` is this Node, paths under WORKDIR are under the repository root. */
function local(command: readonly string[]): { file: string; args: string[] } {
  const [file, ...args] = command.map((part) =>
    part === 'node' ? process.execPath : part.startsWith(`${image.workdir}/`) ? join(ROOT, part.slice(image.workdir.length + 1)) : part,
  );
  return { file: file!, args };
}

/** The container's environment: the image's ENV under what `docker run -e` adds. */
const containerEnv = (env: Record<string, string>): Record<string, string> => ({ PATH: process.env['PATH'] ?? '', ...image.env, ...env });

async function startContainer(env: Record<string, string>): Promise<Serving> {
  const { file, args } = local(image.start);
  const child = spawn(file, args, { cwd: ROOT, env: containerEnv(env) });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  return serving({ child, output: () => output });
}

async function stop(serve: Serving): Promise<void> {
  const exited = once(serve.child, 'exit');
  serve.child.kill('SIGTERM');
  await exited;
}

/** Runs the HEALTHCHECK's command; killed at its --timeout, which the runtime counts as a failure. */
async function healthcheck(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  const { file, args } = local(image.healthcheck.command);
  const child = spawn(file, args, { cwd: ROOT, env: containerEnv(env) });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const timer = setTimeout(() => child.kill('SIGKILL'), image.healthcheck.timeoutMs);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  return { code, stderr };
}

let dir: string;
let pair: IssuedPair;
let other: IssuedPair;

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does)');
  dir = mkdtempSync(join(tmpdir(), 'tm-cache-healthcheck-'));
  const ca = new TestCa(dir);
  pair = ca.issue('server');
  other = ca.issue('other');
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("the image's HEALTHCHECK", () => {
  const upstream = { TM_CACHE_UPSTREAM: 'https://tm.example.com', TM_CACHE_PORT: '0' };

  it('reads the runtime stage of the Dockerfile: a command, a timeout, a WORKDIR holding dist/', () => {
    expect(image.healthcheck.command.length).toBeGreaterThan(0);
    expect(image.healthcheck.timeoutMs).toBeGreaterThan(0);
    expect(image.start).toContain('serve');
  });

  it('passes over HTTPS with server.tls on a management port set by environment, and fails once the server is gone', async () => {
    const env = { ...upstream, TM_CACHE_MANAGEMENT_PORT: String(await findFreePort()), TM_CACHE_TLS_CERT_FILE: pair.cert, TM_CACHE_TLS_KEY_FILE: pair.key };
    const serve = await startContainer(env);
    try {
      expect(serve.management).toMatch(/^https:/);
      const healthy = await healthcheck(env);
      expect(healthy, healthy.stderr).toEqual({ code: 0, stderr: '' });
    } finally {
      await stop(serve);
    }
    expect((await healthcheck(env)).code).toBe(1);
  });

  it('passes over plain HTTP with server.tls on but server.tls.management off', async () => {
    const env = {
      ...upstream,
      TM_CACHE_MANAGEMENT_PORT: String(await findFreePort()),
      TM_CACHE_TLS_CERT_FILE: pair.cert,
      TM_CACHE_TLS_KEY_FILE: pair.key,
      TM_CACHE_TLS_MANAGEMENT: 'false',
    };
    const serve = await startContainer(env);
    try {
      expect(serve.management).toMatch(/^http:/);
      expect((await healthcheck(env)).code).toBe(0);
    } finally {
      await stop(serve);
    }
  });

  it('passes with TLS off on a management port set in the config file (TM_CACHE_CONFIG), and fails once the server is gone', async () => {
    const port = await findFreePort();
    const file = join(dir, 'config.yaml');
    writeFileSync(file, `server:\n  managementPort: ${port}\n`);
    const env = { ...upstream, TM_CACHE_CONFIG: file };
    const serve = await startContainer(env);
    try {
      expect(serve.management).toMatch(new RegExp(`^http://[^/]+:${port}$`));
      const healthy = await healthcheck(env);
      expect(healthy, healthy.stderr).toEqual({ code: 0, stderr: '' });
    } finally {
      await stop(serve);
    }
    const down = await healthcheck(env);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('ECONNREFUSED');
  });

  it('fails when the port answers 200 with a certificate other than server.tls.certFile, even one of the same CA', async () => {
    const port = await findFreePort();
    const impostor = createServer({ cert: readFileSync(other.cert), key: readFileSync(other.key) }, (_req, res) => res.end('{"status":"ok"}'));
    await new Promise<void>((resolve) => impostor.listen(port, '127.0.0.1', resolve));
    try {
      const result = await healthcheck({
        ...upstream,
        TM_CACHE_MANAGEMENT_PORT: String(port),
        TM_CACHE_TLS_CERT_FILE: pair.cert,
        TM_CACHE_TLS_KEY_FILE: pair.key,
      });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain("a certificate other than server.tls.certFile's");
    } finally {
      await new Promise((resolve) => impostor.close(resolve));
    }
  });

  it('fails with exit code 1, not 2, when the settings do not load', async () => {
    const result = await healthcheck({ TM_CACHE_MANAGEMENT_PORT: 'ninety' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('TM_CACHE_MANAGEMENT_PORT');
  });
});
