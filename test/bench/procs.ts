/**
 * Child processes of the bench: each in its own process group (so a server that forks, like
 * varnishd, dies whole), optionally pinned to one core with `taskset`, remembered until it exits,
 * and killed with its group when the bench exits, however it exits.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface Proc {
  readonly name: string;
  /** Pid of the process, which is also its process group id. */
  readonly pid: number;
  readonly child: ChildProcess;
  /** The last lines it printed (stdout and stderr), for error messages. */
  tail(): string;
  hasExited(): boolean;
  /** SIGTERM to the group, SIGKILL after `graceMs`; resolves once the leader has exited. */
  stop(graceMs?: number): Promise<void>;
}

export interface StartOptions {
  /** Core to pin to with `taskset -c`; undefined: not pinned. */
  readonly cpu?: number;
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
}

const live = new Set<Proc>();
let tasksetPath: string | undefined | null = null;

/** Path of `name` in PATH or the sbin directories (Debian puts varnishd and nginx there). */
export function findBinary(name: string): string | undefined {
  const dirs = [...(process.env['PATH'] ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin', '/sbin'];
  for (const dir of dirs) {
    if (dir && existsSync(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

function taskset(): string | undefined {
  if (tasksetPath === null) tasksetPath = findBinary('taskset');
  return tasksetPath;
}

/** Whether servers and load are really pinned (taskset present). */
export function canPin(): boolean {
  return taskset() !== undefined;
}

/** Pins every thread of this process (the bench runner itself) to `cpu`. */
export function pinSelf(cpu: number): boolean {
  const path = taskset();
  if (!path) return false;
  return spawnSync(path, ['-a', '-cp', String(cpu), String(process.pid)], { stdio: 'ignore' }).status === 0;
}

export function startProcess(name: string, command: string, args: readonly string[], options: StartOptions = {}): Proc {
  const pin = options.cpu !== undefined ? taskset() : undefined;
  const [cmd, argv] = pin ? [pin, ['-c', String(options.cpu), command, ...args]] : [command, [...args]];
  const child = spawn(cmd, argv, {
    detached: true, // its own process group: kill(-pid) reaches whatever it forks
    stdio: ['ignore', 'pipe', 'pipe'],
    env: options.env ?? process.env,
    cwd: options.cwd,
  });
  const lines: string[] = [];
  const keep = (chunk: Buffer): void => {
    lines.push(chunk.toString());
    if (lines.length > 40) lines.shift();
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  let exited = false;
  const exit = new Promise<void>((resolve) => {
    child.once('exit', () => {
      exited = true;
      resolve();
    });
    child.once('error', (err) => {
      lines.push(`spawn error: ${err.message}`);
      exited = true;
      resolve();
    });
  });
  const proc: Proc = {
    name,
    pid: child.pid ?? -1,
    child,
    tail: () => lines.join('').slice(-3000),
    hasExited: () => exited,
    stop: async (graceMs = 3_000) => {
      signalGroup(proc, 'SIGTERM');
      const killed = await Promise.race([exit.then(() => true), sleep(graceMs).then(() => false)]);
      // The leader may be gone while others in its group still run: SIGKILL the group anyway.
      signalGroup(proc, 'SIGKILL');
      if (!killed) await Promise.race([exit, sleep(1_000)]);
      live.delete(proc);
    },
  };
  // Stays in `live` until stop(), even after the leader exits: its group may outlive it.
  live.add(proc);
  return proc;
}

function signalGroup(proc: Proc, signal: NodeJS.Signals): void {
  if (proc.pid <= 0) return;
  try {
    process.kill(-proc.pid, signal);
  } catch {
    // ESRCH: the group is already gone
  }
}

/** Every process still known, SIGKILLed with its group; synchronous, so it works on 'exit'. */
function killAllSync(): void {
  for (const proc of live) signalGroup(proc, 'SIGKILL');
  live.clear();
}

/** Stops every process still known except `keep` (e.g. the emulator shared by all scenarios). */
export async function stopAll(keep: readonly Proc[] = []): Promise<void> {
  await Promise.all([...live].filter((p) => !keep.includes(p)).map((p) => p.stop(2_000)));
}

const CPU_LINE = /^cpu(\d+) (.*)$/gm;

/** Per-core busy and total jiffies from /proc/stat (busy = everything but idle and iowait). */
export function coreTimes(): Map<number, { busy: number; total: number }> {
  const out = new Map<number, { busy: number; total: number }>();
  let text: string;
  try {
    text = readFileSync('/proc/stat', 'utf8');
  } catch {
    return out;
  }
  for (const m of text.matchAll(CPU_LINE)) {
    const f = m[2]!.trim().split(/\s+/).map(Number);
    const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
    out.set(Number(m[1]), { busy: total - f[3]! - f[4]!, total });
  }
  return out;
}

/** Busy % of each core between two `coreTimes()` readings. */
export function coreBusyPct(before: ReturnType<typeof coreTimes>, after: ReturnType<typeof coreTimes>): Record<number, number> {
  const out: Record<number, number> = {};
  for (const [core, a] of after) {
    const b = before.get(core);
    if (b && a.total > b.total) out[core] = (100 * (a.busy - b.busy)) / (a.total - b.total);
  }
  return out;
}

let installed = false;
/** Kills every child on exit and on SIGINT/SIGTERM/SIGHUP (then exits with 128 + signal). */
export function installCleanup(): void {
  if (installed) return;
  installed = true;
  process.once('exit', killAllSync);
  const codes: Record<string, number> = { SIGINT: 2, SIGTERM: 15, SIGHUP: 1 };
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      killAllSync();
      process.exit(128 + codes[signal]!);
    });
  }
}

/** A port that was free a moment ago (bind port 0, read it, close). */
export { findFreePort as freePort } from '../helpers/ports.js';

/** Polls `url` until it answers `expectStatus` (default any < 500), the process dies, or the deadline. */
export async function waitForHttp(url: string, proc: Proc, options: { timeoutMs?: number; headers?: Record<string, string> } = {}): Promise<void> {
  const deadline = Date.now() + (options.timeoutMs ?? 20_000);
  let last = '';
  while (Date.now() < deadline) {
    if (proc.hasExited()) throw new Error(`${proc.name} exited before answering ${url}:\n${proc.tail()}`);
    try {
      const res = await fetch(url, { headers: options.headers ?? {}, signal: AbortSignal.timeout(2_000) });
      await res.arrayBuffer();
      if (res.status < 500) return;
      last = `status ${res.status}`;
    } catch (err) {
      last = err instanceof Error ? err.message : String(err);
    }
    await sleep(50);
  }
  throw new Error(`${proc.name} did not answer ${url} in time (${last}):\n${proc.tail()}`);
}

const CLOCK_TICKS_PER_S = 100; // USER_HZ; 100 on every Linux we target

/** Pids of the live processes of the group `pgid` (from /proc). */
function groupPids(pgid: number): string[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  return entries.filter((entry) => {
    if (!/^\d+$/.test(entry)) return false;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) === pgid;
    } catch {
      return false;
    }
  });
}

/**
 * CPU seconds used so far by every thread of the group `pgid`, to the nanosecond: the sum of
 * each thread's /proc/<pid>/task/<tid>/schedstat (its first field: ns on a CPU). groupCpuSeconds
 * counts in 10 ms ticks, too coarse for a few hundred misses of ~0.2 ms. Threads that exited
 * are not counted (the servers' threads live as long as they do). NaN without schedstat.
 */
export function groupCpuSecondsPrecise(pgid: number): number {
  let ns = 0;
  let read = 0;
  for (const pid of groupPids(pgid)) {
    let tasks: string[];
    try {
      tasks = readdirSync(`/proc/${pid}/task`);
    } catch {
      continue;
    }
    for (const tid of tasks) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
        read++;
      } catch {
        // the thread exited meanwhile
      }
    }
  }
  return read > 0 ? ns / 1e9 : NaN;
}

