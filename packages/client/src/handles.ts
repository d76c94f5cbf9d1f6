import {
  SteadError,
  encode,
  validateRegisterValue,
  validateSetElement,
  type AnyCrdt,
  type AnyOp,
  type BoundedCounter,
  type BoundedCounterOp,
  type Declaration,
  type HistoryEntry,
  type LWWRegister,
  type ORSet,
  type PNCounter,
  type RegisterValue,
  type SetElement,
} from '@stead/core'
import type { Intent } from './drafts.ts'
import type { HistoryPageOptions, SafeResult, UpdateOptions, UpdateResult, WaitOptions } from './types.ts'
import { bounded } from './wait.ts'

/** An update held back from an object's prospective value because it would break an invariant there. */
export interface HeldUpdate {
  readonly op: AnyOp
  /** Made by this client (else received from another). */
  readonly own: boolean
}

/** What handles need from the client: reads of both states, and a way to update. */
export interface HandleHost {
  prospective(key: string): AnyCrdt | undefined
  /** Undecided updates kept out of `prospective(key)` by its invariants, in order. */
  heldBack(key: string): readonly HeldUpdate[]
  stable(key: string): AnyCrdt | undefined
  history(key: string): readonly HistoryEntry[]
  /** A page of the object's whole stable history, oldest first (from memory, else from f+1 relays). */
  historyPage(key: string, options: HistoryPageOptions): Promise<Array<{ index: number; value: unknown }>>
  update(key: string, decl: Declaration, intent: Intent, safe: boolean): Promise<UpdateResult>
  /** A group of intents applied atomically in the stable order. */
  safeGroup(items: ReadonlyArray<{ key: string; decl: Declaration; intent: Intent }>): Promise<SafeResult>
  subscribe(key: string, listener: () => void): () => void
  /** Rights this client holds on a bounded counter that no pending update of its own has spent. */
  spendableRights(key: string, decl: Declaration): number
  authorId(): string
  now(): number
}

const MAX_REGISTER_BYTES = 512 * 1024

abstract class Handle {
  constructor(
    protected readonly host: HandleHost,
    readonly key: string,
    readonly declaration: Declaration,
  ) {}

  /** Calls `listener` whenever the prospective or stable value may have changed. Returns the unsubscribe function. */
  subscribe(listener: () => void): () => void {
    return this.host.subscribe(this.key, listener)
  }

  /** Stable history of this object, oldest first: one entry per stable index that changed it (the latest `historyLimit`, default 1,000, kept in memory). */
  history(): Array<{ index: number; value: unknown }> {
    return this.host.history(this.key).map((h) => ({ index: h.index, value: h.value }))
  }

  /**
   * One page of this object's whole stable history, oldest first: the
   * `limit` (default 100, at most 1,000) latest entries before stable index
   * `before` (default: all). Served from memory when it holds them, else
   * from the relays: a page f+1 relays signed identically. Page backwards
   * with `before` = the first entry's index.
   */
  historyPage(options: HistoryPageOptions = {}): Promise<Array<{ index: number; value: unknown }>> {
    return this.host.historyPage(this.key, options)
  }

  protected send(intent: Intent, options?: UpdateOptions): Promise<UpdateResult> {
    return bounded(this.host.update(this.key, this.declaration, intent, options?.safe === true), options, `an update of ${this.key}`)
  }
}

/** The amount of an update: a positive safe integer, or a typed error naming the call. */
export function amount(n: number, what: string): number {
  if (!Number.isSafeInteger(n) || n <= 0) throw new SteadError('malformed', `${what} takes a positive safe integer, got ${n}`)
  return n
}

/** Runs a synchronous check, turning a throw into a rejected promise (updates always return promises). */
function guarded<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return fn()
  } catch (err) {
    return Promise.reject(err)
  }
}

/** A PN-Counter, optionally with `min`/`max` invariants that the stable value never breaks. */
export class CounterHandle extends Handle {
  /**
   * Prospective value: every update this client made or received, except
   * those that would cross `min`/`max` (see `pending`): it never shows a
   * value the invariants forbid.
   */
  get value(): number {
    return (this.host.prospective(this.key) as PNCounter | undefined)?.value() ?? 0
  }

  /**
   * Undecided updates held back from `value` because they would cross a
   * bound there, as signed amounts in order (`own`: made by this client).
   * The stable order decides them: they commit (and show) if the bound
   * allows it then, or are rejected with reason `invariant`.
   */
  get pending(): ReadonlyArray<{ readonly amount: number; readonly own: boolean }> {
    return this.host.heldBack(this.key).map((h) => ({ amount: h.op as number, own: h.own }))
  }

  /** Latest stable value. */
  get stable(): number {
    return (this.host.stable(this.key) as PNCounter | undefined)?.value() ?? 0
  }

  increment(n?: number): Promise<UpdateResult>
  increment(n: number, options: { safe: true } & WaitOptions): Promise<SafeResult>
  increment(n: number, options?: UpdateOptions): Promise<UpdateResult>
  increment(n = 1, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.send(amount(n, 'increment'), options))
  }

  decrement(n?: number): Promise<UpdateResult>
  decrement(n: number, options: { safe: true } & WaitOptions): Promise<SafeResult>
  decrement(n: number, options?: UpdateOptions): Promise<UpdateResult>
  decrement(n = 1, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.send(-amount(n, 'decrement'), options))
  }
}

/** An add-wins OR-Set of strings or numbers, optionally with a maximum size. */
export class SetHandle<T extends SetElement = SetElement> extends Handle {
  get value(): T[] {
    return this.values()
  }

  get stable(): T[] {
    return this.stableValues()
  }

