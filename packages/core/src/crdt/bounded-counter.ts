import { SteadError } from '../errors.ts'
import { Escrow, POOL, type Ask, type EscrowSnapshot, type EscrowView } from './escrow.ts'
import { OK, invalid, isSafeInt, violates, type ApplyResult, type Crdt, type ObjectType, type OpContext } from './types.ts'

export { POOL, type Ask, type EscrowSnapshot, type EscrowView } from './escrow.ts'

/**
 * A bounded counter is declared with a lower bound `min` (value never
 * below), an upper bound `max` (value never above), or both, and an initial
 * value within them.
 */
export type BoundedCounterParams =
  | {
      /** The lower bound: the value never goes below it. */
      readonly min: number
      /** The upper bound: the value never goes above it (absent: no upper bound). */
      readonly max?: number
      /** The starting value (≥ `min`, ≤ `max`); `initial − min` rights to decrement start in the pool, and `max − initial` rights to increment. */
      readonly initial: number
    }
  | {
      /** The upper bound: the value never goes above it. */
      readonly max: number
      /** Absent: no lower bound. */
      readonly min?: undefined
      /** The starting value (≤ `max`); `max − initial` rights to increment start in the pool. */
      readonly initial: number
    }

/** Which rights: to increment (spent by increments, the distance to `max`) or to decrement (the distance to `min`). */
export type RightsKind = 'i' | 'd'

/**
 * - `['i', n]` increment, `['d', n]` decrement by the author;
 * - `['t', n, to, kind?]` transfer n of the author's rights of `kind` to replica `to`;
 * - `['c', n, kind?]` claim n rights of `kind` from the pool;
 * - `['q', n, from, seen, no, kind?]` ask replica `from` for n rights (the
 *   author's ask number `no`; `from` had given it `seen`, see {@link Ask});
 * - `['g', n, to, seen, kind?]` grant n rights to `to`, answering its ask
 *   that saw `seen`: refused unless the author gave `to` exactly `seen`
 *   so far (so an ask is answered once), or if n is more than half (rounded up) the
 *   author's rights;
 * - `['r', replica]` retire a replica (a device that left for good): its
 *   rights of both kinds go back to the pool and its cells and ask go, so
 *   the matrix keeps only replicas still around. A safe update; who may
 *   send it is the space's to say (see `reclaimProblem`);
 * - `['x', op]` undo op (only produced by `inverse`).
 *
 * `kind` may be left out on a counter with one bound (its rights are of one
 * kind); a counter with both bounds needs it.
 */
export type BoundedCounterOp =
  | readonly ['i', number]
  | readonly ['d', number]
  | readonly ['t', number, string]
  | readonly ['t', number, string, RightsKind]
  | readonly ['c', number]
  | readonly ['c', number, RightsKind]
  | readonly ['q', number, string, number, number]
  | readonly ['q', number, string, number, number, RightsKind]
  | readonly ['g', number, string, number]
  | readonly ['g', number, string, number, RightsKind]
  | readonly ['r', string]
  | readonly ['x', BoundedCounterOp]

/** What is wrong with bounded counter params (no bound, not safe integers, initial outside the bounds), or null. */
export function validateBoundedCounterParams(p: BoundedCounterParams): string | null {
  const { min, max, initial } = p as { min?: unknown; max?: unknown; initial?: unknown }
  if (min === undefined && max === undefined) return 'a bounded counter needs min, max or both'
  for (const [name, v] of [['min', min], ['max', max], ['initial', initial]] as const) {
    if ((v !== undefined || name === 'initial') && !isSafeInt(v)) return `${name} must be a safe integer`
  }
  const i = initial as number
  if (min !== undefined && i < (min as number)) return `initial ${i} is below min ${min as number}`
  if (max !== undefined && i > (max as number)) return `initial ${i} is above max ${max as number}`
  // Rights add up to the distances to the bounds: they must stay exact.
  if (min !== undefined && !isSafeInt(i - (min as number))) return `initial ${i} is too far from min ${min as number}`
  if (max !== undefined && !isSafeInt((max as number) - i)) return `initial ${i} is too far from max ${max as number}`
  return null
}

