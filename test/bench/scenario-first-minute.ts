/**
 * Scenario "first-minute": what a new deployment does in its first minute, at tm-cache's DEFAULT
 * settings (no `upstream.budget`: the learned budget; default freshness), against an instance
 * 150 ms away whose rate limit tm-cache is not told. Every figure beside a baseline measured in
 * the same run, its target and a verdict:
 * 1. a cold dashboard: wall time through tm-cache ÷ straight to the instance (first-minute-dashboards.ts);
 * 2. a team of ten opening the same panels and polling them (`cache.sharing: project`): upstream
 *    requests in the minute ÷ the floor, first-load p95 ÷ a lone cold load;
 * 3. 200 CI agents through 3 replicas + Redis against an instance that locks out (first-minute-fleet.ts);
 * 4. a fleet started during a lockout: how soon it serves at 80 % of the limit, and whether it stays;
 * and a rollout of two replicas under polling.
 */
import { coldDashboard, KNOWN_LIMIT, teamFirstMinute, type ColdDashboard, type TeamMinute } from './first-minute-dashboards.js';
import { ciFirstBurst, fleetDuringLockout, rolloutUnderPolling, type CiMinute, type Dashboard, type LockoutStart, type Rollout } from './first-minute-fleet.js';
import { describeInstance, LATENCY_MS, LIMIT_RPS, lockingInstance, PANELS_AT_ONCE, PLAIN_INSTANCE, tallyStatuses } from './first-minute-load.js';
import { ciQuestions, dashboardPanels, projectFacts, type ProjectFacts } from './questions.js';
import { fmt, maxCheck, printTable, ratioCheck, type Check } from './report.js';
import { usersSharingAProject } from './scenario-ci-burst.js';
import { makeTeam } from './scenario-team-dashboards.js';
import type { Emulator } from './servers.js';

export interface FirstMinuteOptions {
  readonly ciAgents: number;
  readonly ciUsers: number;
  readonly pollers: number;
  readonly lockoutS: number;
  /** Seconds measured after the lockout's end (figure 4). */
  readonly afterLockoutS: number;
  readonly rolloutWindowS: number;
}

const TEAM = 10;
const REPLICAS = 3;
const RECOVER_WITHIN_S = 10;

/** `count` users, each with a project they see that has an open run and a milestone (tokens issued from user 6 on). */
async function dashboardsFor(em: Emulator, count: number): Promise<Dashboard[]> {
  const facts = new Map<number, ProjectFacts | undefined>();
  const out: Dashboard[] = [];
  for (let next = 6; out.length < count && next < 6 + count * 3; next += 10) {
    const tokens = await em.issueTokens(Array.from({ length: 10 }, (_, i) => next + i)).catch(() => []);
    if (tokens.length === 0) break; // past the last user
    for (const user of tokens.filter((t) => !t.is_admin)) {
      for (const id of user.project_ids) {
        if (!facts.has(id)) facts.set(id, await projectFacts(em, id).catch(() => undefined));
        const f = facts.get(id);
        if (f) {
          out.push({ user, facts: f });
          break;
        }
      }
      if (out.length === count) break;
    }
  }
  if (out.length < count) throw new Error(`only ${out.length} of ${count} users with a project that has an open run and a milestone`);
  return out;
}

/** Every path answers 200 when asked of the instance directly, faults off: no typo'd question measured. */
async function assertAnswered(em: Emulator, token: string, paths: readonly string[]): Promise<void> {
  for (const path of paths) {
    const res = await fetch(em.url + path, { headers: { authorization: `Bearer ${token}` } });
    if (res.status !== 200) throw new Error(`${path} → ${res.status} from the emulator: ${(await res.text()).slice(0, 200)}`);
  }
}

