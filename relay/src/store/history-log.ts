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

/** A stored entry: a whole value, or a patch of the entry at `base`. */
type Stored = readonly ['w', unknown] | readonly ['p', number, ValuePatch]

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
 */
export class HistoryLog {
  private readonly table: KvTable<[string, string, number]>
  private readonly heads = new Map<string, Head>()

  constructor(table: KvTable<[string, string, number]>) {
    this.table = table
  }

  /** Stores one entry (only inside Kv.write). A patch is kept only if it follows the latest entry stored for its object. */
  put(h: HistoryRecord): void {
    const id = `${h.space}\u0000${h.key}`
    const head = this.heads.get(id)
    this.heads.delete(id)
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
    this.forget()
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
      const enough = stored.length >= limit && stored[stored.length - 1]?.entry[0] === 'w'
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
      if (entry[0] === 'w') value = entry[1]
      else if (entry[1] === at) value = applyValuePatch(value, entry[2])
      else throw new Error(`history of ${key} in ${space}: the entry at ${index} patches ${entry[1]}, not ${at}`)
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
