import { SteadError } from '../errors.ts'
import { OK, invalid, isSafeInt, type ApplyResult, type Crdt, type ObjectType, type OpContext } from './types.ts'

/** Values a register can hold: whatever msgpack carries without extensions. */
export type RegisterValue = null | boolean | number | string | Uint8Array | RegisterValue[] | { [key: string]: RegisterValue }

/**
 * `['s', value, t]` writes value at timestamp t, a hybrid logical clock
 * reading chosen by the writer: the later of its corrected wall time (the
 * device clock plus the offset it measured against the relays) and one more
 * than the highest timestamp it had seen on the register. So a write that
 * saw another always beats it, and concurrent writes order by real time as
 * the relays keep it, not by whichever device clock runs fastest; relays
 * refuse a timestamp far ahead of their clock (`clock-ahead`). `['u']`
 * withdraws the write made under the same context: only ever produced by
 * `inverse`.
 */
export type RegisterOp = readonly ['s', RegisterValue, number] | readonly ['u']

const MAX_VALUE_DEPTH = 16

/**
 * What is wrong with a register value, or null: it must be msgpack data
 * (null, booleans, finite numbers, strings, bytes, arrays and plain objects)
 * nested at most 16 deep, with no `__proto__` key.
 */
export function validateRegisterValue(v: unknown, depth = 0): string | null {
  if (depth > MAX_VALUE_DEPTH) return `register value nested deeper than ${MAX_VALUE_DEPTH}`
  if (v === null || typeof v === 'boolean' || typeof v === 'string' || v instanceof Uint8Array) return null
  if (typeof v === 'number') return Number.isFinite(v) ? null : 'register numbers must be finite'
  if (Array.isArray(v)) {
    for (const item of v) {
      const p = validateRegisterValue(item, depth + 1)
      if (p) return p
    }
    return null
  }
  if (typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) {
    // msgpack decoders rename this key (msgpackr reads it back as "__proto_") to keep prototypes safe: it would not survive the wire.
    if (Object.hasOwn(v, '__proto__')) return 'register object keys cannot be "__proto__"'
    for (const item of Object.values(v as object)) {
      const p = validateRegisterValue(item, depth + 1)
      if (p) return p
    }
    return null
  }
  return `register values must be msgpack data, got ${typeof v}`
}

/** What is wrong with a register op from the wire (`['s', value, timestamp]`), or null. */
export function validateRegisterOp(op: unknown): string | null {
  if (!Array.isArray(op) || op[0] !== 's' || op.length !== 3) return "register op must be ['s', value, timestamp]"
  if (!isSafeInt(op[2]) || op[2] < 0) return 'register timestamp must be a non-negative safe integer'
  return validateRegisterValue(op[1])
}

/** One write an LWW register holds: its value, timestamp, writer (the envelope's author id) and op tag. */
export interface RegisterWrite {
  /** The value written. */
  readonly value: RegisterValue
  /** Its timestamp (the writer's hybrid logical clock reading, see {@link RegisterOp}). */
  readonly t: number
  /** The writer: the envelope's author id. */
  readonly replica: string
  /** The op's tag (`${envelope id prefix}:${n}`). */
  readonly tag: string
}
type Write = RegisterWrite

/**
 * Whether write `a` wins over `b` in an LWW register: timestamp (the
 * writer's hybrid logical clock), then writer, then tag, so ties are broken
 * identically everywhere. Deterministic: no wall clock is read here.
 */
export function registerWriteWins(a: RegisterWrite, b: RegisterWrite): boolean {
  if (a.t !== b.t) return a.t > b.t
  if (a.replica !== b.replica) return a.replica > b.replica
  return a.tag > b.tag
}

/**
 * Last-writer-wins register. It keeps every write it was given with `apply`
 * so that any of them can be withdrawn exactly; `tryApply` (the stable path,
 * which is never compensated) keeps only the winner, so stable registers stay
 * one write big.
 */
export class LWWRegister implements Crdt<RegisterOp, RegisterValue | undefined> {
  readonly type = 'register' as const
  private writes = new Map<string, Write>()
  private winner: Write | undefined

  value(): RegisterValue | undefined {
    return this.winner?.value
  }

  /** Timestamp of the winning write, so writers can pick a later one. */
  timestamp(): number {
    return this.winner?.t ?? 0
  }

