/**
 * Scenario 5: the emulator's own cost, so the other figures can be read against it: the
 * micro-bench of `emulator.ts` (generation time of each scale, a page's CPU in fastify and in the
 * handler, in this process), then the emulator's CPU per 100-item page with users expanded at
 * medium scale over HTTP (wrk, one connection, a unique `created_before` per request so nothing
 * can be reused).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runEmulatorMicro, type EmulatorMicro } from './emulator.js';
import type { Page } from './measure.js';
import { groupCpuSeconds } from './procs.js';
import { fmt, printTable, ratioCheck, type Check } from './report.js';
import { LOAD_CPU, type Emulator } from './servers.js';
import { runWrk } from './wrk.js';

export interface EmulatorScenario {
  readonly rps: number;
  readonly cpuMsPerPage: number;
  readonly p50Ms: number;
  readonly requests: number;
  readonly micro: Omit<EmulatorMicro, 'checks'>;
  readonly checks: Check[];
}

/** wrk Lua: the page with created_before 2032-01-01T00:00:00.000Z plus one ms per request. */
function uniqueTimestampScript(path: string): string {
  return `local i = 0
request = function()
  i = i + 1
  local ms = i % 1000
  local s = math.floor(i / 1000) % 60
  local m = math.floor(i / 60000) % 60
  local h = math.floor(i / 3600000) % 24
  return wrk.format(nil, string.format("${path}&created_before=2032-01-01T%02d:%02d:%02d.%03dZ", h, m, s, ms))
end
`;
}

/** `samples`: timed requests of each kind in the micro-bench. */
export async function runEmulatorScenario(dir: string, emulator: Emulator, page: Page, durationS: number, samples: number): Promise<EmulatorScenario> {
  console.log('\n== 5a. Emulator micro-bench (emulator.ts, in this process)');
  const { checks: microChecks, ...micro } = await runEmulatorMicro(samples);
  const script = join(dir, 'unique-created-before.lua');
  if (!page.path.includes('?')) throw new Error('the page path is expected to carry a query');
  writeFileSync(script, uniqueTimestampScript(page.path));
  const cpuBefore = groupCpuSeconds(emulator.proc.pid);
  const wrk = await runWrk({ url: emulator.url + page.path, connections: 1, durationS, headers: { authorization: `Bearer ${page.token}` }, script });
  const cpuS = groupCpuSeconds(emulator.proc.pid) - cpuBefore;
  if (wrk.non2xx > 0) throw new Error(`the emulator answered ${wrk.non2xx} non-2xx responses to the unique-timestamp pages`);
  const cpuMsPerPage = (cpuS * 1_000) / wrk.requests;
  printTable(
    `5. Emulator (medium, seed 42): ${page.path} + unique created_before, 1 connection, ${durationS} s, emulator and wrk on core ${LOAD_CPU}`,
    ['figure', 'value'],
    [
      ['pages served', wrk.requests],
      ['req/s (sharing core 0 with wrk)', fmt(wrk.rps, 0)],
      ['latency p50 / p99 ms', `${fmt(wrk.latencyMs.p50)} / ${fmt(wrk.latencyMs.p99)}`],
      ['emulator CPU per page (ms)', fmt(cpuMsPerPage, 3)],
      ['⇒ pages/s one core could serve', fmt(1_000 / cpuMsPerPage, 0)],
    ],
  );
  return {
    rps: wrk.rps,
    cpuMsPerPage,
    p50Ms: wrk.latencyMs.p50,
    requests: wrk.requests,
    micro,
    checks: [{ ...ratioCheck('emulator: CPU per 100-run page', cpuMsPerPage, undefined), unit: 'ms' }, ...microChecks],
  };
}
