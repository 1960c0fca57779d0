/**
 * `emulator:micro`: emulator speed: generation time of each scale, and the CPU time of a 100-item
 * runs page with users expanded at medium scale, through fastify (`inject`) and through the
 * handler alone. Also part of the `emulator` scenario.
 *
 *   npm run bench -- emulator:micro
 */
import { getOperation } from '../../src/api/catalogue.js';
import { normalizeRequest } from '../../src/api/normalize.js';
import { buildEmulator, emulatorState } from '../../src/emulator/app.js';
import { generateDataset } from '../../src/emulator/dataset.js';
import type { Scale } from '../../src/emulator/model.js';
import { runOperation } from '../../src/emulator/operations.js';
import type { Check } from './report.js';

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** CPU µs (user + system) of each call. */
async function cpuMicros(n: number, fn: () => unknown | Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const start = process.cpuUsage();
    await fn();
    const d = process.cpuUsage(start);
    out.push(d.user + d.system);
  }
  return out;
}

function generation(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const scale of ['small', 'medium', 'large'] as Scale[]) {
    const t = performance.now();
    const data = generateDataset({ seed: 42, scale });
    const ms = performance.now() - t;
    console.log(`generate ${scale.padEnd(6)} ${ms.toFixed(0).padStart(6)} ms  (${data.runs.length} runs, ${data.results.size} results)`);
    out[scale] = ms;
  }
  return out;
}

async function pages(samples: number): Promise<{ firstUs: number; injectUs: number; handlerUs: number }> {
  const app = await buildEmulator({ seed: 42, scale: 'medium' });
  const state = emulatorState(app)!;
  const admin = state.tokens()[0]!.token;
  const query = 'per_page=100&expands=users';
  const paths = [1, 2, 3].map((p) => `/api/v1/projects/${p}/runs?${query}`);
  const headers = { authorization: `Bearer ${admin}` };
  const first = await cpuMicros(1, () => app.inject({ url: paths[0]!, headers }));
  console.log(`first request (cold JSON memo)   ${first[0]} µs CPU`);
  for (let i = 0; i < 300; i++) await app.inject({ url: paths[i % 3]!, headers }); // warm up the JIT
  const injected = await cpuMicros(samples, (i = 0) => app.inject({ url: paths[i % 3]!, headers }));
  console.log(`inject: runs page, users expanded  median ${median(injected)} µs CPU (n=${injected.length})`);

  const op = getOperation('listRuns');
  const direct = await cpuMicros(samples, () => runOperation({ world: state, userId: 1, req: normalizeRequest(op, { project_id: 1 }, query) }));
  console.log(`handler: normalize + list + JSON  median ${median(direct)} µs CPU`);
  const body = JSON.parse(runOperation({ world: state, userId: 1, req: normalizeRequest(op, { project_id: 1 }, query) }));
  console.log(`  (page of ${body.result.length} runs of ${body.total}, ${body.expands.users.length} users expanded)`);
  await app.close();
  return { firstUs: first[0]!, injectUs: median(injected), handlerUs: median(direct) };
}

export interface EmulatorMicro {
  /** ms to generate each scale. */
  readonly generateMs: Record<string, number>;
  /** CPU µs: the first request (cold JSON memo), then medians through fastify and the handler alone. */
  readonly firstUs: number;
  readonly injectUs: number;
  readonly handlerUs: number;
  readonly checks: Check[];
}

/** `samples`: timed requests of each kind (3,000). */
export async function runEmulatorMicro(samples: number): Promise<EmulatorMicro> {
  const generateMs = generation();
  const page = await pages(samples);
  return {
    generateMs,
    ...page,
    checks: [
      { name: 'emulator: generating small', value: generateMs['small'], unit: 'ms', target: '< 2,000 ms', pass: generateMs['small']! < 2_000 },
      { name: 'emulator: handler CPU per 100-run page', value: page.handlerUs, unit: 'µs', target: 'info', pass: undefined },
    ],
  };
}
