import { BoundedCounter, POOL, SteadError, claimOp, spendsRights, transferOp, type BoundedCounterOp, type BoundedCounterParams, type Declaration, type RightsKind } from '@stead/core'
import type { Intent } from '../space/drafts.ts'
import type { SafeResult, UpdateOptions, UpdateResult, WaitOptions } from '../types.ts'
import { Handle, amount, guarded } from './handles.ts'

/** One holder of a bounded counter's rights (`BoundedCounterHandle.holders`). */
export interface RightsHolder {
  /** The author id, or POOL for the rights nobody claimed yet. */
  readonly author: string
  /** Its rights to decrement (toward `min`; 0 without `min`). */
  readonly toDecrement: number
  /** Its rights to increment (toward `max`; 0 without `max`). */
  readonly toIncrement: number
}

/** Options of a bounded counter's `increment` and `decrement`. */
export interface SpendOptions extends UpdateOptions {
  /**
   * What a spend beyond this client's rights does. `'wait'` (default):
   * obtain the missing rights first (claimed from the pool with a safe
   * update while it has them, else asked of the replicas that hold the
   * most), then spend once they are stable, with a regular update that can
   * no longer be refused (bounded by `timeoutMs`, default the client's safe
   * timeout); it resolves `rejected` (`invariant`) as soon as the rights
   * that could reach this client fall short: its own, the pool's, and half
   * (rounded up) of what each client holding more has. `'fail'`:
   * resolve `rejected` (`invariant`) at once, without a round trip; the
   * client still asks for rights in the background.
   */
  readonly rights?: 'wait' | 'fail'
}

/** Options of `BoundedCounterHandle.transfer`. */
export interface TransferOptions extends UpdateOptions {
  /**
   * Which rights to give: `'decrement'` (toward `min`) or `'increment'`
   * (toward `max`). A counter with one bound has rights of one kind, the
   * default; one with both bounds needs it.
   */
  readonly rights?: 'increment' | 'decrement'
}

/**
 * An escrow counter (Bounded Counter): its bounds hold without
 * coordination because each client may only spend rights it holds.
 * Rights to decrement are the distance to `min`, rights to increment the
 * distance to `max`; a change spends rights toward the bound it moves to
 * and gives this client as many toward the other. Spending within this
 * client's rights is a regular update (no round trip, and it always
 * commits); spending more claims the missing rights from the initial pool
 * in a safe, atomic update that the stable order accepts or rejects.
 */
export class BoundedCounterHandle extends Handle {
  /** Prospective value: the initial value plus every update this client made or received. */
  get value(): number {
    return (this.host.prospective(this.key) as BoundedCounter | undefined)?.value() ?? this.params.initial
  }

  /** Stable value: agreed by every correct replica, never past a bound. */
  get stable(): number {
    return (this.host.stable(this.key) as BoundedCounter | undefined)?.value() ?? this.params.initial
  }

  /**
   * Rights this client can spend right now without a round trip, toward
   * the counter's bound: to decrement with `min`, to increment with only
   * `max`. With both bounds this is `rightsToDecrement`.
   */
  get rights(): number {
    return this.params.min !== undefined ? this.rightsToDecrement : this.rightsToIncrement
  }

  /** How much this client may subtract now without a round trip: its rights toward `min` (Infinity without `min`). */
  get rightsToDecrement(): number {
    // Below 0 while a safe group that claims and spends is undecided: its claim counts once stable.
    return Math.max(0, this.host.spendableRights(this.key, this.declaration, 'd'))
  }

  /** How much this client may add now without a round trip: its rights toward `max` (Infinity without `max`). */
  get rightsToIncrement(): number {
    return Math.max(0, this.host.spendableRights(this.key, this.declaration, 'i'))
  }

  /**
   * Who holds the counter's rights in the stable state, most first: each
   * author's rights to decrement and to increment (0 toward no bound), the
   * pool's (not yet claimed) under {@link POOL}. What an app shows to
   * explain why a spend went local or had to ask.
   */
  holders(): RightsHolder[] {
    // Nothing stable yet: the declared counter, its rights all in the pool.
    const state = (this.host.stable(this.key) as BoundedCounter | undefined) ?? new BoundedCounter(this.params)
    const down = state.rightsOfKind('d')
    const up = state.rightsOfKind('i')
    const authors = new Set<string>([POOL, ...[...(down?.holders() ?? [])].map(([a]) => a), ...[...(up?.holders() ?? [])].map(([a]) => a)])
    return [...authors]
      .map((author) => ({ author, toDecrement: down?.rightsOf(author) ?? 0, toIncrement: up?.rightsOf(author) ?? 0 }))
      .filter((h) => h.author === POOL || h.toDecrement > 0 || h.toIncrement > 0)
      .sort((a, b) => b.toDecrement + b.toIncrement - (a.toDecrement + a.toIncrement) || (a.author < b.author ? -1 : 1))
  }

