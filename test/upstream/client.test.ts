/**
 * The upstream client against a real HTTP server on a free port: bodies collected whole (with a
 * Content-Length and without), the size bound, and the lane's slots, which every way an answer
 * ends (whole, too large, refused) gives back exactly once.
 */
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UpstreamClient, UpstreamError, type UpstreamOptions } from '../../src/upstream/client.js';
import { findFreePort } from '../helpers/ports.js';

const BODY = Buffer.from(JSON.stringify({ result: Array.from({ length: 2_000 }, (_, i) => ({ id: i, name: `run ${i}` })) }));
let server: Server;
let url: string;
/** Answers held back by /slow until the test lets them go. */
const held: ServerResponse[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    if (req.url === '/length') return void res.writeHead(200, { 'content-type': 'application/json', 'content-length': BODY.length }).end(BODY);
    if (req.url === '/chunked') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write(BODY.subarray(0, 1000));
      return void setTimeout(() => res.end(BODY.subarray(1000)), 5);
    }
    if (req.url === '/slow') return void held.push(res);
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

function options(over: Partial<UpstreamOptions> = {}): UpstreamOptions {
  return {
    url,
    connectTimeoutMs: 2_000,
    headersTimeoutMs: 5_000,
    bodyTimeoutMs: 5_000,
    connections: 4,
    maxConcurrent: 4,
    maxQueue: 4,
    maxPerUser: 8,
    maxBodyBytes: 1 << 20,
    ...over,
  };
}

describe('UpstreamClient', () => {
  it('collects a body whole, announced by Content-Length or chunked, and frees its slot', async () => {
    const client = new UpstreamClient(options());
    try {
      for (const path of ['/length', '/chunked']) {
        const res = await client.get(path, {});
        expect(res.status).toBe(200);
        expect(res.body.equals(BODY)).toBe(true);
        expect(client.load).toEqual({ active: 0, queued: 0 });
      }
    } finally {
      await client.close();
    }
  });

  it('fails an answer above maxBodyBytes as too-large, and frees its slot', async () => {
    const client = new UpstreamClient(options({ maxBodyBytes: 1_000 }));
    try {
      for (const path of ['/length', '/chunked']) {
        const err = await client.get(path, {}).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(UpstreamError);
        expect((err as UpstreamError).code).toBe('too-large');
        expect(client.load).toEqual({ active: 0, queued: 0 });
      }
    } finally {
      await client.close();
    }
  });

  it('queues past maxConcurrent, refuses past maxQueue, and runs the queued one when a slot frees', async () => {
    const client = new UpstreamClient(options({ maxConcurrent: 1, maxQueue: 1 }));
    try {
      const first = client.get('/slow', {});
      const second = client.get('/length', {});
      const third = await client.get('/length', {}).catch((e: unknown) => e);
      expect((third as UpstreamError).code).toBe('queue-full');
      expect(client.load).toEqual({ active: 1, queued: 1 });
      await expect.poll(() => held.length).toBe(1);
      held.shift()!.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      expect((await first).body.toString()).toBe('{}');
      expect((await second).body.equals(BODY)).toBe(true);
      expect(client.load).toEqual({ active: 0, queued: 0 });
    } finally {
      await client.close();
    }
  });

  it('refuses a user past maxPerUser while another user’s request still queues, and runs it next', async () => {
    const client = new UpstreamClient(options({ maxConcurrent: 1, maxQueue: 4, maxPerUser: 2 }));
    try {
      const first = client.get('/slow', {}, 7);
      const second = client.get('/length', {}, 7);
      const third = await client.get('/length', {}, 7).catch((e: unknown) => e);
      expect((third as UpstreamError).code).toBe('queue-full');
      const other = client.get('/length', {}, 8);
      expect(client.load).toEqual({ active: 1, queued: 2 });
      await expect.poll(() => held.length).toBe(1);
      held.shift()!.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      expect((await first).status).toBe(200);
      expect((await second).body.equals(BODY)).toBe(true);
      expect((await other).body.equals(BODY)).toBe(true);
      expect(client.load).toEqual({ active: 0, queued: 0 });
    } finally {
      await client.close();
    }
  });

  it('fails a refused connection as connect, and frees its slot', async () => {
    const client = new UpstreamClient(options({ url: `http://127.0.0.1:${await findFreePort()}` }));
    try {
      const err = await client.get('/length', {}).catch((e: unknown) => e);
      expect((err as UpstreamError).code).toBe('connect');
      expect(client.load).toEqual({ active: 0, queued: 0 });
    } finally {
      await client.close();
    }
  });
});
