import { SteadError } from '../errors.ts'
import { BoundedCounter, validateBoundedCounterOp, validateBoundedCounterParams, type BoundedCounterOp, type BoundedCounterParams } from './bounded-counter.ts'
import { PNCounter, validateCounterBounds, validateCounterOp, type CounterBounds, type CounterOp } from './counter.ts'
import { LWWRegister, validateRegisterOp, type RegisterOp, type RegisterValue } from './register.ts'
import { ORSet, validateSetBounds, validateSetOp, type SetBounds, type SetElement, type SetOp } from './set.ts'
import type { Crdt } from './types.ts'

export * from './types.ts'
export * from './counter.ts'
export * from './set.ts'
export * from './register.ts'
export * from './bounded-counter.ts'

/**
 * What an object is: its type and declared invariants. The first committed
 * declaration of a key fixes it for every replica; updates that declare the
 * key differently are rejected with 'type-mismatch', so a client cannot
 * weaken an invariant by declaring it its own way.
 */
export type Declaration =
  | {
      /** A PN-Counter. */
      readonly type: 'counter'
      /** Its `min`/`max`, if any. */
      readonly bounds: CounterBounds
    }
  | {
      /** An OR-Set. */
      readonly type: 'set'
      /** Its `maxSize`, if any. */
      readonly bounds: SetBounds
    }
  | {
      /** An LWW-Register (it has no invariants). */
      readonly type: 'register'
    }
  | {
      /** A Bounded Counter. */
      readonly type: 'bounded-counter'
      /** Its bound and initial value. */
      readonly params: BoundedCounterParams
    }

/** An operation of any object type (which one is known from the declaration it comes with). */
export type AnyOp = CounterOp | SetOp | RegisterOp | BoundedCounterOp
/** A CRDT of any object type; narrow on `type`. */
export type AnyCrdt = PNCounter | ORSet | LWWRegister | BoundedCounter

/** Compact wire form: ['c', min, max] | ['s', maxSize] | ['r'] | ['b', 'min'|'max', bound, initial]. */
export type EncodedDeclaration = readonly unknown[]

/** The compact wire form of a declaration (see {@link EncodedDeclaration}). */
export function encodeDeclaration(d: Declaration): EncodedDeclaration {
  switch (d.type) {
    case 'counter':
      return ['c', d.bounds.min ?? null, d.bounds.max ?? null]
    case 'set':
      return ['s', d.bounds.maxSize ?? null]
    case 'register':
      return ['r']
    case 'bounded-counter':
      return d.params.min !== undefined ? ['b', 'min', d.params.min, d.params.initial] : ['b', 'max', d.params.max, d.params.initial]
  }
}

const opt = (v: unknown): unknown => (v === null ? undefined : v)

/** Parses and validates a declaration from the wire; throws SteadError('malformed'). */
export function decodeDeclaration(enc: unknown): Declaration {
  if (!Array.isArray(enc)) throw new SteadError('malformed', 'declaration must be an array')
  let d: Declaration
  let problem: string | null
  switch (enc[0]) {
    case 'c': {
      if (enc.length !== 3) throw new SteadError('malformed', 'counter declaration is [c, min, max]')
      const bounds: { min?: number; max?: number } = {}
      if (opt(enc[1]) !== undefined) bounds.min = enc[1] as number
      if (opt(enc[2]) !== undefined) bounds.max = enc[2] as number
      d = { type: 'counter', bounds }
      problem = validateCounterBounds(bounds)
      break
    }
    case 's': {
      if (enc.length !== 2) throw new SteadError('malformed', 'set declaration is [s, maxSize]')
      const bounds: { maxSize?: number } = {}
      if (opt(enc[1]) !== undefined) bounds.maxSize = enc[1] as number
      d = { type: 'set', bounds }
      problem = validateSetBounds(bounds)
      break
    }
    case 'r':
      if (enc.length !== 1) throw new SteadError('malformed', 'register declaration is [r]')
      d = { type: 'register' }
      problem = null
      break
    case 'b': {
      if (enc.length !== 4 || (enc[1] !== 'min' && enc[1] !== 'max')) throw new SteadError('malformed', 'bounded counter declaration is [b, min|max, bound, initial]')
      const params = (enc[1] === 'min' ? { min: enc[2], initial: enc[3] } : { max: enc[2], initial: enc[3] }) as BoundedCounterParams
      d = { type: 'bounded-counter', params }
      problem = validateBoundedCounterParams(params)
      break
    }
    default:
      throw new SteadError('malformed', `unknown object type ${JSON.stringify(enc[0])}`)
  }
  if (problem) throw new SteadError('malformed', problem)
  return d
}

/** Whether two declarations are the same type with the same invariants (what opening a key twice requires). */
export function sameDeclaration(a: Declaration, b: Declaration): boolean {
  const x = encodeDeclaration(a)
  const y = encodeDeclaration(b)
  return x.length === y.length && x.every((v, i) => v === y[i])
}

/** A declaration in a few characters for error messages: its wire form as JSON. */
export function describeDeclaration(d: Declaration): string {
  return JSON.stringify(encodeDeclaration(d))
}

/** Validates an op from the wire against its declared type; null when fine. */
export function validateOp(d: Declaration, op: unknown): string | null {
  switch (d.type) {
    case 'counter':
      return validateCounterOp(op)
    case 'set':
      return validateSetOp(op)
    case 'register':
      return validateRegisterOp(op)
    case 'bounded-counter':
      return validateBoundedCounterOp(op)
  }
}

/**
 * A fresh, empty CRDT of the declared type and invariants.
 *
 * @throws RangeError for invariants the type does not allow (e.g. a counter `min` above 0).
 */
export function createCrdt(d: Declaration): AnyCrdt {
  switch (d.type) {
    case 'counter':
      return new PNCounter(d.bounds)
    case 'set':
      return new ORSet(d.bounds)
    case 'register':
      return new LWWRegister()
    case 'bounded-counter':
      return new BoundedCounter(d.params)
  }
}

/** Rebuilds a CRDT from its `snapshot()` (trusted input: a replica's own checkpoint). */
export function restoreCrdt(d: Declaration, snap: unknown): AnyCrdt {
  switch (d.type) {
    case 'counter':
      return PNCounter.fromSnapshot(d.bounds, snap as Array<[string, number, number]>)
    case 'set':
      return ORSet.fromSnapshot(d.bounds, snap as Array<[SetElement, Array<[string, boolean, string[]]>]>)
    case 'register':
      return LWWRegister.fromSnapshot(snap as Array<[string, string, number, RegisterValue]>)
    case 'bounded-counter':
      return BoundedCounter.fromSnapshot(d.params, snap as { R: Array<[string, string, number]>; U: Array<[string, number]> })
  }
}

/** The CRDTs share one interface; this view lets generic code call it without a type switch. */
export function asGeneric(c: AnyCrdt): Crdt<AnyOp, unknown> {
  return c as unknown as Crdt<AnyOp, unknown>
}

/**
 * Compacts one object's regular operations before they are signed:
 * counter amounts are summed, and only the last register write is kept.
 * Sets and bounded counters keep every op: their tags and rights checks
 * depend on each one.
 */
export function compactOps(d: Declaration, ops: readonly AnyOp[]): AnyOp[] {
  if (d.type === 'counter') {
    const sum = (ops as CounterOp[]).reduce((a, b) => a + b, 0)
    return sum === 0 || !Number.isSafeInteger(sum) ? (sum === 0 ? [] : [...ops]) : [sum]
  }
  if (d.type === 'register') return ops.length > 0 ? [ops[ops.length - 1] as AnyOp] : []
  return [...ops]
}
