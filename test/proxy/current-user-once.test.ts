/**
 * A cold `GET /user` through tm-cache costs the instance one `GET /user`: the identity look-up it
 * triggers asks exactly that question under the caller's credential, and its 200 is the fill's
 * answer (pipeline.ts, read-through.ts `prefetched`). Stored like any fill: the next is a hit.
 */
import { describe, expect, it } from 'vitest';
import { proxyOverEmulator } from '../helpers/setup.js';

const env = proxyOverEmulator();
const USER_ROUTE = 'GET /api/v1/user';

describe('a cold GET /user', () => {
  it('is answered from the identity look-up it triggers: one request to the instance, then hits', async () => {
    const member = env.emulator.tokens.member(1);
    const first = await env.proxy.get('/api/v1/user', member.token);
    expect(first.status).toBe(200);
    expect(first.json().id).toBe(member.user_id);
    expect(first.headers['cache-status']).toMatch(/fwd=uri-miss.*stored/);
    expect((await env.emulator.stats()).by_route[USER_ROUTE]).toBe(1);
    const second = await env.proxy.get('/api/v1/user', member.token);
    expect(second.headers['cache-status']).toMatch(/hit/);
    expect(second.body.equals(first.body)).toBe(true);
    expect((await env.emulator.stats()).by_route[USER_ROUTE]).toBe(1);
  });

  it('any other question still asks its own fill after the look-up', async () => {
    const member = env.emulator.tokens.member(2);
    expect((await env.proxy.get(`/api/v1/projects/${member.project_ids[0]!}`, member.token)).status).toBe(200);
    const stats = await env.emulator.stats();
    expect(stats.by_route[USER_ROUTE]).toBe(1);
    expect(stats.by_route['GET /api/v1/projects/{project_id}']).toBe(1);
  });
});
