/**
 * A private redis-server per test file, on a free loopback port: never the machine's shared
 * Redis (6379), so tests can kill, restart and fill it freely. Nothing is persisted
 * (`--save "" --appendonly no`), and every server started here is killed when the test
 * process exits, however it exits.
 */
import type { Redis } from 'ioredis';
import { findFreePort } from './ports.js';
import { until } from './wait.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { createConnection } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface RedisHandle {
  readonly url: string;
  readonly port: number;
  /** Graceful stop (SIGTERM), waits for the process to exit. */
  stop(): Promise<void>;
  /** Abrupt death (SIGKILL), as in a crash or an OOM kill; waits for the process to exit. */
  kill(): Promise<void>;
  /** Starts a server again on the same port (after stop/kill; stops a running one first). */
  restart(): Promise<void>;
}

const READY_TIMEOUT_MS = 15_000;
const running = new Set<ChildProcess>();
const logs = new WeakMap<ChildProcess, string[]>();

function killAll(): void {
  for (const child of running) child.kill('SIGKILL');
}

process.once('exit', killAll);
// A signal ends the process without 'exit': clean up, then let the signal do what it would
// have done (re-raised only if nobody else handles it, so we change no one's behaviour).
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    killAll();
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  });
}

export { findFreePort };

/** One PING over a raw socket; true on `+PONG`. */
function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    // A server that wants AUTH answers -NOAUTH: it is up all the same.
    socket.once('data', (data) => done(/^(\+PONG|-NOAUTH)/.test(data.toString())));
  });
}

/**
 * One redis-server on `port` (plain TCP, which readiness pings), with `extra` arguments: a
 * config file first for a sentinel (`[file, '--sentinel']`), cluster or TLS settings after.
 */
export function spawnServer(port: number, extra: readonly string[] = [], cwd?: string): ChildProcess {
  const first = extra[0]?.endsWith('.conf') ? [extra[0]] : [];
  const rest = first.length === 1 ? extra.slice(1) : extra;
  const args = [...first, '--port', String(port), '--save', '', '--appendonly', 'no', '--bind', '127.0.0.1', '--loglevel', 'warning', ...rest];
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'], ...(cwd ? { cwd } : {}) });
  // Keep the tail of its log (redis-server logs to stdout) for the error if it fails to start.
  const log: string[] = [];
  const keep = (chunk: Buffer): void => {
    log.push(chunk.toString());
    if (log.length > 20) log.shift();
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  logs.set(child, log);
  running.add(child);
  child.once('exit', () => running.delete(child));
  return child;
}

export async function waitUntilReady(child: ChildProcess, port: number): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const log = (logs.get(child) ?? []).join('').slice(-2000);
      throw new Error(`redis-server on port ${port} exited (${child.exitCode ?? child.signalCode}): ${log}`);
    }
    if (await ping(port)) return;
    await sleep(25);
  }
  child.kill('SIGKILL');
  throw new Error(`redis-server on port ${port} did not answer PING within ${READY_TIMEOUT_MS} ms`);
}

export async function terminate(child: ChildProcess | undefined, signal: NodeJS.Signals): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  await exited;
}

export async function startRedis(): Promise<RedisHandle> {
  const port = await findFreePort();
  let child: ChildProcess | undefined = spawnServer(port);
  await waitUntilReady(child, port);
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop: async () => terminate(child, 'SIGTERM'),
    kill: async () => terminate(child, 'SIGKILL'),
    restart: async () => {
      await terminate(child, 'SIGTERM');
      child = spawnServer(port);
      await waitUntilReady(child, port);
    },
  };
}

/** Waits until the fleet budget's bucket under `keyPrefix` holds a pause: a replica reports it to Redis after `onRateLimited` returns. */
export async function pauseStored(client: Redis, keyPrefix: string): Promise<void> {
  await until(async () => Number(await client.hget(`${keyPrefix}budget:fleet`, 'pauseUntil')) > 0);
}
