import { describe, expect, it } from 'vitest';
import { generateDataset } from '../../src/emulator/dataset.js';

const data = generateDataset({ seed: 42, scale: 'small' });

describe('the small dataset', () => {
  it.each([
    ['projects', data.projects.length, 5],
    ['runs', data.runs.length, 300],
    ['sessions', data.sessions.length, 50],
    ['milestones', data.milestones.length, 40],
    ['automation sources', data.sources.length, 20],
    ['roles', data.roles.length, 8],
    ['groups', data.groups.length, 6],
    ['users', data.users.length, 25],
    ['results', data.results.size, 20_000],
    ['custom statuses', data.statuses.filter((s) => s.id > 6).length, 1],
  ])('has at least the issue’s number of %s', (_, n, min) => {
    expect(n).toBeGreaterThanOrEqual(min);
  });

  it('has a milestone hierarchy: children whose root is a root milestone', () => {
    const children = data.milestones.filter((m) => m.parent_id !== null);
    expect(children.length).toBeGreaterThan(5);
    for (const c of children) expect(data.milestones[c.root_id! - 1]!.root_id).toBeNull();
    expect(children.some((c) => c.root_id !== c.parent_id)).toBe(true);
  });

  it('has several results per test and exactly one latest per tested test', () => {
    const perTest = new Map<number, { n: number; latest: number }>();
    for (let i = 0; i < data.results.size; i++) {
      const e = perTest.get(data.results.int('test_id', i)) ?? { n: 0, latest: 0 };
      e.n++;
      e.latest += data.results.int('is_latest', i);
      perTest.set(data.results.int('test_id', i), e);
    }
    expect([...perTest.values()].every((e) => e.latest === 1)).toBe(true);
    expect([...perTest.values()].filter((e) => e.n > 1).length).toBeGreaterThan(perTest.size / 2);
  });

  it('mixes active and closed, completed and retired', () => {
    for (const flags of [
      data.runs.map((r) => r.is_closed),
      data.sessions.map((s) => s.is_closed),
      data.milestones.map((m) => m.is_completed),
      data.projects.map((p) => p.is_completed),
      data.sources.map((s) => s.is_retired),
    ]) {
      expect(flags).toContain(true);
      expect(flags).toContain(false);
    }
  });

  it('is the same for the same seed and differs for another', () => {
    const again = generateDataset({ seed: 42, scale: 'small' });
    expect(again.runs.map((r) => r.name)).toEqual(data.runs.map((r) => r.name));
    expect(again.results.size).toBe(data.results.size);
    expect(generateDataset({ seed: 7, scale: 'small' }).runs.map((r) => r.name)).not.toEqual(data.runs.map((r) => r.name));
  });
});
