import type { Rng } from '../rng.ts'
import type { LoadClient, Outcome } from './types.ts'

export type CrdtKind = 'counter' | 'set' | 'bounded' | 'bank'

export interface WorkloadSpec {
  readonly crdt: CrdtKind
  /** Objects the ops spread over, uniformly. */
  readonly objects: number
  /** Share of ops that are reads (the rest are updates). Ignored by `bank`, which has its own mix. */
  readonly readRatio: number
  /** Share of updates that are safe. Ignored by `bank`. */
  readonly safeRatio: number
}

/** Latency classes: the issue's three, plus the banking transactions. */
export type OpClass = 'read' | 'regular' | 'safe' | 'balance' | 'deposit' | 'withdraw' | 'transfer'

export interface IssuedOp {
  readonly cls: OpClass
  /** Also counted under read/regular/safe when cls is a banking transaction. */
  readonly base: 'read' | 'regular' | 'safe'
  readonly update: boolean
  /** undefined for a read (it completed synchronously). */
  readonly done: Promise<Outcome> | undefined
}

export const key = (kind: CrdtKind, i: number): string => (kind === 'counter' ? `c:${i}` : kind === 'set' ? `s:${i}` : kind === 'bounded' ? `b:${i}` : `acct:${i}`)

/** Elements per OR-Set: adds and removes of observed elements keep each set small, like the paper's capped sets. */
const SET_UNIVERSE = 32

/**
 * Draws and issues one op. Counters: regular = increment 1..10, safe =
 * decrement 1 (min 0, so the audit may reject one). Bounded counters (min 0,
 * a pool of 1,000,000): regular = increment 1..5 or spend 1..3 rights, safe =
 * spend 1 in the stable order. Sets: regular = add,
 * safe = remove an observed element (add if none). Bank (the paper's demo,
 * with the issue's four transactions): 50% balance, 10% deposit (regular),
 * 20% withdraw (safe), 20% transfer (atomic safe group).
 */
export function issue(client: LoadClient, rng: Rng, spec: WorkloadSpec): IssuedOp {
  const k = key(spec.crdt, rng.int(0, spec.objects - 1))
  if (spec.crdt === 'bank') {
    const r = rng.next()
    if (r < 0.5) {
      client.readCounter(k)
      return { cls: 'balance', base: 'read', update: false, done: undefined }
    }
    if (r < 0.6) return { cls: 'deposit', base: 'regular', update: true, done: client.counterAdd(k, rng.int(1, 100), false) }
    if (r < 0.8) return { cls: 'withdraw', base: 'safe', update: true, done: client.counterAdd(k, -rng.int(1, 50), true) }
    let to = rng.int(0, spec.objects - 2)
    if (key('bank', to) === k) to = spec.objects - 1
    return { cls: 'transfer', base: 'safe', update: true, done: client.transfer(k, key('bank', to), rng.int(1, 50)) }
  }
  if (rng.chance(spec.readRatio)) {
    if (spec.crdt === 'counter') client.readCounter(k)
    else if (spec.crdt === 'bounded') client.readBounded(k)
    else client.readSet(k)
    return { cls: 'read', base: 'read', update: false, done: undefined }
  }
  const safe = rng.chance(spec.safeRatio)
  const cls = safe ? 'safe' : 'regular'
  if (spec.crdt === 'counter') return { cls, base: cls, update: true, done: client.counterAdd(k, safe ? -1 : rng.int(1, 10), safe) }
  if (spec.crdt === 'bounded') {
    // Regular: increment 1..5 or spend 1..3 of this client's rights (no coordination); safe: spend 1 through the order.
    const amount = safe ? -1 : rng.chance(0.5) ? rng.int(1, 5) : -rng.int(1, 3)
    return { cls, base: cls, update: true, done: client.boundedAdd(k, amount, safe) }
  }
  const e = `e${rng.int(0, SET_UNIVERSE - 1)}`
  if (safe) {
    const present = client.readSet(k)
    const victim = present.length ? String(present[rng.int(0, present.length - 1)]) : e
    return { cls, base: cls, update: true, done: client.setRemove(k, victim, true) }
  }
  return { cls, base: cls, update: true, done: client.setAdd(k, e, false) }
}
