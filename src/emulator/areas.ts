/**
 * Areas of a project: an instance grants access per project through roles, so a role may allow
 * some parts of a project and not others. The control plane's deny_area/allow_area restrict one
 * user on one project's area; a restricted user gets 403 (insufficient access) on that area's
 * operations of that project, whatever the operation answers when the project itself is missing.
 */
import { AREAS, getOperation, type Area, type OperationId } from '../api/catalogue.js';

export { AREAS, type Area };

/**
 * The area of a project-scoped operation, from the catalogue (the proxy reads the same column):
 * none for getProject (membership only), nor for the operations that name no project.
 */
export function areaOf(op: OperationId): Area | undefined {
  return getOperation(op).area ?? undefined;
}

/** Which (user, project, area) triples are denied. Nothing is denied on a fresh instance. */
export class AreaDenials {
  private readonly denied = new Set<string>();

  deny(userId: number, projectId: number, area: Area): void {
    this.denied.add(key(userId, projectId, area));
  }

  allow(userId: number, projectId: number, area: Area): void {
    this.denied.delete(key(userId, projectId, area));
  }

  isDenied(userId: number, projectId: number, area: Area): boolean {
    return this.denied.has(key(userId, projectId, area));
  }

  /** The user's denied areas of the project, in AREAS order. */
  deniedAreas(userId: number, projectId: number): Area[] {
    return AREAS.filter((area) => this.isDenied(userId, projectId, area));
  }
}

function key(userId: number, projectId: number, area: Area): string {
  return `${userId}:${projectId}:${area}`;
}
