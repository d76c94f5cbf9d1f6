import { decode, encode, type Retention } from '@stead/core'
import { RECORD_LIMIT, type KvTable } from './kv.ts'
import type { HistoryLog, ListingCursor } from './history-log.ts'

const DAY_MS = 86_400_000
const HOUR_MS = 3_600_000
/** Stamps a retention in days keeps per window at most: its limit moves in steps of 1% of the window (or an hour). */
const STAMPS_PER_WINDOW = 100
/** History entries and stored commits one compaction prunes at most: the rest waits for the next (bounds the time a write takes). */
export const PRUNE_BUDGET = 10_000

/** What a space's policy says of its history, as a snapshot of it reports (see SnapshotWrite.retention). */
export interface SpaceRetention {
  readonly space: string
  /** Its stable index at the snapshot. */
  readonly stableIndex: number
  /** Its retention; undefined: keep everything. */
  readonly keep?: Retention
  /** Whether an admin deleted it: everything goes. */
  readonly deleted: boolean
}

/**
 * A space's row: [entries, days, deleted (0 or 1), stable index at its
 * latest snapshot, when that was (ms), where listing its entries stored
 * before it had a row goes on (null once all are listed)].
 */
type Row = [number, number, number, number, number, ListingCursor | null]

/**
 * Applies the spaces' retentions (their policies' `['k', entries, days]`)
 * to the relay's stable histories, and their deletions to those and to
 * their stored commits, when it compacts (with each snapshot). A space's
 * limit is a stable index: its last `entries` indexes, and the index it
 * had `days` ago, as this relay's clock stamped its snapshots (to within
 * 1% of the window or an hour); a deleted space keeps nothing but its
 * latest commit. Every space
 * with a retention is swept, a bounded number of entries per compaction,
 * round-robin from where the last stopped, so a quiet space ages out too
 * and no compaction takes long.
 */
export class HistoryRetention {
  private readonly rows: KvTable<string>
  /**
   * [space, stable index] → [ms]: when a snapshot first found the space at
   * that index, so that what is at or below it is at least that old (kept
   * for spaces kept by days, one per 1% of the window at most; the row has
   * the latest).
   */
  private readonly stamps: KvTable<[string, number]>
  private readonly history: HistoryLog
  private readonly pruneFeed: (space: string, below: number, limit: number) => number
  /** The space the next sweep starts from (spaces are swept in name order, wrapping around). */
  private next = ''

  constructor(rows: KvTable<string>, stamps: KvTable<[string, number]>, history: HistoryLog, pruneFeed: (space: string, below: number, limit: number) => number) {
    this.rows = rows
    this.stamps = stamps
    this.history = history
    this.pruneFeed = pruneFeed
  }

  /** Inside Kv.write: records what the snapshotted spaces' policies say now, then prunes within `budget`. */
  compact(spaces: readonly SpaceRetention[], now: number, budget = PRUNE_BUDGET): void {
    for (const s of spaces) this.record(s, now)
    this.sweep(now, budget)
  }

  /** Whether the space has a retention (or was deleted): its history entries are listed by stable index (see HistoryLog). */
  covers(space: string): boolean {
    return this.rows.get(space) !== undefined
  }

  private record(s: SpaceRetention, now: number): void {
    const had = this.rows.get(s.space)
    const days = s.deleted ? 0 : (s.keep?.days ?? 0)
    // Stamps date history for retentions in days only.
    if (days === 0) this.dropStamps(s.space, Number.MAX_SAFE_INTEGER)
    if (!s.deleted && !s.keep) {
      if (had) this.rows.remove(s.space)
      return
    }
    // A space new here lists its entries stored so far (from its first on), a bounded number per sweep.
    const listing = had ? (decode(had, RECORD_LIMIT) as Row)[5] : (['', 0] as const)
    this.rows.put(s.space, encode([s.deleted ? 0 : (s.keep?.entries ?? 0), days, s.deleted ? 1 : 0, s.stableIndex, now, listing] satisfies Row))
    if (days === 0) return
    let latest: [number, number] | undefined
    for (const { key, value } of this.stamps.getRange({ start: [s.space, Number.MAX_SAFE_INTEGER], end: [s.space, -1], reverse: true, limit: 1 })) {
      if ((key as [string, number])[0] === s.space) latest = [(key as [string, number])[1], (decode(value, RECORD_LIMIT) as [number])[0]]
    }
    const due = latest === undefined || (latest[0] < s.stableIndex && now - latest[1] >= Math.max(HOUR_MS, (days * DAY_MS) / STAMPS_PER_WINDOW))
    if (due) this.stamps.put([s.space, s.stableIndex], encode([now]))
  }

