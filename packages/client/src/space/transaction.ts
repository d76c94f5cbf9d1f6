import { SteadError, describeDeclaration, sameDeclaration, spendsRights, type BoundedCounterOp, type Declaration, type RegisterValue, type RightsKind, type SetElement } from '@stead/core'
import type { DraftItem } from './drafts.ts'
import { boundedSpend } from '../handles/bounded-counter-handle.ts'
import { amount } from '../handles/handles.ts'

type Kind = Declaration['type']

/**
 * What `space.safe(build)` hands to `build`: each call records updates of
 * one object into the atomic group (nothing is sent until `build`
 * returns). An object resolves like opening a handle: the declaration it is
 * open with, else its committed one, else the one given here (or none).
 */
export interface Transaction {
  /** A counter in the group. Invariants are only needed for an object not opened and not committed yet; given for one that is, they must match. */
  counter(key: string, invariants?: { min?: number; max?: number }): {
    /** Adds `n` (default 1, a positive safe integer) when the group commits. */
    increment(n?: number): void
    /** Subtracts `n` (default 1, a positive safe integer) when the group commits; the whole group is rejected if that would cross `min`. */
    decrement(n?: number): void
  }
  /** A set in the group; `invariants` as for `counter`. */
  set<T extends SetElement = SetElement>(key: string, invariants?: { maxSize?: number }): {
    /** Adds `e` when the group commits; the whole group is rejected if the set would exceed `maxSize`. */
    add(e: T): void
    /** Removes `e` as this client has seen it when the group commits. */
    delete(e: T): void
  }
  /** A register in the group. */
  register<T extends RegisterValue = RegisterValue>(key: string): {
    /** Writes `v` when the group commits. */
    set(v: T): void
  }
  /** A bounded counter in the group: open it with `space.boundedCounter(key, params)` first (or it must be committed). Spends beyond this client's rights claim the rest from the pool within the group. */
  boundedCounter(key: string): {
    /** Adds `n` (default 1) when the group commits. */
    increment(n?: number): void
    /** Subtracts `n` (default 1) when the group commits. */
    decrement(n?: number): void
  }
}

/** What a transaction needs to know about the client's objects. */
export interface TransactionContext {
  /** The declaration the client has the key open with, if it does. */
  known(key: string): Declaration | undefined
  /** The key's committed declaration, if any. */
  committed(key: string): Declaration | undefined
  spendableRights(key: string, decl: Declaration, kind: RightsKind): number
  /** The stamp a register write of `key` gets now: later than every write of it seen here (see registerStamp). */
  registerStamp(key: string): number
}

/**
 * Runs `build` against a Transaction and returns the items of one atomic
 * safe group. Declarations resolve like opening a handle: the one the key is
 * open with, else the committed one, else the one given (or no invariants).
 */
export function buildTransaction(ctx: TransactionContext, build: (tx: Transaction) => void): DraftItem[] {
  const items: DraftItem[] = []
  const spent = new Map<string, number>()
  const declFor = (kind: Kind, key: string, given: Declaration, explicit = false): Declaration => {
    const known = ctx.known(key) ?? ctx.committed(key)
    if (!known) return given
    if (known.type !== kind || (explicit && !sameDeclaration(known, given))) {
      throw new SteadError('type-mismatch', `${key} is ${describeDeclaration(known)}, not ${describeDeclaration(given)}`)
    }
    return known
  }
  const tx: Transaction = {
    counter: (key, invariants) => {
      const bounds: { min?: number; max?: number } = {}
      if (invariants?.min !== undefined) bounds.min = invariants.min
      if (invariants?.max !== undefined) bounds.max = invariants.max
      const decl = declFor('counter', key, { type: 'counter', bounds }, invariants !== undefined)
      return {
        increment: (n = 1) => void items.push({ key, decl, intent: amount(n, 'increment') }),
        decrement: (n = 1) => void items.push({ key, decl, intent: -amount(n, 'decrement') }),
      }
    },
    set: (key, invariants) => {
      const decl = declFor('set', key, { type: 'set', bounds: invariants?.maxSize === undefined ? {} : { maxSize: invariants.maxSize } }, invariants !== undefined)
      return {
        add: (e) => void items.push({ key, decl, intent: ['a', e] }),
        delete: (e) => void items.push({ key, decl, intent: { remove: e } }),
      }
    },
    register: (key) => {
      const decl = declFor('register', key, { type: 'register' })
      return { set: (v) => void items.push({ key, decl, intent: ['s', v, ctx.registerStamp(key)] }) }
    },
    boundedCounter: (key) => {
      const decl = ctx.known(key) ?? ctx.committed(key)
      if (!decl || decl.type !== 'bounded-counter') throw new SteadError('type-mismatch', `open ${key} with client.boundedCounter(key, params) first`)
      const change = (kind: 'i' | 'd', n: number): void => {
        if (!spendsRights(decl.params, kind)) return void items.push({ key, decl, intent: [kind, amount(n, kind === 'i' ? 'increment' : 'decrement')] as BoundedCounterOp })
        // Rights an earlier spend in this same transaction already uses are not there twice.
        const spentKey = `${kind}:${key}`
        const already = spent.get(spentKey) ?? 0
        const rights = ctx.spendableRights(key, decl, kind) - already
        spent.set(spentKey, already + Math.min(n, Math.max(0, rights)))
        items.push(...boundedSpend(key, decl, kind, amount(n, kind === 'i' ? 'increment' : 'decrement'), rights))
      }
      return { increment: (n = 1) => change('i', n), decrement: (n = 1) => change('d', n) }
    },
  }
  build(tx)
  if (items.length === 0) throw new SteadError('malformed', 'a safe group needs at least one update')
  return items
}
