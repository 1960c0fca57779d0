/**
 * Request paths → what the catalogue says they name. The one place paths under `/api/v1` are
 * split and their ids parsed, so a read and a write of the same URL name the same resource.
 *
 * - matchRoute: a read path → one of the 19 operations and its path ids (the cacheable reads);
 * - resourcesInPath: any path, typically a write the proxy passes through → every resource it
 *   names, left to right, with its id where one follows (what the write may have changed).
 *   It reads the path as the instance may: percent-encoded unreserved characters decoded first
 *   (`/runs/%33` is `/runs/3`, RFC 3986 §6.2.2.2), since the write is forwarded as spelled.
 * Both split with apiSegments and read ids with parsePathId: an id is a positive integer of at
 * most 15 digits, leading zeros allowed (`/projects/02` names project 2).
 */
import { API_PREFIX, OPERATIONS, RESOURCES, type Operation, type ResourceName, type ResourceSpec } from './catalogue.js';
import { ValidationError } from './errors.js';

/** A request path resolved to a catalogued operation and its path ids. */
export interface RouteMatch {
  readonly op: Operation;
  readonly ids: Readonly<Record<string, number>>;
}

/** A resource a path names; `id` when the path names one item of it. */
export interface ResourceRef {
  readonly resource: ResourceName;
  readonly id?: number;
}

const ID_RE = /^[0-9]{1,15}$/;

/** A path id as the catalogue defines it, or undefined when the segment is not one. */
export function parsePathId(raw: string): number | undefined {
  if (!ID_RE.test(raw)) return undefined;
  const value = Number(raw);
  return value >= 1 ? value : undefined;
}

/** A percent-encoded unreserved character (RFC 3986 §2.3: ALPHA, DIGIT, `-`, `.`, `_`, `~`), either case. */
const ENCODED_UNRESERVED = /%(?:[46][1-9a-f]|[57][0-9a]|3[0-9]|2[de]|5f|7e)/gi;

/**
 * `pathname` with its percent-encoded unreserved characters decoded: the same path to any
 * server or front that normalizes it (RFC 3986 §6.2.2.2). Reserved ones (`%2F`) stay encoded, so
 * no segment is split or joined here; forwarding.ts refuses them, and encoded dot segments, anyway.
 */
function decodeUnreserved(pathname: string): string {
  if (!pathname.includes('%')) return pathname;
  return pathname.replace(ENCODED_UNRESERVED, (encoded) => String.fromCharCode(parseInt(encoded.slice(1), 16)));
}

/** `/api/v1/a/b/` → `['a', 'b']` (one trailing slash ignored); undefined outside the API. */
function apiSegments(pathname: string): string[] | undefined {
  if (!pathname.startsWith(API_PREFIX + '/')) return undefined;
  let rest = pathname.slice(API_PREFIX.length + 1);
  if (rest.endsWith('/')) rest = rest.slice(0, -1);
  return rest.split('/');
}

interface CompiledRoute {
  readonly op: Operation;
  /** Literal segments, or null where the template has an id. */
  readonly segments: readonly (string | null)[];
}

const ROUTES: readonly CompiledRoute[] = OPERATIONS.map((op) => ({
  op,
  segments: op.path
    .slice(1)
    .split('/')
    .map((s) => (s.startsWith('{') ? null : s)),
}));

/**
 * Resolves `/api/v1/...` (without query string) to an operation. Answers undefined for a path that
 * is not one of the 19 operations; throws a 400 ValidationError for a catalogued path whose id is
 * not a positive integer (e.g. `/runs/abc`).
 */
export function matchRoute(pathname: string): RouteMatch | undefined {
  const parts = apiSegments(pathname);
  if (parts === undefined) return undefined;
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
    const value = parsePathId(parts[i]!);
    if (value === undefined) {
      throw new ValidationError([{ param: name, status: 400, rule: `The ${name} must be a positive integer.` }]);
    }
    ids[name] = value;
  });
  return ids;
}

/** Resources sharing one collection path (`users`: site users, and a project's members). */
interface Collection {
  readonly segments: readonly string[];
  readonly resources: readonly (readonly [ResourceName, ResourceSpec])[];
}

/** Longest first, so `automation/sources` is tried as a whole before any one-segment collection. */
const COLLECTIONS: readonly Collection[] = (() => {
  const byPath = new Map<string, { segments: readonly string[]; resources: [ResourceName, ResourceSpec][] }>();
  for (const [name, spec] of Object.entries(RESOURCES) as [ResourceName, ResourceSpec][]) {
    const key = spec.collection.join('/');
    const entry = byPath.get(key) ?? { segments: spec.collection, resources: [] };
    entry.resources.push([name, spec]);
    byPath.set(key, entry);
  }
  return [...byPath.values()].sort((a, b) => b.segments.length - a.segments.length);
})();

/**
 * Every catalogued resource `pathname` names, in order: `/api/v1/projects/4/runs` →
 * project 4, then runs. Collection segments are recognised wherever they occur, because a write
 * path need not be a catalogued read (`POST /runs/7/results`, `PATCH /projects/4/cases/9`);
 * segments of no collection are skipped. An id follows a collection only when it parses as one
 * (`/projects/abc` names projects but no project) and is given only to resources that have an
 * id parameter. A path outside `/api/v1` names nothing. Read after decodeUnreserved: a write
 * to `/runs/%33%35%37` changes run 357 on an instance behind a front that normalizes paths.
 */
export function resourcesInPath(pathname: string): ResourceRef[] {
  const parts = apiSegments(decodeUnreserved(pathname));
  if (parts === undefined) return [];
  const refs: ResourceRef[] = [];
  let i = 0;
  while (i < parts.length) {
    const at = i;
    const collection = COLLECTIONS.find((c) => c.segments.every((s, k) => parts[at + k] === s));
    if (collection === undefined) {
      i++;
      continue;
    }
    i += collection.segments.length;
    const id = i < parts.length ? parsePathId(parts[i]!) : undefined;
    const named = id !== undefined && collection.resources.some(([, spec]) => spec.idParam !== null);
    if (named) i++;
    for (const [resource, spec] of collection.resources) {
      refs.push(named && spec.idParam !== null ? { resource, id } : { resource });
    }
  }
  return refs;
}
