import { SteadError } from '../errors.ts'
import { OK, invalid, isSafeInt, violates, type ApplyResult, type Crdt, type ObjectType, type OpContext } from './types.ts'

/**
 * A bounded counter is declared with exactly one bound, `min` (value never
 * below) or `max` (value never above), and an initial value within it.
 */
export type BoundedCounterParams =
  | {
      /** The lower bound: the value never goes below it. */
      readonly min: number
      /** Absent: exactly one bound. */
      readonly max?: undefined
      /** The starting value (≥ `min`); `initial − min` rights start in the pool. */
      readonly initial: number
    }
  | {
      /** The upper bound: the value never goes above it. */
      readonly max: number
      /** Absent: exactly one bound. */
      readonly min?: undefined
      /** The starting value (≤ `max`); `max − initial` rights start in the pool. */
      readonly initial: number
    }

/**
 * The replica that holds the initial rights. Nobody signs as '*': rights
 * leave it only through `claim`, which the SDK sends as a safe update so the
 * stable order decides which claims fit.
 */
export const POOL = '*'

/**
 * - `['i', n]` increment, `['d', n]` decrement by the author;
 * - `['t', n, to]` transfer n of the author's rights to replica `to`;
 * - `['c', n]` claim n rights from the pool;
 * - `['x', op]` undo op (only produced by `inverse`).
 */
export type BoundedCounterOp =
  | readonly ['i', number]
  | readonly ['d', number]
  | readonly ['t', number, string]
  | readonly ['c', number]
  | readonly ['x', BoundedCounterOp]

/** What is wrong with bounded counter params (not exactly one bound, not safe integers, initial outside the bound), or null. */
export function validateBoundedCounterParams(p: BoundedCounterParams): string | null {
  const hasMin = p.min !== undefined
  const hasMax = p.max !== undefined
  if (hasMin === hasMax) return 'a bounded counter needs exactly one of min or max'
  const bound = (hasMin ? p.min : p.max) as number
  if (!isSafeInt(bound) || !isSafeInt(p.initial)) return 'bound and initial must be safe integers'
  if (hasMin ? p.initial < bound : p.initial > bound) return `initial ${p.initial} is outside the bound ${bound}`
  return null
}

/** What is wrong with a bounded counter op from the wire, or null. */
export function validateBoundedCounterOp(op: unknown): string | null {
  if (!Array.isArray(op)) return 'bounded counter op must be an array'
  const [kind, n, to] = op as unknown[]
  if (kind !== 'i' && kind !== 'd' && kind !== 't' && kind !== 'c') return `unknown bounded counter op ${JSON.stringify(kind)}`
  if (!isSafeInt(n) || n <= 0) return 'bounded counter amounts must be positive safe integers'
  if (kind === 't') {
    if (op.length !== 3 || typeof to !== 'string' || to.length === 0 || to.length > 256) return "transfer must be ['t', n, replica]"
  } else if (op.length !== 2) return `bounded counter op '${kind}' takes one amount`
  return null
}

/**
 * Escrow counter from "Extending Eventually Consistent Cloud Databases for
 * Enforcing Numeric Invariants" (Balegas et al., SRDS 2015). Internally it is
 * always a lower-bound counter: a `max` counter runs on the negated value, so
 * an increment consumes rights there as a decrement does here.
 *
 * R[i][i] counts increments by i, R[i][j] rights i gave to j, U[i] decrements
 * by i. Replica i's rights are R[i][i] + Σ R[j][i] − Σ R[i][j] − U[i], and the
 * distance to the bound is the sum of all rights. Every row and U entry only
 * grows through its own replica, so merge is an element-wise max.
 */
export class BoundedCounter implements Crdt<BoundedCounterOp, number> {
  readonly type = 'bounded-counter' as const
  /** The declared bound and initial value. */
  readonly params: BoundedCounterParams
  private readonly dir: 1 | -1
  private readonly R = new Map<string, Map<string, number>>()
  private readonly U = new Map<string, number>()
  /** Derived from R and U, kept in step for O(1) checks. */
  private readonly rights = new Map<string, number>()
  private total = 0 // Σ R[i][i] − Σ U[i], internal orientation

