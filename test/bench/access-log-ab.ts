/**
 * What the access log costs a memory hit, one build side by side with itself (rotating rounds,
 * as ab.ts): log.access off; on, with stdout a pipe drained by this runner (as a container
 * runtime drains it); on, with stdout on /dev/null (the line built and written, nobody reading).
 *
 *   npm run build && npx tsx test/bench/access-log-ab.ts
 *
 * Options: BENCH_DURATION_S (per server and round, default 10), BENCH_ROUNDS (default 4).
 */
import { fileURLToPath } from 'node:url';
import { choosePage, compareHits } from './measure.js';
import { installCleanup, pinSelf, stopAll } from './procs.js';
import { envNumber, fmt, printTable } from './report.js';
import { LOAD_CPU, startEmulator, startTmCache } from './servers.js';

const DEVNULL = fileURLToPath(new URL('./devnull-stdout.mjs', import.meta.url));

installCleanup();
pinSelf(LOAD_CPU);
process.env['BENCH_TM_LOG_LEVEL'] = 'info';
const emulator = await startEmulator();
try {
  const page = await choosePage(emulator);
  const servers = [
    await startTmCache(emulator.url, { name: 'log.access off', env: { TM_CACHE_LOG_ACCESS: 'off' } }),
    await startTmCache(emulator.url, { name: 'all, stdout a drained pipe', env: { TM_CACHE_LOG_ACCESS: 'all' } }),
    await startTmCache(emulator.url, { name: 'all, stdout /dev/null', env: { TM_CACHE_LOG_ACCESS: 'all' }, nodeArgs: [DEVNULL] }),
  ];
  const rounds = envNumber('BENCH_ROUNDS', 4);
  const figures = await compareHits(servers, page, { connections: 32, durationS: envNumber('BENCH_DURATION_S', 10), warmupS: 2, rounds, headers: {} });
  const off = figures[0]!;
  printTable(`memory hit, identity clients, ${page.path}, 32 connections, ${rounds} rotating rounds, log level info`, ['server', 'req/s', 'CPU µs/req', 'µs/req over off', 'errors'],
    figures.map((f) => [f.name, fmt(f.rps, 0), fmt(f.cpuUsPerReq, 2), f === off ? '' : fmt(f.cpuUsPerReq - off.cpuUsPerReq, 2), f.errors]));
} finally {
  await stopAll();
}