export async function runFirstMinuteScenario(em: Emulator, o: FirstMinuteOptions): Promise<{ checks: Check[] }> {
  await em.faults({});
  const team = await makeTeam(em, TEAM);
  const ci = await usersSharingAProject(em, o.ciUsers);
  const ciFacts = await projectFacts(em, ci.projectId);
  const dashboards = await dashboardsFor(em, o.pollers);
  const dashUser = team.members[0]!;
  const { shared, own } = dashboardPanels(team.facts, dashUser.user_id);
  await assertAnswered(em, dashUser.token, [...shared, ...own]);
  await assertAnswered(em, ci.users[0]!.token, [...ciQuestions(ciFacts), ...dashboardPanels(ciFacts, ci.users[0]!.user_id).own]);
  const d0 = dashboardPanels(dashboards[0]!.facts, dashboards[0]!.user.user_id);
  await assertAnswered(em, dashboards[0]!.user.token, [...d0.shared, ...d0.own]);

  console.log(
    '   tm-cache at its DEFAULT settings: no upstream.budget configured (the learned budget: 10 req/s and a bucket of 5 to start, growing while demand exceeds it), default freshness;',
  );
  console.log(`   the instance ${LATENCY_MS} ms away with a rate limit tm-cache is not told (each part names it).`);
  try {
    const cold = await coldDashboard(em, team.facts, dashUser);
    const coldKnown = await coldDashboard(em, team.facts, dashUser, KNOWN_LIMIT);
    printCold(cold, coldKnown);
    const teamRun = await teamFirstMinute(em, team.facts, team.members);
    printTeam(teamRun);
    const burst = await ciFirstBurst(em, ciFacts, ci.users, { agents: o.ciAgents, replicas: REPLICAS, deadlineS: 60 });
    printCi(burst);
    const lockout = await fleetDuringLockout(em, dashboards, {
      replicas: REPLICAS,
      lockoutS: o.lockoutS,
      afterS: o.afterLockoutS,
      recoverWithinS: RECOVER_WITHIN_S,
    });
    printLockout(lockout);
    const rollout = await rolloutUnderPolling(em, dashboards.slice(0, 10), { warmS: 15, windowS: o.rolloutWindowS });
    printRollout(rollout);
    return { checks: checksOf(cold, coldKnown, teamRun, burst, lockout, rollout) };
  } finally {
    await em.faults({});
  }
}

const statusesOf = (r: Record<string, number>): string =>
  Object.entries(r)
    .map(([s, n]) => `${s}: ${n}`)
    .join(', ');
const okOf = (c: ColdDashboard): number => c.through.answers.filter((a) => a.status === 200).length;
const tmCache429sOf = (c: ColdDashboard): number => c.through.answers.filter((a) => a.status === 429).length;

function printCold(c: ColdDashboard, known: ColdDashboard): void {
  printTable(
    `First minute 1. A cold dashboard: ${c.panels} panels (the dashboards scenario's), ${PANELS_AT_ONCE} at a time; instance ${describeInstance(PLAIN_INSTANCE)}; a fresh tm-cache at its defaults`,
    ['path', 'wall ms', 'answers', 'upstream requests', '429s from the instance'],
    [
      ['straight to the instance', fmt(c.direct.ms, 0), statusesOf(tallyStatuses(c.direct.answers)), c.panels, '—'],
      ['through tm-cache', fmt(c.through.ms, 0), statusesOf(tallyStatuses(c.through.answers)), c.upstream, c.instance429s],
      [
        `through tm-cache told the limit (upstream.budget ${LIMIT_RPS} req/s, burst ${LIMIT_RPS}): not the defaults`,
        `${fmt(known.through.ms, 0)} (straight: ${fmt(known.direct.ms, 0)})`,
        statusesOf(tallyStatuses(known.through.answers)),
        known.upstream,
        known.instance429s,
      ],
    ],
    [
      `Target: through ÷ straight ≤ 1.2 (measured ${fmt(c.through.ms / c.direct.ms)}), every panel 200, no 429 from tm-cache. The limit is never reached by ${c.panels} requests.`,
    ],
  );
}

