/**
 * A Redis-tier hit's decode for an identity client, two builds side by side in one process:
 * opening a stored entry (MAC check or AES-GCM open, metadata, checks) and reading its identity
 * body (the inflate), this checkout's src/cache/codec.ts against `BENCH_AB_BASE`'s, in
 * alternating batches so that a noisy machine weighs on both alike.
 *
 *   BENCH_AB_BASE=/work/wt-perf-base npx tsx test/bench/decode-ab.ts
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import * as head from '../../src/cache/codec.js';
import type { ValueGuard } from '../../src/cache/codec.js';
import { makeEntry, makeListPageBody } from '../cache/fixtures.js';

const BASE = process.env['BENCH_AB_BASE'];
if (!BASE) {
  console.error('BENCH_AB_BASE must name another checkout (its src/cache/codec.ts is loaded)');
  process.exit(2);
}
const base = (await import(join(BASE, 'src/cache/codec.ts'))) as typeof head;
const entry = makeEntry(Date.now(), { body: makeListPageBody(100) });
const KEY = 'tmc:{u:5|v1|listRuns|1|expands=users}';
const ROUNDS = 30;
const BATCH = 100;
const guards: [string, ValueGuard][] = [
  ['MAC-bound', { macKey: head.deriveMacKey(randomBytes(32)) }],
  ['sealed (AES-256-GCM)', { keyring: { keys: { k: randomBytes(32) }, current: 'k' } }],
];
for (const [label, guard] of guards) {
  const stored = await head.encodeEntry(entry, guard, KEY);
  const spent = { base: 0, head: 0 };
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, codec] of [['head', head], ['base', base]] as const) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < BATCH; i++) {
        const decoded = await codec.decodeEntry(stored, guard, KEY);
        if (decoded?.body.length !== entry.body.length) throw new Error(`${name} did not decode the body`);
      }
      if (round >= 3) spent[name] += Number(process.hrtime.bigint() - t0) / 1e3; // the first rounds warm up
    }
  }
  const each = (us: number) => (us / ((ROUNDS - 3) * BATCH)).toFixed(1);
  console.log(`${label}: ${entry.body.length} B body, ${stored.length} B stored; open + identity body, µs each: base ${each(spent.base)}, this ${each(spent.head)}`);
}