/** Whether a change of `kind` spends rights on a counter declared with `params` (it does toward a bound). */
export function spendsRights(params: BoundedCounterParams, kind: RightsKind): boolean {
  return kind === 'd' ? params.min !== undefined : params.max !== undefined
}

/**
 * The op that claims `n` rights of `kind` from the pool: the kind is named
 * only on a counter with both bounds, so one-bound claims keep the wire
 * form relays before two-bound counters read.
 */
export function claimOp(params: BoundedCounterParams, kind: RightsKind, n: number): BoundedCounterOp {
  return kinded(params, ['c', n], kind)
}

/** The op that transfers `n` rights of `kind` to `to` (the kind named only with both bounds, as in {@link claimOp}). */
export function transferOp(params: BoundedCounterParams, kind: RightsKind, n: number, to: string): BoundedCounterOp {
  return kinded(params, ['t', n, to], kind)
}

/** The op that asks replica `from` for `n` rights of `kind` (see {@link Ask}; the kind named as in {@link claimOp}). */
export function askOp(params: BoundedCounterParams, kind: RightsKind, ask: Ask): BoundedCounterOp {
  return kinded(params, ['q', ask.n, ask.from, ask.seen, ask.no], kind)
}

/** The op that grants `n` rights of `kind` to `to`, answering its ask that saw `seen` (the kind named as in {@link claimOp}). */
export function grantOp(params: BoundedCounterParams, kind: RightsKind, n: number, to: string, seen: number): BoundedCounterOp {
  return kinded(params, ['g', n, to, seen], kind)
}

/** `op` with the kind of rights it moves appended when the counter has both bounds (the last element of every such op's form). */
function kinded(params: BoundedCounterParams, op: readonly (string | number)[], kind: RightsKind): BoundedCounterOp {
  return (params.min !== undefined && params.max !== undefined ? [...op, kind] : op) as BoundedCounterOp
}

/** Where each op keeps its optional kind of rights, and how many elements it has without it. */
const SHAPES: Readonly<Record<string, { kindAt: number; length: number; form: string }>> = {
  i: { kindAt: -1, length: 2, form: "['i', n]" },
  d: { kindAt: -1, length: 2, form: "['d', n]" },
  t: { kindAt: 3, length: 3, form: "['t', n, replica, kind?]" },
  c: { kindAt: 2, length: 2, form: "['c', n, kind?]" },
  q: { kindAt: 5, length: 5, form: "['q', n, from, seen, no, kind?]" },
  g: { kindAt: 4, length: 4, form: "['g', n, to, seen, kind?]" },
}

/** What is wrong with a bounded counter op from the wire, or null. */
export function validateBoundedCounterOp(op: unknown): string | null {
  if (!Array.isArray(op)) return 'bounded counter op must be an array'
  const [kind, n, other, seen, no] = op as unknown[]
  if (kind === 'r') return op.length === 2 && typeof n === 'string' && n.length > 0 && n.length <= 256 && n !== POOL ? null : "retire must be ['r', replica], a replica id of 1 to 256 characters other than the pool's"
  const shape = typeof kind === 'string' && Object.hasOwn(SHAPES, kind) ? SHAPES[kind] : undefined
  if (!shape) return `unknown bounded counter op ${JSON.stringify(kind)}`
  if (!isSafeInt(n) || n <= 0) return 'bounded counter amounts must be positive safe integers'
  const kinded = shape.kindAt > 0 && op.length === shape.length + 1
  if (op.length !== shape.length && !kinded) return `bounded counter op must be ${shape.form}`
  if (kinded && op[shape.kindAt] !== 'i' && op[shape.kindAt] !== 'd') return "the kind of rights is 'i' (to increment) or 'd' (to decrement)"
  if (kind === 't' || kind === 'q' || kind === 'g') {
    if (typeof other !== 'string' || other.length === 0 || other.length > 256) return `bounded counter op must be ${shape.form}, with a replica id of 1 to 256 characters`
  }
  if ((kind === 'q' || kind === 'g') && (!isSafeInt(seen) || seen < 0)) return 'seen must be a safe integer ≥ 0'
  if (kind === 'q' && (!isSafeInt(no) || no <= 0)) return 'an ask number must be a positive safe integer'
  return null
}

