/**
 * The access log line, written straight to the logger's destination in pino's own format
 * (`{"level":30,"time":…,"pid":…,"hostname":…, fields…, "msg":"access"}`), so that log
 * processors see one format. Built by hand because it is written for every request, hits
 * included: pino's generic serializer costs several microseconds per line, more than the rest
 * of a memory hit's bookkeeping. Strings from the request (path, request id, User-Agent) are
 * escaped as JSON; absent fields are left out.
 *
 * With `tm-cache serve`'s LogSink (log-sink.ts), a request's line is not even formatted on its
 * path: its fields (strings it already has, numbers) are kept in columns, and the lines are written
 * in batches, as bytes straight into the sink's buffer, when the sink is about to write (at most
 * `maxDelayMs` later) or the columns are full. No string or object is made for a line: the fields
 * that repeat from one line to the next (the millisecond, method and operation, path, status,
 * outcome, client and User-Agent) are copied as the bytes the last line made of them, the rest
 * written byte by byte. Access lines may then follow, by a few milliseconds, a warning logged after
 * them; each carries its own time. What it costs a memory hit, per destination, is measured by the
 * bench's `ab:access-log`.
 *
 * A logger without a reachable destination (a custom one) gets the same fields through
 * `logger.info`; a destination that takes strings (not a LogSink) gets each line at once.
 */
import { pino, type Logger } from 'pino';
import type { LineBytes, LineProducer } from './log-sink.js';

/** A line's fields, as `logger.info` gets them from a logger without a reachable destination. */
interface AccessFields {
  readonly reqId: string;
  readonly method: string;
  readonly op: string;
  readonly path: string;
  readonly status: number;
  readonly ms: number;
  readonly outcome: string;
  readonly tier?: string | undefined;
  /** Whose entry answered (decided requests): `user`, `admin` or `project` (`cache.sharing: project`), never an id. */
  readonly scope?: string | undefined;
  readonly detail?: string | undefined;
  readonly upstreamStatus?: number | undefined;
  readonly upstreamMs?: number | undefined;
  readonly user?: number | undefined;
  readonly bytes?: number | undefined;
  readonly aborted?: boolean | undefined;
  /** The address the request came from (the socket's peer: a load balancer's, behind one). */
  readonly client?: string | undefined;
  /** The client's User-Agent, as sent (escaped; cut to `MAX_USER_AGENT_CHARS`). */
  readonly userAgent?: string | undefined;
  /** The parameters a 400/422 refused, comma-separated, as its body's `errors` names them. */
  readonly refused?: string | undefined;
}

/**
 * One access line's fields, as values: owned by the caller (the recorder keeps one and fills it
 * for every line, as lru-cache's `Status` is owned by its caller and filled field by field), read
 * by `AccessLog.request` and not kept: no object per line. Absent fields are undefined. Every
 * field is set here, so every row has one shape; `ms` and `time` start as doubles (NaN) and stay
 * so, written in place rather than boxed anew on each line.
 */
export class AccessRow {
  reqId = '';
  method = '';
  /** The operation: a catalogue id, `invalid`, `unknown` or `passthrough`. */
  op = '';
  /** The request target as received: its query is cut when the line is written, never logged. */
  target = '';
  status = 0;
  /** The request's duration, unrounded. */
  ms = NaN;
  outcome = '';
  tier: string | undefined = undefined;
  /** Whose entry answered (decided requests): `user`, `admin` or `project`, never an id. */
  scope: string | undefined = undefined;
  detail: string | undefined = undefined;
  upstreamStatus: number | undefined = undefined;
  /** Unrounded. */
  upstreamMs: number | undefined = undefined;
  user: number | undefined = undefined;
  bytes: number | undefined = undefined;
  aborted = false;
  /** The parameters a 400/422 refused, comma-separated. */
  refused: string | undefined = undefined;
  client: string | undefined = undefined;
  userAgent: string | undefined = undefined;
  /** The clock reading the line is dated with (ms since epoch). */
  time = NaN;
}

/** A User-Agent longer than this is cut: a line per request must not carry a client's essay. */
const MAX_USER_AGENT_CHARS = 256;

interface Destination {
  write(line: string): unknown;
}

/** A destination that takes lines kept aside (LogSink). */
interface BatchingDestination extends Destination {
  produceFrom(producer: LineProducer): void;
  absorb(): void;
  wake(): void;
}

