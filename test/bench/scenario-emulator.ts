/**
 * Scenario 5: the emulator's own cost, so the other figures can be read against it. If someone's
 * `test/bench/emulator.ts` micro-bench exists it is run too (bounded in time) and its output kept.
 * Always measured here: the emulator's CPU per 100-item page with users expanded at medium scale
 * (wrk, one connection, a unique `created_before` per request so nothing can be reused).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from './measure.js';
import { groupCpuSeconds, runCommand } from './procs.js';
import { fmt, printTable, ratioCheck, type Check } from './report.js';
import { LOAD_CPU, ROOT, type Emulator } from './servers.js';
import { runWrk } from './wrk.js';

const OTHERS_BENCH = join(ROOT, 'test/bench/emulator.ts');

export interface EmulatorScenario {
  readonly rps: number;
  readonly cpuMsPerPage: number;
  readonly p50Ms: number;
  readonly requests: number;
  readonly othersBench?: { readonly exitCode: number | null; readonly timedOut: boolean; readonly output: string };
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

export async function runEmulatorScenario(dir: string, emulator: Emulator, page: Page, durationS: number): Promise<EmulatorScenario> {
  let othersBench: EmulatorScenario['othersBench'];
  if (existsSync(OTHERS_BENCH)) {
    const r = await runCommand('emulator bench', join(ROOT, 'node_modules/.bin/tsx'), [OTHERS_BENCH], { cwd: ROOT, cpu: LOAD_CPU, timeoutMs: 60_000 });
    othersBench = { exitCode: r.code, timedOut: r.timedOut, output: (r.stdout + r.stderr).trim() };
    console.log(`\n== 5a. test/bench/emulator.ts (exit ${r.code}${r.timedOut ? ', killed after 60 s' : ''})\n${othersBench.output}`);
  }
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
    ...(othersBench ? { othersBench } : {}),
    checks: [{ ...ratioCheck('emulator: CPU per 100-run page', cpuMsPerPage, undefined), unit: 'ms' }],
  };
}