/** A bounded counter's canonical form: its one escrow, or with both bounds the rights to decrement plus `up`, the rights to increment. */
export type BoundedCounterSnapshot = EscrowSnapshot & {
  /** With both bounds: the rights to increment (R and U are then the rights to decrement). */
  up?: EscrowSnapshot
}

/**
 * Escrow counter from "Extending Eventually Consistent Cloud Databases for
 * Enforcing Numeric Invariants" (Balegas et al., SRDS 2015), with the
 * paper's extension to two bounds: one `Escrow` of rights per bound.
 * Rights to decrement are the distance to `min`, rights to increment the
 * distance to `max`; a change spends the rights toward the bound it moves
 * to and gains as many toward the other, so no replica acting within its
 * rights, and no merge of such replicas, ever crosses a bound.
 */
export class BoundedCounter implements Crdt<BoundedCounterOp, number> {
  readonly type = 'bounded-counter' as const
  /** The declared bounds and initial value. */
  readonly params: BoundedCounterParams
  /** Rights to decrement (toward `min`), if there is a lower bound. */
  private readonly down: Escrow | undefined
  /** Rights to increment (toward `max`), if there is an upper bound. */
  private readonly up: Escrow | undefined

  constructor(params: BoundedCounterParams) {
    const problem = validateBoundedCounterParams(params)
    if (problem) throw new RangeError(problem)
    this.params = params
    this.down = params.min !== undefined ? new Escrow(params.initial - params.min) : undefined
    this.up = params.max !== undefined ? new Escrow(params.max - params.initial) : undefined
  }

  value(): number {
    return this.down ? this.params.initial + this.down.net : this.params.initial - (this.up as Escrow).net
  }

  /**
   * The rights `replica` holds ({@link POOL} for the pool's): how much it may
   * spend toward a bound. `kind` may be left out on a counter with one bound.
   */
  localRights(replica: string, kind?: RightsKind): number {
    const escrow = this.escrow(kind)
    if (!escrow) throw new RangeError(kind === undefined ? 'a counter with both bounds has rights of two kinds: name one' : `this counter has no ${kind === 'i' ? 'upper' : 'lower'} bound: nothing limits that change`)
    return escrow.rightsOf(replica)
  }

  /** How much `replica` may change the value by `kind` on its own: its rights toward that bound, or Infinity where there is none. */
  spendable(replica: string, kind: RightsKind): number {
    const escrow = kind === 'i' ? this.up : this.down
    return escrow ? escrow.rightsOf(replica) : Infinity
  }

  /** The rights of `kind` (who holds how many, who gave whom, the asks), or undefined if no bound limits that change. */
  rightsOfKind(kind: RightsKind): EscrowView | undefined {
    return kind === 'i' ? this.up : this.down
  }

