/**
 * `ab:decode`: a Redis-tier hit's decode for an identity client, two builds side by side in one
 * process: opening a stored entry (MAC check or AES-GCM open, metadata, checks) and reading its
 * identity body (the inflate), this checkout's src/cache/redis/codec.ts against `--base`'s, in
 * alternating batches so that a noisy machine weighs on both alike.
 *
 *   npm run bench -- ab:decode --base /work/wt-perf-base
 *
 * Knobs: --rounds (30; the first 3 warm up).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import * as head from '../../src/cache/redis/codec.js';
import type { ValueGuard } from '../../src/cache/redis/codec.js';
import { makeEntry, makeListPageBody } from '../cache/fixtures.js';
import type { Check } from './report.js';

export const DECODE_SOURCE = 'src/cache/redis/codec.ts';
const WARMUP_ROUNDS = 3;
const BATCH = 100;

interface DecodeFigure {
  readonly guard: string;
  readonly bodyBytes: number;
  readonly storedBytes: number;
  /** µs per open + identity body. */
  readonly baseUs: number;
  readonly headUs: number;
}

interface AbDecode {
  readonly figures: DecodeFigure[];
  readonly checks: Check[];
}

export async function runAbDecode(options: { base: string; rounds: number }): Promise<AbDecode> {
  const base = (await import(join(options.base, DECODE_SOURCE))) as typeof head;
  const rounds = Math.max(options.rounds, WARMUP_ROUNDS + 1);
  const entry = makeEntry(Date.now(), { body: makeListPageBody(100) });
  const KEY = 'tmc:{u:5|v1|listRuns|1|expands=users}';
  const guards: [string, ValueGuard][] = [
    ['MAC-bound', { macKey: head.deriveMacKey(randomBytes(32)) }],
    ['sealed (AES-256-GCM)', { keyring: { keys: { k: randomBytes(32) }, current: 'k' } }],
  ];
  const figures: DecodeFigure[] = [];
  for (const [label, guard] of guards) {
    const stored = await head.encodeEntry(entry, guard, KEY);
    const spent = { base: 0, head: 0 };
    for (let round = 0; round < rounds; round++) {
      for (const [name, codec] of [
        ['head', head],
        ['base', base],
      ] as const) {
        const t0 = process.hrtime.bigint();
        for (let i = 0; i < BATCH; i++) {
          const decoded = await codec.decodeEntry(stored, guard, KEY);
          if (decoded?.body.length !== entry.body.length) throw new Error(`${name} did not decode the body`);
        }
        if (round >= WARMUP_ROUNDS) spent[name] += Number(process.hrtime.bigint() - t0) / 1e3; // the first rounds warm up
      }
    }
    const each = (us: number) => us / ((rounds - WARMUP_ROUNDS) * BATCH);
    const figure = { guard: label, bodyBytes: entry.body.length, storedBytes: stored.length, baseUs: each(spent.base), headUs: each(spent.head) };
    console.log(
      `${label}: ${figure.bodyBytes} B body, ${figure.storedBytes} B stored; open + identity body, µs each: base ${figure.baseUs.toFixed(1)}, this ${figure.headUs.toFixed(1)}`,
    );
    figures.push(figure);
  }
  return {
    figures,
    checks: figures.map((f) => ({ name: `ab:decode, ${f.guard}: this ÷ base (time per decode)`, value: f.headUs / f.baseUs, target: 'info', pass: undefined })),
  };
}
