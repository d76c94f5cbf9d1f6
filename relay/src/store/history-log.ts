import { applyValuePatch, decode, encode, type ValuePatch } from '@stead/core'
import { RECORD_LIMIT, type KvTable } from './kv.ts'

/** An object's stable value from `index` on, as the audit reports it (see StableChange). */
export interface HistoryRecord {
  readonly space: string
  readonly key: string
  readonly index: number
  readonly value: unknown
  /** The same value as a patch of the object's value at stable index `base` (texts, lists, maps). */
  readonly patch?: { readonly base: number; readonly patch: ValuePatch }
  /** The object was deleted here (value null). */
  readonly deleted?: true
}

/** Most patches stored in a row for one object before its whole value again: bounds the work of reading any entry. */
export const MAX_PATCH_RUN = 256
/** Objects whose latest stored entry is remembered (beyond it, the next entry of an object forgotten is stored whole). */
const MAX_HEADS = 20_000

/** What is remembered of an object's latest stored entry. */
interface Head {
  readonly index: number
  /** Bytes of the latest whole value stored, and of the patches stored since. */
  readonly wholeBytes: number
  readonly patchBytes: number
  readonly patches: number
}

/** A stored entry: a whole value, a patch of the entry at `base`, or the object's deletion (read as null). */
type Stored = readonly ['w', unknown] | readonly ['p', number, ValuePatch] | readonly ['x']

const EMPTY = new Uint8Array(0)

/** Where listing a space's existing entries in the index goes on from: the next entry's object key and stable index. */
export type ListingCursor = readonly [key: string, index: number]

/**
 * The stable histories of a relay's objects: each object's value at each
 * stable index that changed it. A text, list or map changed a keystroke at
 * a time would cost its whole value per change; those are stored as
 * patches (see ValuePatch) between whole values, a whole value again once
 * the patches since the last one weigh as much as it does or number
 * MAX_PATCH_RUN. So the history of an object takes at most about twice the
 * bytes of its changes plus one whole value per MAX_PATCH_RUN changes, and
 * reading any entry replays at most MAX_PATCH_RUN patches.
 *
 * Reads give the values, whatever was stored: relays that stored one
 * history differently (one restarted, and stored a whole value where
 * another stored a patch) serve identical pages.
 *
 * Histories are kept whole unless pruned (see prune): a second table lists
 * the entries of spaces with a retention by stable index (`listed`), so
 * that pruning below an index visits only the entries below it, not every
 * object of the space; other spaces' entries cost no second row.
 */
export class HistoryLog {
  private readonly table: KvTable<[string, string, number]>
  /** [space, stable index, object key] → nothing: the listed spaces' entries not yet swept by prune, in stable order. */
  private readonly byIndex: KvTable<[string, number, string]>
  private readonly heads = new Map<string, Head>()
  /** Whether a space's new entries go in the index (it has a retention). */
  private readonly listed: (space: string) => boolean

  constructor(table: KvTable<[string, string, number]>, byIndex: KvTable<[string, number, string]>, listed: (space: string) => boolean = () => true) {
    this.table = table
    this.byIndex = byIndex
    this.listed = listed
  }

  /** Stores one entry (only inside Kv.write). A patch is kept only if it follows the latest entry stored for its object. */
  put(h: HistoryRecord): void {
    const id = `${h.space}\u0000${h.key}`
    const head = this.heads.get(id)
    this.heads.delete(id)
    if (this.listed(h.space)) this.byIndex.put([h.space, h.index, h.key], EMPTY)
    if (h.deleted) {
      // What comes after a deletion is stored whole (there is no head to patch).
      this.table.put([h.space, h.key, h.index], encode(['x'] satisfies Stored))
      return
    }
    if (h.patch && head && head.index === h.patch.base && head.patches < MAX_PATCH_RUN) {
      const bytes = encode(['p', h.patch.base, h.patch.patch] satisfies Stored)
      if (head.patchBytes + bytes.length <= head.wholeBytes) {
        this.table.put([h.space, h.key, h.index], bytes)
        this.remember(id, { index: h.index, wholeBytes: head.wholeBytes, patchBytes: head.patchBytes + bytes.length, patches: head.patches + 1 })
        return
      }
    }
    const bytes = encode(['w', h.value] satisfies Stored)
    this.table.put([h.space, h.key, h.index], bytes)
    this.remember(id, { index: h.index, wholeBytes: bytes.length, patchBytes: 0, patches: 0 })
  }

  /** Removes every history (only inside Kv.write). */
  clear(): void {
    for (const key of [...this.table.getKeys()]) this.table.remove(key as [string, string, number])
    for (const key of [...this.byIndex.getKeys()]) this.byIndex.remove(key as [string, number, string])
    this.forget()
  }

  /**
   * Prunes `space`'s histories below stable index `below` (only inside
   * Kv.write): of each object's entries below it, all go but the newest
   * (the value in force at `below`, rewritten whole if it was a patch), and
   * that one too if it is the object's deletion. Visits at most `budget`
   * entries of the index and about as many of the objects' (in stable
   * order, from where the last prune of the space stopped) and returns how
   * much of `budget` it used: less than all of it only once the space is
   * pruned up to `below`. Only entries listed in the index are visited
   * (see listExisting).
   */
  prune(space: string, below: number, budget: number): number {
    const swept: Array<[string, number, string]> = []
    const objects = new Set<string>()
    for (const key of this.byIndex.getKeys({ start: [space, 0, ''], end: [space, below, ''], limit: budget })) {
      const k = key as [string, number, string]
      if (k[0] !== space || k[1] >= below) break
      swept.push(k)
      objects.add(k[2])
    }
    // Objects not pruned to the limit keep their place in the index: the next prune goes on with them.
    let left = budget
    const unfinished = new Set<string>()
    for (const object of objects) {
      const done = left > 0 && this.pruneObject(space, object, below, left, (n) => (left -= n))
      if (!done) unfinished.add(object)
    }
    for (const k of swept) if (!unfinished.has(k[2])) this.byIndex.remove(k)
    return unfinished.size > 0 ? budget : swept.length
  }

