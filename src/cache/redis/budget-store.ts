/**
 * The fleet budget's bucket in Redis: one hash (`<prefix>budget:fleet`) that every replica leases
 * tokens from, a few at a time, through one Lua script per lease (so replicas never race on it),
 * and that a 429 pauses for the whole fleet. The arithmetic is budget-store.ts's, line for line
 * (`normalizeState`, `forgetStaleCeiling`, `grownRate`, `leaseFrom`, `rateLimitedFrom`); a contract suite,
 * a table of the learned budget's rules included, checks both agree. The ceiling a 429 taught
 * (`limit`, `limitAt`, `regrowFrom`) lives in the same hash, so a new or restarted replica goes on from it.
 *
 * Clock: the script reads Redis' TIME, so replicas' clocks never meet; replies carry durations.
 * (Tests pass their own clock instead.)
 *
 * Failure rule, as for every Redis role (redis-connection.ts): a lease Redis cannot answer is
 * `undefined`, never thrown nor waited on past the command timeout; the budget then falls back
 * to its share (fleet-budget.ts).
 *
 * Trust: these numbers are not sealed like stored values (a script cannot check an HMAC cheaply);
 * instead the script bounds every field it reads (`normalizeState`): a tampered key can pause the
 * fleet for at most `upstream.maxRetryAfterMs` at a time or slow it to MIN_RPS, never lift the budget
 * past its ceiling or its burst. Whoever can write to Redis can already drop every entry.
 */
import {
  DECREASE_FACTOR,
  FORGET_CEILING_MS,
  GROWTH_FACTOR,
  INCREASE_INTERVAL_MS,
  LEARN_BURST_TOKENS,
  LEASE_TTL_MS,
  LOW_USE_SHARE,
  MAX_GROWTH_STEP_RPS,
  MEASURE_WINDOW_MS,
  MIN_RPS,
  PROBE_STEP_SHARE,
  REGROW_MS,
  REGROW_SHARE,
  type BudgetShape,
  type BudgetStore,
  type LeaseReply,
  type LeaseRequest,
  type PauseReply,
} from '../../upstream/budget-store.js';
import type { RedisConnection, RedisScript } from './connection.js';

/** An idle fleet's bucket is forgotten after this (ms): it then starts again from its shape. */
const BUDGET_IDLE_EXPIRY_MS = 3_600_000;

/** Rates cross the script boundary as integers (Lua numbers become integer replies): micro-requests per second. */
const MICRO = 1_000_000;

