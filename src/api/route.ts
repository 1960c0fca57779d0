import { API_PREFIX, OPERATIONS, type Operation } from './catalogue.js';
import { ValidationError } from './errors.js';

/** A request path resolved to a catalogued operation and its path ids. */
export interface RouteMatch {
  readonly op: Operation;
  readonly ids: Readonly<Record<string, number>>;
}

interface CompiledRoute {
  readonly op: Operation;
  /** Literal segments, or null where the template has an id. */
  readonly segments: readonly (string | null)[];
}

const ROUTES: readonly CompiledRoute[] = OPERATIONS.map((op) => ({
  op,
  segments: op.path.slice(1).split('/').map((s) => (s.startsWith('{') ? null : s)),
}));

const ID_RE = /^[0-9]{1,15}$/;

/**
 * Resolves `/api/v1/...` (without query string) to an operation. Answers undefined for a path that
 * is not one of the 19 operations; throws a 400 ValidationError for a catalogued path whose id is
 * not a positive integer (e.g. `/runs/abc`).
 */
export function matchRoute(pathname: string): RouteMatch | undefined {
  if (!pathname.startsWith(API_PREFIX + '/')) return undefined;
  let rest = pathname.slice(API_PREFIX.length + 1);
  if (rest.endsWith('/')) rest = rest.slice(0, -1);
  const parts = rest.split('/');
  for (const route of ROUTES) {
    if (route.segments.length !== parts.length) continue;
    if (!route.segments.every((s, i) => s === null || s === parts[i])) continue;
    return { op: route.op, ids: parseIds(route, parts) };
  }
  return undefined;
}

function parseIds(route: CompiledRoute, parts: readonly string[]): Record<string, number> {
  const ids: Record<string, number> = {};
  let n = 0;
  route.segments.forEach((s, i) => {
    if (s !== null) return;
    const name = route.op.pathIds[n++]!;
    const raw = parts[i]!;
    const value = ID_RE.test(raw) ? Number(raw) : NaN;
    if (!Number.isSafeInteger(value) || value < 1) {
      throw new ValidationError([{ param: name, status: 400, rule: `The ${name} must be a positive integer.` }]);
    }
    ids[name] = value;
  });
  return ids;
}
