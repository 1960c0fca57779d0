/**
 * Node's own floor for a cache hit: a bare `node:http` server that answers every request with
 * tm-cache's own answer to the measured page, as tm-cache sent it (its status, its headers, its
 * body), from one fixed Buffer and one fixed header list: no routing, no identity, no key, no
 * lookup, no record. What tm-cache's hit costs beyond this is the cache's own work; what this costs
 * beyond Varnish or nginx is Node's.
 *
 * A client that accepts gzip gets tm-cache's gzip answer (its headers and stored bytes), as
 * tm-cache's memory tier sends it; any other the identity answer.
 *
 *   node --import tsx test/bench/floor-server.ts --port 8083 --answers answers.json [--spin-us 5]
 *
 * `answers.json`: `{ "identity": { "status", "headers": [name, value, ...], "body": file }, "gzip": {...} }`.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { keepTickObjectShape } from '../../src/tick-shape.js';

// As tm-cache serve does first: without it, a process's CPU per request depends on whether V8 forgot the tick objects' shape (src/tick-shape.ts).
keepTickObjectShape();

export interface FloorAnswer {
  readonly status: number;
  /** Name, value, name, value...: what tm-cache sent, less what node writes itself (date, connection, keep-alive). */
  readonly headers: string[];
  /** The body's file. */
  readonly body: string;
}

const { values } = parseArgs({ options: { port: { type: 'string' }, answers: { type: 'string' }, 'spin-us': { type: 'string' } } });
/** Busy work per request, in µs (default none): what a few µs of JavaScript on a hit cost the floor, all told. */
const spinUs = Number(values['spin-us'] ?? 0);
const answers = JSON.parse(readFileSync(values.answers!, 'utf8')) as Record<'identity' | 'gzip', FloorAnswer>;
const load = (a: FloorAnswer) => ({ status: a.status, headers: a.headers, body: readFileSync(a.body) });
const identity = load(answers.identity);
const gzip = load(answers.gzip);

const server = createServer((req, res) => {
  if (spinUs > 0) for (const until = performance.now() + spinUs / 1_000; performance.now() < until;);
  const a = req.headers['accept-encoding']?.includes('gzip') === true ? gzip : identity;
  res.writeHead(a.status, a.headers);
  res.end(a.body);
});
server.listen(Number(values.port), '127.0.0.1');
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => server.close(() => process.exit(0)));