  /**
   * One object's part of prune: its entries below `below` but the one in
   * force there (none if that is a deletion), or, when more than
   * `maxRows` are, the oldest `maxRows` of them (the next one rewritten
   * whole). Tells `spent` how many entries it read; returns whether it
   * pruned the object up to `below`.
   */
  private pruneObject(space: string, key: string, below: number, maxRows: number, spent: (n: number) => void): boolean {
    const rows = [...this.table.getRange({ start: [space, key, 0], end: [space, key, below], limit: maxRows + 1 })].filter(({ key: k }) => k[0] === space && k[1] === key && k[2] < below)
    spent(rows.length)
    const done = rows.length <= maxRows
    const last = rows.at(-1)
    if (!last) return true
    const entry = decode(last.value, RECORD_LIMIT) as Stored
    const drop = done && entry[0] === 'x' ? rows : rows.slice(0, -1)
    if (entry[0] === 'p') {
      // The oldest entry kept must be whole: nothing it patches is left.
      this.table.put(last.key, encode(['w', this.valueAt(rows)] satisfies Stored))
      this.heads.delete(`${space}\u0000${key}`)
    }
    for (const { key: k } of drop) this.table.remove(k)
    return done
  }

  /** The value of the last of an object's consecutive entries (oldest first, from a whole one on). */
  private valueAt(rows: ReadonlyArray<{ key: [string, string, number]; value: Uint8Array }>): unknown {
    // Back to the entry it starts from (the newest that is no patch), each decoded once.
    const entries: Stored[] = []
    for (let i = rows.length - 1; i >= 0; i--) {
      const entry = decode((rows[i] as { value: Uint8Array }).value, RECORD_LIMIT) as Stored
      entries.push(entry)
      if (entry[0] !== 'p') break
    }
    let value: unknown
    for (const entry of entries.reverse()) value = applyEntry(value, entry)
    return value
  }

  /**
   * Lists up to `budget` of `space`'s entries stored before its entries
   * were listed (a retention set on a space with a history, or a data dir
   * from before the index), from `from` on (inside Kv.write). Returns how
   * many it listed and where to go on (none once all are).
   */
  listExisting(space: string, from: ListingCursor, budget: number): { next?: ListingCursor; listed: number } {
    let listed = 0
    for (const key of this.table.getKeys({ start: [space, from[0], from[1]], limit: budget + 1 })) {
      const [s, object, index] = key as [string, string, number]
      if (s !== space) break
      if (listed === budget) return { next: [object, index], listed }
      this.byIndex.put([space, index, object], EMPTY)
      listed++
    }
    return { listed }
  }

  /** Forgets what was stored last (a write that failed may not have stored it): each object's next entry is stored whole. */
  forget(): void {
    this.heads.clear()
  }

  /**
   * Up to `limit` entries of an object's stable history before stable index
   * `before`, newest first, as many as fit in `maxBytes` of encoded values
   * (always at least one); `more` says whether older entries remain. Reads
   * back to the whole value the oldest one needs, then forwards, holding at
   * most `maxBytes` of values and one more.
   */
  page(space: string, key: string, before: number, limit: number, maxBytes: number): { entries: Array<{ index: number; value: unknown }>; more: boolean } {
    // Newest first: the page's entries, then older ones back to a whole value.
    const stored: Array<{ index: number; entry: Stored }> = []
    let more = false
    for (const { key: k, value } of this.table.getRange({ start: [space, key, before], end: [space, key, -1], reverse: true })) {
      if (k[2] >= before) continue
      const enough = stored.length >= limit && stored[stored.length - 1]?.entry[0] !== 'p'
      if (enough) {
        more = true
        break
      }
      stored.push({ index: k[2], entry: decode(value, RECORD_LIMIT) as Stored })
    }
    if (stored.length > limit) more = true
    // Forwards, keeping the newest entries that fit.
    const kept: Array<{ index: number; value: unknown; bytes: number }> = []
    let keptBytes = 0
    let value: unknown
    let at = -1
    for (let i = stored.length - 1; i >= 0; i--) {
      const { index, entry } = stored[i] as { index: number; entry: Stored }
      if (entry[0] === 'p' && entry[1] !== at) throw new Error(`history of ${key} in ${space}: the entry at ${index} patches ${entry[1]}, not ${at}`)
      value = applyEntry(value, entry)
      at = index
      if (i >= limit) continue
      const bytes = encode(value).length
      kept.push({ index, value, bytes })
      keptBytes += bytes
      while (kept.length > 1 && keptBytes > maxBytes) {
        keptBytes -= (kept.shift() as { bytes: number }).bytes
        more = true
      }
    }
    return { entries: kept.reverse().map(({ index, value: v }) => ({ index, value: v })), more }
  }

  private remember(id: string, head: Head): void {
    this.heads.set(id, head)
    if (this.heads.size > MAX_HEADS) this.heads.delete(this.heads.keys().next().value as string)
  }
}

/** An entry's value, given the value of the entry before it (what a patch applies to). */
function applyEntry(before: unknown, entry: Stored): unknown {
  if (entry[0] === 'w') return entry[1]
  if (entry[0] === 'x') return null
  return applyValuePatch(before, entry[2])
}