  /** Prospective elements; adds that would exceed `maxSize` are held back (see `pending`). */
  values(): T[] {
    return ((this.host.prospective(this.key) as ORSet | undefined)?.value() ?? []) as T[]
  }

  /** Undecided adds held back from `values()` because the set would exceed `maxSize` there (`own`: made by this client). */
  get pending(): ReadonlyArray<{ readonly element: T; readonly own: boolean }> {
    return this.host.heldBack(this.key).flatMap((h) => (Array.isArray(h.op) && h.op[0] === 'a' ? [{ element: h.op[1] as T, own: h.own }] : []))
  }

  stableValues(): T[] {
    return ((this.host.stable(this.key) as ORSet | undefined)?.value() ?? []) as T[]
  }

  has(element: T): boolean {
    return (this.host.prospective(this.key) as ORSet | undefined)?.has(element) ?? false
  }

  add(element: T): Promise<UpdateResult>
  add(element: T, options: { safe: true } & WaitOptions): Promise<SafeResult>
  add(element: T, options?: UpdateOptions): Promise<UpdateResult>
  add(element: T, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.send(['a', checkElement(element)], options))
  }

  /** Removes the element as this client has seen it (an add it has not seen survives: add wins). */
  delete(element: T): Promise<UpdateResult>
  delete(element: T, options: { safe: true } & WaitOptions): Promise<SafeResult>
  delete(element: T, options?: UpdateOptions): Promise<UpdateResult>
  delete(element: T, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.send({ remove: checkElement(element) }, options))
  }
}

function checkElement<T extends SetElement>(e: T): T {
  const problem = validateSetElement(e)
  if (problem) throw new SteadError('malformed', problem)
  return e
}

/** A last-writer-wins register. */
export class RegisterHandle<T extends RegisterValue = RegisterValue> extends Handle {
  get value(): T | undefined {
    return (this.host.prospective(this.key) as LWWRegister | undefined)?.value() as T | undefined
  }

  get stable(): T | undefined {
    return (this.host.stable(this.key) as LWWRegister | undefined)?.value() as T | undefined
  }

  set(value: T): Promise<UpdateResult>
  set(value: T, options: { safe: true } & WaitOptions): Promise<SafeResult>
  set(value: T, options?: UpdateOptions): Promise<UpdateResult>
  set(value: T, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      const problem = validateRegisterValue(value)
      if (problem) throw new SteadError('malformed', problem)
      const size = encode(value).length
      if (size > MAX_REGISTER_BYTES) throw new SteadError('too-large', `register value of ${size} bytes exceeds ${MAX_REGISTER_BYTES}`)
      // Later than anything this client has seen here, so its own write wins locally.
      const seen = (this.host.prospective(this.key) as LWWRegister | undefined)?.timestamp() ?? 0
      return this.send(['s', value, Math.max(this.host.now(), seen + 1)], options)
    })
  }
}

/**
 * An escrow counter (Bounded Counter): the bound holds without coordination
 * because each client may only spend rights it holds. Spending within this
 * client's rights is a regular update (no round trip, and it always
 * commits); spending more claims the missing rights from the initial pool in
 * a safe, atomic update that the stable order accepts or rejects.
 */
export class BoundedCounterHandle extends Handle {
  get value(): number {
    return (this.host.prospective(this.key) as BoundedCounter | undefined)?.value() ?? this.params.initial
  }

  get stable(): number {
    return (this.host.stable(this.key) as BoundedCounter | undefined)?.value() ?? this.params.initial
  }

  /** Rights this client can spend right now without a round trip. */
  get rights(): number {
    return this.host.spendableRights(this.key, this.declaration)
  }

  increment(n = 1, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.change('i', amount(n, 'increment'), options))
  }

  decrement(n = 1, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => this.change('d', amount(n, 'decrement'), options))
  }

  /** Gives `n` of this client's rights to another author (by author id). */
  transfer(n: number, to: string, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      if (typeof to !== 'string' || to.length === 0 || to === this.host.authorId()) throw new SteadError('malformed', 'transfer needs another author id')
      const op: BoundedCounterOp = ['t', amount(n, 'transfer'), to]
      if (this.rights < n) return Promise.resolve(rejectedRights(this.rights, n))
      return this.send(op, options)
    })
  }

  private get params(): { initial: number; min?: number; max?: number } {
    return (this.declaration as Extract<Declaration, { type: 'bounded-counter' }>).params
  }

  private change(kind: 'i' | 'd', n: number, options?: UpdateOptions): Promise<UpdateResult> {
    const spends = this.params.min !== undefined ? kind === 'd' : kind === 'i'
    if (!spends) return this.send([kind, n], options)
    const items = boundedSpend(this.key, this.declaration, kind, n, this.rights)
    if (items.length === 1 && !options?.safe) return this.send([kind, n], options)
    return bounded(this.host.safeGroup(items), options, `an update of ${this.key}`)
  }
}

function rejectedRights(have: number, need: number): SafeResult {
  return { status: 'rejected', reason: 'invariant', detail: `this client holds ${have} rights, needs ${need}` }
}

/** The intents that spend `n` on a bounded counter: claim what the client's rights do not cover, then spend. */
export function boundedSpend(key: string, decl: Declaration, kind: 'i' | 'd', n: number, rights: number): Array<{ key: string; decl: Declaration; intent: Intent }> {
  const missing = Math.max(0, n - Math.max(0, rights))
  const spend = { key, decl, intent: [kind, n] as BoundedCounterOp }
  return missing > 0 ? [{ key, decl, intent: ['c', missing] as BoundedCounterOp }, spend] : [spend]
}
