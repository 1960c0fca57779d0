/**
 * Threat: a client that asks for `100 Continue` before sending its body (curl does for bodies
 * over 1 KiB, and for every chunked body) must have its write forwarded like any other: tm-cache
 * says `100 Continue` itself, reads the body and sends it on. The expectation is met at this hop
 * and not asked of the instance again (RFC 9110 §10.1.1), so the instance's answer is the one
 * the client gets, never a 502 for a write that was never sent.
 */
import type { IncomingMessage } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHostileUpstream, type HostileUpstream } from '../helpers/hostile.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { sendAfterContinue } from '../helpers/raw-request.js';
import { proxyOverEmulator } from '../helpers/setup.js';

const env = proxyOverEmulator();
const FRAMINGS = ['chunked', 'content-length'] as const;
const WRITE = 'POST /api/v1/runs/{run_id}/results';

describe('a passthrough write sent after 100 Continue is answered as the instance answers it', () => {
  it.each(FRAMINGS)('a member’s POST with a %s body is forwarded once and answered 204', async (framing) => {
    const { token } = env.emulator.tokens.member(0);
    const headers = { authorization: `Bearer ${token}` };
    const res = await sendAfterContinue(env.proxy.url, 'POST', '/api/v1/runs/1/results', headers, '{"results":[]}', framing);
    expect(res.interim).toEqual([100]);
    expect(res.status).toBe(204);
    expect((await env.emulator.stats()).by_route[WRITE]).toBe(1);
  });

  it.each(FRAMINGS)('an unknown token’s POST with a %s body gets the instance’s 401', async (framing) => {
    const headers = { authorization: 'Bearer not-a-token' };
    const res = await sendAfterContinue(env.proxy.url, 'POST', '/api/v1/runs/1/results', headers, '{"results":[]}', framing);
    expect(res.interim).toEqual([100]);
    expect(res.status).toBe(401);
    expect(JSON.parse(res.text)).toEqual({ message: 'Unauthenticated.', errors: {} });
    expect((await env.emulator.stats()).by_route[WRITE]).toBe(1);
  });
});

describe('the body sent after 100 Continue reaches the instance whole', () => {
  let upstream: HostileUpstream;
  let proxy: TestProxy;
  beforeAll(async () => {
    upstream = await startHostileUpstream();
    proxy = await startTestProxy(upstream.url);
  });
  afterAll(async () => {
    await proxy?.close();
    await upstream?.close();
  });

  it.each(FRAMINGS)('with a %s body, and without the expectation tm-cache already met', async (framing) => {
    const received: { body: string; expect: string | undefined }[] = [];
    upstream.answer = (req, res) => {
      void bodyOf(req).then((body) => {
        received.push({ body, expect: req.headers.expect });
        res.writeHead(201, { 'content-type': 'application/json' }).end('{"created":true}');
      });
      return true;
    };
    const body = JSON.stringify({ results: [{ status_id: 1, comment: 'x'.repeat(2_000) }] });
    const res = await sendAfterContinue(proxy.url, 'POST', '/api/v1/runs/1/results', { authorization: 'Bearer u1' }, body, framing);
    expect(res.status).toBe(201);
    expect(received).toEqual([{ body, expect: undefined }]);
  });
});

async function bodyOf(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString();
}