  private sweep(now: number, budget: number): void {
    // Deleted spaces pruned to the end leave the sweep (a later snapshot of one brings it back); rows are
    // changed once the sweep is done with them (not while a cursor walks them).
    const done: string[] = []
    const listed = new Map<string, Row>()
    this.next = this.sweepFrom(now, budget, done, listed)
    for (const [space, row] of listed) this.rows.put(space, encode(row))
    for (const space of done) this.rows.remove(space)
  }

  /** Sweeps from where the last sweep stopped to the end, then from the start back to there; each space visited costs one. Returns where to go on next time. */
  private sweepFrom(now: number, budget: number, done: string[], listed: Map<string, Row>): string {
    const from = this.next
    const ranges = [this.rows.getRange({ start: from }), ...(from === '' ? [] : [this.rows.getRange({ end: from })])]
    for (const range of ranges) {
      for (const { key, value } of range) {
        const space = key as string
        if (budget <= 0) return space
        budget--
        const row = decode(value, RECORD_LIMIT) as Row
        if (row[5] !== null) {
          // Entries stored before the space had a row are listed first; until then it is not pruned.
          const { next, listed: n } = this.history.listExisting(space, row[5], budget)
          budget -= n
          listed.set(space, [row[0], row[1], row[2], row[3], row[4], next ?? null])
          if (next) return space
        }
        const below = this.limitOf(space, row, now)
        if (below <= 0) continue
        budget -= this.history.prune(space, below, budget)
        // A deleted space's commits go too (they carry what was deleted); others keep theirs for
        // clients resuming, as long as the operator says (--retain-updates).
        if (budget > 0 && row[2] === 1) {
          // All but the latest, which the store keeps whatever the limit.
          budget -= this.pruneFeed(space, row[3], budget)
          if (budget > 0) done.push(space)
        }
        // Cut short: this space goes on first next time.
        if (budget <= 0) return space
      }
    }
    return ''
  }

  /** The stable index below which `space`'s history goes (0: none does). */
  private limitOf(space: string, [entries, days, deleted, stableIndex, at]: Row, now: number): number {
    if (deleted) return stableIndex + 1
    const below = entries > 0 ? stableIndex - entries + 1 : 0
    if (days === 0) return below
    const since = now - days * DAY_MS
    // The space's latest snapshot: all it held then is older than the window once that is.
    if (at <= since) return Math.max(below, stableIndex + 1)
    // Else the newest stamp at least `days` old: what the space held then is.
    let old: number | undefined
    for (const { key, value } of this.stamps.getRange({ start: [space, 0], end: [space, Number.MAX_SAFE_INTEGER] })) {
      if ((key as [string, number])[0] !== space || (decode(value, RECORD_LIMIT) as [number])[0] > since) break
      old = (key as [string, number])[1]
    }
    if (old === undefined) return below
    this.dropStamps(space, old)
    return Math.max(below, old + 1)
  }

  /** Forgets the space's stamps below stable index `below`. */
  private dropStamps(space: string, below: number): void {
    for (const key of [...this.stamps.getKeys({ start: [space, 0], end: [space, below] })]) {
      if ((key as [string, number])[0] === space) this.stamps.remove(key as [string, number])
    }
  }
}
