/**
 * Where `tm-cache serve` writes its log lines (pino's destination): a file descriptor (stdout),
 * written asynchronously from a byte buffer.
 *
 * Why not pino's own destination (sonic-boom): the access log writes a line per request, hits
 * included, and sonic-boom's asynchronous mode costs ~3 µs per line (string bookkeeping, and a
 * string handed to `fs.write` that node must encode again), and each write is a round trip through
 * libuv's thread pool (a wake-up, a syscall, a completion) that a busy proxy would pay thousands
 * of times a second. Here a line is copied into a preallocated Buffer (~0.3 µs; the access log
 * writes its lines into it as bytes, with no string at all: `LineProducer`), and the buffer is
 * written once it holds `minBytes` or its oldest line is `maxDelayMs` old: a few hundred writes a
 * second at most, whatever the request rate; a quiet proxy's lines appear within `maxDelayMs`.
 *
 * How a buffer is written depends on the descriptor. A pipe or a socket (stdout under a container
 * runtime, a log shipper, the bench) is written as a non-blocking libuv stream from the main
 * thread: the write is tried at once, and what the pipe cannot take yet is sent when it can, with
 * no thread-pool round trip (which cost a hit ~4 µs when the proxy ran on one core: the hand-off
 * wakes a worker thread that competes with the main one). Node's own process.stdout makes pipes
 * blocking on Linux, which a stalled reader would turn into a stalled proxy: not used. A regular
 * file is written with `writeSync` from the main thread: a write lands in the page cache (tens of
 * microseconds for a 64 KiB batch, a few dozen batches a second), while `fs.write` woke a
 * thread-pool worker per batch that competes with the main thread for the proxy's core (the bench's
 * ab:access-log measured a file 4.7–6.2 µs a line over off that way, on a loaded machine). A terminal is
 * written with `fs.write` (thread pool), as before.
 *
 * Two buffers take turns (one being written, one filling). A slow reader (a log collector
 * that stalls) makes the filling one grow, up to `maxBytes`; past that, lines are dropped and
 * counted, and a line saying how many is written once writing resumes: the proxy never stalls
 * on its log. A non-blocking descriptor's EAGAIN is retried after a short pause, a partial write
 * continues where it stopped, and `flush(cb)` (pino's `logger.flush`) calls back once everything
 * handed in is written.
 */
import { fstatSync, write, writeSync } from 'node:fs';
import { Socket } from 'node:net';
import { isatty } from 'node:tty';

export interface LogSinkOptions {
  /** Bytes the filling buffer may grow to while a write is in flight; default 4 MiB. */
  readonly maxBytes?: number;
  /** A write starts once this many bytes wait; default 64 KiB. */
  readonly minBytes?: number;
  /** ... or once the oldest waiting line is this old (ms); default 50. */
  readonly maxDelayMs?: number;
  /** Clock for the "lines dropped" line; default Date.now. */
  readonly now?: () => number;
}

/**
 * A writer that keeps its lines aside and writes them when the sink is about to write them
 * (access-log.ts: the access log formats its lines in batches, off the request's path), as bytes
 * straight into the sink's buffer: no string is made for them.
 */
export interface LineProducer {
  /** Has it lines waiting? */
  pending(): boolean;
  /** Writes every waiting line into `into`, in order. */
  drain(into: LineBytes): void;
}

/** Where a LineProducer writes: the sink's filling buffer, one line at a time. */
export interface LineBytes {
  /**
   * Room for a line of at most `bytes` bytes: the offset in `buffer` it starts at, or -1 when there
   * is none (the reader fell more than `maxBytes` behind): the line is dropped, and counted.
   */
  reserve(bytes: number): number;
  /** The filling buffer, as `reserve` left it (it may have grown). */
  readonly buffer: Buffer;
  /** The line reserved last ends at `end` (exclusive). */
  commit(end: number): void;
}

const INITIAL_BYTES = 64 * 1024;
const RETRY_MS = 10;

export class LogSink implements LineBytes {
  readonly #fd: number;
  readonly #maxBytes: number;
  readonly #now: () => number;
  readonly #minBytes: number;
  readonly #maxDelayMs: number;
  #timer: NodeJS.Timeout | undefined;
  #writes = 0;
  #filling = Buffer.allocUnsafe(INITIAL_BYTES);
  #spare = Buffer.allocUnsafe(INITIAL_BYTES);
  #length = 0;
  #writing = false;
  #dropped = 0;
  #waiting: Array<(err?: Error | null) => void> = [];
  /** The descriptor as a non-blocking stream, when it is a pipe or a socket. */
  readonly #stream: Socket | undefined;
  /** The descriptor is a regular file (or /dev/null): written synchronously, see above. */
  readonly #isFile: boolean;
  #streamError: Error | undefined;
  #producer: LineProducer | undefined;

