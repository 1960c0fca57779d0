/**
 * Everything one emulator instance holds: the dataset (with its memoized JSON), the areas denied
 * to whom, the logical clock for mutations, the wall clock for faults and stats, request stats
 * and injected faults.
 */
import { AreaDenials } from './areas.js';
import { generateDataset, type Dataset } from './dataset.js';
import { FaultInjector } from './faults.js';
import { DATASET_NOW_MS, type Caller, type DatasetOptions } from './model.js';
import type { OperationWorld } from './operations.js';
import { JsonMemo } from './serialize.js';
import { RequestStats } from './stats.js';

/** Each mutation happens one second after the previous one, starting at the dataset's "now". */
const MUTATION_STEP_MS = 1000;

class LogicalClock {
  private nowMs = DATASET_NOW_MS;

  tick(): number {
    this.nowMs += MUTATION_STEP_MS;
    return this.nowMs;
  }
}

export interface TokenInfo {
  readonly token: string;
  readonly user_id: number;
  readonly name: string;
  readonly is_admin: boolean;
  readonly project_ids: number[];
}

/**
 * Milliseconds, the time requests arrive and faults decide at: Date.now, or a test's fake clock
 * so rates, windows and lockouts are exact without sleeping.
 */
export type WallClock = () => number;

export class EmulatorState implements OperationWorld {
  readonly memo = new JsonMemo();
  readonly clock = new LogicalClock();
  readonly stats = new RequestStats();
  readonly denials = new AreaDenials();
  readonly faults: FaultInjector;
  private readonly byToken: Map<string, Caller>;

  constructor(
    readonly data: Dataset,
    readonly nowMs: WallClock = Date.now,
  ) {
    this.faults = new FaultInjector(data.seed);
    this.byToken = new Map(data.callers.map((c) => [c.token, c]));
  }

  static generate(opts: DatasetOptions, nowMs?: WallClock): EmulatorState {
    return new EmulatorState(generateDataset(opts), nowMs);
  }

  /** The caller behind a bearer token; undefined when unknown or revoked. */
  authenticate(token: string | undefined): Caller | undefined {
    const caller = token === undefined ? undefined : this.byToken.get(token);
    return caller && !caller.revoked ? caller : undefined;
  }

  /** A further token for an existing user (users of the real product may hold several). */
  addCaller(caller: Caller): void {
    this.data.callers.push(caller);
    this.byToken.set(caller.token, caller);
  }

  findCaller(token: string): Caller | undefined {
    return this.byToken.get(token);
  }

  isAdmin(userId: number): boolean {
    return this.data.users[userId - 1]?.is_admin === true;
  }

  /** What GET /__emulator/tokens shows for a user: project_ids sorted ascending. */
  describeUser(userId: number, token = ''): TokenInfo {
    const user = this.data.users[userId - 1]!;
    const projectIds = user.is_admin ? this.data.projects.map((p) => p.id) : [...(this.data.access.get(userId) ?? [])];
    return { token, user_id: userId, name: user.name, is_admin: user.is_admin, project_ids: projectIds.sort((a, b) => a - b) };
  }

  /** Callers whose token still works. */
  tokens(): TokenInfo[] {
    return this.data.callers.filter((c) => !c.revoked).map((c) => this.describeUser(c.userId, c.token));
  }
}
