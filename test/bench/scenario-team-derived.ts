/**
 * Scenario "team-derived": one team polling 12 panels that overlap as a real dashboard's do (the
 * project; the active runs list and detail panels for three of its runs; a run's results at two
 * page sizes; the milestones list at two page sizes and one milestone of it; the open sessions and
 * one of them), every 10 s with their own tokens, as "team-dashboards" polls (time compressed by
 * `--team-scale`), with derived answers on and off, in both sharing modes.
 *
 * Seven of the 12 are derivable from the other five (docs/how-it-works.md, "Derived answers"):
 * each run, the milestone and the session from their list, the smaller pages from the larger.
 * Reported: upstream requests per freshness period, offload, and the most a per-question cache
 * can offload at default settings (each question refreshed once per ttl: `ceilingOf`).
 */
import { fmt, printTable, type Check } from './report.js';
import { startEmulator, type Emulator } from './servers.js';
import { ceilingOf, makeTeam, runTeam, type TeamOptions, type TeamRun } from './scenario-team-dashboards.js';
import type { ProjectFacts } from './questions.js';

/** The target of offload with derived answers, sharing by project, a team of ten (the per-question ceiling is 96.7 %). */
const TARGET = 0.98;

/**
 * The project-mode variant's `access.projectConfirmMs` (the default is 30 s). Each member's access
 * is confirmed once per that time, by a fill under their token or a request of its own: with N
 * members, Q questions nothing derives and answers fresh for T, a period asks at least
 * max(Q, N × T ÷ projectConfirmMs) requests.
 */
const LONGER_CONFIRM_MS = 60_000;

interface Overlap {
  readonly runIds: readonly number[];
  readonly sessionId: number;
}

/** Three open runs of the active runs panel's first page, and an open session of the sessions panel. */
async function overlapOf(emulator: Emulator, f: ProjectFacts): Promise<Overlap> {
  const admin = emulator.tokens.find((t) => t.is_admin)!;
  const get = async (path: string): Promise<{ result: { id: number }[] }> => {
    const res = await fetch(`${emulator.url}/api/v1${path}`, { headers: { authorization: `Bearer ${admin.token}` } });
    if (res.status !== 200) throw new Error(`emulator GET ${path} → ${res.status}`);
    return (await res.json()) as { result: { id: number }[] };
  };
  const runs = (await get(`/projects/${f.projectId}/runs?is_closed=0&per_page=25`)).result;
  const sessions = (await get(`/projects/${f.projectId}/sessions?is_closed=0&per_page=15`)).result;
  if (runs.length < 3 || sessions.length === 0) throw new Error(`project ${f.projectId} has fewer than 3 open runs or no open session`);
  return { runIds: runs.slice(0, 3).map((r) => r.id), sessionId: sessions[0]!.id };
}

/** The 12 overlapping panels; the project's first (its rename is watched). */
function overlappingPanels(f: ProjectFacts, o: Overlap): string[] {
  const p = `/api/v1/projects/${f.projectId}`;
  const run = o.runIds[0]!;
  return [
    p,
    `${p}/runs?is_closed=0&per_page=25&expands=statuses`,
    ...o.runIds.map((id) => `/api/v1/runs/${id}?expands=statuses`),
    `/api/v1/runs/${run}/results?per_page=25`,
    `/api/v1/runs/${run}/results?per_page=15`,
    `${p}/milestones?per_page=25&expands=milestone_stats`,
    `${p}/milestones?per_page=15&expands=milestone_stats`,
    `/api/v1/milestones/${f.milestoneId}?expands=milestone_stats`,
    `${p}/sessions?is_closed=0&per_page=15`,
    `/api/v1/sessions/${o.sessionId}`,
  ];
}

export async function runTeamDerivedScenario(dir: string, options: TeamOptions): Promise<{ checks: Check[] }> {
  const emulator = await startEmulator('large');
  const runs: (TeamRun & { derive: boolean; confirmMs?: number })[] = [];
  try {
    const { facts, members } = await makeTeam(emulator, Math.max(...options.teams));
    const panels = overlappingPanels(facts, await overlapOf(emulator, facts));
    for (const size of options.teams) {
      for (const mode of ['user', 'project'] as const) {
        for (const derive of [false, true]) {
          const run = await runTeam(dir, emulator, { facts, members: members.slice(0, size) }, mode, options, { name: 'team-derived', panels, derive });
          runs.push({ ...run, derive });
        }
      }
      // What confirming each member's access half as often buys (an answer revoked upstream is then served up to a minute longer).
      const variant = { name: 'team-derived', panels, derive: true, projectConfirmMs: LONGER_CONFIRM_MS };
      const run = await runTeam(dir, emulator, { facts, members: members.slice(0, size) }, 'project', options, variant);
      runs.push({ ...run, derive: true, confirmMs: LONGER_CONFIRM_MS });
    }
  } finally {
    await emulator.proc.stop();
  }
  printTable(
    `9. Team dashboards whose panels overlap (a list and its items, a page at two sizes): derived answers off and on; default settings, time ×${options.scale}`,
    ['members', 'sharing', 'derived', 'upstream / ttl period', 'offload', 'per-question ceiling', 'errors', 'upstream by route'],
    runs.map((r) => [
      String(r.members),
      r.confirmMs === undefined ? r.mode : `${r.mode}, projectConfirmMs ${r.confirmMs / 1000} s`,
      r.derive ? 'on' : 'off',
      fmt(r.perPeriod, 1),
      `${fmt(100 * r.offload, 1)}%`,
      `${fmt(100 * r.ceiling, 1)}%`,
      String(r.errors),
      Object.entries(r.upstreamByRoute)
        .map(([route, n]) => `${route.replace('GET /api/v1', '')} ${n}`)
        .join(', '),
    ]),
    [
      "12 panels: the project; active runs (25, statuses) and 3 of its runs; a run's results at 25 and 15; milestones at 25 and 15 and one of them; open sessions and one of them.",
      'Derivable: the 3 runs, the milestone and the session from their lists, the 15-pages from the 25-pages (7 of 12). Per-question ceiling: 1 − questions ÷ polls per ttl.',
    ],
    true,
  );
  const checks: Check[] = [];
  for (const size of options.teams) {
    for (const mode of ['user', 'project'] as const) {
      const on = runs.find((r) => r.members === size && r.mode === mode && r.derive && r.confirmMs === undefined)!;
      const off = runs.find((r) => r.members === size && r.mode === mode && !r.derive)!;
      const target = size === 10 && mode === 'project';
      checks.push({
        name: `team of ${size}, overlapping panels, sharing ${mode}: offload with derived answers (off: ${fmt(off.offload, 3)})`,
        value: on.offload,
        target: `${target ? `≥ ${TARGET}` : 'info'} (per-question ceiling ${fmt(ceilingOf(size, mode), 3)})`,
        pass: target ? on.offload >= TARGET && on.errors === 0 : undefined,
      });
    }
    const longer = runs.find((r) => r.members === size && r.confirmMs !== undefined)!;
    checks.push({
      name: `team of ${size}, overlapping panels, sharing project, access.projectConfirmMs ${LONGER_CONFIRM_MS / 1000} s: offload with derived answers`,
      value: longer.offload,
      target: 'info',
      pass: undefined,
    });
  }
  return { checks };
}