// ARGV[1..5]: startRps, maxRps, burst, maxPauseMs, now ('' for Redis' TIME). Builds `s`, the
// normalized state (normalizeState), and `save()`.
const PRELUDE = `
local key = KEYS[1]
local startRps, maxRps, burstCfg, maxPauseMs = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local MIN_RPS = ${MIN_RPS}
local function num(v)
  local n = tonumber(v)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then return nil end
  return n
end
local function clamp(v, lo, hi) return math.min(hi, math.max(lo, v)) end
local learned = startRps < maxRps
local function capacityOf(rate)
  if learned then return math.max(1, ${LEARN_BURST_TOKENS}) end
  local burst = rate
  if burstCfg > 0 then burst = burstCfg * rate / maxRps end
  return math.max(1, burst - rate * ${LEASE_TTL_MS} / 1000)
end
local f = redis.call('HMGET', key, 'tokens', 'at', 'rate', 'limit', 'increasedAt', 'pauseUntil', 'windowStart', 'windowCount', 'previousCount',
  'limitAt', 'regrowFrom')
local s = {}
local v = num(f[3])
if v then s.rate = clamp(v, MIN_RPS, maxRps) else s.rate = math.min(startRps, maxRps) end
v = num(f[6])
if v then s.pauseUntil = math.min(v, now + maxPauseMs) else s.pauseUntil = 0 end
local latest = math.max(now, s.pauseUntil)
local capacity = capacityOf(s.rate)
v = num(f[7])
if v then s.windowStart = math.min(v, now) else s.windowStart = now end
v = num(f[1])
if v then s.tokens = clamp(v, 0, capacity) else s.tokens = capacity end
v = num(f[2])
if v then s.at = math.min(v, latest) else s.at = now end
v = num(f[4])
if v then s.limit = clamp(v, 0, maxRps) else s.limit = 0 end
v = num(f[5])
if v then s.increasedAt = math.min(v, latest) else s.increasedAt = now end
v = num(f[8])
if v then s.windowCount = math.max(0, v) else s.windowCount = 0 end
v = num(f[9])
if v then s.previousCount = math.max(0, v) else s.previousCount = 0 end
v = num(f[10])
if v then s.limitAt = math.min(v, latest) else s.limitAt = now end
v = num(f[11])
if v then s.regrowFrom = clamp(v, MIN_RPS, math.max(MIN_RPS, s.limit)) else s.regrowFrom = s.rate end
local function roll()
  if now - s.windowStart < ${MEASURE_WINDOW_MS} then return end
  if now - s.windowStart < ${2 * MEASURE_WINDOW_MS} then s.previousCount = s.windowCount else s.previousCount = 0 end
  s.windowStart = now
  s.windowCount = 0
end
local function forgetStaleCeiling()
  if s.limit == 0 or now - s.limitAt < ${FORGET_CEILING_MS} then return end
  s.limit = 0
  s.rate = math.max(s.rate, math.min(startRps, maxRps))
end
local function save()
  redis.call('HSET', key, 'tokens', s.tokens, 'at', s.at, 'rate', s.rate, 'limit', s.limit, 'increasedAt', s.increasedAt,
    'pauseUntil', s.pauseUntil, 'windowStart', s.windowStart, 'windowCount', s.windowCount, 'previousCount', s.previousCount,
    'limitAt', s.limitAt, 'regrowFrom', s.regrowFrom)
  redis.call('PEXPIRE', key, ${BUDGET_IDLE_EXPIRY_MS} + math.max(0, math.ceil(s.pauseUntil - now)))
end
`;

const SCRIPTS: Record<string, RedisScript> = {
  // leaseFrom. ARGV[6] want, ARGV[7] constrained ('1'). {granted, waitMs, pausedMs, micro-rps}.
  tmcBudgetLease: {
    numberOfKeys: 1,
    lua: `${PRELUDE}
local want, constrained = tonumber(ARGV[6]), ARGV[7] == '1'
if now < s.pauseUntil then
  local paused = s.pauseUntil - now
  return {0, math.ceil(paused), math.ceil(paused), math.floor(s.rate * ${MICRO})}
end
forgetStaleCeiling()
if constrained and now - s.increasedAt >= ${INCREASE_INTERVAL_MS} then
  local grown
  if s.limit == 0 then
    grown = s.rate + math.min(s.rate * (${GROWTH_FACTOR} - 1), ${MAX_GROWTH_STEP_RPS})
  else
    local target = s.limit * ${REGROW_SHARE}
    if now - s.limitAt >= ${REGROW_MS} then
      grown = math.max(s.rate, target) + math.max(0.01, s.limit * ${PROBE_STEP_SHARE})
    else
      local curve = target - (target - s.regrowFrom) * (1 - math.max(0, now - s.limitAt) / ${REGROW_MS}) ^ 3
      grown = math.max(s.rate, curve)
    end
  end
  s.rate = math.min(maxRps, grown)
  s.increasedAt = now
end
s.tokens = math.min(capacityOf(s.rate), s.tokens + math.max(0, now - s.at) * s.rate / 1000)
s.at = math.max(s.at, now)
local granted = math.max(0, math.min(math.floor(want), math.floor(s.tokens)))
s.tokens = s.tokens - granted
roll()
s.windowCount = s.windowCount + granted
local wait = 0
if granted == 0 then wait = math.ceil((1 - s.tokens) * 1000 / s.rate) end
save()
return {granted, wait, 0, math.floor(s.rate * ${MICRO})}`,
  },
  // rateLimitedFrom. ARGV[6] pauseMs. {pausedMs, micro-rps}.
  tmcBudgetRateLimited: {
    numberOfKeys: 1,
    lua: `${PRELUDE}
local untilMs = now + clamp(tonumber(ARGV[6]), 0, maxPauseMs)
if now < s.pauseUntil then
  s.pauseUntil = math.max(s.pauseUntil, untilMs)
  save()
  return {math.ceil(s.pauseUntil - now), math.floor(s.rate * ${MICRO})}
end
roll()
forgetStaleCeiling()
local inUse = math.max(s.previousCount, s.windowCount)
if s.previousCount >= s.rate * ${LOW_USE_SHARE} then
  local base = math.max(MIN_RPS, math.min(s.rate, inUse))
  s.limit = base
  s.limitAt = untilMs
  s.rate = math.max(MIN_RPS, base * ${DECREASE_FACTOR})
  s.regrowFrom = s.rate
end
s.pauseUntil = untilMs
s.tokens = 0
s.at = untilMs
s.increasedAt = untilMs
save()
return {math.ceil(untilMs - now), math.floor(s.rate * ${MICRO})}`,
  },
};

