/**
 * Scenario "team-dashboards": one team of 2, 5 or 10 members polling the same 12 panels of their
 * project every 10 s, each with their own token, against tm-cache in `cache.sharing: user` and
 * `project` mode. Time is compressed as in "dashboards" (scenario-dashboards.ts): every clock of
 * tm-cache that costs upstream requests (freshness, identity.ttlMs, access.projectConfirmMs,
 * access.grantTtlMs) and the poll interval are multiplied by `scale`.
 *
 * Reported per team size and mode, over the steady state (the first freshness period is the
 * warm-up): upstream requests per freshness period (ttl) against the floor, offload, and the time
 * until a change shows (the project renamed upstream; each member's project panel watched).
 *
 * The floor per freshness period: in `user` mode each member's 12 questions (12 × members); in
 * `project` mode the team's 12 questions, plus each member's proofs: a confirmation per
 * access.projectConfirmMs, a grant per area (6) per access.grantTtlMs, an identity per
 * identity.ttlMs, as if none were renewed by a fill under that member's token.
 *
 * The ceiling per freshness period, at default settings: every question the team polls is
 * refreshed about once per ttl (refresh-ahead keeps a polled answer fresh), so no cache offloads
 * more than 1 − questions refreshed ÷ polls. In `user` mode each member's 12 questions are their
 * own; in `project` mode the team's 12 are one set. None of the panels is settled (an open
 * project, an open run: `makeTeam`, `projectFacts`), so none lives the settled hour instead.
 */
import { Pool } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { projectFacts, timedGet, type ProjectFacts } from './questions.js';
import { fmt, printTable, type Check } from './report.js';
import { startEmulator, startTmCache, writeConfig, type Emulator, type TokenInfo } from './servers.js';

const DEFAULTS = { ttlMs: 30_000, staleWhileRevalidateMs: 30_000, identityTtlMs: 60_000, projectConfirmMs: 30_000, grantTtlMs: 300_000 };
const POLL_MS = 10_000;
const AREAS = 6;
/** The panels every member polls (`teamPanels`), and how many polls of each fall in one freshness period. */
const PANELS = 12;
const POLLS_PER_TTL = DEFAULTS.ttlMs / POLL_MS;

/** The most a per-question cache can offload at default settings: each question polled refreshed once per ttl, against every poll of it. */
export function ceilingOf(members: number, mode: 'user' | 'project'): number {
  const refreshed = mode === 'user' ? PANELS * members : PANELS;
  return 1 - refreshed / (members * PANELS * POLLS_PER_TTL);
}

export interface TeamOptions {
  readonly teams: readonly number[];
  readonly scale: number;
  readonly periods: number;
}

export interface TeamRun {
  readonly members: number;
  readonly mode: 'user' | 'project';
  readonly clientRequests: number;
  readonly upstreamRequests: number;
  readonly upstreamByRoute: Record<string, number>;
  readonly perPeriod: number;
  readonly floorPerPeriod: number;
  readonly offload: number;
  /** 1 − questions refreshed per ttl ÷ polls per ttl, at default settings (see the module's comment). */
  readonly ceiling: number;
  readonly changeShownMaxS: number;
  readonly changeShownSamples: number;
  readonly errors: number;
}

/** The 12 panels every member of the team polls: the same questions, the project's every area. */
export function teamPanels(f: ProjectFacts): string[] {
  const p = `/api/v1/projects/${f.projectId}`;
  return [
    p,
    `${p}/runs?is_closed=0&per_page=25&expands=users`,
    `${p}/runs?is_closed=1&per_page=15&sort=runs:closed_at`,
    `${p}/milestones?is_completed=0&per_page=15`,
    `${p}/milestones?per_page=15&expands=milestone_stats`,
    `${p}/sessions?is_closed=0&per_page=15&expands=users`,
    `${p}/sessions?per_page=15`,
    `${p}/automation/sources?is_retired=0&sort=automation_sources:ran_at&per_page=15`,
    `${p}/users?per_page=15`,
    `/api/v1/runs/${f.runId}?expands=statuses`,
    `/api/v1/runs/${f.runId}/results?per_page=25`,
    `/api/v1/runs/${f.runId}/results?get_latest_result=1&per_page=15`,
  ];
}