  constructor(params: BoundedCounterParams) {
    const problem = validateBoundedCounterParams(params)
    if (problem) throw new RangeError(problem)
    this.params = params
    this.dir = params.min !== undefined ? 1 : -1
    const initialRights = params.min !== undefined ? params.initial - params.min : (params.max as number) - params.initial
    // The initial distance to the bound is the pool's own; it is not an increment, so it stays out of `total`.
    if (initialRights > 0) this.setCell(POOL, POOL, initialRights)
    this.rights.set(POOL, initialRights)
  }

  value(): number {
    return this.params.initial + this.dir * this.total
  }

  /** The rights `replica` holds: how much it may spend without breaking the bound ({@link POOL} for the pool's). */
  localRights(replica: string): number {
    return this.rights.get(replica) ?? 0
  }

  tryApply(op: BoundedCounterOp, ctx: OpContext): ApplyResult {
    if (op[0] === 'x') {
      this.apply(op, ctx)
      return OK
    }
    const problem = validateBoundedCounterOp(op)
    if (problem) return invalid(problem)
    const [kind, n] = this.internal(op)
    if (kind === 't' && op[2] === ctx.replica) return invalid('a replica cannot transfer rights to itself')
    const spender = kind === 'c' ? POOL : ctx.replica
    if (kind !== 'i' && this.localRights(spender) < n) {
      return violates(`${spender === POOL ? 'the pool' : `replica ${ctx.replica}`} holds ${this.localRights(spender)} rights, needs ${n}`)
    }
    this.apply(op, ctx)
    return OK
  }

  apply(op: BoundedCounterOp, ctx: OpContext): void {
    if (op[0] === 'x') {
      this.change(op[1], ctx, -1)
      return
    }
    this.change(op, ctx, 1)
  }

  inverse(op: BoundedCounterOp): BoundedCounterOp {
    return op[0] === 'x' ? op[1] : ['x', op]
  }

  merge(other: BoundedCounter): void {
    for (const [from, row] of other.R) for (const [to, n] of row) if (n > this.cell(from, to)) this.setCell(from, to, n)
    for (const [replica, n] of other.U) if (n > (this.U.get(replica) ?? 0)) this.U.set(replica, n)
    this.recompute()
  }

  clone(): this {
    const copy = new BoundedCounter(this.params)
    copy.R.clear()
    for (const [from, row] of this.R) copy.R.set(from, new Map(row))
    for (const [replica, n] of this.U) copy.U.set(replica, n)
    copy.recompute()
    return copy as this
  }