function printTeam(t: TeamMinute): void {
  const f = t.floor;
  printTable(
    `First minute 2. A team of ${t.members}, cache.sharing: project: the same 12 panels each, opened within 2 s, then polled every 10 s for the rest of the minute; instance ${describeInstance(PLAIN_INSTANCE)}`,
    ['figure', 'value'],
    [
      ['upstream requests in the first minute', `${t.upstream} (${statusesOf(shortRoutes(t.upstreamByRoute))}); 429s from the instance ${t.instance429s}`],
      [
        'floor',
        `${f.questions} questions × ${f.periods} freshness periods in the minute (default ttl 30 s) + ${f.members} members × (1 GET /user + ${f.areas} area proofs) = ${f.total}`,
      ],
      ['upstream ÷ floor', `${fmt(t.upstream / f.total)} (target ≤ 1.2)`],
      ['lone cold load (one member, a fresh tm-cache)', `${fmt(t.loneMs, 0)} ms`],
      ['first loads of the team', `p95 ${fmt(t.firstLoadP95Ms, 0)} ms (${t.firstLoadMs.map((ms) => fmt(ms, 0)).join(', ')} ms)`],
      ['first-load p95 ÷ lone', `${fmt(t.firstLoadP95Ms / t.loneMs)} (target ≤ 1.5)`],
      ['client answers over the minute', `${t.polls}: ${statusesOf(t.statuses)}`],
      [
        'polls (after the first loads) answered stale',
        `${t.stalePolls}${t.stalePolls > 0 ? ` (the oldest ${fmt(t.oldestStaleS, 0)} s old)` : ''} (target 0: refresh-ahead keeps them fresh)`,
      ],
    ],
    [],
    true,
  );
}

const shortRoutes = (r: Record<string, number>): Record<string, number> =>
  Object.fromEntries(Object.entries(r).map(([route, n]) => [route.replace('GET /api/v1', ''), n]));

function printCi(c: CiMinute): void {
  printTable(
    `First minute 3. A CI fleet's first burst: ${c.agents} agents under ${c.users} users, ${c.questionsPerAgent} questions each, through ${c.replicas} replicas + Redis; instance ${describeInstance(lockingInstance(5, 60))}; agents retry tm-cache's 429/503 after its Retry-After (until 60 s)`,
    ['figure', 'value'],
    [
      ['distinct questions', `${c.distinctQuestions} (user, question) pairs (keys are per user at the defaults); ${c.clientRequests} client requests answered`],
      ['distinct upstream requests needed', `${c.distinctUpstream} = ${c.distinctQuestions} questions + ${c.distinctUpstream - c.distinctQuestions} GET /user`],
      ['floor', `${c.distinctUpstream} ÷ ${LIMIT_RPS} req/s = ${fmt(c.floorS, 1)} s; target 1.5 × floor + 2 s = ${fmt(c.targetS, 1)} s`],
      ['all agents done', Number.isNaN(c.doneS) ? `NOT within 60 s (${c.agentsDone} of ${c.agents} agents done)` : `${fmt(c.doneS, 1)} s`],
      ['upstream requests', `${c.upstream} (${fmt(c.upstream / c.distinctUpstream)} × the distinct ones; target ≤ 1.05)`],
      ['429s from the instance / lockouts', `${c.instance429s} (target ≤ 2) / ${c.lockouts} (target 0)`],
      ['answers retried (tm-cache 429/503)', String(c.retried)],
      ['final answers', statusesOf(c.statuses)],
    ],
    [],
    true,
  );
}

function printLockout(l: LockoutStart): void {
  printTable(
    `First minute 4. A fleet started during a ${l.lockoutS} s lockout: ${l.replicas} replicas + Redis started with ${fmt(l.lockoutLeftS, 1)} s of it left, ${l.dashboards} dashboards (12 panels, polled every 10 s) through them; instance ${describeInstance(lockingInstance(LIMIT_RPS, l.lockoutS))}`,
    ['figure', 'value'],
    [
      [
        'served ≥ 80 % of the limit after the lockout',
        Number.isNaN(l.recoverS) ? 'never in the run' : `${fmt(l.recoverS, 1)} s after its end (target ≤ ${RECOVER_WITHIN_S} s)`,
      ],
      [
        'served per second, sustained',
        `${fmt(l.sustainedRps, 1)} req/s over the ${fmt(l.sustainedWindowS, 0)} s from ${RECOVER_WITHIN_S} s after the lockout's end (target ≥ ${fmt(0.8 * LIMIT_RPS, 0)}, 80 % of ${LIMIT_RPS})`,
      ],
      ['served per second after the end, second by second', l.perSecond.join(' ')],
      ['lockouts begun by the fleet / 429s from the instance', `${l.lockouts} / ${l.instance429s}`],
      [`client answers from ${RECOVER_WITHIN_S} s after the end`, statusesOf(l.clientStatusesInWindow)],
    ],
    [
      'Served: requests the instance answered other than with a 429 (its stats, sampled every 250 ms). Demand stays above the limit: every dashboard panel is cold.',
    ],
    true,
  );
}

