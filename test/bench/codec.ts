/**
 * Codec comparison for the Redis stored form (src/cache/redis/codec.ts): ratio and per-call
 * encode/decode time on a realistic body (a 100-item list page, ~80 KB of JSON).
 *
 *   npm run bench -- codec
 *
 * Optional codecs (lz4-napi, zstd-napi) are measured when they can be resolved from the
 * project or from the folder named by --codec-modules (e.g. a scratch `npm install`).
 */
import { createRequire } from 'node:module';
import { join } from 'node:path';
import * as zlib from 'node:zlib';
import { makeListPageBody } from '../cache/fixtures.js';
import type { Check } from './report.js';

interface Candidate {
  name: string;
  encode(body: Buffer): Buffer;
  decode(packed: Buffer): Buffer;
}

const { constants: z } = zlib;

function brotli(quality: number): Candidate {
  const params = { [z.BROTLI_PARAM_QUALITY]: quality, [z.BROTLI_PARAM_MODE]: z.BROTLI_MODE_TEXT };
  return {
    name: `brotli q${quality}`,
    encode: (body) => zlib.brotliCompressSync(body, { params: { ...params, [z.BROTLI_PARAM_SIZE_HINT]: body.length } }),
    decode: (packed) => zlib.brotliDecompressSync(packed),
  };
}

function zlibFamily(kind: 'gzip' | 'deflateRaw', level: number): Candidate {
  const encode = kind === 'gzip' ? zlib.gzipSync : zlib.deflateRawSync;
  const decode = kind === 'gzip' ? zlib.gunzipSync : zlib.inflateRawSync;
  return { name: `${kind} ${level}`, encode: (body) => encode(body, { level }), decode: (packed) => decode(packed) };
}

/** Loads an optional package without making it a dependency of the project. */
function loadOptional(name: string, modulesDir: string | undefined): unknown {
  const roots = [join(process.cwd(), 'package.json')];
  if (modulesDir) roots.push(join(modulesDir, 'package.json'));
  for (const root of roots) {
    try {
      return createRequire(root)(name);
    } catch {
      // not installed there: try the next root
    }
  }
  return undefined;
}

function optionalCandidates(modulesDir: string | undefined): Candidate[] {
  const out: Candidate[] = [];
  const lz4 = loadOptional('lz4-napi', modulesDir) as { compressSync(b: Buffer): Buffer; uncompressSync(b: Buffer): Buffer } | undefined;
  if (lz4) out.push({ name: 'lz4 (lz4-napi)', encode: (b) => lz4.compressSync(b), decode: (p) => lz4.uncompressSync(p) });
  const zstd = loadOptional('zstd-napi', modulesDir) as { compress(b: Buffer, o?: Record<string, number>): Buffer; decompress(b: Buffer): Buffer } | undefined;
  for (const level of [1, 3, 6]) {
    if (!zstd) break;
    out.push({ name: `zstd ${level} (zstd-napi)`, encode: (b) => zstd.compress(b, { compressionLevel: level }), decode: (p) => zstd.decompress(p) });
  }
  return out;
}

/** Median of `rounds` timings of `fn`, in microseconds. */
function medianMicros(rounds: number, fn: () => void): number {
  const samples: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const start = process.hrtime.bigint();
    fn();
    samples.push(Number(process.hrtime.bigint() - start) / 1000);
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)]!;
}

interface CodecRow {
  readonly codec: string;
  readonly bytes: number;
  /** body ÷ packed. */
  readonly ratio: number;
  readonly encodeUs: number;
  readonly decodeUs: number;
}

interface CodecFigures {
  readonly bodyBytes: number;
  readonly rows: CodecRow[];
  readonly checks: Check[];
}

/** `rounds`: timings per codec (the median is kept); brotli q11, the slowest, gets 15 at most. */
export function runCodec(options: { rounds: number; modulesDir?: string | undefined }): CodecFigures {
  const body = makeListPageBody(100);
  const candidates: Candidate[] = [
    ...[1, 3, 4, 5, 6, 9, 11].map(brotli),
    ...[1, 6, 9].map((level) => zlibFamily('gzip', level)),
    ...[1, 6].map((level) => zlibFamily('deflateRaw', level)),
    ...optionalCandidates(options.modulesDir),
  ];
  console.log(`body: ${body.length} bytes (100-item list page, JSON)`);
  console.log('codec'.padEnd(22), 'bytes'.padStart(7), 'ratio'.padStart(6), 'enc µs'.padStart(8), 'dec µs'.padStart(8));
  const rows: CodecRow[] = [];
  for (const candidate of candidates) {
    const packed = candidate.encode(body);
    if (!candidate.decode(packed).equals(body)) throw new Error(`${candidate.name} does not round-trip`);
    const rounds = candidate.name.includes('q11') ? Math.min(15, options.rounds) : options.rounds;
    const row = {
      codec: candidate.name,
      bytes: packed.length,
      ratio: body.length / packed.length,
      encodeUs: medianMicros(rounds, () => candidate.encode(body)),
      decodeUs: medianMicros(rounds, () => candidate.decode(packed)),
    };
    console.log(
      row.codec.padEnd(22),
      String(row.bytes).padStart(7),
      row.ratio.toFixed(1).padStart(6),
      row.encodeUs.toFixed(0).padStart(8),
      row.decodeUs.toFixed(0).padStart(8),
    );
    rows.push(row);
  }
  return { bodyBytes: body.length, rows, checks: [] };
}
