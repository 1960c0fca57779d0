/**
 * The log destination of `tm-cache serve` (log-sink.ts), on real descriptors: a file (written
 * through fs.write), and a FIFO (written as a non-blocking stream) whose reader is slow, stalls
 * (the bound) or goes away (EPIPE).
 */
import { execFileSync } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { AccessLog, AccessRow } from '../../src/ops/access-log.js';
import { LogSink } from '../../src/ops/log-sink.js';
import { until } from '../helpers/wait.js';

const dirs: string[] = [];
const fds: number[] = [];
afterEach(() => {
  for (const fd of fds.splice(0)) closeSync(fd);
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tm-cache-sink-'));
  dirs.push(dir);
  return dir;
}

const line = (i: number): string => `{"level":30,"n":${i},"msg":"access","pad":"${'x'.repeat(200)}"}\n`;
const flushed = (sink: LogSink) => new Promise<void>((resolve, reject) => sink.flush((err) => (err ? reject(err) : resolve())));

/** A FIFO with both ends open non-blocking: the test reads when it chooses. */
function fifo(): { read: number; write: number } {
  const path = join(tempDir(), 'fifo');
  execFileSync('mkfifo', [path]);
  const read = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  const write = openSync(path, constants.O_WRONLY | constants.O_NONBLOCK);
  fds.push(read, write);
  return { read, write };
}

/** Everything the FIFO holds now. */
function drain(fd: number): string {
  const chunk = Buffer.allocUnsafe(256 * 1024);
  let out = '';
  for (;;) {
    try {
      const n = readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) return out;
      out += chunk.toString('utf8', 0, n);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') return out;
      throw err;
    }
  }
}

describe('LogSink', () => {
  it('writes every line, in order, to a file; flush calls back once they are all out', async () => {
    const path = join(tempDir(), 'log');
    const fd = openSync(path, 'w');
    fds.push(fd);
    // Bound above the 12 MB written at once here: this test is about order and completeness.
    const sink = new LogSink(fd, { maxBytes: 64 * 1024 * 1024 });
    for (let i = 0; i < 50_000; i++) expect(sink.write(line(i))).toBe(true);
    await flushed(sink);
    const lines = readFileSync(path, 'utf8').split('\n').filter(Boolean);
    expect(lines).toHaveLength(50_000);
    expect(lines.every((l, i) => JSON.parse(l).n === i)).toBe(true);
    // In batches of at least 16 KiB (~70 lines), not a write per line.
    expect(sink.writes).toBeLessThanOrEqual(Math.ceil((50_000 * line(0).length) / (16 * 1024)) + 1);
  });

  it('writes a lone line by itself within maxDelayMs, without being asked to flush', async () => {
    const path = join(tempDir(), 'log');
    const fd = openSync(path, 'w');
    fds.push(fd);
    const sink = new LogSink(fd, { maxDelayMs: 20 });
    sink.write(line(7));
    expect(readFileSync(path, 'utf8')).toBe('');
    await until(() => readFileSync(path, 'utf8') === line(7), 2_000);
    expect(sink.writes).toBe(1);
  });

  it('writes on when a pipe is full, from where it stopped: a slow reader gets every line in order', async () => {
    const { read, write } = fifo();
    const sink = new LogSink(write, { maxBytes: 64 * 1024 * 1024 });
    const count = 20_000; // ~4.6 MB through a 64 KiB pipe, written at once
    for (let i = 0; i < count; i++) sink.write(line(i));
    let received = '';
    const done = flushed(sink);
    await until(() => {
      received += drain(read);
      return received.split('\n').length - 1 === count;
    }, 30_000);
    await done;
    const lines = received.split('\n').filter(Boolean);
    expect(lines.map((l) => JSON.parse(l).n)).toEqual([...Array(count).keys()]);
  });

  it('never holds more than maxBytes for a stalled reader: the rest is dropped, counted, and said once writing resumes', async () => {
    const { read, write } = fifo();
    const sink = new LogSink(write, { maxBytes: 64 * 1024, now: () => 42 });
    let accepted = 0;
    let refused = 0;
    for (let i = 0; i < 5_000; i++) {
      if (sink.write(line(i))) accepted++;
      else refused++;
    }
    expect(refused).toBeGreaterThan(3_000);
    expect(sink.dropped).toBe(refused);
    let received = '';
    await until(() => {
      received += drain(read);
      return received.includes('log lines dropped');
    }, 30_000);
    await flushed(sink);
    received += drain(read);
    const lines = received
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    const kept = lines.filter((l) => l.msg === 'access');
    expect(kept).toHaveLength(accepted);
    // What was kept is in order; the note says exactly how many were not.
    expect(kept.map((l) => l.n)).toEqual([...kept.map((l) => l.n)].sort((a, b) => a - b));
    expect(lines.find((l) => l.msg.startsWith('log lines dropped'))).toEqual({
      level: 40,
      time: 42,
      msg: "log lines dropped: the log's reader fell behind",
      dropped: refused,
    });
  });

  it('a pipe whose reader went away (EPIPE) fails the flush, never the caller or the process', async () => {
    const { read, write } = fifo();
    // The stream owns the write end from here: it closes it on EPIPE.
    fds.splice(fds.indexOf(write), 1);
    const sink = new LogSink(write);
    sink.write(line(1));
    await flushed(sink);
    expect(drain(read)).toBe(line(1));
    closeSync(fds.splice(fds.indexOf(read), 1)[0]!);
    expect(sink.write(line(2))).toBe(true);
    await expect(flushed(sink)).rejects.toThrow(/EPIPE/);
    expect(sink.write(line(3))).toBe(true);
    await expect(flushed(sink)).rejects.toThrow(/EPIPE/);
  });

  it('a descriptor that cannot be written fails the flush, never the caller', async () => {
    const path = join(tempDir(), 'ro');
    execFileSync('touch', [path]);
    const fd = openSync(path, 'r');
    fds.push(fd);
    const sink = new LogSink(fd);
    expect(() => sink.write(line(1))).not.toThrow();
    await expect(flushed(sink)).rejects.toThrow(/EBADF/);
    // It goes on taking lines.
    expect(sink.write(line(2))).toBe(true);
    // ... and fails it too, before the descriptor is closed: a write due later would land in
    // whatever file takes the descriptor's number next.
    await expect(flushed(sink)).rejects.toThrow(/EBADF/);
  });
});

