/**
 * `ab:access-log`: what the access log costs a memory hit, at log level info, for each place
 * stdout may lead: a pipe drained by a reader (as a container runtime drains it: here `dd` on the
 * load core, which costs that core far less than this runner reading it would; a busier load
 * core serves fewer requests a second, and a server's CPU per request rises when fewer arrive
 * per wake-up, which would be counted as the log's cost), a regular
 * file (a shell's `> file`, systemd's StandardOutput=file:), /dev/null (the line built and
 * written, nobody reading). The target: each destination at most 2 µs of CPU per line.
 *
 * The machine is shared, and a memory hit of the page costs tens of µs: a 2 µs difference is
 * far inside the drift between two moments (a neighbour on the host moves a slice by ±10 µs).
 * So the two ways are measured at the same moment: each destination has two servers on the
 * server core, one at `log.access: all` and one at `off`, each loaded by its own wrk over the same
 * slice, and each round swaps which one logs (switched by a reload, SIGHUP), so that neither the
 * moment nor the server instance favours a way. The cost is the difference of the two servers' CPU
 * µs per request in the round. Two servers differ by themselves (which one the scheduler favours:
 * ±15 µs here), so each two rounds, one each way, are averaged, which cancels that; the figure
 * is the median of those averages. A control pair with both
 * servers off, measured the same way, shows what this method reads when there is nothing to find
 * (its spread is the figures' noise). CPU is read from the scheduler's nanosecond counters, not
 * 10 ms ticks.
 *
 *   npm run bench -- ab:access-log
 *
 * Knobs: --duration (measured seconds per destination, split over the rounds: 24), --rounds (12).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fetchPage, measureSlice, type Page } from './measure.js';
import { fmt, median, printTable, type Check } from './report.js';
import { startProcess } from './procs.js';
import { BENCH_BUDGET, LOAD_CPU, metricSum, startTmCache, type Emulator, type Server } from './servers.js';

const STDOUT_TO = fileURLToPath(new URL('./stdout-to.mjs', import.meta.url));
/** CPU per line the access log may add to a memory hit, whatever its destination. */
const TARGET_US_PER_LINE = 2;
const CONNECTIONS = 32;

interface DestinationFigures {
  readonly name: string;
  /** The control pair (both off): its figure is the method's noise, not a cost. */
  readonly control: boolean;
  /** CPU µs per request of the server off and of the one on, each round (in the order run). */
  readonly offUs: number[];
  readonly onUs: number[];
  /** on − off of each round; the mean of each two rounds (one each way), and their median: the figure. */
  readonly overUs: number[];
  readonly swappedUs: number[];
  readonly medianOverUs: number;
  readonly rpsOff: number;
  readonly rpsOn: number;
  readonly errors: number;
}

interface AbAccessLog {
  readonly figures: DestinationFigures[];
  readonly checks: Check[];
}

/** `log.access` of each server, as last applied. */
const accessOf = new WeakMap<Server, 'off' | 'all'>();

/** Rewrites the server's settings file with `log.access` and reloads it; resolves once applied. */
async function setAccess(server: Server, access: 'off' | 'all'): Promise<void> {
  if (accessOf.get(server) === access) return; // a reload that changes nothing is not "applied"
  const before = await metricSum(server, 'tm_cache_reloads_total', 'result="applied"');
  writeFileSync(server.configFile!, `${JSON.stringify({ ...BENCH_BUDGET, log: { access } }, null, 2)}\n`);
  process.kill(server.proc.pid, 'SIGHUP');
  for (let i = 0; i < 500; i++) {
    if ((await metricSum(server, 'tm_cache_reloads_total', 'result="applied"')) > before) return void accessOf.set(server, access);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`${server.name}: the reload to log.access ${access} was not applied in 10 s`);
}

/**
 * A hit whose answer is small (15 runs): a line's cost does not depend on the body, and the
 * bigger the rest of a hit costs, the more the machine's drift hides it (a 90 KB page's hit
 * costs ~50 µs of CPU, most of it the socket write, which moves by tens of µs under load).
 */
async function smallPage(emulator: Emulator, page: Page): Promise<Page> {
  const path = page.path.replace(/\?.*$/, '?per_page=15');
  const got = await fetchPage(emulator.url + path, page.token);
  if (got.status !== 200) throw new Error(`the emulator answered ${path} with ${got.status}`);
  return { path, token: page.token, body: got.body, contentType: String(got.headers['content-type']) };
}

