import { OK, isSafeInt, violates, invalid, type ApplyResult, type Crdt, decodeBounds, encodeBounds, type ObjectType, type OpContext } from './types.ts'

/** Declared invariants of a counter: its value stays within [min, max]. */
export interface CounterBounds {
  /** The value never goes below this (a safe integer ≤ 0, since a counter starts at 0). */
  readonly min?: number
  /** The value never goes above this (a safe integer ≥ 0). */
  readonly max?: number
}

/** A counter operation is the signed amount to add; 0 is not an operation. */
export type CounterOp = number

/** What is wrong with a counter op from the wire, or null. */
export function validateCounterOp(op: unknown): string | null {
  if (!isSafeInt(op) || op === 0) return 'counter op must be a non-zero safe integer'
  return null
}

/** What is wrong with counter bounds (not safe integers, min > 0, max < 0, min > max), or null. */
export function validateCounterBounds(b: CounterBounds): string | null {
  if (b.min !== undefined && !isSafeInt(b.min)) return 'min must be a safe integer'
  if (b.max !== undefined && !isSafeInt(b.max)) return 'max must be a safe integer'
  if (b.min !== undefined && b.max !== undefined && b.min > b.max) return 'min must not exceed max'
  if (b.min !== undefined && b.min > 0) return 'min must be <= 0 (a counter starts at 0)'
  if (b.max !== undefined && b.max < 0) return 'max must be >= 0 (a counter starts at 0)'
  return null
}

interface Row {
  p: number
  n: number
}

/**
 * PN-Counter: each replica grows its own increment (p) and decrement (n)
 * totals, so merge is an element-wise max and the value is Σp − Σn.
 * The value is cached because reads are far more frequent than merges.
 */
export class PNCounter implements Crdt<CounterOp, number> {
  readonly type = 'counter' as const
  /** The declared invariants. */
  readonly bounds: CounterBounds
  private rows = new Map<string, Row>()
  private total = 0

  constructor(bounds: CounterBounds = {}) {
    const problem = validateCounterBounds(bounds)
    if (problem) throw new RangeError(problem)
    this.bounds = bounds
  }

  value(): number {
    return this.total
  }

  tryApply(op: CounterOp, ctx: OpContext): ApplyResult {
    const problem = validateCounterOp(op)
    if (problem) return invalid(problem)
    const next = this.total + op
    if (!Number.isSafeInteger(next)) return violates('counter would overflow the safe integer range')
    if (this.bounds.min !== undefined && next < this.bounds.min) {
      return violates(`counter would drop to ${next}, below its minimum ${this.bounds.min}`)
    }
    if (this.bounds.max !== undefined && next > this.bounds.max) {
      return violates(`counter would rise to ${next}, above its maximum ${this.bounds.max}`)
    }
    this.apply(op, ctx)
    return OK
  }

  apply(op: CounterOp, ctx: OpContext): void {
    let row = this.rows.get(ctx.replica)
    if (!row) {
      row = { p: 0, n: 0 }
      this.rows.set(ctx.replica, row)
    }
    if (op > 0) row.p += op
    else row.n -= op
    this.total += op
  }

  inverse(op: CounterOp): CounterOp {
    return -op
  }

  merge(other: PNCounter): void {
    for (const [replica, theirs] of other.rows) {
      const mine = this.rows.get(replica)
      if (!mine) {
        this.rows.set(replica, { p: theirs.p, n: theirs.n })
        this.total += theirs.p - theirs.n
        continue
      }
      const p = Math.max(mine.p, theirs.p)
      const n = Math.max(mine.n, theirs.n)
      this.total += p - mine.p - (n - mine.n)
      mine.p = p
      mine.n = n
    }
  }

  clone(): this {
    const copy = new PNCounter(this.bounds)
    for (const [replica, row] of this.rows) copy.rows.set(replica, { p: row.p, n: row.n })
    copy.total = this.total
    return copy as this
  }

  snapshot(): Array<[string, number, number]> {
    return [...this.rows.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([replica, row]) => [replica, row.p, row.n])
  }

  /** Rebuilds a counter from its `snapshot()` (trusted input). */
  static fromSnapshot(bounds: CounterBounds, rows: Array<[string, number, number]>): PNCounter {
    const c = new PNCounter(bounds)
    for (const [replica, p, n] of rows) {
      c.rows.set(replica, { p, n })
      c.total += p - n
    }
    return c
  }

  invariantsHold(): boolean {
    const { min, max } = this.bounds
    return (min === undefined || this.total >= min) && (max === undefined || this.total <= max)
  }
}

/** A PN-Counter's declaration: its `min`/`max`, if any. */
export interface CounterDeclaration {
  /** A PN-Counter. */
  readonly type: 'counter'
  /** Its `min`/`max`, if any. */
  readonly bounds: CounterBounds
}

/** The counter in the registry; wire form `['c', min, max]`. */
export const counterType: ObjectType<CounterDeclaration, PNCounter> = {
  name: 'counter',
  code: 'c',
  encode: (d) => encodeBounds('c', d.bounds, ['min', 'max']),
  decode: (enc) => ({ type: 'counter', bounds: decodeBounds(enc, 'counter', ['min', 'max'], validateCounterBounds) }),
  validateOp: validateCounterOp,
  create: (d) => new PNCounter(d.bounds),
  restore: (d, snap) => PNCounter.fromSnapshot(d.bounds, snap as Array<[string, number, number]>),
  // Amounts are summed; a sum past the safe range keeps the ops as they are.
  compact(ops) {
    const sum = (ops as CounterOp[]).reduce((a, b) => a + b, 0)
    return sum === 0 || !Number.isSafeInteger(sum) ? (sum === 0 ? [] : [...ops]) : [sum]
  },
  hasInvariants: (d) => d.bounds.min !== undefined || d.bounds.max !== undefined,
}
