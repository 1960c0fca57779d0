/**
 * The access log, over real HTTP through a real tm-cache in front of the real emulator: one
 * structured line per request, hit, miss, local error or passthrough alike, with the request id
 * that the response echoes; never a credential, never a query; `log.access` and
 * `log.accessSample` choose which lines are written, and a reload changes them.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startProxy, type RunningProxy } from '../../src/serve.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, makeConfig } from '../helpers/proxy.js';
import { until } from '../helpers/wait.js';

type Line = Record<string, unknown>;
const lines: Line[] = [];
const raw: string[] = [];
let emulator: TestEmulator;
let proxy: RunningProxy;

const access = (): Line[] => lines.filter((l) => l['msg'] === 'access');

beforeAll(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      raw.push(chunk.toString());
      lines.push(JSON.parse(chunk.toString()) as Line);
      done();
    },
  });
  emulator = await startTestEmulator();
  proxy = await startProxy(makeConfig(emulator.url), { logger: pino({ level: 'info' }, sink) });
});
afterAll(async () => {
  await proxy?.close();
  await emulator?.close();
});
beforeEach(() => {
  lines.length = 0;
  raw.length = 0;
  proxy.reconfigure({ ...proxy.config, log: { access: 'all', accessSample: 1 } });
});

describe('the access log', () => {
  it('writes one line per request with id, method, operation, path, status, duration, outcome, tier, upstream status and time, user and bytes', async () => {
    const m = emulator.tokens.member(0);
    const path = `/api/v1/projects/${m.project_ids[0]}/runs?per_page=15`;
    const miss = await httpGet(proxy.url + path, m.token, { 'x-request-id': 'dashboard-42.poll-7' });
    const hit = await httpGet(proxy.url + path, m.token);
    expect(access()).toHaveLength(2);
    const [first, second] = access();
    expect(first).toMatchObject({
      level: 30,
      reqId: 'dashboard-42.poll-7',
      method: 'GET',
      op: 'listRuns',
      path: `/api/v1/projects/${m.project_ids[0]}/runs`,
      status: 200,
      outcome: 'miss',
      upstreamStatus: 200,
      user: m.user_id,
      bytes: miss.body.length,
    });
    expect(first!['ms']).toEqual(expect.any(Number));
    expect(first!['upstreamMs']).toEqual(expect.any(Number));
    expect(miss.headers['x-request-id']).toBe('dashboard-42.poll-7');
    expect(second).toMatchObject({ outcome: 'hit', tier: 'memory', status: 200, bytes: hit.body.length, user: m.user_id });
    expect(second!['upstreamStatus']).toBeUndefined();
    // No id given: one is made, and the response says which.
    expect(hit.headers['x-request-id']).toMatch(/^[0-9a-f]{12}-[0-9a-z]+$/);
    expect(second!['reqId']).toBe(hit.headers['x-request-id']);
    // The next one made is another.
    expect((await httpGet(proxy.url + path, m.token)).headers['x-request-id']).not.toBe(hit.headers['x-request-id']);
  });

  it("names the client's address and User-Agent, and for a refused request the parameter refused (never its value)", async () => {
    const m = emulator.tokens.member(0);
    const ua = 'dashboard/1.2 (wall screen; "quoted")';
    await httpGet(`${proxy.url}/api/v1/projects/${m.project_ids[0]}/runs?per_page=15`, m.token, { 'user-agent': ua });
    const refused = await httpGet(`${proxy.url}/api/v1/projects/${m.project_ids[0]}/runs?per_page=99999`, m.token, { 'user-agent': 'x'.repeat(1_000) });
    expect(refused.status).toBe(422);
    await httpGet(`${proxy.url}/api/v1/projects/${m.project_ids[0]}/cases`, m.token, { 'user-agent': ua });
    const [ok, invalid, forwarded] = access();
    expect(ok).toMatchObject({ status: 200, client: '127.0.0.1', userAgent: ua });
    expect(ok!['refused']).toBeUndefined();
    expect(invalid).toMatchObject({ status: 422, refused: 'per_page', client: '127.0.0.1', userAgent: 'x'.repeat(256) });
    expect(JSON.stringify(invalid)).not.toContain('99999');
    expect(forwarded).toMatchObject({ outcome: 'passthrough', client: '127.0.0.1', userAgent: ua });
  });

  it('gives a request with an unusable X-Request-Id (spaces, too long) a new id instead', async () => {
    const m = emulator.tokens.member(0);
    for (const given of ['has spaces in it', 'x'.repeat(129)]) {
      const res = await httpGet(`${proxy.url}/api/v1/projects/${m.project_ids[0]}/milestones`, m.token, { 'x-request-id': given });
      expect(res.headers['x-request-id']).toMatch(/^[0-9a-f]{12}-[0-9a-z]+$/);
    }
    expect(access().map((l) => l['reqId'])).not.toContain('has spaces in it');
  });

  it('writes local errors, refused credentials, 304s, HEADs and passthrough writes the same way', async () => {
    const m = emulator.tokens.member(0);
    const path = `/api/v1/projects/${m.project_ids[0]}/milestones`;
    const full = await httpGet(proxy.url + path, m.token);
    await httpGet(proxy.url + path, m.token, { 'if-none-match': String(full.headers['etag']) });
    await httpGet(proxy.url + path, m.token, {}, 'HEAD');
    await httpGet(`${proxy.url}/api/v1/projects/1/runs?per_page=7`, m.token);
    await httpGet(`${proxy.url}/api/v1/projects`, 'refused-token-value');
    const patched = await request(`${proxy.url}/api/v1/projects/${m.project_ids[0]}?notify=secret-value`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${m.token}`, 'content-type': 'application/json', 'x-request-id': 'write-1' },
      body: '{}',
    });
    await patched.body.dump();
    expect(patched.headers['x-request-id']).toBe('write-1');
    await until(() => access().length === 6);
    const [ok, notModified, head, invalid, refused, write] = access();
    expect(ok).toMatchObject({ status: 200, outcome: expect.stringMatching(/hit|miss/) });
    expect(notModified).toMatchObject({ status: 304, outcome: 'hit', bytes: 0 });
    expect(head).toMatchObject({ method: 'HEAD', status: 200, bytes: 0 });
    expect(invalid).toMatchObject({ status: 422, outcome: 'error', op: 'invalid' });
    expect(refused).toMatchObject({ status: 401, outcome: 'bypass', upstreamStatus: 401 });
    expect(refused!['user']).toBeUndefined();
    expect(write).toMatchObject({
      reqId: 'write-1',
      method: 'PATCH',
      op: 'passthrough',
      outcome: 'passthrough',
      path: `/api/v1/projects/${m.project_ids[0]}`,
      upstreamStatus: patched.statusCode,
      status: patched.statusCode,
    });
    // Never a credential, never a query (it may carry secrets).
    const all = raw.join('');
    expect(all).not.toContain(m.token);
    expect(all).not.toContain('refused-token-value');
    expect(all).not.toContain('secret-value');
    // The refused parameter is named, its value never is.
    expect(invalid).toMatchObject({ refused: 'per_page' });
    expect(all).not.toContain('per_page=7');
    expect(all).not.toMatch(/"per_page[^"]*":7/);
  });

  it('log.access=errors writes only failures; off writes nothing; a sample of 0 keeps only errors', async () => {
    const m = emulator.tokens.member(1);
    const ok = `${proxy.url}/api/v1/projects/${m.project_ids[0]}/milestones`;
    const bad = `${proxy.url}/api/v1/projects/1/runs?per_page=7`;
    const send = async () => {
      await httpGet(ok, m.token);
      await httpGet(bad, m.token);
    };
    proxy.reconfigure({ ...proxy.config, log: { access: 'errors', accessSample: 1 } });
    await send();
    expect(access().map((l) => l['status'])).toEqual([422]);
    lines.length = 0;
    proxy.reconfigure({ ...proxy.config, log: { access: 'off', accessSample: 1 } });
    await send();
    expect(access()).toEqual([]);
    proxy.reconfigure({ ...proxy.config, log: { access: 'all', accessSample: 0 } });
    await send();
    expect(access().map((l) => l['status'])).toEqual([422]);
  });
});
