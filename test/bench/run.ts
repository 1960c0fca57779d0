/**
 * `npm run bench`: the bench's one entry point. tm-cache against baselines measured in the same
 * run, reported as ratios; A/B comparisons with another build; profiles; single measurements.
 *
 *   npm run bench                          # builds, then the suite (--list: which scenarios)
 *   npm run bench -- hit miss              # only these scenarios
 *   npm run bench -- --short               # every scenario at its short defaults: checks that it runs
 *   npm run bench -- ab:redis --base /tmp/base
 *   npm run bench -- --list                # every scenario, with what it measures and needs
 *   npm run bench -- --help                # every knob, as a flag and as its BENCH_* variable
 *
 * (`npx tsx test/bench/run.ts …` does the same without building first.) Knobs and their
 * variables: options.ts; scenarios and their defaults: scenarios.ts. The suite at its defaults
 * takes about 5–6 minutes.
 *
 * Layout on a 2-core machine: every server under test alone on core 1 (`taskset -c 1`); wrk, the
 * emulator (upstream, medium scale, seed 42), redis-server and this runner on core 0. Every load
 * loop is bounded in time; every child runs in its own process group and is killed on exit.
 * Figures are printed per scenario, then every ratio against its target (informative: the exit
 * code is 0 unless something broke or a named scenario could not run), and saved as JSON:
 * bench-results/<scenario>.json and bench-results/latest.json (`--out`). `npm run bench:docs`
 * renders the README's table from them (docs.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { missingBinary, missingBuild } from './guards.js';
import { choosePage, type Page } from './measure.js';
import { knobHelp, parseBenchArgs, UsageError, type BenchArgs } from './options.js';
import { canPin, installCleanup, pinSelf, stopAll } from './procs.js';
import { printSummary, type Check } from './report.js';
import { writeRun, writeScenario, type RunSetup, type ScenarioRecord } from './results.js';
import { SCENARIOS, type BenchContext, type Scenario } from './scenarios.js';
import { LOAD_CPU, ROOT, SERVER_CPU, setLogLevel, startEmulator, type Emulator } from './servers.js';

function usage(): string {
  return [
    'usage: npm run bench -- [scenario ...] [--short] [--list] [knobs]',
    '',
    'Without a scenario: the suite. Scenarios (--list for what each measures):',
    `  suite:  ${SCENARIOS.filter((s) => s.suite)
      .map((s) => s.name)
      .join(', ')}`,
    `  others: ${SCENARIOS.filter((s) => !s.suite)
      .map((s) => s.name)
      .join(', ')}`,
    '',
    'Knobs (flag, or its environment variable; a flag wins):',
    '  --list                                          every scenario, what it measures and needs',
    ...knobHelp(),
  ].join('\n');
}

function list(): string {
  const width = Math.max(...SCENARIOS.map((s) => s.name.length));
  return SCENARIOS.map((s) => {
    const missing = s.needs.map(missingBinary).filter((m) => m !== undefined);
    return `${s.name.padEnd(width)}  ${s.suite ? 'suite ' : '      '} ${s.about}${s.needs.length ? ` [needs ${s.needs.join(', ')}${missing.length ? `: ${missing.join('; ')}` : ''}]` : ''}`;
  }).join('\n');
}

/** The scenarios to run, in the registry's order; throws UsageError on an unknown name. */
function choose(args: BenchArgs): Scenario[] {
  if (args.scenarios.length === 0) return SCENARIOS.filter((s) => s.suite);
  const unknown = args.scenarios.filter((name) => !SCENARIOS.some((s) => s.name === name));
  if (unknown.length > 0) throw new UsageError(`unknown scenario ${unknown.join(', ')} (npm run bench -- --list)`);
  return SCENARIOS.filter((s) => args.scenarios.includes(s.name));
}

/** Why `scenario` cannot run on this machine, or undefined. */
function cannotRun(scenario: Scenario): string | undefined {
  const missing = [...scenario.needs.map(missingBinary), scenario.build ? missingBuild(ROOT) : undefined].filter((m) => m !== undefined);
  return missing.length > 0 ? missing.join('; ') : undefined;
}