/** Request lines kept aside before they are formatted: at most this many (then formatted at once). */
const BATCH_LINES = 128;

export class AccessLog implements LineProducer {
  readonly #logger: Logger;
  readonly #stream: Destination | undefined;
  /** pino's bindings (`,"pid":…,"hostname":…`), as the bytes every line carries after its time. */
  readonly #bindings: Uint8Array;
  /**
   * Requests' fields, column by column: kept aside until the sink drains them (a batching
   * destination), else one line's, formatted at once.
   */
  readonly #batch: Batch;
  /** The value of pino's level info (a line is written at it). */
  readonly #info: number;
  /** Where a line formatted at once is written before it is made a string (other destinations). */
  #scratch: Buffer = Buffer.alloc(0);
  /** The runs of fields repeated from the last line that had them (`#write`), and what made them. */
  #headTime = -1;
  #head: Buffer = EMPTY;
  #method = '';
  #op = '';
  #methodOp: Buffer = EMPTY;
  #target = '';
  #path: Buffer = EMPTY;
  #status = -1;
  #statusMs: Buffer = EMPTY;
  #outcome = '';
  #tier: string | undefined;
  #scope: string | undefined;
  #outcomeTierScope: Buffer = EMPTY;
  #client: string | undefined = '';
  #userAgent: string | undefined = '';
  #clientEnd: Buffer = EMPTY;
  #segmentScratch: Buffer = EMPTY;

  constructor(logger: Logger) {
    this.#logger = logger;
    const symbols = pino.symbols as unknown as Record<string, symbol>;
    const target = logger as unknown as Record<symbol, unknown>;
    const stream = target[symbols['streamSym']!] as Destination | undefined;
    const bindings = target[symbols['chindingsSym']!];
    // Only pino's plain JSON format (no formatters, no custom message key) is written directly.
    this.#stream = typeof stream?.write === 'function' && typeof bindings === 'string' ? stream : undefined;
    this.#bindings = Buffer.from(typeof bindings === 'string' ? bindings : '');
    const sink = this.#stream !== undefined && isBatching(this.#stream) ? this.#stream : undefined;
    this.#batch = new Batch(sink === undefined ? 1 : BATCH_LINES, sink);
    sink?.produceFrom(this);
    this.#info = logger.levels.values['info'] ?? 30;
  }

  /** False while the logger is above info (warn, error, silent...): nothing to build. */
  get enabled(): boolean {
    return this.#logger.levelVal <= this.#info;
  }