export async function runAbAccessLog(emulator: Emulator, listPage: Page, options: { sliceS: number; rounds: number }): Promise<AbAccessLog> {
  const page = await smallPage(emulator, listPage);
  const dir = mkdtempSync(join(tmpdir(), 'tm-cache-access-log-'));
  const start = async (name: string, nodeArgs: string[] = []): Promise<Server> => {
    const server = await startTmCache(emulator.url, { name, logLevel: 'info', nodeArgs, config: { ...BENCH_BUDGET, log: { access: 'all' } } });
    accessOf.set(server, 'all');
    return server;
  };
  const fifos = [join(dir, 'stdout-1.fifo'), join(dir, 'stdout-2.fifo')];
  for (const fifo of fifos) execFileSync('mkfifo', [fifo]);
  const readers = fifos.map((fifo) => startProcess('pipe reader', 'dd', [`if=${fifo}`, 'of=/dev/null', 'bs=1M', 'status=none'], { cpu: LOAD_CPU }));
  // Each destination: two servers, [the one that logs on even rounds, the other]; the control never logs.
  const pairs: { name: string; servers: [Server, Server]; control: boolean }[] = [];
  const pair = async (name: string, args: (i: number) => string[], control = false) =>
    pairs.push({ name, servers: [await start(`${name} (1)`, args(0)), await start(`${name} (2)`, args(1))], control });
  const figures: DestinationFigures[] = [];
  try {
    await pair('stdout a drained pipe', (i) => [STDOUT_TO, fifos[i]!]);
    await pair('stdout a regular file', (i) => [STDOUT_TO, join(dir, `access-${i}.log`)]);
    await pair('stdout /dev/null', () => [STDOUT_TO, '/dev/null']);
    await pair('control: both off, stdout /dev/null', () => [STDOUT_TO, '/dev/null'], true);
    // Warm-up, each server both ways (the JIT sees both paths before anything is counted).
    for (const { servers } of pairs) {
      for (const access of ['all', 'off'] as const) {
        await Promise.all(servers.map((server) => setAccess(server, access)));
        await Promise.all(servers.map((server) => measureSlice(server, page, CONNECTIONS, 1)));
      }
    }
    const samples = pairs.map(() => ({ off: [] as number[], on: [] as number[], rpsOff: [] as number[], rpsOn: [] as number[], errors: 0 }));
    for (let round = 0; round < options.rounds; round++) {
      for (let i = 0; i < pairs.length; i++) {
        const at = (i + round) % pairs.length;
        const { servers, control } = pairs[at]!;
        const [on, off] = round % 2 === 0 ? servers : [servers[1], servers[0]];
        await Promise.all([setAccess(on, control ? 'off' : 'all'), setAccess(off, 'off')]);
        const [sliceOn, sliceOff] = await Promise.all([on, off].map((server) => measureSlice(server, page, CONNECTIONS, options.sliceS, {}, true)));
        const s = samples[at]!;
        s.on.push((sliceOn!.cpuS * 1e6) / sliceOn!.wrk.requests);
        s.off.push((sliceOff!.cpuS * 1e6) / sliceOff!.wrk.requests);
        s.rpsOn.push(sliceOn!.wrk.rps);
        s.rpsOff.push(sliceOff!.wrk.rps);
        for (const slice of [sliceOn!, sliceOff!]) s.errors += slice.wrk.socketErrors + slice.wrk.non2xx;
      }
    }
    pairs.forEach(({ name, control }, i) => {
      const s = samples[i]!;
      const overUs = s.on.map((us, round) => us - s.off[round]!);
      const swappedUs = overUs.filter((_, round) => round % 2 === 1).map((us, k) => (overUs[2 * k]! + us) / 2);
      figures.push({
        name,
        control,
        offUs: s.off,
        onUs: s.on,
        overUs,
        swappedUs,
        medianOverUs: median(swappedUs),
        rpsOff: median(s.rpsOff),
        rpsOn: median(s.rpsOn),
        errors: s.errors,
      });
    });
  } finally {
    for (const { servers } of pairs) for (const server of servers) await server.proc.stop();
    for (const reader of readers) await reader.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  printTable(
    `memory hit, identity clients, ${page.path}, ${CONNECTIONS} connections each, ${options.rounds} rounds of ${options.sliceS} s: two servers per destination at once on the server core, one at log.access all and one off (swapped each round), log level info`,
    [
      'destination (log.access all)',
      'req/s off',
      'req/s on',
      'CPU µs/req off',
      'µs/line over off, each two rounds (one each way)',
      'median',
      'middle half',
      'target',
      'verdict',
      'errors',
    ],
    figures.map((f) => [
      f.name,
      fmt(f.rpsOff, 0),
      fmt(f.rpsOn, 0),
      fmt(median(f.offUs), 2),
      f.swappedUs.map((us) => us.toFixed(1)).join(' '),
      fmt(f.medianOverUs, 2),
      middleHalf(f.swappedUs),
      f.control ? 'noise' : `≤ ${TARGET_US_PER_LINE}`,
      f.control ? '' : f.medianOverUs <= TARGET_US_PER_LINE ? 'PASS' : 'FAIL',
      f.errors,
    ]),
  );
  return {
    figures,
    checks: figures
      .filter((f) => !f.control)
      .map((f) => ({
        name: `ab:access-log: CPU per line over log.access off (median of ${f.swappedUs.length} swapped round pairs, two servers at once), ${f.name}`,
        value: f.medianOverUs,
        unit: 'µs',
        target: `≤ ${TARGET_US_PER_LINE}`,
        pass: f.medianOverUs <= TARGET_US_PER_LINE && f.errors === 0,
      })),
  };
}

/** The interquartile range of the rounds' figures, as `low…high` (µs): how much one round's figure moves. */
function middleHalf(xs: number[]): string {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number): number => s[Math.min(s.length - 1, Math.max(0, Math.round(q * (s.length - 1))))]!;
  return `${at(0.25).toFixed(1)}…${at(0.75).toFixed(1)}`;
}