  tryApply(op: BoundedCounterOp, ctx: OpContext): ApplyResult {
    if (op[0] === 'x') {
      this.apply(op, ctx)
      return OK
    }
    const problem = validateBoundedCounterOp(op)
    if (problem) return invalid(problem)
    if (op[0] === 'r') {
      this.apply(op, ctx)
      return OK
    }
    const [kind, n] = op
    if (kind === 'i' || kind === 'd') {
      const have = this.spendable(ctx.replica, kind)
      if (have < n) return violates(`replica ${ctx.replica} holds ${have} rights to ${kind === 'i' ? 'increment' : 'decrement'}, needs ${n}`)
    } else {
      const rightsKind = kindOf(op)
      const escrow = this.escrow(rightsKind)
      if (!escrow) return invalid(rightsKind === undefined ? 'a counter with both bounds needs the kind of rights (i or d)' : `this counter has no rights to ${rightsKind === 'i' ? 'increment' : 'decrement'}`)
      const problem = kind === 'c' ? null : otherProblem(escrow, op, ctx.replica)
      if (problem) return problem
      const from = kind === 'c' ? POOL : ctx.replica
      if (kind !== 'q' && escrow.rightsOf(from) < n) return violates(`${from === POOL ? 'the pool' : `replica ${ctx.replica}`} holds ${escrow.rightsOf(from)} rights, needs ${n}`)
    }
    this.apply(op, ctx)
    return OK
  }

  apply(op: BoundedCounterOp, ctx: OpContext): void {
    this.change(op, ctx, 1)
  }

  inverse(op: BoundedCounterOp): BoundedCounterOp {
    return op[0] === 'x' ? op[1] : ['x', op]
  }

  merge(other: BoundedCounter): void {
    if (this.down && other.down) this.down.merge(other.down)
    if (this.up && other.up) this.up.merge(other.up)
  }

  clone(): this {
    return BoundedCounter.fromSnapshot(this.params, this.snapshot()) as this
  }

  /** The rights matrices and spends, sorted (see {@link BoundedCounterSnapshot}). */
  snapshot(): BoundedCounterSnapshot {
    if (this.down && this.up) return { ...this.down.snapshot(), up: this.up.snapshot() }
    return ((this.down ?? this.up) as Escrow).snapshot()
  }

  /** Rebuilds a bounded counter from its `snapshot()` (trusted input). */
  static fromSnapshot(params: BoundedCounterParams, snap: BoundedCounterSnapshot): BoundedCounter {
    const c = new BoundedCounter(params)
    if (c.down && c.up) {
      c.down.load(snap)
      c.up.load(snap.up ?? { R: [], U: [] })
    } else (c.down ?? (c.up as Escrow)).load(snap)
    return c
  }

  invariantsHold(): boolean {
    if ((this.down && !this.down.holds()) || (this.up && !this.up.holds())) return false
    const v = this.value()
    return (this.params.min === undefined || v >= this.params.min) && (this.params.max === undefined || v <= this.params.max)
  }

  /** The escrow of rights of `kind`, or the only one when `kind` is left out on a one-bound counter. */
  private escrow(kind: RightsKind | undefined): Escrow | undefined {
    if (kind === 'i') return this.up
    if (kind === 'd') return this.down
    return this.down && this.up ? undefined : (this.down ?? this.up)
  }

  private change(op: BoundedCounterOp, ctx: OpContext, sign: 1 | -1): void {
    if (op[0] === 'x') {
      this.change(op[1], ctx, sign === 1 ? -1 : 1)
      return
    }
    if (op[0] === 'r') {
      // Not undone: a retirement is decided in the stable order, never shown ahead of it.
      if (sign === 1) for (const escrow of [this.down, this.up]) escrow?.retire(op[1])
      return
    }
    const me = ctx.replica
    const n = sign * op[1]
    switch (op[0]) {
      case 'i':
        this.down?.gain(me, n)
        this.up?.spend(me, n)
        break
      case 'd':
        this.down?.spend(me, n)
        this.up?.gain(me, n)
        break
      case 't':
      case 'g':
        // A self-transfer would land on the diagonal and read as a gain after a merge.
        if (op[2] !== me) this.escrow(kindOf(op))?.move(me, op[2], n)
        break
      case 'c':
        this.escrow(kindOf(op))?.move(POOL, me, n)
        break
      case 'q':
        if (op[2] !== me && op[2] !== POOL) this.escrow(kindOf(op))?.setAsk(me, { no: op[4], from: op[2], seen: op[3], n: op[1] }, sign === -1)
        break
    }
  }
}

