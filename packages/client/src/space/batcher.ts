import type { HostClock } from '@stead/core'
import { DraftIds } from './draft-ids.ts'
import { DraftBatch, deferred, type Deferred, type DraftItem } from './drafts.ts'
import { FreshnessHold } from './freshness.ts'
import { DeadlineTimer, SealSchedule } from './timing.ts'
import type { SafeResult, UpdateResult } from '../types.ts'

/** Where a space stands in closing: 'closing' from the moment close() is called (no update gets in after that), 'closed' once its sessions are left. */
export type Lifecycle = 'open' | 'closing' | 'closed'

/** What the batcher needs of its space: showing drafts, and the upstream that takes sealed ones. */
export interface BatcherPort {
  /** New drafts join the prospective views (`several`: a group, shown all or nothing). */
  show(items: readonly DraftItem[], several: boolean): void
  /** This client's own edits changed `keys`: subscribers and status listeners are told. */
  edited(keys: ReadonlySet<string>): void
  /** The drafts of `key` took another place in the order of prospective views. */
  reordered(key: string): void
  /** Hands a sealed batch to the upstream; resolves once it was settled there (the next batch waits for it: order matters). */
  seal(batch: DraftBatch): Promise<void>
  lifecycle(): Lifecycle
}

/**
 * A space's drafts not signed yet, and when they are sealed into
 * envelopes: the open batch is sealed once full, else as its SealSchedule
 * says; regular updates of objects with a freshness bound wait in the
 * FreshnessHold until their deadline; a `transact` keeps its edits in one
 * batch and tells subscribers once at its end. Sealed batches go to the
 * upstream one after another.
 */
export class Batcher {
  /** The ids of unsigned drafts (read by the outbox when it signs them). */
  readonly ids = new DraftIds()
  /** Drafts not yet signed, oldest first; the last one is open. */
  private batches: DraftBatch[] = [new DraftBatch()]
  /** The batches handed to the upstream, chained so each waits for the one before. */
  private sealing: Promise<void> = Promise.resolve()
  /** When the open batch is sealed (at most one envelope per batch interval). */
  private readonly seals: SealSchedule
  /** Regular updates of objects with a freshness bound, waiting for their deadline. */
  private readonly hold: FreshnessHold
  /** Fires at the earliest freshness deadline. */
  private readonly holdTimer: DeadlineTimer
  /** Set while `transact` runs: the keys its edits changed, told to subscribers once at its end. */
  private transaction: { readonly changed: Set<string>; readonly done: Deferred<UpdateResult> } | undefined
  private readonly maxBatchOps: number
  private readonly clock: HostClock
  private readonly port: BatcherPort

  constructor(init: { batchIntervalMs: number; maxBatchOps: number; clock: HostClock; port: BatcherPort }) {
    this.maxBatchOps = init.maxBatchOps
    this.clock = init.clock
    this.port = init.port
    this.hold = new FreshnessHold(init.batchIntervalMs)
    this.seals = new SealSchedule(init.batchIntervalMs, this.clock, () => {
      if (this.port.lifecycle() !== 'closed') this.sealNow()
    })
    this.holdTimer = new DeadlineTimer(this.clock, () => {
      if (this.port.lifecycle() !== 'open') return
      this.releaseHeld(this.hold.due(this.clock.now()))
      this.armHoldTimer()
    })
  }

  /** Drafts not yet signed, oldest first; the last one is open. */
  get drafts(): readonly DraftBatch[] {
    return this.batches
  }

  /** Every batch whose items show prospectively, in the order they apply: the drafts, then what waits for a freshness deadline. */
  shown(): readonly DraftBatch[] {
    return this.hold.size ? [...this.batches, this.hold.batch] : this.batches
  }

  /** Updates not handed to the upstream yet (drafted or waiting for a deadline). */
  get queued(): number {
    return this.batches.reduce((n, d) => n + d.size, 0) + this.hold.size
  }

  private get openBatch(): DraftBatch {
    return this.batches[this.batches.length - 1] as DraftBatch
  }

  /** Drafts a regular update; resolves once it is signed into an envelope and stored. */
  addRegular(item: DraftItem): Promise<UpdateResult> {
    const stored = deferred<UpdateResult>()
    // A transaction's edits all go into its envelope: an object's waiting updates leave before them.
    if (this.transaction) this.releaseHeld([item.key])
    else if (this.hold.holds(item.key)) {
      this.hold.hold(item, stored, this.clock.now())
      this.show(this.hold.batch, [item])
      if (this.hold.size >= this.maxBatchOps) this.releaseHeld('all')
      else this.armHoldTimer()
      return stored.promise
    }
    const batch = this.openBatch
    batch.regular.push(item)
    batch.stored.push(stored)
    this.showDraft(batch, [item])
    return stored.promise
  }

  /** Drafts one safe group; resolves once the stable order decided it. */
  addSafe(items: readonly DraftItem[]): Promise<SafeResult> {
    // Safe updates never wait; the waiting updates of their objects go first, in order.
    this.releaseHeld(items.map((i) => i.key))
    const batch = this.openBatch
    const waiter = deferred<SafeResult>()
    batch.safe.push({ items, waiter })
    this.showDraft(batch, items)
    return waiter.promise
  }

  /**
   * Drafts one safe group in an envelope of its own, after everything
   * drafted before it and before anything drafted after it (an envelope
   * puts its regular updates before its safe ones: a deletion must not
   * take a later update with it). Inside a transaction it joins the
   * transaction's envelope, as addSafe.
   */
  addSafeAlone(items: readonly DraftItem[]): Promise<SafeResult> {
    if (this.transaction) return this.addSafe(items)
    this.releaseHeld(items.map((i) => i.key))
    this.sealNow()
    const done = this.addSafe(items)
    this.sealNow()
    return done
  }

