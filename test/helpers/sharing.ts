/** What the tests of sharing by project (`cache.sharing: project`) share: who to test with, and what a shared hit looks like. */
import type { TokenInfo } from '../../src/emulator/state.js';
import type { TestProxy, TestResponse } from './proxy.js';

/** Two members of one project (`a` fills, `b` reads) among the emulator's tokens, on a project `fits` accepts; throws when there are none. */
export function twoMembersOfOneProject(
  all: readonly TokenInfo[],
  fits: (projectId: number) => boolean = () => true,
): { a: TokenInfo; b: TokenInfo; projectId: number } {
  const members = all.filter((t) => !t.is_admin && t.project_ids.length > 0);
  for (const a of members) {
    for (const b of members) {
      const projectId = b === a ? undefined : a.project_ids.find((p) => b.project_ids.includes(p) && fits(p));
      if (projectId !== undefined) return { a, b, projectId };
    }
  }
  throw new Error('the emulator has no two members sharing a project that fits the test');
}

/** A hit on a project's shared entry. */
export const isSharedHit = (res: TestResponse): boolean => /^tm-cache; hit;.*key=project$/.test(String(res.headers['cache-status'] ?? ''));

/** Reads until the answer is a shared hit (proof earned on the way), at most `tries` times; the last answer. */
export async function readUntilSharedHit(p: TestProxy, path: string, token: string, tries = 4): Promise<TestResponse> {
  let res = await p.get(path, token);
  for (let i = 1; i < tries && !isSharedHit(res); i++) res = await p.get(path, token);
  return res;
}