function printRollout(r: Rollout): void {
  printTable(
    `Rollout: two replicas + Redis, ${r.dashboards} dashboards polling through a round-robin balancer; replica 1 restarted, then replica 2 half a window later; instance ${describeInstance(PLAIN_INSTANCE)}`,
    ['figure', 'value'],
    [
      [
        'upstream requests, window before / during the rollout',
        `${r.upstreamBefore} / ${r.upstreamDuring} (${r.windowS} s each; ratio ${fmt(r.upstreamDuring / Math.max(1, r.upstreamBefore))}, target ≤ 1.2)`,
      ],
      ['polls during the rollout from cache', `${fmt(100 * r.fromCacheShare, 1)} % of ${r.pollsDuring} (target ≥ 90 %)`],
      ['polls during the rollout not 200', `${r.errorsDuring} (${statusesOf(r.statusesDuring)})`],
    ],
    [],
    true,
  );
}

function checksOf(cold: ColdDashboard, coldKnown: ColdDashboard, team: TeamMinute, ci: CiMinute, lockout: LockoutStart, rollout: Rollout): Check[] {
  const n = (name: string) => `first-minute: ${name}`;
  return [
    maxCheck(n('cold dashboard wall time, through tm-cache ÷ straight'), cold.through.ms / cold.direct.ms, 1.2),
    ratioCheck(n('cold dashboard with upstream.budget set to the limit, through ÷ straight'), coldKnown.through.ms / coldKnown.direct.ms, undefined),
    { name: n('cold dashboard panels answered 200'), value: okOf(cold), target: `= ${cold.panels}`, pass: okOf(cold) === cold.panels, unit: '' },
    { name: n('cold dashboard 429s from tm-cache'), value: tmCache429sOf(cold), target: '= 0', pass: tmCache429sOf(cold) === 0, unit: '' },
    maxCheck(n(`team of ${team.members}, upstream in the first minute ÷ floor (${team.floor.total})`), team.upstream / team.floor.total, 1.2),
    maxCheck(n(`team of ${team.members}, first-load p95 ÷ a lone cold load`), team.firstLoadP95Ms / team.loneMs, 1.5),
    { name: n(`team of ${team.members}, polls answered stale`), value: team.stalePolls, target: '= 0', pass: team.stalePolls === 0, unit: '' },
    {
      name: n(`CI burst of ${ci.agents}, all done (s)`),
      value: ci.doneS,
      target: `≤ ${fmt(ci.targetS, 1)} s (1.5 × floor + 2)`,
      pass: !Number.isNaN(ci.doneS) && ci.doneS <= ci.targetS,
      unit: 's',
    },
    { name: n('CI burst, lockouts'), value: ci.lockouts, target: '= 0', pass: ci.lockouts === 0, unit: '' },
    { name: n('CI burst, 429s from the instance'), value: ci.instance429s, target: '≤ 2', pass: ci.instance429s <= 2, unit: '' },
    maxCheck(n(`CI burst, upstream ÷ distinct upstream requests (${ci.distinctUpstream})`), ci.upstream / ci.distinctUpstream, 1.05),
    {
      name: n('after a lockout, s until 80 % of the limit'),
      value: lockout.recoverS,
      target: `≤ ${RECOVER_WITHIN_S} s`,
      pass: !Number.isNaN(lockout.recoverS) && lockout.recoverS <= RECOVER_WITHIN_S,
      unit: 's',
    },
    { ...ratioCheck(n('after a lockout, sustained rate ÷ the unknown limit'), lockout.sustainedRps / LIMIT_RPS, 0.8) },
    { name: n('after a lockout, lockouts begun by the fleet'), value: lockout.lockouts, target: 'info', pass: undefined, unit: '' },
    maxCheck(n('rollout, upstream during ÷ before'), rollout.upstreamDuring / Math.max(1, rollout.upstreamBefore), 1.2),
    ratioCheck(n('rollout, share of polls from cache'), rollout.fromCacheShare, 0.9),
    { name: n('rollout, polls not 200'), value: rollout.errorsDuring, target: '= 0', pass: rollout.errorsDuring === 0, unit: '' },
  ];
}