  tryApply(op: RegisterOp, ctx: OpContext): ApplyResult {
    const problem = op[0] === 'u' ? null : validateRegisterOp(op)
    if (problem) return invalid(problem)
    this.apply(op, ctx)
    if (this.winner) {
      this.writes.clear()
      this.writes.set(this.winner.tag, this.winner)
    }
    return OK
  }

  apply(op: RegisterOp, ctx: OpContext): void {
    if (op[0] === 'u') {
      this.writes.delete(ctx.tag)
      if (this.winner?.tag === ctx.tag) this.winner = this.best()
      return
    }
    const write: Write = { value: op[1], t: op[2], replica: ctx.replica, tag: ctx.tag }
    this.writes.set(ctx.tag, write)
    if (!this.winner || registerWriteWins(write, this.winner)) this.winner = write
  }

  inverse(): RegisterOp {
    return ['u']
  }

  merge(other: LWWRegister): void {
    for (const [tag, w] of other.writes) {
      if (this.writes.has(tag)) continue
      this.writes.set(tag, w)
      if (!this.winner || registerWriteWins(w, this.winner)) this.winner = w
    }
  }

  clone(): this {
    const copy = new LWWRegister()
    for (const [tag, w] of this.writes) copy.writes.set(tag, w)
    copy.winner = this.winner
    return copy as this
  }

  /** Every kept write as [tag, replica, t, value], sorted by tag. */
  snapshot(): Array<[string, string, number, RegisterValue]> {
    return [...this.writes.values()]
      .sort((a, b) => (a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0))
      .map((w) => [w.tag, w.replica, w.t, w.value])
  }

  /** Rebuilds a register from its `snapshot()` (trusted input). */
  static fromSnapshot(snap: Array<[string, string, number, RegisterValue]>): LWWRegister {
    const r = new LWWRegister()
    for (const [tag, replica, t, value] of snap) r.apply(['s', value, t], { replica, tag })
    return r
  }

  invariantsHold(): boolean {
    return true
  }

  private best(): Write | undefined {
    let best: Write | undefined
    for (const w of this.writes.values()) if (!best || registerWriteWins(w, best)) best = w
    return best
  }
}

/** What {@link latestRegisterStamp} reads: an envelope's regular updates and safe groups. */
interface StampedUpdates {
  readonly updates: ReadonlyArray<{ readonly decl: { readonly type: string }; readonly ops: readonly unknown[] }>
  readonly safe: ReadonlyArray<{ readonly updates: ReadonlyArray<{ readonly decl: { readonly type: string }; readonly op: unknown }> }>
}

/**
 * The latest timestamp among the register writes of an envelope (regular
 * and safe), or undefined when it writes no register: what a relay holds
 * against its own clock at the door, since one write stamped far ahead
 * would beat every concurrent write until real time caught up with it.
 */
export function latestRegisterStamp(env: StampedUpdates): number | undefined {
  let latest: number | undefined
  const see = (op: unknown): void => {
    if (Array.isArray(op) && op[0] === 's' && typeof op[2] === 'number' && (latest === undefined || op[2] > latest)) latest = op[2]
  }
  for (const u of env.updates) if (u.decl.type === 'register') for (const op of u.ops) see(op)
  for (const g of env.safe) for (const u of g.updates) if (u.decl.type === 'register') see(u.op)
  return latest
}

/** An LWW-Register's declaration (it has no invariants). */
export interface RegisterDeclaration {
  /** An LWW-Register. */
  readonly type: 'register'
}

/** The register in the registry; wire form `['r']`. Only the last write of a batch is kept. */
export const registerType: ObjectType<RegisterDeclaration, LWWRegister> = {
  name: 'register',
  code: 'r',
  encode: () => ['r'],
  decode(enc) {
    if (enc.length !== 1) throw new SteadError('malformed', 'register declaration is [r]')
    return { type: 'register' }
  },
  validateOp: validateRegisterOp,
  create: () => new LWWRegister(),
  restore: (_d, snap) => LWWRegister.fromSnapshot(snap as Array<[string, string, number, RegisterValue]>),
  compact: (ops) => (ops.length > 0 ? [ops[ops.length - 1]] : []),
  hasInvariants: () => false,
}
