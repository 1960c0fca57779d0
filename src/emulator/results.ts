/**
 * Run results, stored column-wise in typed arrays. The large scale holds over two million
 * results; one object per result would cost gigabytes and seconds of GC, columns cost ~100 MB.
 * A result's id is its index + 1. Null user ids are stored as 0, null timestamps as NaN.
 */
export interface NewResult {
  project_id: number;
  run_id: number;
  test_id: number;
  case_id: number;
  status_id: number;
  note: number;
  elapsed: number;
  assignee_id: number | null;
  is_latest: boolean;
  issue_id: number | null;
  created_at: number;
  created_by: number;
  updated_at: number | null;
  updated_by: number | null;
  deleted_at: number | null;
  deleted_by: number | null;
}

const INT_COLUMNS = [
  'project_id',
  'run_id',
  'test_id',
  'case_id',
  'status_id',
  'note',
  'elapsed',
  'assignee_id',
  'is_latest',
  'issue_id',
  'created_by',
  'updated_by',
  'deleted_by',
] as const;
const TIME_COLUMNS = ['created_at', 'updated_at', 'deleted_at'] as const;
type IntColumn = (typeof INT_COLUMNS)[number];
type TimeColumn = (typeof TIME_COLUMNS)[number];

export class ResultStore {
  size = 0;
  private capacity: number;
  private ints = new Map<IntColumn, Int32Array>();
  private times = new Map<TimeColumn, Float64Array>();

  constructor(initialCapacity = 1024) {
    this.capacity = initialCapacity;
    for (const c of INT_COLUMNS) this.ints.set(c, new Int32Array(initialCapacity));
    for (const c of TIME_COLUMNS) this.times.set(c, new Float64Array(initialCapacity));
  }

  /** Appends a result; answers its index (id - 1). */
  push(r: NewResult): number {
    if (this.size === this.capacity) this.grow();
    const i = this.size++;
    for (const c of INT_COLUMNS) {
      const v = c === 'is_latest' ? (r.is_latest ? 1 : 0) : r[c];
      this.ints.get(c)![i] = v ?? 0;
    }
    for (const c of TIME_COLUMNS) this.times.get(c)![i] = r[c] ?? NaN;
    return i;
  }

  int(column: IntColumn, i: number): number {
    return this.ints.get(column)![i]!;
  }

  /** A nullable id column: 0 means null. */
  ref(column: IntColumn, i: number): number | null {
    const v = this.ints.get(column)![i]!;
    return v === 0 ? null : v;
  }

  time(column: TimeColumn, i: number): number | null {
    const v = this.times.get(column)![i]!;
    return Number.isNaN(v) ? null : v;
  }

  setInt(column: IntColumn, i: number, v: number): void {
    this.ints.get(column)![i] = v;
  }

  /** Direct column access for hot loops (filters over a run's results). */
  column(name: IntColumn): Int32Array {
    return this.ints.get(name)!;
  }

  timeColumn(name: TimeColumn): Float64Array {
    return this.times.get(name)!;
  }

  private grow(): void {
    this.capacity *= 2;
    for (const [c, old] of this.ints) {
      const next = new Int32Array(this.capacity);
      next.set(old);
      this.ints.set(c, next);
    }
    for (const [c, old] of this.times) {
      const next = new Float64Array(this.capacity);
      next.set(old);
      this.times.set(c, next);
    }
  }
}
