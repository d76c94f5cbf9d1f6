import { POOL, askOp, claimOp, grantOp, spendsRights, type BoundedCounter, type BoundedCounterDeclaration, type BoundedCounterOp, type EscrowView, type HostClock, type HostTimer, type RightsKind } from '@stead/core'
import type { UpdateResult } from '../types.ts'

/** How often open bounded counters are looked at for rights to ask, claim or grant. */
export const RIGHTS_INTERVAL_MS = 1000
/** How long an ask may go unanswered before the next one goes to another replica. */
export const ASK_RETRY_MS = 3000

/** What the broker needs of its space. */
export interface RightsPort {
  readonly authorId: string
  readonly clock: HostClock
  /** The counter as this client may spend from it: stable, plus this client's own updates not decided yet. */
  ownView(key: string, decl: BoundedCounterDeclaration): BoundedCounter
  /** The counter with every update this client has seen (others' asks show here first). */
  prospective(key: string): BoundedCounter | undefined
  /** Sends an update of this client (a claim safe, the rest regular). */
  update(key: string, decl: BoundedCounterDeclaration, op: BoundedCounterOp, safe: boolean): Promise<UpdateResult>
  /** Calls `listener` when `key` may have changed. */
  subscribe(key: string, listener: () => void): () => void
  /** Whether the space still takes updates. */
  isOpen(): boolean
}

interface Tracked {
  readonly decl: BoundedCounterDeclaration
  readonly unsubscribe: () => void
  /** When this client last asked, and whom, per kind. */
  readonly asked: Map<RightsKind, { readonly at: number; readonly from: string }>
  /** Kinds with a claim from the pool on its way. */
  readonly claiming: Set<RightsKind>
  /** Spends waiting for rights (see acquire), in the order they came. */
  readonly waiters: Set<Waiter>
  soon: HostTimer | undefined
}

interface Waiter {
  readonly kind: RightsKind
  readonly n: number
  readonly done: (enough: boolean) => void
}

/**
 * Moves bounded counters' rights between replicas without consensus (the
 * Bounded Counter paper, §IV-D): for each counter this client opened it
 * answers other replicas' asks addressed to it with grants (at most half
 * of what it holds, rounded up, never to a replica holding more, and none
 * while it waits for rights itself), and once this client has spent on it
 * (an active replica, in the paper's terms) keeps its own rights above a
 * threshold (half an equal share of the distance to the bound) by claiming
 * from the pool while it has rights, else by asking the replica that holds
 * the most for half the difference. A client that only reads or gains
 * claims nothing: rights do not pile up on idle devices. Asks and grants
 * are regular updates that relays forward at once; a grant's rights can be
 * spent once it is stable (the audit does not order one author's spend
 * after another author's grant), so spends stay local when rights arrive
 * ahead of them.
 */
export class RightsBroker {
  private readonly tracked = new Map<string, Tracked>()
  private timer: HostTimer | undefined
  private readonly port: RightsPort

  constructor(port: RightsPort) {
    this.port = port
  }

  /** Starts looking after `key`'s rights (a bounded counter the app opened). */
  track(key: string, decl: BoundedCounterDeclaration): void {
    if (this.tracked.has(key)) return
    this.tracked.set(key, { decl, unsubscribe: this.port.subscribe(key, () => this.soon(key)), asked: new Map(), claiming: new Set(), waiters: new Set(), soon: undefined })
    this.arm()
    this.soon(key)
  }

  /** Stops every timer and subscription. */
  close(): void {
    this.timer?.cancel()
    this.timer = undefined
    for (const t of this.tracked.values()) {
      t.unsubscribe()
      t.soon?.cancel()
      for (const w of t.waiters) w.done(false)
    }
    this.tracked.clear()
  }

  /**
   * Waits until this client may spend `n` of `kind` on `key` by itself,
   * asking for what it lacks (see the class). Resolves false as soon as the
   * rights that could reach it fall short of `n`: its own, the pool's, and
   * what the others would grant (half of each holding, rounded up, from
   * those holding more). The caller bounds the wait.
   */
  acquire(key: string, decl: BoundedCounterDeclaration, kind: RightsKind, n: number, abort: AbortSignal): Promise<boolean> {
    this.track(key, decl)
    const t = this.tracked.get(key) as Tracked
    return new Promise<boolean>((resolve) => {
      const waiter: Waiter = {
        kind,
        n,
        done: (enough) => {
          t.waiters.delete(waiter)
          abort.removeEventListener('abort', onAbort)
          resolve(enough)
        },
      }
      const onAbort = (): void => waiter.done(false)
      if (abort.aborted) return resolve(false)
      abort.addEventListener('abort', onAbort)
      t.waiters.add(waiter)
      this.step(key)
    })
  }

  private arm(): void {
    if (this.timer || this.tracked.size === 0) return
    this.timer = this.port.clock.setTimer(RIGHTS_INTERVAL_MS, () => {
      this.timer = undefined
      for (const key of this.tracked.keys()) this.step(key)
      this.arm()
    })
    this.timer.unref?.()
  }

  /** Looks at `key` once the current change is done (changes come in bursts; a grant sent inside a listener would nest). */
  private soon(key: string): void {
    const t = this.tracked.get(key)
    if (!t || t.soon) return
    t.soon = this.port.clock.setTimer(0, () => {
      t.soon = undefined
      this.step(key)
    })
  }

