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
 * inside the drift between two servers, or two slices seconds apart. So the comparison is made
 * inside one process and one moment: each destination is one server, and each round measures it
 * with `log.access: off` and with `log.access: all` back to back (switched by a reload, SIGHUP;
 * which goes first alternates), the cost being the difference of the two slices' CPU µs per
 * request. The figure is the median over the rounds: a round disturbed by a neighbour moves one
 * sample, not the verdict. CPU is read from the scheduler's nanosecond counters, not 10 ms ticks.
 *
 *   npm run bench -- ab:access-log
 *
 * Knobs: --duration (measured seconds per destination and way, split over the rounds: 16),
 * --rounds (8).
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
  /** CPU µs per request, log off and on, of each round (in the order run). */
  readonly offUs: number[];
  readonly onUs: number[];
  /** on − off of each round, and their median: the figure. */
  readonly overUs: number[];
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
  const fifo = join(dir, 'stdout.fifo');
  execFileSync('mkfifo', [fifo]);
  const reader = startProcess('pipe reader', 'dd', [`if=${fifo}`, 'of=/dev/null', 'bs=1M', 'status=none'], { cpu: LOAD_CPU });
  const servers = [
    await start('stdout a drained pipe', [STDOUT_TO, fifo]),
    await start('stdout a regular file', [STDOUT_TO, join(dir, 'access.log')]),
    await start('stdout /dev/null', [STDOUT_TO, '/dev/null']),
  ];
  const figures: DestinationFigures[] = [];
  try {
    // Warm-up, each server both ways (the JIT sees both paths before anything is counted).
    for (const server of servers) {
      for (const access of ['off', 'all'] as const) {
        await setAccess(server, access);
        await measureSlice(server, page, CONNECTIONS, 1);
      }
    }
    const samples = servers.map(() => ({ off: [] as number[], on: [] as number[], rpsOff: [] as number[], rpsOn: [] as number[], errors: 0 }));
    for (let round = 0; round < options.rounds; round++) {
      for (let i = 0; i < servers.length; i++) {
        const at = (i + round) % servers.length;
        const server = servers[at]!;
        const s = samples[at]!;
        for (const access of round % 2 === 0 ? (['off', 'all'] as const) : (['all', 'off'] as const)) {
          await setAccess(server, access);
          const slice = await measureSlice(server, page, CONNECTIONS, options.sliceS, {}, true);
          const us = (slice.cpuS * 1e6) / slice.wrk.requests;
          (access === 'off' ? s.off : s.on).push(us);
          (access === 'off' ? s.rpsOff : s.rpsOn).push(slice.wrk.rps);
          s.errors += slice.wrk.socketErrors + slice.wrk.non2xx;
        }
      }
    }
    servers.forEach((server, i) => {
      const s = samples[i]!;
      const overUs = s.on.map((us, round) => us - s.off[round]!);
      figures.push({
        name: server.name,
        offUs: s.off,
        onUs: s.on,
        overUs,
        medianOverUs: median(overUs),
        rpsOff: median(s.rpsOff),
        rpsOn: median(s.rpsOn),
        errors: s.errors,
      });
    });
  } finally {
    for (const server of servers) await server.proc.stop();
    await reader.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  printTable(
    `memory hit, identity clients, ${page.path}, ${CONNECTIONS} connections, ${options.rounds} rounds of ${options.sliceS} s off + ${options.sliceS} s on per destination, log level info`,
    ['log.access all, destination', 'req/s off', 'req/s on', 'CPU µs/req off', 'µs/line over off, each round', 'median', 'target', 'verdict', 'errors'],
    figures.map((f) => [
      f.name,
      fmt(f.rpsOff, 0),
      fmt(f.rpsOn, 0),
      fmt(median(f.offUs), 2),
      f.overUs.map((us) => us.toFixed(1)).join(' '),
      fmt(f.medianOverUs, 2),
      `≤ ${TARGET_US_PER_LINE}`,
      f.medianOverUs <= TARGET_US_PER_LINE ? 'PASS' : 'FAIL',
      f.errors,
    ]),
  );
  return {
    figures,
    checks: figures.map((f) => ({
      name: `ab:access-log: CPU per line over log.access off (median of ${options.rounds} paired rounds), ${f.name}`,
      value: f.medianOverUs,
      unit: 'µs',
      target: `≤ ${TARGET_US_PER_LINE}`,
      pass: f.medianOverUs <= TARGET_US_PER_LINE && f.errors === 0,
    })),
  };
}
