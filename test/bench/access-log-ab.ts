/**
 * `ab:access-log`: what the access log costs a memory hit, one build side by side with itself
 * (rotating rounds, as ab:hit), at log level info: log.access off; on, with stdout a pipe drained
 * by this runner (as a container runtime drains it); on, with stdout on /dev/null (the line built
 * and written, nobody reading).
 *
 *   npm run bench -- ab:access-log
 *
 * Knobs: --duration (per server, 10), --rounds (4).
 */
import { fileURLToPath } from 'node:url';
import { compareHits, type HitFigures, type Page } from './measure.js';
import { fmt, printTable, type Check } from './report.js';
import { startTmCache, type Emulator } from './servers.js';

const DEVNULL = fileURLToPath(new URL('./devnull-stdout.mjs', import.meta.url));

interface AbAccessLog {
  readonly figures: HitFigures[];
  readonly checks: Check[];
}

export async function runAbAccessLog(emulator: Emulator, page: Page, options: { durationS: number; rounds: number }): Promise<AbAccessLog> {
  const info = { logLevel: 'info' };
  const servers = [
    await startTmCache(emulator.url, { ...info, name: 'log.access off', env: { TM_CACHE_LOG_ACCESS: 'off' } }),
    await startTmCache(emulator.url, { ...info, name: 'all, stdout a drained pipe', env: { TM_CACHE_LOG_ACCESS: 'all' } }),
    await startTmCache(emulator.url, { ...info, name: 'all, stdout /dev/null', env: { TM_CACHE_LOG_ACCESS: 'all' }, nodeArgs: [DEVNULL] }),
  ];
  const figures = await compareHits(servers, page, { connections: 32, durationS: options.durationS, warmupS: 2, rounds: options.rounds, headers: {} });
  const off = figures[0]!;
  printTable(`memory hit, identity clients, ${page.path}, 32 connections, ${options.rounds} rotating rounds, log level info`, ['server', 'req/s', 'CPU µs/req', 'µs/req over off', 'errors'],
    figures.map((f) => [f.name, fmt(f.rps, 0), fmt(f.cpuUsPerReq, 2), f === off ? '' : fmt(f.cpuUsPerReq - off.cpuUsPerReq, 2), f.errors]));
  return {
    figures,
    checks: figures.slice(1).map((f) => ({ name: `ab:access-log: CPU over log.access off, ${f.name}`, value: f.cpuUsPerReq - off.cpuUsPerReq, unit: 'µs', target: 'info', pass: undefined })),
  };
}
