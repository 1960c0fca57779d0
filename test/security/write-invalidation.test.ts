/**
 * Threat: a write that the instance accepts under another spelling of an id (`/projects/02`,
 * `/projects/2/`) must not leave the answers of that resource cached. Write paths are parsed
 * exactly as read paths are (src/api/route.ts), so the invalidation tag is the canonical one.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { proxyOverEmulator } from '../helpers/setup.js';

const env = proxyOverEmulator();

async function write(method: string, path: string, token: string): Promise<number> {
  const res = await request(`${env.proxy.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: '{}',
  });
  await res.body.dump();
  return res.statusCode;
}

describe('a successful write drops what it names, however the id is spelled', () => {
  it.each([
    ['PATCH', '/api/v1/projects/0:id'],
    ['PUT', '/api/v1/projects/00:id/'],
    ['POST', '/api/v1/projects/0:id/runs'],
  ])('%s %s', async (method, spelling) => {
    const { token, project_ids } = env.emulator.tokens.member(0);
    const project = project_ids[0]!;
    const cached = [`/api/v1/projects/${project}`, `/api/v1/projects/${project}/runs?per_page=15`];
    for (const path of cached) {
      await env.proxy.get(path, token);
      expect((await env.proxy.get(path, token)).headers['cache-status'], path).toMatch(/hit/);
    }
    expect(await write(method, spelling.replace(':id', String(project)), token)).toBeLessThan(300);
    for (const path of cached) {
      expect((await env.proxy.get(path, token)).headers['cache-status'], path).toMatch(/fwd=uri-miss/);
    }
  });
});