export async function runTeamDashboardsScenario(dir: string, options: TeamOptions): Promise<{ checks: Check[] }> {
  const emulator = await startEmulator('large');
  const runs: TeamRun[] = [];
  const biggest = Math.max(...options.teams);
  try {
    const { facts, members } = await makeTeam(emulator, biggest);
    for (const size of options.teams) {
      for (const mode of ['user', 'project'] as const) runs.push(await runTeam(dir, emulator, { facts, members: members.slice(0, size) }, mode, options));
    }
  } finally {
    await emulator.proc.stop();
  }
  const s = options.scale;
  printTable(
    `8. Team dashboards: one team polling the same 12 panels of its project every ${POLL_MS / 1_000} s with its members' own tokens; default settings, time ×${s}`,
    ['members', 'sharing', 'upstream / ttl period', 'floor', 'offload', 'ceiling', 'change shown (worst, s)', 'upstream by route'],
    runs.map((r) => [
      String(r.members),
      r.mode,
      fmt(r.perPeriod, 1),
      fmt(r.floorPerPeriod, 1),
      `${fmt(100 * r.offload, 1)}%`,
      `${fmt(100 * r.ceiling, 1)}%`,
      `${fmt(r.changeShownMaxS, 1)} (${r.changeShownSamples}/${r.members})`,
      Object.entries(r.upstreamByRoute)
        .map(([route, n]) => `${route.replace('GET /api/v1', '')} ${n}`)
        .join(', '),
    ]),
    [
      "Floor per freshness period (30 s): user mode 12 questions × members; project mode 12 questions + each member's proofs",
      '  (a confirmation per 30 s, 6 area grants per 5 min, an identity per 60 s), as if no fill renewed them. Unscaled seconds.',
      `Ceiling: each question polled is refreshed about once per ttl (refresh-ahead), none settled (open project, open run): 1 − refreshes ÷ polls per period.`,
      `  ${biggest} members, project mode: 1 − ${PANELS} ÷ (${biggest} × ${PANELS} panels × ${POLLS_PER_TTL} polls) = ${fmt(100 * ceilingOf(biggest, 'project'), 1)}%` +
        (ceilingOf(biggest, 'project') < 0.97 ? ': the 97 % target is above what any cache can offload at default settings.' : '.'),
    ],
    true,
  );
  const checks: Check[] = [];
  for (const size of options.teams) {
    const user = runs.find((r) => r.members === size && r.mode === 'user')!;
    const project = runs.find((r) => r.members === size && r.mode === 'project')!;
    const target = size === 10;
    checks.push({
      name: `team of ${size}: offload, sharing by project`,
      value: project.offload,
      // The issue's target, beside the most any cache can offload at default settings (the table's ceiling).
      target: `${target ? '≥ 0.97' : 'info'} (ceiling ${fmt(project.ceiling, 3)})`,
      pass: target ? project.offload >= 0.97 : undefined,
    });
    checks.push({ name: `team of ${size}: offload, per user`, value: user.offload, target: 'info', pass: undefined });
    checks.push({
      name: `team of ${size}: worst delay until a change shows, project vs user mode (s)`,
      value: project.changeShownMaxS,
      target: `≤ ${fmt(user.changeShownMaxS, 1)} s (user mode)`,
      pass: target ? project.changeShownSamples === size && project.changeShownMaxS <= user.changeShownMaxS : undefined,
      unit: 's',
    });
  }
  return { checks };
}

/** An open project and `size` members with access to it, tokens issued for each. */
export async function makeTeam(emulator: Emulator, size: number): Promise<{ facts: ProjectFacts; members: TokenInfo[] }> {
  const candidates = await emulator.issueTokens(Array.from({ length: 60 }, (_, i) => 6 + i));
  for (let id = 1; id <= 100; id++) {
    const facts = await projectFacts(emulator, id).catch(() => undefined);
    if (!facts || facts.completed) continue;
    const members = candidates.filter((t) => t.project_ids.includes(id));
    if (members.length >= size) return { facts, members: members.slice(0, size) };
  }
  throw new Error(`no open project with ${size} members among the first 60 users`);
}

/** What a team polls (12 panels), and whether tm-cache derives answers (`cache.derive.enabled`). */
export interface TeamVariant {
  readonly name: string;
  readonly panels: readonly string[];
  readonly derive: boolean;
  /** `access.projectConfirmMs` before the time scale, when not the default (a variant that shows what it costs). */
  readonly projectConfirmMs?: number;
}

