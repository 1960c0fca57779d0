/**
 * The baseline of the cache-hit bench: a bare fastify route that sends exactly the bytes and the
 * content-type tm-cache sends for the measured page, from a Buffer in memory. Anything tm-cache
 * costs beyond this is the cache's own work (routing, identity, key, lookup, headers).
 *
 *   node --import tsx test/bench/bare-server.ts --port 8081 --body page.json --content-type 'application/json; charset=utf-8'
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import fastify from 'fastify';
import { keepTickObjectShape } from '../../src/tick-shape.js';

// As tm-cache serve does first: without it, a process's CPU per request depends on whether V8 forgot the tick objects' shape (src/tick-shape.ts).
keepTickObjectShape();

const { values } = parseArgs({
  options: { port: { type: 'string' }, body: { type: 'string' }, 'content-type': { type: 'string' } },
});
const body = readFileSync(values.body!);
const contentType = values['content-type']!;

const app = fastify({ logger: false });
app.get('/*', (_request, reply) => {
  void reply.header('content-type', contentType).send(body);
});
await app.listen({ host: '127.0.0.1', port: Number(values.port) });

for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => void app.close().then(() => process.exit(0)));
