/**
 * An instance that compresses its answers although tm-cache asks for identity: a minimal HTTP
 * server stands in for it here, since the emulator (rightly) never does that.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync, gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';

let upstream: Server;
let proxy: TestProxy;
const seen: Array<string | undefined> = [];
const PROJECTS = JSON.stringify({ page: 1, prev_page: null, next_page: null, last_page: 1, per_page: 100, total: 0, result: [], expands: {} });

beforeAll(async () => {
  upstream = createServer((req, res) => {
    seen.push(req.headers['accept-encoding']);
    const body = req.url === '/api/v1/user' ? JSON.stringify({ id: 7, name: 'Zed' }) : PROJECTS;
    res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    res.end(gzipSync(body));
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  proxy = await startTestProxy(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`);
});
afterAll(async () => {
  await proxy?.close();
  await new Promise((resolve) => upstream.close(resolve));
});

describe('an instance that compresses anyway', () => {
  it('is asked for identity; its encoded /user is still read, its encoded answers relayed as they are and never stored', async () => {
    for (let i = 0; i < 2; i++) {
      const res = await proxy.get('/api/v1/projects', 'tok');
      expect(res.status).toBe(200);
      expect(res.headers['content-encoding']).toBe('gzip');
      expect(gunzipSync(res.body).toString()).toBe(PROJECTS);
      expect(res.headers['cache-status']).toMatch(/fwd=uri-miss; fwd-status=200$/);
    }
    expect(seen).toEqual(['identity', 'identity', 'identity']); // /user once, /projects twice
  });
});