export async function runTeam(
  dir: string,
  emulator: Emulator,
  { facts, members }: { facts: ProjectFacts; members: TokenInfo[] },
  mode: 'user' | 'project',
  options: TeamOptions,
  variant: TeamVariant = { name: 'team', panels: teamPanels(facts), derive: true },
): Promise<TeamRun> {
  const s = options.scale;
  const ttlMs = DEFAULTS.ttlMs * s;
  const pollMs = POLL_MS * s;
  const periodMs = ttlMs + DEFAULTS.staleWhileRevalidateMs * s;
  const confirmMs = variant.projectConfirmMs ?? DEFAULTS.projectConfirmMs;
  const config = writeConfig(dir, `${variant.name}-${members.length}-${mode}-${variant.derive ? 'derive' : 'no-derive'}-${confirmMs}`, {
    cache: {
      sharing: mode,
      derive: { enabled: variant.derive },
      freshness: { default: { ttlMs, staleWhileRevalidateMs: DEFAULTS.staleWhileRevalidateMs * s } },
    },
    identity: { ttlMs: DEFAULTS.identityTtlMs * s },
    access: { projectConfirmMs: confirmMs * s, grantTtlMs: DEFAULTS.grantTtlMs * s },
  });
  const proxy = await startTmCache(emulator.url, { name: `tm-cache (team ${members.length}, ${mode})`, env: { TM_CACHE_CONFIG: config } });
  const pool = new Pool(proxy.url, { connections: 64 });
  const panels = variant.panels;
  const warmupMs = periodMs;
  const totalMs = warmupMs + options.periods * periodMs;
  const mutateAtMs = totalMs - periodMs - 2 * pollMs;
  const name = `Renamed by the team bench ${Date.now()} (${members.length}, ${mode})`;
  let renamedAt: number | undefined;
  const shownAfter = new Map<number, number>();
  let client = 0;
  let errors = 0;
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  let atWarmup: Promise<{ total: number; by_route: Record<string, number> }> | undefined;
  try {
    const member = async (m: TokenInfo): Promise<void> => {
      const auth = { authorization: `Bearer ${m.token}` };
      const phase = Math.random() * pollMs;
      for (let k = 0; ; k++) {
        const due = phase + k * pollMs;
        if (due >= totalMs) return;
        const wait = due - now();
        if (wait > 0) await sleep(wait);
        await Promise.all(
          panels.map(async (path, i) => {
            const atMs = now();
            try {
              const got = await timedGet(pool, path, auth);
              if (atMs >= warmupMs) client++;
              if (got.status !== 200) errors++;
              if (i === 0 && renamedAt !== undefined && !shownAfter.has(m.user_id) && got.status === 200 && got.body.includes(name))
                shownAfter.set(m.user_id, now() - renamedAt);
            } catch {
              errors++;
            }
          }),
        );
      }
    };
    const control = (async () => {
      await sleep(warmupMs);
      atWarmup = emulator.stats();
      await sleep(Math.max(0, mutateAtMs - now()));
      await emulator.mutate({ op: 'rename_project', project_id: facts.projectId, name });
      renamedAt = now();
    })();
    await Promise.all([control, ...members.map(member)]);
  } finally {
    await pool.close();
    await proxy.proc.stop();
  }
  const elapsedMs = now();
  const [before, after] = [await atWarmup!, await emulator.stats()];
  const byRoute: Record<string, number> = {};
  for (const [route, n] of Object.entries(after.by_route)) {
    const d = n - (before.by_route[route] ?? 0);
    if (d > 0) byRoute[route] = d;
  }
  const upstream = after.total - before.total;
  const periods = (elapsedMs - warmupMs) / ttlMs;
  const n = members.length;
  const proofs = n * (DEFAULTS.ttlMs / DEFAULTS.projectConfirmMs + (AREAS * DEFAULTS.ttlMs) / DEFAULTS.grantTtlMs + DEFAULTS.ttlMs / DEFAULTS.identityTtlMs);
  const delays = [...shownAfter.values()].map((ms) => ms / 1_000 / s);
  return {
    members: n,
    mode,
    clientRequests: client,
    upstreamRequests: upstream,
    upstreamByRoute: byRoute,
    perPeriod: upstream / periods,
    floorPerPeriod: mode === 'user' ? panels.length * n : panels.length + proofs,
    offload: 1 - upstream / client,
    ceiling: ceilingOf(n, mode),
    changeShownMaxS: delays.length ? Math.max(...delays) : NaN,
    changeShownSamples: delays.length,
    errors,
  };
}
