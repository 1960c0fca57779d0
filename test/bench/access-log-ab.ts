/**
 * `ab:access-log`: what the access log costs a memory hit, one build side by side with itself
 * (rotating rounds, as ab:hit), at log level info: log.access off; on, with stdout a pipe drained
 * by this runner (as a container runtime drains it); on, with stdout a regular file (a shell's
 * `> file`, systemd's StandardOutput=file:); on, with stdout on /dev/null (the line built and
 * written, nobody reading). The target: each destination at most 2 µs of CPU per line over off.
 *
 *   npm run bench -- ab:access-log
 *
 * Knobs: --duration (per server, 10), --rounds (4).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compareHits, type HitFigures, type Page } from './measure.js';
import { fmt, printTable, type Check } from './report.js';
import { startTmCache, type Emulator } from './servers.js';

const STDOUT_TO = fileURLToPath(new URL('./stdout-to.mjs', import.meta.url));
/** CPU per line the access log may add to a memory hit, whatever its destination. */
const TARGET_US_PER_LINE = 2;

interface AbAccessLog {
  readonly figures: HitFigures[];
  readonly checks: Check[];
}

export async function runAbAccessLog(emulator: Emulator, page: Page, options: { durationS: number; rounds: number }): Promise<AbAccessLog> {
  const info = { logLevel: 'info' };
  const dir = mkdtempSync(join(tmpdir(), 'tm-cache-access-log-'));
  const on = { ...info, env: { TM_CACHE_LOG_ACCESS: 'all' } };
  const servers = [
    await startTmCache(emulator.url, { ...info, name: 'log.access off', env: { TM_CACHE_LOG_ACCESS: 'off' } }),
    await startTmCache(emulator.url, { ...on, name: 'all, stdout a drained pipe' }),
    await startTmCache(emulator.url, { ...on, name: 'all, stdout a regular file', nodeArgs: [STDOUT_TO, join(dir, 'access.log')] }),
    await startTmCache(emulator.url, { ...on, name: 'all, stdout /dev/null', nodeArgs: [STDOUT_TO, '/dev/null'] }),
  ];
  let figures: HitFigures[];
  try {
    figures = await compareHits(servers, page, { connections: 32, durationS: options.durationS, warmupS: 2, rounds: options.rounds, headers: {} });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const off = figures[0]!;
  printTable(
    `memory hit, identity clients, ${page.path}, 32 connections, ${options.rounds} rotating rounds, log level info`,
    ['server', 'req/s', 'CPU µs/req', 'µs/req over off', 'errors'],
    figures.map((f) => [f.name, fmt(f.rps, 0), fmt(f.cpuUsPerReq, 2), f === off ? '' : fmt(f.cpuUsPerReq - off.cpuUsPerReq, 2), f.errors]),
  );
  return {
    figures,
    checks: figures.slice(1).map((f) => {
      const overUs = f.cpuUsPerReq - off.cpuUsPerReq;
      return {
        name: `ab:access-log: CPU per line over log.access off, ${f.name}`,
        value: overUs,
        unit: 'µs',
        target: `≤ ${TARGET_US_PER_LINE}`,
        pass: overUs <= TARGET_US_PER_LINE,
      };
    }),
  };
}
