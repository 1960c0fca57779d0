/**
 * wrk as the load generator: one thread, pinned to the load core, bounded in time (wrk stops by
 * itself after `durationS`; we kill it anyway if it overruns), and its report parsed.
 */
import { runCommand } from './procs.js';

export interface WrkOptions {
  readonly url: string;
  readonly connections: number;
  readonly durationS: number;
  readonly headers?: Readonly<Record<string, string>>;
  /** Core for wrk; default 0 (the load core). */
  readonly cpu?: number;
  /** A Lua script (path) for wrk's `-s`. */
  readonly script?: string;
}

export interface WrkResult {
  readonly requests: number;
  readonly durationS: number;
  readonly rps: number;
  readonly latencyMs: { readonly avg: number; readonly p50: number; readonly p75: number; readonly p90: number; readonly p99: number };
  readonly socketErrors: number;
  readonly non2xx: number;
  readonly bytesRead: number;
}

export async function runWrk(options: WrkOptions): Promise<WrkResult> {
  const args = ['-t1', `-c${options.connections}`, `-d${options.durationS}s`, '--latency', '--timeout', '5s'];
  for (const [name, value] of Object.entries(options.headers ?? {})) args.push('-H', `${name}: ${value}`);
  if (options.script) args.push('-s', options.script);
  args.push(options.url);
  const result = await runCommand('wrk', 'wrk', args, { cpu: options.cpu ?? 0, timeoutMs: (options.durationS + 15) * 1_000 });
  if (result.timedOut) throw new Error(`wrk overran ${options.durationS}s and was killed`);
  if (result.code !== 0) throw new Error(`wrk failed (${result.code}): ${result.stderr || result.stdout}`);
  return parseWrk(result.stdout);
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1_000, m: 60_000 };
const UNIT_BYTES: Record<string, number> = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3, TB: 1024 ** 4 };

function durationMs(text: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(text.trim());
  if (!m) throw new Error(`wrk: cannot read duration "${text}"`);
  return Number(m[1]) * UNIT_MS[m[2]!]!;
}

function parseWrk(out: string): WrkResult {
  const need = (re: RegExp, what: string): RegExpExecArray => {
    const m = re.exec(out);
    if (!m) throw new Error(`wrk: no ${what} in its output:\n${out}`);
    return m;
  };
  const total = need(/(\d+) requests in ([\d.]+)(us|ms|s|m), ([\d.]+)(B|KB|MB|GB|TB) read/, 'request count');
  const pct = (p: number): number => durationMs(need(new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm'), `p${p}`)[1]!);
  const avg = durationMs(need(/^\s+Latency\s+(\S+)/m, 'average latency')[1]!);
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  return {
    requests: Number(total[1]),
    durationS: durationMs(`${total[2]}${total[3]}`) / 1_000,
    rps: Number(need(/Requests\/sec:\s+([\d.]+)/, 'Requests/sec')[1]),
    latencyMs: { avg, p50: pct(50), p75: pct(75), p90: pct(90), p99: pct(99) },
    socketErrors: errors ? errors.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0,
    non2xx: non2xx ? Number(non2xx[1]) : 0,
    bytesRead: Number(total[4]) * UNIT_BYTES[total[5]!]!,
  };
}