interface BudgetCommands {
  tmcBudgetLease(key: string, ...args: Array<string | number>): Promise<[number, number, number, number]>;
  tmcBudgetRateLimited(key: string, ...args: Array<string | number>): Promise<[number, number]>;
}

export interface RedisBudgetStoreOptions {
  /** The bucket's name under `<prefix>budget:` (default `fleet`). */
  readonly name?: string;
  /** Tests only: the clock the script uses instead of Redis' TIME (ms). */
  readonly now?: () => number;
}

export class RedisBudgetStore {
  readonly #connection: RedisConnection;
  readonly #name: string;
  readonly #now: (() => number) | undefined;

  constructor(connection: RedisConnection, options: RedisBudgetStoreOptions = {}) {
    this.#connection = connection;
    this.#name = options.name ?? 'fleet';
    this.#now = options.now;
    connection.defineScripts(SCRIPTS);
  }

  /** The store of one bucket's shape (the shape travels with each call: replicas of another config bound it their way). */
  forShape(shape: BudgetShape): BudgetStore {
    return {
      lease: (request) => this.lease(shape, request),
      rateLimited: (pauseMs) => this.rateLimited(shape, pauseMs),
    };
  }

  async lease(shape: BudgetShape, request: LeaseRequest): Promise<LeaseReply | undefined> {
    const key = this.#connection.budgetKey(this.#name);
    const args = [...this.#shapeArgs(shape), Math.max(0, Math.floor(request.want)), request.constrained ? '1' : '0'];
    const reply = await this.#connection.call('budget', (c) => (c as unknown as BudgetCommands).tmcBudgetLease(key, ...args));
    if (!Array.isArray(reply)) return undefined;
    const [granted, waitMs, pausedMs, microRps] = reply.map(Number) as [number, number, number, number];
    return { granted, waitMs, pausedMs, rateRps: microRps / MICRO };
  }

  async rateLimited(shape: BudgetShape, pauseMs: number): Promise<PauseReply | undefined> {
    const key = this.#connection.budgetKey(this.#name);
    const args = [...this.#shapeArgs(shape), Math.max(0, Math.ceil(pauseMs))];
    const reply = await this.#connection.call('budget', (c) => (c as unknown as BudgetCommands).tmcBudgetRateLimited(key, ...args));
    if (!Array.isArray(reply)) return undefined;
    const [pausedMs, microRps] = reply.map(Number) as [number, number];
    return { pausedMs, rateRps: microRps / MICRO };
  }

  #shapeArgs(shape: BudgetShape): Array<string | number> {
    return [shape.startRps, shape.maxRps, shape.burst, shape.maxPauseMs, this.#now === undefined ? '' : Math.floor(this.#now())];
  }
}