/** CPU seconds (user + system, in 10 ms ticks) used so far by every live process of the group `pgid`. */
export function groupCpuSeconds(pgid: number): number {
  let ticks = 0;
  for (const pid of groupPids(pgid)) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // Fields after the command name (which may hold spaces) start after the last ')'.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]); // fields 14, 15: utime, stime
    } catch {
      // exited meanwhile
    }
  }
  return ticks / CLOCK_TICKS_PER_S;
}

export interface RunResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly timedOut: boolean;
}

/** Runs a command to completion (pinned if asked), killed with its group after `timeoutMs`. */
export async function runCommand(name: string, command: string, args: readonly string[], options: StartOptions & { timeoutMs: number }): Promise<RunResult> {
  const pin = options.cpu !== undefined ? taskset() : undefined;
  const [cmd, argv] = pin ? [pin, ['-c', String(options.cpu), command, ...args]] : [command, [...args]];
  const child = spawn(cmd, argv, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: options.env ?? process.env, cwd: options.cwd });
  const proc: Proc = {
    name,
    pid: child.pid ?? -1,
    child,
    tail: () => '',
    hasExited: () => child.exitCode !== null || child.signalCode !== null,
    stop: async () => signalGroup(proc, 'SIGKILL'),
  };
  live.add(proc);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    signalGroup(proc, 'SIGKILL');
  }, options.timeoutMs);
  try {
    const code = await new Promise<number | null>((resolve) => {
      child.once('close', (c) => resolve(c));
      child.once('error', (err) => {
        stderr += `spawn error: ${err.message}`;
        resolve(null);
      });
    });
    return { code, stdout, stderr, timedOut };
  } finally {
    clearTimeout(timer);
    signalGroup(proc, 'SIGKILL');
    live.delete(proc);
  }
}
