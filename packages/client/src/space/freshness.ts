import { DraftBatch, type Deferred, type DraftItem } from './drafts.ts'
import type { UpdateResult } from '../types.ts'

/**
 * Regular updates of objects opened with a freshness bound (BENDY's
 * freshness SLA): they wait here, shown prospectively, and join a draft
 * batch once the object's deadline comes, so that a hot object's updates
 * leave as one merged update (counter increments summed, a register's
 * last write) instead of one per batch interval.
 *
 * An object's deadline follows the paper: t = t_u + δ − μ, where t_u is
 * when its oldest waiting update was made, δ its bound and μ the estimated
 * time from leaving the waiting area to reaching the relays (the batch
 * interval, plus the submit → accepted time measured on this client's
 * envelopes). Safe updates never wait: one on an object releases the
 * object's waiting updates first, so they keep their order.
 */
export class FreshnessHold {
  /** The waiting updates, in the order they were made (so they apply after every draft batch in prospective views). */
  readonly batch = new DraftBatch()
  private readonly bounds = new Map<string, number>()
  /** Per object with waiting updates: when its oldest one was made. */
  private readonly since = new Map<string, number>()
  /** Estimated submit → accepted time (exponentially weighted), ms. */
  private acceptMs = 0
  private readonly batchIntervalMs: number

  constructor(batchIntervalMs: number) {
    this.batchIntervalMs = batchIntervalMs
  }

  /** Sets (or, with 0 or undefined, removes) the freshness bound of `key`, in ms. */
  setBound(key: string, ms: number | undefined): void {
    if (ms && ms > 0) this.bounds.set(key, ms)
    else this.bounds.delete(key)
  }

  /** Whether a regular update of `key` waits here. */
  holds(key: string): boolean {
    return this.bounds.has(key)
  }

  get size(): number {
    return this.batch.regular.length
  }

  /** Keeps a regular update of a bounded object until its deadline; `stored` resolves once it is signed into an envelope and stored. */
  hold(item: DraftItem, stored: Deferred<UpdateResult>, now: number): void {
    this.batch.regular.push(item)
    this.batch.stored.push(stored)
    this.batch.keys.add(item.key)
    if (!this.since.has(item.key)) this.since.set(item.key, now)
  }

  /** A measured submit → accepted time of one of this client's envelopes. */
  observeAccepted(ms: number): void {
    if (!(ms >= 0)) return
    this.acceptMs = this.acceptMs === 0 ? ms : this.acceptMs * 0.8 + ms * 0.2
  }

  /** μ: how long an update takes from leaving here to reaching the relays. */
  get propagationMs(): number {
    return this.batchIntervalMs + this.acceptMs
  }

  private deadlineOf(key: string): number {
    return (this.since.get(key) as number) + Math.max(0, (this.bounds.get(key) ?? 0) - this.propagationMs)
  }

  /** The earliest deadline among objects with waiting updates (undefined: none wait). */
  nextDeadline(): number | undefined {
    let next: number | undefined
    for (const key of this.since.keys()) {
      const d = this.deadlineOf(key)
      if (next === undefined || d < next) next = d
    }
    return next
  }

  /** Objects whose deadline has come by `now`. */
  due(now: number): string[] {
    return [...this.since.keys()].filter((key) => this.deadlineOf(key) <= now)
  }

  /** Takes the waiting updates of `keys` (all with 'all'), in the order they were made. */
  release(keys: Iterable<string> | 'all'): Array<{ item: DraftItem; stored: Deferred<UpdateResult> }> {
    const wanted = keys === 'all' ? new Set(this.since.keys()) : new Set([...keys].filter((k) => this.since.has(k)))
    if (wanted.size === 0) return []
    const out: Array<{ item: DraftItem; stored: Deferred<UpdateResult> }> = []
    const keptItems: DraftItem[] = []
    const keptStored: Array<Deferred<UpdateResult>> = []
    this.batch.regular.forEach((item, i) => {
      const stored = this.batch.stored[i] as Deferred<UpdateResult>
      if (wanted.has(item.key)) out.push({ item, stored })
      else {
        keptItems.push(item)
        keptStored.push(stored)
      }
    })
    this.batch.regular.length = 0
    this.batch.stored.length = 0
    for (const item of keptItems) this.batch.regular.push(item)
    for (const stored of keptStored) this.batch.stored.push(stored)
    for (const key of wanted) {
      this.since.delete(key)
      this.batch.keys.delete(key)
    }
    return out
  }
}