function sharedEmulator(): Pick<BenchContext, 'emulator' | 'page'> & { started(): Emulator | undefined } {
  let emulator: Promise<Emulator> | undefined;
  let page: Promise<Page> | undefined;
  let started: Emulator | undefined;
  const get = (): Promise<Emulator> => {
    emulator ??= startEmulator().then((em) => (started = em));
    return emulator;
  };
  return {
    emulator: get,
    page: () => {
      page ??= get().then(async (em) => {
        const p = await choosePage(em);
        console.log(`emulator ${em.url} (medium, seed 42); page ${p.path} for a member token: ${p.body.length} B, ${p.contentType}`);
        return p;
      });
      return page;
    },
    started: () => started,
  };
}

/** A usage error (a missing --base) as its message; anything else with its stack. */
const message = (err: unknown): string => (err instanceof UsageError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err));

async function main(argv: string[]): Promise<number> {
  let args: BenchArgs;
  let chosen: Scenario[];
  try {
    args = parseBenchArgs(argv, process.env);
    if (args.help || args.list) {
      console.log(args.help ? usage() : list());
      return 0;
    }
    chosen = choose(args);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    console.error(`${err.message} (npm run bench -- --help)`);
    return 2;
  }
  const options = args.options;
  const out = resolve(ROOT, options.string('out') ?? 'bench-results');
  installCleanup();
  const started = Date.now();
  const pinned = canPin() && pinSelf(LOAD_CPU);
  const setup: RunSetup = {
    node: process.version,
    cores: cpus().length,
    cpu: cpus()[0]?.model ?? '?',
    pinned,
    loadAverage: loadavg()[0]!,
    short: options.short,
    knobs: options.given(),
  };
  console.log(
    `tm-cache bench — node ${setup.node}, ${setup.cores} cores (${setup.cpu}), load average ${setup.loadAverage.toFixed(1)}${setup.short ? ', SHORT runs' : ''}`,
  );
  console.log(
    pinned
      ? `servers on core ${SERVER_CPU}; wrk, emulator, redis and this runner on core ${LOAD_CPU}`
      : 'taskset not available: NOTHING IS PINNED, figures are less comparable',
  );
  if (setup.cores < 2) console.log('WARNING: fewer than 2 cores: servers and load share a core');
  setLogLevel(options.string('log-level') ?? 'warn');

  const dir = mkdtempSync(join(tmpdir(), 'tm-cache-bench-'));
  const shared = sharedEmulator();
  const ctx: BenchContext = { options, dir, emulator: shared.emulator, page: shared.page };
  const records: Record<string, ScenarioRecord> = {};
  const checks: Check[] = [];
  const failures: string[] = [];
  try {
    for (const scenario of chosen) {
      const t0 = Date.now();
      const base = { scenario: scenario.name, startedAt: new Date(t0).toISOString(), setup: { ...setup, loadAverage: loadavg()[0]! } };
      const why = cannotRun(scenario);
      let record: ScenarioRecord;
      if (why !== undefined) {
        console.log(`\n-- ${scenario.name}: skipped: ${why}`);
        // Asked for by name, it is a failure; in the suite, a scenario this machine cannot run.
        if (args.scenarios.length > 0) failures.push(scenario.name);
        record = { ...base, elapsedS: 0, skipped: why, checks: [] };
      } else {
        console.log(`\n-- ${scenario.name} ...`);
        if (scenario.budget !== undefined) console.log(`   upstream budget: ${scenario.budget}`);
        try {
          const { checks: own, ...result } = await scenario.run(ctx);
          record = { ...base, elapsedS: (Date.now() - t0) / 1_000, checks: own, result };
          checks.push(...own);
        } catch (err) {
          console.error(`   ${scenario.name} FAILED: ${message(err)}`);
          failures.push(scenario.name);
          record = { ...base, elapsedS: (Date.now() - t0) / 1_000, error: message(err), checks: [] };
        } finally {
          // Whatever the scenario started and did not stop (it threw midway), but not the emulator.
          const em = shared.started();
          await stopAll(em ? [em.proc] : []).catch(() => undefined);
        }
      }
      records[scenario.name] = record;
      writeScenario(out, record);
    }
  } finally {
    await stopAll().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }

  if (checks.length > 0) printSummary(checks);
  const elapsedS = (Date.now() - started) / 1_000;
  console.log(`\ntotal ${elapsedS.toFixed(0)} s${failures.length ? `; BROKEN: ${failures.join(', ')}` : ''}`);
  const file = writeRun(out, { startedAt: new Date(started).toISOString(), elapsedS, argv, setup, checks, failures, scenarios: records });
  console.log(`results: ${file} and one file per scenario beside it`);
  return failures.length > 0 ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