  constructor(fd: number, options: LogSinkOptions = {}) {
    this.#fd = fd;
    this.#stream = streamOf(fd);
    this.#isFile = this.#stream === undefined && isRegularFile(fd);
    // An error (EPIPE: the reader is gone) fails the write in flight; lines go nowhere after it.
    this.#stream?.on('error', (err) => (this.#streamError ??= err));
    this.#maxBytes = Math.max(options.maxBytes ?? 4 * 1024 * 1024, INITIAL_BYTES);
    this.#now = options.now ?? Date.now;
    // 64 KiB, about 180 access lines: a busy proxy's file or pipe gets a few dozen writes a second,
    // each a syscall (and for a file a thread-pool round trip) shared by every line in it, a
    // quarter of what 16 KiB made. maxDelayMs still bounds how late a quiet proxy's line appears.
    this.#minBytes = Math.min(options.minBytes ?? 64 * 1024, this.#maxBytes);
    this.#maxDelayMs = options.maxDelayMs ?? 50;
  }

  /** Writes made to the descriptor so far (each carrying every line waiting then). */
  get writes(): number {
    return this.#writes;
  }

  /** Lines dropped because the reader fell more than `maxBytes` behind (since the last report). */
  get dropped(): number {
    return this.#dropped;
  }

  write(line: string): boolean {
    if (!this.#append(line)) return false;
    this.#schedule();
    return true;
  }

  /** Lines `producer` keeps aside are drained before every write and flush (one producer). */
  produceFrom(producer: LineProducer): void {
    this.#producer = producer;
  }

  /**
   * The producer has lines waiting: they are drained now (it holds as many as it may), then
   * written as lines handed in are, at once if that makes a batch, else within `maxDelayMs`.
   */
  absorb(): void {
    this.#producer?.drain(this);
    this.#schedule();
  }

  /** The producer's first waiting line: written within `maxDelayMs`, as a line handed in would be. */
  wake(): void {
    if (!this.#writing) this.#timer ??= setTimeout(this.#startLate, this.#maxDelayMs).unref();
  }

  /** Copies a line into the filling buffer; false when it is dropped (the reader fell behind). */
  #append(line: string): boolean {
    // Worst case of UTF-8 from UTF-16: 3 bytes per code unit. Log lines are ASCII in practice.
    if (this.reserve(line.length * 3) === -1) return false;
    this.#length += this.#filling.write(line, this.#length);
    return true;
  }

  /** LineBytes: room for `bytes` more at the end of the filling buffer (grown if it may). */
  reserve(bytes: number): number {
    if (this.#length + bytes > this.#filling.length && !this.#grow(this.#length + bytes)) {
      this.#dropped++;
      return -1;
    }
    return this.#length;
  }

  /** LineBytes: the filling buffer. */
  get buffer(): Buffer {
    return this.#filling;
  }

  /** LineBytes: the line reserved last was written up to `end`. */
  commit(end: number): void {
    this.#length = end;
  }

  #schedule(): void {
    if (this.#writing) return;
    if (this.#length >= this.#minBytes) this.#start();
    else if (this.#length > 0) this.#timer ??= setTimeout(this.#startLate, this.#maxDelayMs).unref();
  }

  #waitingLines(): boolean {
    return this.#length > 0 || this.#producer?.pending() === true;
  }

  readonly #startLate = (): void => {
    this.#timer = undefined;
    if (!this.#writing && (this.#waitingLines() || this.#dropped > 0)) this.#start();
  };

  /** Calls back once every line handed in so far is written (or the descriptor failed). */
  flush(cb?: (err?: Error | null) => void): void {
    if (!this.#writing && !this.#waitingLines()) {
      cb?.();
      return;
    }
    if (cb) this.#waiting.push(cb);
    if (!this.#writing) this.#start();
  }

  /** For the very end (a crash): whatever is not written yet, written now, blocking. */
  flushSync(): void {
    this.#producer?.drain(this);
    // A stream that failed has closed the descriptor: its number may belong to something else now.
    if (this.#length === 0 || this.#streamError !== undefined || this.#stream?.destroyed === true) return;
    try {
      writeSync(this.#fd, this.#filling, 0, this.#length);
    } catch {
      // Nowhere left to say it.
    }
    this.#length = 0;
  }

  #grow(needed: number): boolean {
    if (needed > this.#maxBytes) return false;
    let size = this.#filling.length;
    while (size < needed) size *= 2;
    const bigger = Buffer.allocUnsafe(Math.min(size, this.#maxBytes));
    this.#filling.copy(bigger, 0, 0, this.#length);
    this.#filling = bigger;
    return true;
  }

  /** Swaps the buffers and writes the full one. */
  #start(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    this.#producer?.drain(this);
    if (this.#dropped > 0) this.#noteDropped();
    const out = this.#filling;
    const length = this.#length;
    this.#filling = this.#spare;
    this.#spare = out;
    this.#length = 0;
    this.#writing = true;
    this.#writes++;
    this.#send(out, 0, length);
  }

  /** Says how many lines were dropped, once there is room again (else keeps counting). */
  #noteDropped(): void {
    const note = `{"level":40,"time":${this.#now()},"msg":"log lines dropped: the log's reader fell behind","dropped":${this.#dropped}}\n`;
    if (this.#length + note.length > this.#filling.length && !this.#grow(this.#length + note.length)) return;
    this.#length += this.#filling.write(note, this.#length);
    this.#dropped = 0;
  }

  #send(buffer: Buffer, offset: number, length: number): void {
    if (this.#stream !== undefined) {
      if (this.#streamError !== undefined || this.#stream.destroyed) return this.#sent(this.#streamError ?? new Error('the log stream is closed'));
      // Called back once all of it is written, however long the reader takes; the buffer is not
      // reused before (the other one fills meanwhile).
      this.#stream.write(buffer.subarray(offset, offset + length), (err) => this.#sent(err ?? null));
      return;
    }
    if (this.#isFile) return this.#sendSync(buffer, offset, length);
    write(this.#fd, buffer, offset, length, null, (err, written) => {
      if (err && (err as NodeJS.ErrnoException).code === 'EAGAIN') {
        setTimeout(() => this.#send(buffer, offset, length), RETRY_MS);
        return;
      }
      if (!err && written < length) return this.#send(buffer, offset + written, length - written);
      this.#sent(err);
    });
  }

  /** A regular file: written now; the completion is still reported asynchronously, as for the others. */
  #sendSync(buffer: Buffer, offset: number, length: number): void {
    let err: Error | null = null;
    try {
      let done = 0;
      while (done < length) done += writeSync(this.#fd, buffer, offset + done, length - done);
    } catch (error) {
      err = error as Error;
    }
    queueMicrotask(() => this.#sent(err));
  }

  /** A buffer is out (or failed): start the next if it is due. */
  #sent(err: Error | null): void {
    this.#writing = false;
    if (err) {
      // A descriptor that cannot be written (closed stdout): lines go nowhere, the proxy goes on.
      this.#length = 0;
      this.#settle(err);
      return;
    }
    // More came meanwhile: written at once if it is a batch or someone waits for it, else soon.
    if (this.#length >= this.#minBytes || (this.#waiting.length > 0 && this.#waitingLines()) || this.#dropped > 0) this.#start();
    else if (this.#waitingLines()) this.#timer ??= setTimeout(this.#startLate, this.#maxDelayMs).unref();
    else this.#settle(null);
  }

  #settle(err: Error | null): void {
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const cb of waiting) cb(err);
  }
}

/** A regular file or a character device that never blocks on write (/dev/null); not a terminal. */
function isRegularFile(fd: number): boolean {
  try {
    const stat = fstatSync(fd);
    return stat.isFile() || (stat.isCharacterDevice() && !isatty(fd));
  } catch {
    return false;
  }
}

/**
 * A pipe or a socket as a libuv stream, non-blocking (libuv sets O_NONBLOCK on it), not keeping
 * the process alive by itself; undefined for anything else (a file, a terminal), or if it
 * cannot be opened as one.
 */
function streamOf(fd: number): Socket | undefined {
  try {
    const stat = fstatSync(fd);
    if (!stat.isFIFO() && !stat.isSocket()) return undefined;
    const stream = new Socket({ fd, readable: false, writable: true });
    stream.unref();
    return stream;
  } catch {
    return undefined;
  }
}