  /**
   * Adds `n` (default 1). Without `max` this is never a spend: it always
   * fits, and gives this client `n` more rights to decrement. With `max` it
   * spends rights to increment: within `rightsToIncrement` it is a regular
   * update (it can never cross the bound nor be refused), or a safe one
   * with `{ safe: true }`; beyond them, see {@link SpendOptions}: by
   * default the missing rights are obtained first (`rejected` with
   * `invariant` if the counter is nearer its bound than `n`).
   *
   * @param options `rights`: what a spend beyond this client's rights does (see {@link SpendOptions}).
   * @throws SteadError `malformed` (the promise rejects) unless `n` is a positive safe integer, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  increment(n = 1, options?: SpendOptions): Promise<UpdateResult> {
    return guarded(() => this.change('i', amount(n, 'increment'), options))
  }

  /**
   * Subtracts `n` (default 1): a spend of rights to decrement when the
   * counter has `min` (see `increment` for how spends within and beyond
   * them go), and a gain of as many rights to increment when it has `max`.
   *
   * @param options `rights`: what a spend beyond this client's rights does (see {@link SpendOptions}).
   * @throws SteadError `malformed` (the promise rejects) unless `n` is a positive safe integer, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  decrement(n = 1, options?: SpendOptions): Promise<UpdateResult> {
    return guarded(() => this.change('d', amount(n, 'decrement'), options))
  }

  /**
   * Gives `n` of this client's rights to another author (by author id), so
   * that it can spend them without a round trip. Resolves `rejected` with
   * `invariant` at once if this client holds fewer than `n` rights of that
   * kind.
   *
   * @param to The other client's `authorId`.
   * @param options `rights`: which kind to give (needed with both bounds).
   * @throws SteadError `malformed` (the promise rejects) unless `n` is a positive safe integer, `to` another author id and `rights` a kind of rights this counter has; {@link ClosedError} after the space closed.
   */
  transfer(n: number, to: string, options?: TransferOptions): Promise<UpdateResult> {
    return guarded(() => {
      if (typeof to !== 'string' || to.length === 0 || to === this.host.authorId()) throw new SteadError('malformed', 'transfer needs another author id')
      const kind = this.rightsKind(options?.rights)
      const op = transferOp(this.params, kind, amount(n, 'transfer'), to)
      const have = this.host.spendableRights(this.key, this.declaration, kind)
      if (have < n) return Promise.resolve(rejectedRights(have, n))
      return this.send(op, options)
    })
  }

  /**
   * Gives back the rights of a replica that left for good (a lost or
   * retired device) to the pool, where others can claim them, and takes it
   * out of the counter's matrix. A safe update: it commits when `author`
   * is this client itself, or this client's user is a space admin, or
   * `author` is a device of this client's user that the space's policy
   * revoked; else it is `rejected` (`unauthorized`). After it, `author`
   * spends only rights it gets again.
   *
   * @param author The replica's author id.
   * @throws SteadError `malformed` (the promise rejects) unless `author` is an author id; `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  reclaim(author: string, options?: WaitOptions): Promise<SafeResult> {
    return guarded(() => {
      if (typeof author !== 'string' || author.length === 0 || author.length > 256) throw new SteadError('malformed', 'reclaim needs an author id')
      return this.send(['r', author], { ...options, safe: true }) as Promise<SafeResult>
    })
  }

  private get params(): BoundedCounterParams {
    return (this.declaration as Extract<Declaration, { type: 'bounded-counter' }>).params
  }

  /** The kind of rights a transfer moves: the one named, which this counter must have, else its only one. */
  private rightsKind(named: TransferOptions['rights']): RightsKind {
    const both = this.params.min !== undefined && this.params.max !== undefined
    if (named === undefined) {
      if (both) throw new SteadError('malformed', `${this.key} has both bounds: say which rights to transfer, { rights: 'increment' } or { rights: 'decrement' }`)
      return this.params.min !== undefined ? 'd' : 'i'
    }
    if (named !== 'increment' && named !== 'decrement') throw new SteadError('malformed', `rights is 'increment' or 'decrement', got ${String(named)}`)
    const kind = named === 'increment' ? 'i' : 'd'
    if (!spendsRights(this.params, kind)) throw new SteadError('malformed', `${this.key} has no ${kind === 'i' ? 'max' : 'min'}: it has no rights to ${named}`)
    return kind
  }

  private change(kind: RightsKind, n: number, options?: SpendOptions): Promise<UpdateResult> {
    const spend = [kind, n] as BoundedCounterOp
    if (options?.rights !== undefined && options.rights !== 'wait' && options.rights !== 'fail') throw new SteadError('malformed', `rights is 'wait' or 'fail', got ${String(options.rights)}`)
    if (!spendsRights(this.params, kind)) return this.send(spend, options)
    const have = this.host.spendableRights(this.key, this.declaration, kind)
    if (have >= n) return this.send(spend, options)
    if (options?.rights === 'fail') return Promise.resolve(rejectedRights(have, n))
    // Rights first (claimed from the pool, or granted by other replicas, once stable), then a spend that cannot be refused.
    const attempt = (): Promise<UpdateResult> =>
      this.host.acquireRights(this.key, this.declaration, kind, n, options).then((ok) => {
        const now = this.host.spendableRights(this.key, this.declaration, kind)
        if (!ok) return rejectedRights(now, n)
        // Another spend of this client waiting beside this one may have taken them first: wait again.
        return now >= n ? this.send(spend, options) : attempt()
      })
    return attempt()
  }
}

function rejectedRights(have: number, need: number): SafeResult {
  return { status: 'rejected', reason: 'invariant', detail: `this client holds ${have} rights, needs ${need}` }
}

/** The intents that spend `n` on a bounded counter: claim what the client's rights of that kind do not cover, then spend. */
export function boundedSpend(key: string, decl: Declaration, kind: RightsKind, n: number, rights: number): Array<{ key: string; decl: Declaration; intent: Intent }> {
  const missing = Math.max(0, n - Math.max(0, rights))
  const spend = { key, decl, intent: [kind, n] as BoundedCounterOp }
  const params = (decl as Extract<Declaration, { type: 'bounded-counter' }>).params
  return missing > 0 ? [{ key, decl, intent: claimOp(params, kind, missing) }, spend] : [spend]
}