  /** Drafts updates another tab forwarded (see `Space.queueForwarded`); returns the promises of the safe groups. */
  addForwarded(request: string, regular: readonly DraftItem[], safe: ReadonlyArray<readonly DraftItem[]>): Array<Promise<SafeResult>> {
    const batch = this.openBatch
    const groups: number[] = []
    const promises: Array<Promise<SafeResult>> = []
    for (const item of regular) batch.regular.push(item)
    for (const items of safe) {
      const waiter = deferred<SafeResult>()
      groups.push(batch.safe.length)
      batch.safe.push({ items, waiter })
      promises.push(waiter.promise)
    }
    batch.requests.push({ id: request, safe: groups })
    this.showDraft(batch, [...regular, ...safe.flat()], true)
    return promises
  }

  /** Runs `edits` as one transaction (see `Space.transact`); a nested call joins the outer one. */
  transact(edits: () => void): Promise<UpdateResult> {
    const outer = this.transaction
    if (outer) {
      edits()
      return outer.done.promise
    }
    // The transaction's envelope holds its edits only: what was queued before leaves first.
    this.sealNow()
    const batch = this.openBatch
    const transaction = { changed: new Set<string>(), done: deferred<UpdateResult>() }
    this.transaction = transaction
    let failure: { err: unknown } | undefined
    try {
      edits()
    } catch (err) {
      failure = { err }
    } finally {
      this.transaction = undefined
    }
    if (batch.size > 0) {
      batch.stored.push(transaction.done)
      this.sealNow()
    } else {
      transaction.done.resolve({ status: 'stored' })
    }
    this.port.edited(transaction.changed)
    if (!failure) return transaction.done.promise
    transaction.done.promise.catch(() => undefined)
    return Promise.reject(failure.err)
  }

  /** Whether a `transact` is running (a nested one joins it). */
  get transacting(): boolean {
    return this.transaction !== undefined
  }

  /**
   * A new freshness bound for `key`: its waiting updates leave at once when
   * the bound is lifted (later ones would otherwise overtake them), and at
   * the new deadline otherwise.
   */
  setFreshness(key: string, ms: number): void {
    this.hold.setBound(key, ms)
    if (!this.hold.holds(key)) this.releaseHeld([key])
    this.armHoldTimer()
  }

  /** A relay accepted one of this client's envelopes `ms` after it was sent: feeds the freshness deadlines' estimate of propagation time. */
  observeAccepted(ms: number): void {
    this.hold.observeAccepted(ms)
  }

  /** Seals everything, waiting or drafted; resolves once the upstream settled it all. */
  async sealAll(): Promise<void> {
    this.releaseHeld('all')
    this.sealNow()
    await this.sealing
  }

  /** The space closes: everything is sealed and nothing is scheduled any more; never rejects. */
  async close(): Promise<void> {
    this.releaseHeld('all')
    this.holdTimer.cancel()
    this.sealNow()
    await this.sealing.catch(() => undefined)
    this.seals.cancel()
  }

  /** A draft batch was settled by the upstream (signed, cancelled out or failed): it leaves the drafts. */
  remove(batch: DraftBatch): void {
    this.batches = this.batches.filter((d) => d !== batch)
  }

  /** Prospective at once (G1): the new items join the overlay and subscribers hear of it before this returns; then the batch is sealed in time. */
  private showDraft(batch: DraftBatch, items: readonly DraftItem[], several = items.length > 1): void {
    this.show(batch, items, several)
    this.sealInTime()
  }

  private show(batch: DraftBatch, items: readonly DraftItem[], several = items.length > 1): void {
    for (const item of items) batch.keys.add(item.key)
    this.port.show(items, several)
    // Within a transaction subscribers hear of its edits once, at its end.
    if (this.transaction) for (const item of items) this.transaction.changed.add(item.key)
    else this.port.edited(new Set(items.map((i) => i.key)))
  }

  /** Seals the open batch now if it is full, else when the seal schedule says. */
  private sealInTime(): void {
    if (this.transaction) return
    if (this.openBatch.size >= this.maxBatchOps) this.sealNow()
    else this.seals.request()
  }

  /** Moves the open batch to the upstream (signed and stored there, or by the leader tab), in order. */
  private sealNow(): void {
    const batch = this.openBatch
    if (batch.size === 0) return this.seals.cancel()
    this.seals.sealed()
    this.batches.push(new DraftBatch())
    this.sealing = this.sealing.then(() => this.port.seal(batch))
  }

  /**
   * Moves the waiting updates of `keys` (every one with 'all') into the
   * open draft batch, in the order they were made, and has it sealed in time.
   */
  private releaseHeld(keys: readonly string[] | 'all'): void {
    const released = this.hold.release(keys)
    if (released.length === 0) return
    for (const { item, stored } of released) {
      // No batch past maxBatchOps (but a transaction's): a full one is sealed and the rest go into the next.
      if (!this.transaction && this.openBatch.size >= this.maxBatchOps) this.sealNow()
      const batch = this.openBatch
      batch.regular.push(item)
      batch.stored.push(stored)
      batch.keys.add(item.key)
      this.port.reordered(item.key)
    }
    this.armHoldTimer()
    this.sealInTime()
  }

  /** Keeps one timer, for the earliest freshness deadline. */
  private armHoldTimer(): void {
    this.holdTimer.arm(this.hold.nextDeadline())
  }
}
