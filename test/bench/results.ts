/**
 * The bench's results as JSON: one file per scenario (`bench-results/<name>.json`, the last run
 * of each), one for the whole last run (`bench-results/latest.json`), and the committed copy the
 * README's generated table is rendered from (`docs/bench/results.json`, docs.ts).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Check } from './report.js';

/** Where and on what a run was taken: printed with its figures, so a reader can weigh them. */
export interface RunSetup {
  readonly node: string;
  readonly cores: number;
  readonly cpu: string;
  readonly pinned: boolean;
  /** 1-minute load average when the run (in a scenario's record: the scenario) started: above the core count, other work shared the machine. */
  readonly loadAverage: number;
  readonly short: boolean;
  /** Knobs set on the command line or in the environment. */
  readonly knobs: Record<string, string | boolean>;
}

export interface ScenarioRecord {
  readonly scenario: string;
  readonly startedAt: string;
  readonly elapsedS: number;
  readonly setup: RunSetup;
  /** Why it did not run (a binary missing), or why it broke. */
  readonly skipped?: string;
  readonly error?: string;
  readonly checks: Check[];
  /** Every figure the scenario measured (its own shape). */
  readonly result?: unknown;
}

interface RunRecord {
  readonly startedAt: string;
  readonly elapsedS: number;
  readonly argv: string[];
  readonly setup: RunSetup;
  readonly checks: Check[];
  readonly failures: string[];
  readonly scenarios: Record<string, ScenarioRecord>;
}

/** `ab:hit` → `ab-hit.json`. */
export function resultFile(scenario: string): string {
  return `${scenario.replace(/[^a-z0-9-]+/gi, '-')}.json`;
}

/** JSON with Buffers as `<n bytes>` (a page's body, a stored value): the figures, not the bytes. */
export function toJson(value: unknown): string {
  return `${JSON.stringify(value, (_k, v: any) => (v?.type === 'Buffer' && Array.isArray(v.data) ? `<${v.data.length} bytes>` : v), 2)}\n`;
}

export function writeScenario(dir: string, record: ScenarioRecord): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, resultFile(record.scenario));
  writeFileSync(file, toJson(record));
  return file;
}

export function writeRun(dir: string, record: RunRecord): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'latest.json');
  writeFileSync(file, toJson(record));
  return file;
}