  private step(key: string): void {
    const t = this.tracked.get(key)
    if (!t) return
    if (!this.port.isOpen()) {
      for (const w of [...t.waiters]) w.done(false)
      return
    }
    // One view of the counter for the whole step: computing it clones the rights matrix.
    const own = this.port.ownView(key, t.decl)
    for (const kind of ['i', 'd'] as const) {
      if (!spendsRights(t.decl.params, kind)) continue
      const view = own.rightsOfKind(kind) as EscrowView
      const { need, reserved } = this.settleWaiters(t, kind, view)
      // A client that waits for rights itself grants none (they would only come back), and keeps what its spends just got.
      const granted = need === undefined ? this.answer(key, t, kind, view, reserved) : 0
      // Grants just sent left this view behind; the next step (their own change) looks again.
      if (granted === 0) this.provision(key, t, kind, view, need)
    }
  }

  /**
   * Resolves the waiting spends that now hold their rights (each taking
   * its share: they spend next), or never will; returns the most any other
   * still needs, and the rights the resolved ones are about to spend.
   */
  private settleWaiters(t: Tracked, kind: RightsKind, view: EscrowView): { need: number | undefined; reserved: number } {
    const me = this.port.authorId
    let need: number | undefined
    let reserved = 0
    for (const w of [...t.waiters]) {
      if (w.kind !== kind) continue
      if (view.rightsOf(me) - reserved >= w.n) {
        reserved += w.n
        w.done(true)
      } else if (reachable(view, me) - reserved < w.n) w.done(false)
      else need = Math.max(need ?? 0, w.n)
    }
    return { need, reserved }
  }

  /** Grants what other replicas asked of this one, by the paper's rules (see the class); returns how many grants it sent. */
  private answer(key: string, t: Tracked, kind: RightsKind, mine: EscrowView, reserved: number): number {
    const me = this.port.authorId
    const asks = this.port.prospective(key)?.rightsOfKind(kind)
    if (!asks) return 0
    let have = mine.rightsOf(me) - reserved
    let sent = 0
    for (const [requester, ask] of asks.allAsks()) {
      if (ask.from !== me || requester === me) continue
      if (mine.given(me, requester) !== ask.seen || mine.rightsOf(requester) >= have) continue
      const n = Math.min(ask.n, Math.ceil(have / 2))
      if (n < 1) continue
      have -= n
      sent++
      void this.port.update(key, t.decl, grantOp(t.decl.params, kind, n, requester, ask.seen), false).catch(() => {})
    }
    return sent
  }

  /** Keeps this client's rights of `kind` above its threshold, or what a waiting spend needs. */
  private provision(key: string, t: Tracked, kind: RightsKind, view: EscrowView, need: number | undefined): void {
    const me = this.port.authorId
    const mine = view.rightsOf(me)
    // Only a replica that spends keeps a stock of rights: one that never did leaves them where they are useful.
    if (need === undefined && view.spent(me) === 0) return
    const want = Math.max(threshold(view, me), need ?? 0)
    if (mine >= want) return
    const pool = view.rightsOf(POOL)
    if (pool > 0) {
      if (t.claiming.has(kind)) return
      t.claiming.add(kind)
      // What a waiting spend needs, else a stock of at most an eighth of the pool: clients that start together do not all race for half of it.
      const n = Math.min(pool, Math.max((need ?? 0) - mine, Math.min(want - mine, Math.ceil(pool / 8))))
      void this.port
        .update(key, t.decl, claimOp(t.decl.params, kind, n), true)
        .catch(() => {})
        .finally(() => {
          t.claiming.delete(kind)
          this.soon(key)
        })
      return
    }
    const now = this.port.clock.now()
    const last = t.asked.get(kind)
    const pending = view.askOf(me)
    const unanswered = pending !== undefined && view.given(pending.from, me) === pending.seen
    if (unanswered && last && now - last.at < ASK_RETRY_MS) return
    // The replica holding the most, but not the one that left the last ask unanswered.
    const skip = unanswered ? last?.from : undefined
    const richest = holders(view, me).filter(([r]) => r !== skip).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))[0]
    if (!richest || richest[1] <= mine) return
    const [from, theirs] = richest
    const n = Math.min(Math.ceil(theirs / 2), Math.max(want - mine, Math.floor((theirs - mine) / 2)))
    if (n < 1) return
    t.asked.set(kind, { at: now, from })
    void this.port.update(key, t.decl, askOp(t.decl.params, kind, { no: (pending?.no ?? 0) + 1, from, seen: view.given(from, me), n }), false).catch(() => {})
  }
}

/** Replicas other than `me` and the pool that hold rights, with how many. */
function holders(view: EscrowView, me: string): Array<[string, number]> {
  return [...view.holders()].filter(([r, n]) => r !== me && r !== POOL && n > 0)
}

/** The rights `me` could hold by asking: its own, the pool's, and what each replica holding more would grant (half, rounded up). */
function reachable(view: EscrowView, me: string): number {
  const mine = view.rightsOf(me)
  let sum = mine + Math.max(0, view.rightsOf(POOL))
  for (const [, n] of holders(view, me)) if (n > mine) sum += Math.ceil(n / 2)
  return sum
}

/** Every right of this kind, the pool's included: how far the value is from the bound. */
function distance(view: EscrowView): number {
  let sum = 0
  for (const [, n] of view.holders()) sum += Math.max(0, n)
  return sum
}

/** Half an equal share of the distance to the bound among the replicas holding rights and `me`: below it, `me` asks for more. */
function threshold(view: EscrowView, me: string): number {
  const share = distance(view) / (holders(view, me).length + 1)
  return Math.max(1, Math.floor(share / 2))
}
