/**
 * The first minute of dashboards at tm-cache's defaults (the first-minute scenario's figures 1
 * and 2), each against a baseline measured in the same run:
 * 1. one cold dashboard (12 panels, six at a time) through a fresh tm-cache, against the same
 *    panels asked of the instance directly;
 * 2. a team of ten opening the same 12 panels within 2 s and polling them every 10 s for the rest
 *    of the minute (`cache.sharing: project`): upstream requests in that minute against the floor,
 *    and the members' first loads against one member's lone cold load.
 */
import { Pool } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { AREAS } from '../../src/api/catalogue.js';
import { DEFAULT_CONFIG } from '../../src/config/schema.js';
import { LIMIT_RPS, loadPanels, PLAIN_INSTANCE, tallyStatuses, type Answer, type Load } from './first-minute-load.js';
import { dashboardPanels, type ProjectFacts } from './questions.js';
import { quantile } from './report.js';
import { teamPanels } from './scenario-team-dashboards.js';
import { startTmCache, type Emulator, type TokenInfo } from './servers.js';

/** Nothing over tm-cache's defaults: no budget, default freshness (a --config file of `{}`). */
export const DEFAULTS: Record<string, unknown> = {};
const MINUTE_MS = 60_000;
const POLL_MS = 10_000;
const START_SPREAD_MS = 2_000;

async function withPool<T>(url: string, fn: (pool: Pool) => Promise<T>): Promise<T> {
  const pool = new Pool(url, { connections: 64 });
  try {
    return await fn(pool);
  } finally {
    await pool.close();
  }
}

export interface ColdDashboard {
  readonly panels: number;
  readonly direct: Load;
  readonly through: Load;
  /** Requests the instance received for the load through tm-cache, and how many it refused. */
  readonly upstream: number;
  readonly instance429s: number;
}

/** The instance's own limit (PLAIN_INSTANCE), told to tm-cache: what an operator who knows it configures. */
export const KNOWN_LIMIT = { upstream: { budget: { requestsPerSecond: LIMIT_RPS, burst: LIMIT_RPS } } };

/** One user's 12 dashboard panels, cold: straight to the instance, then through a fresh tm-cache (at its defaults unless `config` says otherwise). */
export async function coldDashboard(em: Emulator, facts: ProjectFacts, user: TokenInfo, config: Record<string, unknown> = DEFAULTS): Promise<ColdDashboard> {
  const { shared, own } = dashboardPanels(facts, user.user_id);
  const panels = [...shared, ...own];
  await em.faults(PLAIN_INSTANCE);
  const direct = await withPool(em.url, (pool) => loadPanels(pool, panels, user.token));
  const proxy = await startTmCache(em.url, { name: 'tm-cache (first-minute: cold dashboard)', config });
  try {
    await em.faults(PLAIN_INSTANCE); // a full bucket again, whatever tm-cache's start asked
    await em.resetStats();
    const through = await withPool(proxy.url, (pool) => loadPanels(pool, panels, user.token));
    const stats = await em.stats();
    return { panels: panels.length, direct, through, upstream: stats.total, instance429s: stats.rate_limited };
  } finally {
    await proxy.proc.stop();
  }
}

export interface TeamFloor {
  readonly questions: number;
  readonly periods: number;
  readonly members: number;
  readonly areas: number;
  readonly total: number;
}

export interface TeamMinute {
  readonly members: number;
  readonly loneMs: number;
  readonly firstLoadMs: number[];
  readonly firstLoadP95Ms: number;
  readonly upstream: number;
  readonly upstreamByRoute: Record<string, number>;
  readonly instance429s: number;
  readonly floor: TeamFloor;
  readonly statuses: Record<string, number>;
  readonly polls: number;
  /** Polls after the first loads answered stale (`fwd=stale`), and the oldest of them (s). */
  readonly stalePolls: number;
  readonly oldestStaleS: number;
}

/**
 * The floor of upstream requests in the minute, from what the team does: each of the questions
 * filled once per freshness period the minute holds (default ttl), and per member one GET /user and
 * one proof per area the panels reveal (its grant, access.grantTtlMs, outlives the minute; the
 * project's confirmation is taken as earned with the first proof).
 */
function teamFloor(questions: number, members: number): TeamFloor {
  const periods = Math.ceil(MINUTE_MS / DEFAULT_CONFIG.cache.freshness.default.ttlMs);
  const areas = AREAS.length;
  return { questions, periods, members, areas, total: questions * periods + members * (1 + areas) };
}

const SHARING = { cache: { sharing: 'project' } };

/** Served from cache without a fresh answer (RFC 9211 `fwd=stale`). */
const isStale = (a: Answer): boolean => a.cacheStatus.includes('fwd=stale');

/**
 * One member's lone cold load through a fresh tm-cache, then the team through another: member i
 * opens the panels at i × 2 s ÷ members and polls them every 10 s from then until the minute ends.
 * Upstream requests are counted over the minute from the first member's start.
 */
export async function teamFirstMinute(em: Emulator, facts: ProjectFacts, members: TokenInfo[]): Promise<TeamMinute> {
  const panels = teamPanels(facts);
  const lone = await startTmCache(em.url, { name: 'tm-cache (first-minute: lone member)', config: SHARING });
  let loneMs: number;
  try {
    await em.faults(PLAIN_INSTANCE);
    loneMs = (await withPool(lone.url, (pool) => loadPanels(pool, panels, members[0]!.token))).ms;
  } finally {
    await lone.proc.stop();
  }
  const proxy = await startTmCache(em.url, { name: 'tm-cache (first-minute: team)', config: SHARING });
  try {
    return await withPool(proxy.url, async (pool) => {
      await em.faults(PLAIN_INSTANCE);
      await em.resetStats();
      const t0 = performance.now();
      const answers: Answer[] = [];
      const polls: Answer[] = [];
      const firstLoadMs: number[] = [];
      const member = async (m: TokenInfo, i: number): Promise<void> => {
        const startMs = (i * START_SPREAD_MS) / members.length;
        for (let k = 0; startMs + k * POLL_MS < MINUTE_MS; k++) {
          await sleep(Math.max(0, t0 + startMs + k * POLL_MS - performance.now()));
          const load = await loadPanels(pool, panels, m.token);
          if (k === 0) firstLoadMs.push(load.ms);
          else polls.push(...load.answers);
          answers.push(...load.answers);
        }
      };
      const polling = Promise.all(members.map(member));
      await sleep(MINUTE_MS);
      const stats = await em.stats();
      await polling;
      return {
        members: members.length,
        loneMs,
        firstLoadMs,
        firstLoadP95Ms: quantile(firstLoadMs, 0.95),
        upstream: stats.total,
        upstreamByRoute: stats.by_route,
        instance429s: stats.rate_limited,
        floor: teamFloor(panels.length, members.length),
        statuses: tallyStatuses(answers),
        polls: answers.length,
        stalePolls: polls.filter(isStale).length,
        oldestStaleS: Math.max(0, ...polls.filter(isStale).map((a) => a.ageS)),
      };
    });
  } finally {
    await proxy.proc.stop();
  }
}