/** The kind of rights a transfer, claim, ask or grant names, if it names one. */
function kindOf(op: Extract<BoundedCounterOp, readonly ['t' | 'c' | 'q' | 'g', ...unknown[]]>): RightsKind | undefined {
  return op[(SHAPES[op[0]] as { kindAt: number }).kindAt] as RightsKind | undefined
}

/** What makes a transfer, ask or grant by `me` invalid or a violation here (the other replica, an ask's order, a grant's rules), or null. */
function otherProblem(escrow: Escrow, op: Extract<BoundedCounterOp, readonly ['t' | 'q' | 'g', ...unknown[]]>, me: string): ApplyResult | null {
  const other = op[2]
  if (other === me) return invalid('a replica cannot transfer rights to, ask rights of, or grant rights to itself')
  if (op[0] === 'q') {
    if (other === POOL) return invalid('the pool answers no asks: claim its rights')
    const last = escrow.askOf(me)
    return last && last.no >= op[4] ? invalid(`ask ${op[4]} is not after this replica's ask ${last.no}`) : null
  }
  if (op[0] === 'g') {
    const given = escrow.given(me, other)
    // The paper's rule against double grants: an ask names R[me][other] as it was, and only that state answers it.
    if (given !== op[3]) return violates(`replica ${me} gave ${other} ${given} rights so far, not the ${op[3]} its ask saw: ${given > op[3] ? 'answered already' : 'no such ask'}`)
    const have = escrow.rightsOf(me)
    // Half, rounded up: a replica down to its last right may still give it (else the last rights of a run could never move).
    if (op[1] > Math.ceil(have / 2)) return violates(`a grant gives at most half of what its author holds, rounded up: ${op[1]} of ${have}`)
  }
  return null
}

/** A Bounded Counter's declaration: its bounds and initial value. */
export interface BoundedCounterDeclaration {
  /** A Bounded Counter. */
  readonly type: 'bounded-counter'
  /** Its bounds and initial value. */
  readonly params: BoundedCounterParams
}

/**
 * The bounded counter in the registry; wire form `['b', 'min'|'max', bound,
 * initial]`, or `['b', 'range', min, max, initial]` with both bounds. Every op is kept: rights checks depend on each one. It has no
 * invariants a prospective view must respect: it respects its own through rights.
 */
export const boundedCounterType: ObjectType<BoundedCounterDeclaration, BoundedCounter> = {
  name: 'bounded-counter',
  code: 'b',
  encode: (d) => {
    const { min, max, initial } = d.params
    if (min !== undefined && max !== undefined) return ['b', 'range', min, max, initial]
    return min !== undefined ? ['b', 'min', min, initial] : ['b', 'max', max, initial]
  },
  decode(enc) {
    const range = enc[1] === 'range'
    if (enc.length !== (range ? 5 : 4) || (enc[1] !== 'min' && enc[1] !== 'max' && !range)) throw new SteadError('malformed', 'bounded counter declaration is [b, min|max, bound, initial] or [b, range, min, max, initial]')
    const params = (range ? { min: enc[2], max: enc[3], initial: enc[4] } : enc[1] === 'min' ? { min: enc[2], initial: enc[3] } : { max: enc[2], initial: enc[3] }) as BoundedCounterParams
    const problem = validateBoundedCounterParams(params)
    if (problem) throw new SteadError('malformed', problem)
    return { type: 'bounded-counter', params }
  },
  validateOp: validateBoundedCounterOp,
  create: (d) => new BoundedCounter(d.params),
  restore: (d, snap) => BoundedCounter.fromSnapshot(d.params, snap as BoundedCounterSnapshot),
  hasInvariants: () => false,
  // Pool claims race each other, and a retirement must come after the spends the order puts before it: only the stable order may decide.
  mustBeSafe: (op) => Array.isArray(op) && (op[0] === 'c' || op[0] === 'r'),
  disposesOf: (op) => (Array.isArray(op) && op[0] === 'r' && typeof op[1] === 'string' ? op[1] : undefined),
}