  /** { R: [from, to, n][], U: [replica, n][] } sorted. */
  snapshot(): {
    /** The rights matrix, in the lower-bound orientation (see the class): gains on the diagonal, transfers and claims elsewhere. */
    R: Array<[string, string, number]>
    /** Spends per replica, in the same orientation. */
    U: Array<[string, number]>
  } {
    const R: Array<[string, string, number]> = []
    for (const [from, row] of this.R) for (const [to, n] of row) R.push([from, to, n])
    R.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
    const U = [...this.U.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return { R, U }
  }

  /** Rebuilds a bounded counter from its `snapshot()` (trusted input). */
  static fromSnapshot(params: BoundedCounterParams, snap: { R: Array<[string, string, number]>; U: Array<[string, number]> }): BoundedCounter {
    const c = new BoundedCounter(params)
    c.R.clear()
    for (const [from, to, n] of snap.R) c.setCell(from, to, n)
    for (const [replica, n] of snap.U) c.U.set(replica, n)
    c.recompute()
    return c
  }

  invariantsHold(): boolean {
    for (const n of this.rights.values()) if (n < 0) return false
    return this.dir === 1 ? this.value() >= (this.params.min as number) : this.value() <= (this.params.max as number)
  }

  /** Maps a user-facing op to the internal lower-bound orientation. */
  private internal(op: Exclude<BoundedCounterOp, readonly ['x', BoundedCounterOp]>): readonly ['i' | 'd' | 't' | 'c', number, string?] {
    if (this.dir === -1 && op[0] === 'i') return ['d', op[1]]
    if (this.dir === -1 && op[0] === 'd') return ['i', op[1]]
    return op
  }

  private change(op: BoundedCounterOp, ctx: OpContext, sign: 1 | -1): void {
    if (op[0] === 'x') {
      this.change(op[1], ctx, sign === 1 ? -1 : 1)
      return
    }
    const [kind, amount, to] = this.internal(op)
    const n = sign * amount
    const me = ctx.replica
    // A self-transfer would land on the diagonal and read as an increment after a merge.
    if (kind === 't' && to === me) return
    switch (kind) {
      case 'i':
        this.setCell(me, me, this.cell(me, me) + n)
        this.addRights(me, n)
        this.total += n
        break
      case 'd':
        this.U.set(me, (this.U.get(me) ?? 0) + n)
        this.addRights(me, -n)
        this.total -= n
        break
      case 't':
        this.setCell(me, to as string, this.cell(me, to as string) + n)
        this.addRights(me, -n)
        this.addRights(to as string, n)
        break
      case 'c':
        this.setCell(POOL, me, this.cell(POOL, me) + n)
        this.addRights(POOL, -n)
        this.addRights(me, n)
        break
    }
  }

  private cell(from: string, to: string): number {
    return this.R.get(from)?.get(to) ?? 0
  }

  private setCell(from: string, to: string, n: number): void {
    let row = this.R.get(from)
    if (!row) {
      row = new Map()
      this.R.set(from, row)
    }
    row.set(to, n)
  }

  private addRights(replica: string, n: number): void {
    this.rights.set(replica, (this.rights.get(replica) ?? 0) + n)
  }

  private recompute(): void {
    this.rights.clear()
    this.total = 0
    for (const [from, row] of this.R) {
      for (const [to, n] of row) {
        if (from === to) {
          this.addRights(from, n)
          if (from !== POOL) this.total += n
        } else {
          this.addRights(from, -n)
          this.addRights(to, n)
        }
      }
    }
    for (const [replica, n] of this.U) {
      this.addRights(replica, -n)
      this.total -= n
    }
  }
}

/** A Bounded Counter's declaration: its bound and initial value. */
export interface BoundedCounterDeclaration {
  /** A Bounded Counter. */
  readonly type: 'bounded-counter'
  /** Its bound and initial value. */
  readonly params: BoundedCounterParams
}

/**
 * The bounded counter in the registry; wire form `['b', 'min'|'max', bound,
 * initial]`. Every op is kept: rights checks depend on each one. It has no
 * invariants a prospective view must respect: it respects its own through rights.
 */
export const boundedCounterType: ObjectType<BoundedCounterDeclaration, BoundedCounter> = {
  name: 'bounded-counter',
  code: 'b',
  encode: (d) => (d.params.min !== undefined ? ['b', 'min', d.params.min, d.params.initial] : ['b', 'max', d.params.max, d.params.initial]),
  decode(enc) {
    if (enc.length !== 4 || (enc[1] !== 'min' && enc[1] !== 'max')) throw new SteadError('malformed', 'bounded counter declaration is [b, min|max, bound, initial]')
    const params = (enc[1] === 'min' ? { min: enc[2], initial: enc[3] } : { max: enc[2], initial: enc[3] }) as BoundedCounterParams
    const problem = validateBoundedCounterParams(params)
    if (problem) throw new SteadError('malformed', problem)
    return { type: 'bounded-counter', params }
  },
  validateOp: validateBoundedCounterOp,
  create: (d) => new BoundedCounter(d.params),
  restore: (d, snap) => BoundedCounter.fromSnapshot(d.params, snap as { R: Array<[string, string, number]>; U: Array<[string, number]> }),
  hasInvariants: () => false,
  // Pool claims race each other; only the stable order may decide which fit.
  mustBeSafe: (op) => Array.isArray(op) && op[0] === 'c',
}
