/**
 * The floor of a miss in node: a bare `http` server that forwards each request to the upstream
 * through an undici Pool (a raw dispatch handler, the body collected into one buffer of the
 * announced length) and writes the answer back. No routing, no identity, no key, no cache: what
 * tm-cache's miss costs beyond this is the cache's own work (npm run bench -- ab:miss --bare-proxy).
 *
 *   node --import tsx test/bench/bare-proxy.ts --port 8082 --upstream http://127.0.0.1:8080
 */
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { Pool, type Dispatcher } from 'undici';
import { keepTickObjectShape } from '../../src/tick-shape.js';

// As tm-cache serve does first: without it, a process's CPU per request depends on whether V8 forgot the tick objects' shape (src/tick-shape.ts).
keepTickObjectShape();

const { values } = parseArgs({ options: { port: { type: 'string' }, upstream: { type: 'string' } } });
const pool = new Pool(values.upstream!, { connections: 8 });

const server = createServer((req, res) => {
  let status = 0;
  let contentType = 'application/json';
  let body: Buffer | undefined;
  let filled = 0;
  const chunks: Buffer[] = [];
  const handler: Dispatcher.DispatchHandler = {
    onRequestStart() {},
    onResponseStart(_controller, statusCode, headers) {
      status = statusCode;
      contentType = String(headers['content-type'] ?? contentType);
      const length = Number(headers['content-length']);
      if (Number.isSafeInteger(length)) body = Buffer.allocUnsafe(length);
    },
    onResponseData(_controller, chunk) {
      if (body !== undefined) filled += chunk.copy(body, filled);
      else chunks.push(chunk);
    },
    onResponseEnd() {
      const out = body ?? Buffer.concat(chunks);
      res.writeHead(status, ['content-type', contentType, 'content-length', String(out.length)]);
      res.end(out);
    },
    onResponseError(_controller, err) {
      res.writeHead(502).end(String(err));
    },
  };
  pool.dispatch({ path: req.url!, method: 'GET', headers: { authorization: req.headers.authorization ?? '', accept: 'application/json' } }, handler);
});
server.listen(Number(values.port), '127.0.0.1');
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => server.close(() => process.exit(0)));
