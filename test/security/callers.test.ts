/**
 * What a client can and cannot do to other callers, over real HTTP against the real emulator:
 * one caller never receives another's answers, the shared admin scope is read only by verified
 * admins, and a revoked token or project access stops being served.
 */
import { describe, expect, it } from 'vitest';
import { httpGet } from '../helpers/proxy.js';
import { proxyOverEmulator } from '../helpers/setup.js';
import { DEFAULT_CONFIG } from '../../src/config/schema.js';

let clock = Date.now();
const now = () => clock;

const env = proxyOverEmulator({ identity: { ttlMs: 60_000 }, access: { ttlMs: 300_000 } }, now);

describe('callers never receive each other’s data', () => {
  it('gives each member exactly what the instance gives them, for the same URL', async () => {
    const members = [env.emulator.tokens.member(0), env.emulator.tokens.member(1), env.emulator.tokens.member(2), env.emulator.tokens.noAccess()];
    for (let round = 0; round < 2; round++) {
      for (const m of members) {
        const viaProxy = await env.proxy.get('/api/v1/projects?per_page=100', m.token);
        const direct = await httpGet(`${env.emulator.url}/api/v1/projects?per_page=100`, m.token);
        expect(viaProxy.body.equals(direct.body)).toBe(true);
        expect(
          viaProxy
            .json()
            .result.map((p: { id: number }) => p.id)
            .sort(),
        ).toEqual([...m.project_ids].sort());
      }
    }
  });

  it('relays the instance 403/404 byte for byte to a member without access, even when another member has it cached', async () => {
    const owner = env.emulator.tokens.member(0);
    const outsider = env.emulator.tokens.noAccess();
    const project = owner.project_ids[0]!;
    for (const path of [`/api/v1/projects/${project}/runs`, `/api/v1/projects/${project}/milestones`, `/api/v1/projects/${project}`]) {
      expect((await env.proxy.get(path, owner.token)).status).toBe(200);
      const denied = await env.proxy.get(path, outsider.token);
      const direct = await httpGet(env.emulator.url + path, outsider.token);
      expect([403, 404]).toContain(direct.status);
      expect(denied.status).toBe(direct.status);
      expect(denied.body.equals(direct.body)).toBe(true);
      expect(denied.headers['content-type']).toBe(direct.headers['content-type']);
      // Never stored: asking again goes upstream again.
      await env.proxy.get(path, outsider.token);
    }
    const stats = await env.emulator.stats();
    expect(stats.by_token[outsider.token]).toBeGreaterThanOrEqual(6);
  });

  it('shares admin-only answers among verified admins only; a member gets the instance 403 every time', async () => {
    const admin = env.emulator.tokens.admin();
    const member = env.emulator.tokens.member(0);
    const first = await env.proxy.get('/api/v1/roles', admin.token);
    expect(first.status).toBe(200);
    expect((await env.proxy.get('/api/v1/roles', admin.token)).headers['cache-status']).toMatch(/hit/);
    for (let i = 0; i < 2; i++) {
      const denied = await env.proxy.get('/api/v1/roles', member.token);
      const direct = await httpGet(`${env.emulator.url}/api/v1/roles`, member.token);
      expect(denied.status).toBe(403);
      expect(denied.body.equals(direct.body)).toBe(true);
    }
    const routes = (await env.emulator.stats()).by_route;
    expect(routes['GET /api/v1/roles']).toBe(1 + 2 + 2); // admin's fill, member's two via proxy, two direct
  });

  it('refuses a token revoked upstream once the identity TTL has passed, with the instance 401', async () => {
    const member = env.emulator.tokens.member(2);
    const path = `/api/v1/projects/${member.project_ids[0]}/runs`;
    expect((await env.proxy.get(path, member.token)).status).toBe(200);
    await env.emulator.mutate({ op: 'revoke_token', token: member.token });
    clock += 61_000;
    const res = await env.proxy.get(path, member.token);
    expect(res.status).toBe(401);
    const direct = await httpGet(`${env.emulator.url}/api/v1/user`, member.token);
    expect(res.body.equals(direct.body)).toBe(true);
  });

  it('shares one user’s entries between that user’s tokens', async () => {
    const m = env.emulator.tokens.member(1);
    const second = (await env.emulator.mutate({ op: 'issue_token', user_id: m.user_id })) as { token: string };
    const path = `/api/v1/projects/${m.project_ids[0]}/sessions?per_page=15`;
    const first = await env.proxy.get(path, m.token);
    const other = await env.proxy.get(path, second.token);
    expect(other.headers['cache-status']).toMatch(/^tm-cache; hit/);
    expect(other.body.equals(first.body)).toBe(true);
    expect((await env.emulator.stats()).by_route['GET /api/v1/projects/{project_id}/sessions']).toBe(1);
  });

  it('stops serving a project’s entries once access to it is revoked upstream and its confirmation lapses', async () => {
    const m = env.emulator.tokens.member(0);
    const project = m.project_ids[0]!;
    const path = `/api/v1/projects/${project}/runs?per_page=15&order=asc`;
    expect((await env.proxy.get(path, m.token)).status).toBe(200);
    await env.emulator.mutate({ op: 'revoke_project', user_id: m.user_id, project_id: project });
    try {
      clock += DEFAULT_CONFIG.access.projectConfirmMs + 1;
      // The user's access to the project is confirmed upstream before anything of it is served
      // again (access-confirmation.ts): the first request past the window sees the instance's answer.
      const res = await env.proxy.get(path, m.token);
      const direct = await httpGet(env.emulator.url + path, m.token);
      expect(direct.status).toBe(404);
      expect(res.status).toBe(404);
      expect(res.body.equals(direct.body)).toBe(true);
    } finally {
      await env.emulator.mutate({ op: 'grant_project', user_id: m.user_id, project_id: project });
    }
  });

  it('answers a request without Authorization 401 itself, as the instance would, never asking it nor caching', async () => {
    const before = (await env.emulator.stats()).by_route['GET /api/v1/projects'] ?? 0;
    for (let i = 0; i < 2; i++) {
      const res = await env.proxy.get('/api/v1/projects');
      expect(res.status).toBe(401);
      expect(res.headers['cache-status']).toBeUndefined();
      expect(res.headers['www-authenticate']).toBe('Bearer');
      expect(res.json().errors.authorization[0]).toMatch(/Authorization: Bearer/);
    }
    expect((await env.emulator.stats()).by_route['GET /api/v1/projects'] ?? 0).toBe(before);
  });
});