describe('access lines kept aside (AccessLog over a LogSink)', () => {
  /** A pino logger over a LogSink on a file, as `tm-cache serve` builds it, and its AccessLog. */
  function logged(options: { maxDelayMs?: number } = {}) {
    const path = join(tempDir(), 'log');
    const fd = openSync(path, 'w');
    fds.push(fd);
    const sink = new LogSink(fd, options);
    const logger = pino({ level: 'info', base: { pid: 1, hostname: 'h' } }, sink);
    return { path, sink, logger, log: new AccessLog(logger), read: () => readFileSync(path, 'utf8').split('\n').filter(Boolean) };
  }
  const request = (log: AccessLog, i: number, extra: { userAgent?: string; upstreamMs?: number } = {}): void =>
    log.request(
      Object.assign(new AccessRow(), {
        reqId: `req-${i}`,
        method: 'GET',
        op: 'listRuns',
        target: `/api/v1/projects/1/runs?per_page=${i}&token=secret`,
        status: 200,
        ms: 1.23456,
        outcome: 'hit',
        tier: 'memory',
        scope: 'user',
        upstreamMs: extra.upstreamMs,
        user: 7,
        bytes: 512,
        client: '127.0.0.1',
        userAgent: extra.userAgent,
        time: 1_700_000_000_000 + i,
      }),
    );

  it('formats them as written at once would, in order, within maxDelayMs, never with the query', async () => {
    const { log, read, path } = logged({ maxDelayMs: 20 });
    request(log, 1, { userAgent: 'dash "board"/1.0' });
    request(log, 2, { upstreamMs: 40.123 });
    expect(readFileSync(path, 'utf8')).toBe('');
    await until(() => read().length === 2, 2_000);
    const [first, second] = read().map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(first).toEqual({
      level: 30,
      time: 1_700_000_000_001,
      pid: 1,
      hostname: 'h',
      reqId: 'req-1',
      method: 'GET',
      op: 'listRuns',
      path: '/api/v1/projects/1/runs',
      status: 200,
      ms: 1.23,
      outcome: 'hit',
      tier: 'memory',
      scope: 'user',
      user: 7,
      bytes: 512,
      client: '127.0.0.1',
      userAgent: 'dash "board"/1.0',
      msg: 'access',
    });
    expect(second).toMatchObject({ reqId: 'req-2', upstreamMs: 40.12, time: 1_700_000_000_002 });
    expect(second).not.toHaveProperty('userAgent');
    expect(read().join('\n')).not.toContain('secret');
  });

  it('writes whatever a client chose as valid JSON equal to the fields, through the sink and at once: escapes, non-ASCII, long values, numbers', async () => {
    // A seeded generator: the same 600 requests every run.
    let seed = 42;
    const random = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
    const pieces = [
      'a',
      'Z',
      '/',
      '-',
      ' ',
      '"',
      '\\',
      '\n',
      '\r',
      '\t',
      '\u0000',
      '\u001f',
      '\u007f',
      'é',
      '€',
      '\u2028',
      '😀',
      '\ud83d',
      '\udc00',
      '%22',
      '<',
    ];
    const text = (max: number): string => Array.from({ length: Math.floor(random() * max) }, () => pick(pieces)).join('');
    const msOf = (): number => pick([0, 0.004, 0.005, 0.015, 1.005, 2.5, 0.1, 10, 99.999, 123_456.789, random() * 10, random() * 100_000]);
    const sinkLines = logged({ maxDelayMs: 10 });
    const atOnce: string[] = [];
    const direct = new AccessLog(
      pino({ level: 'info', base: { pid: 1, hostname: 'h' } }, new Writable({ write: (chunk, _e, cb) => void (atOnce.push(String(chunk)), cb()) })),
    );
    const expected: Record<string, unknown>[] = [];
    let last = { target: '', userAgent: undefined as string | undefined };
    for (let i = 0; i < 600; i++) {
      const f = {
        reqId: text(12) || 'r',
        method: pick(['GET', 'HEAD', 'POST']),
        op: pick(['listRuns', 'getRun', 'unknown']),
        // Half the targets and User-Agents repeat the last one's (a poller's), by value, not by reference.
        target: random() < 0.5 && i > 0 ? `${last.target}` : `/api/v1/${text(30)}${pick(['', '?q=secret&x=1', '#frag', '?'])}`,
        status: pick([200, 304, 422, 503]),
        ms: msOf(),
        outcome: pick(['hit', 'miss', 'stale']),
        tier: pick([undefined, 'memory', 'redis']),
        scope: pick([undefined, 'user', 'project']),
        detail: pick([undefined, text(20)]),
        upstreamStatus: pick([undefined, 0, 200, 429]),
        upstreamMs: pick([undefined, msOf()]),
        user: pick([undefined, 0, 7, 123_456_789]),
        bytes: pick([undefined, 0, 87_400, 2 ** 40]),
        aborted: random() < 0.2,
        refused: pick([undefined, 'per_page', text(10)]),
        client: pick([undefined, '127.0.0.1', '::ffff:10.0.0.1']),
        userAgent: random() < 0.5 && i > 0 ? last.userAgent?.concat('') : pick([undefined, text(40), text(400), 'x'.repeat(300)]),
        // Mostly a clock's milliseconds (13 digits), now and then a fake clock's few, or a fraction.
        time: i % 7 === 3 ? i : i % 13 === 4 ? i + 0.5 : 1_700_000_000_000 + (i >> 2),
      };
      last = f;
      for (const log of [sinkLines.log, direct]) {
        log.request(Object.assign(new AccessRow(), f));
      }
      const round = (ms: number): number => Math.round(ms * 100) / 100;
      // What JSON.stringify of the fields gives, parsed: absent fields left out.
      expected.push(
        JSON.parse(
          JSON.stringify({
            level: 30,
            time: f.time,
            pid: 1,
            hostname: 'h',
            reqId: f.reqId,
            method: f.method,
            op: f.op,
            path: f.target.replace(/[?#].*$/s, ''),
            status: f.status,
            ms: round(f.ms),
            outcome: f.outcome,
            tier: f.tier,
            scope: f.scope,
            detail: f.detail,
            upstreamStatus: f.upstreamStatus,
            upstreamMs: f.upstreamMs === undefined ? undefined : round(f.upstreamMs),
            user: f.user,
            bytes: f.bytes,
            aborted: f.aborted || undefined,
            refused: f.refused,
            client: f.client,
            userAgent: f.userAgent?.slice(0, 256),
            msg: 'access',
          }),
        ) as Record<string, unknown>,
      );
    }
    await until(() => sinkLines.read().length === 600, 2_000);
    for (const lines of [sinkLines.read().map((l) => `${l}\n`), atOnce]) {
      expect(lines).toHaveLength(600);
      lines.forEach((l, i) => {
        expect(l.endsWith('}\n')).toBe(true);
        expect(/^[\x20-\x7e]*\n$/.test(l), l).toBe(true); // ASCII, one line
        expect(JSON.parse(l), l).toEqual(expected[i]);
        // Numbers as JavaScript writes them (`1.01`, never `1.0100000000000002` or `1.010`).
        expect(l).toContain(`"ms":${String(expected[i]!['ms'])},`);
      });
      expect(lines.join('')).not.toContain('secret');
    }
  });

  it('keeps its place among other lines of the logger when a flush or a full batch writes them, and flushSync writes what waits', async () => {
    const { log, read, sink, logger } = logged({ maxDelayMs: 60_000 });
    for (let i = 0; i < 300; i++) request(log, i);
    logger.warn('after 300 requests');
    await flushed(sink);
    const lines = read().map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toHaveLength(301);
    const access = lines.filter((l) => l['msg'] === 'access');
    expect(access.every((l, i) => l['reqId'] === `req-${i}`)).toBe(true);
    // Two full batches of 128 went in before the warning; the last 44 with the flush, after it.
    expect(lines.findIndex((l) => l['msg'] === 'after 300 requests')).toBe(256);
    request(log, 300);
    sink.flushSync();
    expect(read().at(-1)).toContain('"reqId":"req-300"');
  });
});