  /**
   * A request's line, from the row its caller owns and filled (AccessRow: one per caller, reused
   * for every line, so no object is made per line). With a batching destination the row's values
   * are copied into columns and the line is formatted when the sink drains them; else now.
   */
  request(row: Readonly<AccessRow>): void {
    const stream = this.#stream;
    if (stream === undefined) {
      const fields: AccessFields = {
        reqId: row.reqId,
        method: row.method,
        op: row.op,
        path: pathOf(row.target),
        status: row.status,
        ms: round(row.ms),
        outcome: row.outcome,
        tier: row.tier,
        scope: row.scope,
        detail: row.detail,
        upstreamStatus: row.upstreamStatus,
        upstreamMs: row.upstreamMs === undefined ? undefined : round(row.upstreamMs),
        user: row.user,
        bytes: row.bytes,
        aborted: row.aborted || undefined,
        refused: row.refused,
        client: row.client,
        userAgent: row.userAgent === undefined ? undefined : cut(row.userAgent),
      };
      this.#logger.info(fields, 'access');
      return;
    }
    const b = this.#batch;
    const i = b.n++;
    // One request's fields side by side (a row), not spread over a column each: the request's path
    // touches two or three cache lines for its line, not nineteen.
    const r = i * STRINGS;
    const strings = b.strings;
    strings[r + S_REQ_ID] = row.reqId;
    strings[r + S_METHOD] = row.method;
    strings[r + S_OP] = row.op;
    strings[r + S_TARGET] = row.target;
    strings[r + S_OUTCOME] = row.outcome;
    strings[r + S_TIER] = row.tier;
    strings[r + S_SCOPE] = row.scope;
    strings[r + S_DETAIL] = row.detail;
    strings[r + S_REFUSED] = row.refused;
    strings[r + S_CLIENT] = row.client;
    strings[r + S_USER_AGENT] = row.userAgent;
    const v = i * NUMBERS;
    const numbers = b.numbers;
    numbers[v + N_STATUS] = row.status;
    numbers[v + N_MS] = row.ms;
    numbers[v + N_UPSTREAM_STATUS] = row.upstreamStatus ?? -1;
    numbers[v + N_UPSTREAM_MS] = row.upstreamMs ?? NaN;
    numbers[v + N_USER] = row.user ?? -1;
    numbers[v + N_BYTES] = row.bytes ?? -1;
    numbers[v + N_ABORTED] = row.aborted ? 1 : 0;
    numbers[v + N_TIME] = row.time;
    const sink = b.sink;
    if (sink === undefined) {
      b.n = 0;
      stream.write(this.#formatted(0));
    } else if (i === 0) sink.wake();
    else if (b.n === BATCH_LINES) sink.absorb();
  }

  /** LineProducer: lines kept aside? */
  pending(): boolean {
    return this.#batch.n > 0;
  }

  /** LineProducer: the lines kept aside, written into the sink's buffer, in order. */
  drain(into: LineBytes): void {
    const n = this.#batch.n;
    this.#batch.n = 0;
    for (let i = 0; i < n; i++) {
      const at = into.reserve(this.#bound(i));
      if (at !== -1) into.commit(this.#write(into.buffer, at, i));
    }
  }

  /** The line of slot `i`, as a string (a destination that takes strings). */
  #formatted(i: number): string {
    const bound = this.#bound(i);
    if (this.#scratch.length < bound) this.#scratch = Buffer.allocUnsafe(Math.max(bound, 1024));
    return this.#scratch.toString('utf8', 0, this.#write(this.#scratch, 0, i));
  }

  /**
   * The most bytes the line of slot `i` can take: its fixed parts and numbers (at most 24 bytes
   * each), and 6 bytes per character of its strings (`\uXXXX`, the longest escape).
   */
  #bound(i: number): number {
    const strings = this.#batch.strings;
    const r = i * STRINGS;
    let chars = Math.min(strings[r + S_USER_AGENT]?.length ?? 0, MAX_USER_AGENT_CHARS);
    for (let k = 0; k < S_USER_AGENT; k++) chars += strings[r + k]?.length ?? 0;
    return FIXED_BYTES + this.#bindings.length + 6 * chars;
  }

  /**
   * Writes the line of slot `i` into `buf` from `at` (room for `#bound(i)` bytes); returns where it
   * ends. pino's format, field for field what `JSON.stringify` of the fields would give, but ASCII:
   * a character outside printable ASCII is written as its `\uXXXX` escape (equal JSON). Every string
   * is escaped, whoever chose it; the path is the target up to its query (a query is never logged),
   * the User-Agent at most `MAX_USER_AGENT_CHARS` characters. No string or object is made.
   *
   * The runs of fields that repeat from line to line (the time and bindings; method and operation;
   * status; outcome, tier and scope; client and User-Agent) are kept as bytes from the last line
   * that had them and copied whole (one memmove), not written again character by character: most
   * of a busy proxy's lines share them with the line before.
   */
  // eslint-disable-next-line max-lines-per-function -- one line's bytes written in one pass, field by field, with the runs copied whole: split, each part would re-read the batch's columns
  #write(buf: Buffer, at: number, i: number): number {
    const strings = this.#batch.strings;
    const numbers = this.#batch.numbers;
    const r = i * STRINGS;
    const v = i * NUMBERS;
    const time = numbers[v + N_TIME]!;
    if (time !== this.#headTime) {
      // A new millisecond: its digits written over the last one's (as many, for the next 260 years).
      const count = digits(time);
      if (count !== 0 && count === digits(this.#headTime)) putInt(this.#head, K_HEAD.length, time);
      else
        this.#head = this.#segment(FIXED_BYTES + this.#bindings.length, (s) =>
          putBytes(s, putBytes(s, putInt(s, putBytes(s, 0, K_HEAD), time), this.#bindings), K_REQ_ID),
        );
      this.#headTime = time;
    }
    at = copy(buf, at, this.#head);
    const reqId = strings[r + S_REQ_ID]!;
    at = putString(buf, at, reqId, reqId.length);
    const method = strings[r + S_METHOD]!;
    const op = strings[r + S_OP]!;
    if (method !== this.#method || op !== this.#op) {
      this.#method = method;
      this.#op = op;
      this.#methodOp = this.#segment(FIXED_BYTES + 6 * (method.length + op.length), (s) =>
        putBytes(s, putString(s, putBytes(s, putString(s, putBytes(s, 0, K_METHOD), method, method.length), K_OP), op, op.length), K_PATH),
      );
    }
    at = copy(buf, at, this.#methodOp);
    const target = strings[r + S_TARGET]!;
    // A poller asks the same target again and again.
    if (target !== this.#target) {
      this.#target = target;
      this.#path = this.#segment(2 + 6 * target.length, (s) => putPath(s, 0, target));
    }
    at = copy(buf, at, this.#path);
    const status = numbers[v + N_STATUS]!;
    if (status !== this.#status) {
      this.#status = status;
      this.#statusMs = this.#segment(FIXED_BYTES, (s) => putBytes(s, putInt(s, putBytes(s, 0, K_STATUS), status), K_MS));
    }
    at = copy(buf, at, this.#statusMs);
    at = putMs(buf, at, numbers[v + N_MS]!);
    const outcome = strings[r + S_OUTCOME]!;
    const tier = strings[r + S_TIER];
    const scope = strings[r + S_SCOPE];
    if (outcome !== this.#outcome || tier !== this.#tier || scope !== this.#scope) {
      this.#outcome = outcome;
      this.#tier = tier;
      this.#scope = scope;
      this.#outcomeTierScope = this.#segment(FIXED_BYTES + 6 * (outcome.length + (tier?.length ?? 0) + (scope?.length ?? 0)), (s) => {
        let n = putString(s, putBytes(s, 0, K_OUTCOME), outcome, outcome.length);
        if (tier !== undefined) n = putString(s, putBytes(s, n, K_TIER), tier, tier.length);
        if (scope !== undefined) n = putString(s, putBytes(s, n, K_SCOPE), scope, scope.length);
        return n;
      });
    }
    at = copy(buf, at, this.#outcomeTierScope);
    const detail = strings[r + S_DETAIL];
    if (detail !== undefined) at = putString(buf, putBytes(buf, at, K_DETAIL), detail, detail.length);
    const upstreamStatus = numbers[v + N_UPSTREAM_STATUS]!;
    if (upstreamStatus >= 0) at = putInt(buf, putBytes(buf, at, K_UPSTREAM_STATUS), upstreamStatus);
    const upstreamMs = numbers[v + N_UPSTREAM_MS]!;
    if (!Number.isNaN(upstreamMs)) at = putMs(buf, putBytes(buf, at, K_UPSTREAM_MS), upstreamMs);
    const user = numbers[v + N_USER]!;
    if (user >= 0) at = putInt(buf, putBytes(buf, at, K_USER), user);
    const bytes = numbers[v + N_BYTES]!;
    if (bytes >= 0) at = putInt(buf, putBytes(buf, at, K_BYTES), bytes);
    if (numbers[v + N_ABORTED] === 1) at = putBytes(buf, at, K_ABORTED);
    const refused = strings[r + S_REFUSED];
    if (refused !== undefined) at = putString(buf, putBytes(buf, at, K_REFUSED), refused, refused.length);
    const client = strings[r + S_CLIENT];
    const userAgent = strings[r + S_USER_AGENT];
    // Compared by value: each connection has its own address string, each request its own User-Agent.
    if (client !== this.#client || userAgent !== this.#userAgent) {
      this.#client = client;
      this.#userAgent = userAgent;
      this.#clientEnd = this.#segment(FIXED_BYTES + 6 * ((client?.length ?? 0) + Math.min(userAgent?.length ?? 0, MAX_USER_AGENT_CHARS)), (s) => {
        let n = 0;
        if (client !== undefined) n = putString(s, putBytes(s, n, K_CLIENT), client, client.length);
        if (userAgent !== undefined) n = putString(s, putBytes(s, n, K_USER_AGENT), userAgent, Math.min(userAgent.length, MAX_USER_AGENT_CHARS));
        return putBytes(s, n, K_END);
      });
    }
    return copy(buf, at, this.#clientEnd);
  }

  /** A run of fields as bytes of its own, written by `write` from 0 (at most `bound` bytes). */
  #segment(bound: number, write: (into: Buffer) => number): Buffer {
    if (this.#segmentScratch.length < bound) this.#segmentScratch = Buffer.allocUnsafe(bound);
    return Buffer.from(this.#segmentScratch.subarray(0, write(this.#segmentScratch)));
  }
}

/** Where each field of a request's row is: strings in `Batch.strings`, ... */
const S_REQ_ID = 0;
const S_METHOD = 1;
const S_OP = 2;
const S_TARGET = 3;
const S_OUTCOME = 4;
const S_TIER = 5;
const S_SCOPE = 6;
const S_DETAIL = 7;
const S_REFUSED = 8;
const S_CLIENT = 9;
/** The last: `#bound` counts the ones before it whole, and it cut. */
const S_USER_AGENT = 10;
const STRINGS = 11;
/** ... and numbers in `Batch.numbers` (-1 or NaN: absent; aborted 0 or 1). */
const N_STATUS = 0;
const N_MS = 1;
const N_UPSTREAM_STATUS = 2;
const N_UPSTREAM_MS = 3;
const N_USER = 4;
const N_BYTES = 5;
const N_ABORTED = 6;
const N_TIME = 7;
const NUMBERS = 8;

/** The requests' fields kept aside, a row per request: strings as references, numbers unboxed. */
class Batch {
  n = 0;
  readonly strings: (string | undefined)[];
  readonly numbers: Float64Array;

  constructor(
    size: number,
    /** The batching destination that drains them; none: each line is formatted at once. */
    readonly sink: BatchingDestination | undefined,
  ) {
    this.strings = new Array<string | undefined>(size * STRINGS).fill('');
    this.numbers = new Float64Array(size * NUMBERS);
  }
}

function isBatching(stream: Destination): stream is BatchingDestination {
  const s = stream as Partial<BatchingDestination>;
  return typeof s.produceFrom === 'function' && typeof s.absorb === 'function' && typeof s.wake === 'function';
}

const round = (ms: number): number => Math.round(ms * 100) / 100;

/** The path of a request target, without its query: queries may carry secrets, logs never do. */
export function pathOf(url: string | undefined): string {
  const u = url ?? '';
  const end = pathLength(u);
  return end === u.length ? u : u.slice(0, end);
}

/** How many characters of a request target are its path: up to its query or fragment. */
function pathLength(target: string): number {
  const end = target.search(/[?#]/);
  return end === -1 ? target.length : end;
}

const cut = (userAgent: string): string => (userAgent.length > MAX_USER_AGENT_CHARS ? userAgent.slice(0, MAX_USER_AGENT_CHARS) : userAgent);

/** A line's fixed parts as bytes: every key, with the punctuation around it. */
const ascii = (text: string): Uint8Array => Buffer.from(text, 'latin1');
const K_HEAD = ascii('{"level":30,"time":');
const K_REQ_ID = ascii(',"reqId":');
const K_METHOD = ascii(',"method":');
const K_OP = ascii(',"op":');
const K_PATH = ascii(',"path":');
const K_STATUS = ascii(',"status":');
const K_MS = ascii(',"ms":');
const K_OUTCOME = ascii(',"outcome":');
const K_TIER = ascii(',"tier":');
const K_SCOPE = ascii(',"scope":');
const K_DETAIL = ascii(',"detail":');
const K_UPSTREAM_STATUS = ascii(',"upstreamStatus":');
const K_UPSTREAM_MS = ascii(',"upstreamMs":');
const K_USER = ascii(',"user":');
const K_BYTES = ascii(',"bytes":');
const K_ABORTED = ascii(',"aborted":true');
const K_REFUSED = ascii(',"refused":');
const K_CLIENT = ascii(',"client":');
const K_USER_AGENT = ascii(',"userAgent":');
const K_END = ascii(',"msg":"access"}\n');
/** Every fixed part of a line, and 24 bytes for each of its numbers (7): more than any line's share. */
const FIXED_BYTES =
  [
    K_HEAD,
    K_REQ_ID,
    K_METHOD,
    K_OP,
    K_PATH,
    K_STATUS,
    K_MS,
    K_OUTCOME,
    K_TIER,
    K_SCOPE,
    K_DETAIL,
    K_UPSTREAM_STATUS,
    K_UPSTREAM_MS,
    K_USER,
    K_BYTES,
    K_ABORTED,
    K_REFUSED,
    K_CLIENT,
    K_USER_AGENT,
    K_END,
  ].reduce((sum, k) => sum + k.length + 2, 0) +
  7 * 24;

const EMPTY: Buffer = Buffer.alloc(0);
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const HEX = ascii('0123456789abcdef');

/** A run of bytes, copied whole (one memmove: cheaper than a loop past a dozen bytes). */
function copy(buf: Uint8Array, at: number, bytes: Uint8Array): number {
  buf.set(bytes, at);
  return at + bytes.length;
}

/** A few bytes (a key), copied one by one: under a dozen or so, cheaper than `copy`'s memmove. */
function putBytes(buf: Uint8Array, at: number, bytes: Uint8Array): number {
  const n = bytes.length;
  for (let k = 0; k < n; k++) buf[at + k] = bytes[k]!;
  return at + n;
}

/** `s`'s first `n` characters as a JSON string (quoted, escaped; ASCII). */
function putString(buf: Uint8Array, at: number, s: string, n: number): number {
  buf[at++] = QUOTE;
  for (let k = 0; k < n; k++) {
    const c = s.charCodeAt(k);
    if (c >= 0x20 && c < 0x7f && c !== QUOTE && c !== BACKSLASH) buf[at++] = c;
    else at = putEscape(buf, at, c);
  }
  buf[at++] = QUOTE;
  return at;
}

/** A request target's path (up to its query or fragment) as a JSON string. */
function putPath(buf: Uint8Array, at: number, target: string): number {
  return putString(buf, at, target, pathLength(target));
}

/** A character that a JSON string cannot hold as it is, or that is not ASCII: its escape. */
function putEscape(buf: Uint8Array, at: number, c: number): number {
  buf[at++] = BACKSLASH;
  if (c === QUOTE || c === BACKSLASH) buf[at++] = c;
  else if (c === 0x0a)
    buf[at++] = 0x6e; // \n
  else if (c === 0x0d)
    buf[at++] = 0x72; // \r
  else if (c === 0x09)
    buf[at++] = 0x74; // \t
  else {
    buf[at++] = 0x75; // \uXXXX
    buf[at++] = HEX[(c >> 12) & 15]!;
    buf[at++] = HEX[(c >> 8) & 15]!;
    buf[at++] = HEX[(c >> 4) & 15]!;
    buf[at++] = HEX[c & 15]!;
  }
  return at;
}

/** How many digits `putInt` writes for `n`, a whole number from 0 to 2^53; anything else 0. */
function digits(n: number): number {
  if (!(n >= 0 && n <= Number.MAX_SAFE_INTEGER && Math.floor(n) === n)) return 0;
  let count = 1;
  for (let p = 10; p <= n; p *= 10) count++;
  return count;
}

/** A whole number as JSON writes it (up to 2^53); anything else (never expected) as `String(n)` would. */
function putInt(buf: Uint8Array, at: number, n: number): number {
  const count = digits(n);
  if (count === 0) return putAscii(buf, at, JSON.stringify(n));
  const end = at + count;
  let k = end;
  do {
    const q = Math.floor(n / 10);
    buf[--k] = 0x30 + (n - q * 10);
    n = q;
  } while (n > 0);
  return end;
}

/** Milliseconds rounded to hundredths, as JSON writes `Math.round(ms * 100) / 100` (`1.2`, `0.05`, `3`). */
function putMs(buf: Uint8Array, at: number, ms: number): number {
  const hundredths = Math.round(ms * 100);
  if (!(hundredths >= 0 && hundredths <= Number.MAX_SAFE_INTEGER)) return putAscii(buf, at, JSON.stringify(round(ms)));
  const whole = Math.floor(hundredths / 100);
  at = putInt(buf, at, whole);
  const fraction = hundredths - whole * 100;
  if (fraction !== 0) {
    const tenths = Math.floor(fraction / 10);
    buf[at++] = 0x2e; // .
    buf[at++] = 0x30 + tenths;
    if (fraction !== tenths * 10) buf[at++] = 0x30 + (fraction - tenths * 10);
  }
  return at;
}

/** Text known to be ASCII (a number's JSON), byte for byte. */
function putAscii(buf: Uint8Array, at: number, text: string): number {
  for (let k = 0; k < text.length; k++) buf[at++] = text.charCodeAt(k);
  return at;
}
