/**
 * The emulator's in-memory model. Timestamps are ms since epoch (null where the spec says
 * nullable); they become ISO 8601 strings only when serialized. User ids in `*_by` fields.
 */

/** The dataset's "now": every generated timestamp lies before it; mutations tick after it. */
export const DATASET_NOW_MS = Date.UTC(2026, 0, 1);
/** How far back the generated history reaches. */
export const HISTORY_MS = 540 * 24 * 3600 * 1000;

export type Scale = 'small' | 'medium' | 'large';
export const SCALES: readonly Scale[] = ['small', 'medium', 'large'];

export interface DatasetOptions {
  readonly seed: number;
  readonly scale: Scale;
}

/** created/updated lifecycle shared by most resources. */
export interface Stamped {
  readonly id: number;
  created_at: number;
  created_by: number | null;
  updated_at: number | null;
  updated_by: number | null;
}

/** A lookup object: what an expand answers with at least (id, name). */
export interface Named {
  readonly id: number;
  readonly name: string;
}

export interface Status extends Named {
  readonly color: string;
  readonly is_success: boolean;
  readonly is_failure: boolean;
}

export interface Issue extends Named {
  readonly url: string;
}

export interface User extends Stamped {
  readonly name: string;
  readonly email: string;
  readonly type: number;
  readonly timezone: string | null;
  readonly date_format: string | null;
  readonly time_format: string | null;
  readonly role_id: number;
  groups: number[];
  /** Changed only by the `set_admin` mutation (an admin demoted, or a user promoted). */
  is_admin: boolean;
}

export interface Role extends Stamped {
  readonly name: string;
  readonly permissions: number;
  readonly is_default: boolean;
}

export interface Group extends Stamped {
  readonly name: string;
  members: number[];
}

export interface Project extends Stamped {
  name: string;
  readonly note: string | null;
  is_completed: boolean;
  completed_at: number | null;
}

/**
 * Counters of runs and sessions: index 0 is untested_count, index k (1..24) is status<k>_count,
 * which counts tests whose latest status id is k + 1 (status ids 2..25; id 1 is Untested).
 */
export type Counters = Int32Array;
export const COUNTER_SLOTS = 25;

export interface Closable extends Stamped {
  readonly project_id: number;
  readonly name: string;
  readonly config_id: number;
  readonly milestone_id: number;
  readonly state_id: number;
  readonly tags: readonly string[];
  readonly issues: readonly number[];
  is_closed: boolean;
  readonly counts: Counters;
  closed_at: number | null;
  closed_by: number | null;
}

export interface Run extends Closable {
  /** The run's tests, parallel arrays; latest[i] is the index of test i's latest result or -1. */
  readonly testIds: Int32Array;
  readonly caseIds: Int32Array;
  readonly latest: Int32Array;
}

export interface Session extends Closable {
  readonly template_id: number;
  readonly assignee_id: number | null;
  readonly field_values: readonly number[];
}

export interface Milestone extends Stamped {
  readonly project_id: number;
  readonly root_id: number | null;
  readonly parent_id: number | null;
  readonly name: string;
  readonly type_id: number;
  readonly automation_tags: readonly string[];
  readonly issues: readonly number[];
  is_completed: boolean;
  completed_at: number | null;
}

export interface AutomationSource extends Stamped {
  readonly project_id: number;
  readonly name: string;
  readonly status: number;
  readonly is_retired: boolean;
  readonly run_count: number;
  readonly test_count_average: number;
  readonly elapsed_average: number;
  readonly ran_at: number;
  readonly retired_at: number | null;
  readonly retired_by: number | null;
}

/** A caller of the API: a user with a bearer token. */
export interface Caller {
  readonly token: string;
  readonly userId: number;
  revoked: boolean;
}
