import { assert } from './dag.ts'
import { SteadError, type Envelope } from '@stead/core'

/** What the core learns about a client envelope it is asked to carry, from the shell's own check of it. */
export interface PayloadInfo {
  readonly idHex: string
  /** author id and per-author sequence number: two different ids for one slot conflict. */
  readonly slot: string
  /** The author's id: blocks take authors in turn. */
  readonly author: string
  /** A client waits for its order (it carries safe updates): rounds that carry it are not paced. */
  readonly urgent: boolean
}

/** What the core needs of an envelope: its id, its author's slot, and whether a client waits for its order (safe updates). */
export function payloadInfoOf(env: Envelope): PayloadInfo {
  return { idHex: env.idHex, slot: `${env.space}/${env.authorId}:${env.seq}`, author: env.authorId, urgent: env.safe.length > 0 }
}

/**
 * Classifies a payload frame. The shell verifies envelopes (signature,
 * permissions, limits) before the core sees them and answers from its cache
 * here; an Error means the frame is invalid. It must depend on the bytes
 * only: a block one correct relay refuses, every correct relay refuses.
 */
export type InspectPayload = (frame: Uint8Array) => PayloadInfo | SteadError

export interface PayloadLimits {
  /** Envelopes in one block. */
  readonly maxBlockEnvelopes: number
  /** Payload bytes in one block (one envelope may exceed it alone); keeps blocks far below the mesh frame limit. */
  readonly maxBlockBytes: number
  /** Envelopes waiting for a block; more are refused with 'rate-limited'. */
  readonly maxQueued: number
  /** Envelopes of one author waiting for a block; more of its are refused with 'rate-limited'. */
  readonly maxQueuedPerAuthor: number
}

/** A queued envelope. */
interface Queued {
  readonly frame: Uint8Array
  readonly info: PayloadInfo
}

/** One author's queued envelopes in arrival order, taken from `head` on. */
interface AuthorQueue {
  items: Queued[]
  head: number
}

/**
 * Client envelopes waiting for this relay's next block, and which envelope
 * holds each (author, seq) slot among those queued or seen in blocks: a
 * second envelope for a held slot is a conflict.
 *
 * Blocks take the authors in turn, one envelope each per pass (each
 * author's own in arrival order), the author served longest ago first: an
 * author with thousands queued shares each block with one that has one,
 * whose envelope goes in the next block instead of behind the others.
 * One author may hold at most a `maxQueuedPerAuthor` share of the queue.
 */
export class PayloadQueue {
  /** Authors with envelopes queued, the one served longest ago first. */
  private readonly authors = new Map<string, AuthorQueue>()
  private count = 0
  private bytes = 0
  private urgentCount = 0
  /** Envelope id → its author, for every queued envelope. */
  private readonly queuedIds = new Map<string, string>()
  /** slot → the envelope holding it and the round it was seen in (for GC). */
  private readonly slots = new Map<string, { idHex: string; round: number }>()
  private readonly limits: PayloadLimits

  constructor(limits: PayloadLimits) {
    this.limits = limits
  }

  get length(): number {
    return this.count
  }

  get queuedBytes(): number {
    return this.bytes
  }

  get slotCount(): number {
    return this.slots.size
  }

  /** Queued envelopes marked urgent (see PayloadInfo.urgent). */
  get urgentQueued(): number {
    return this.urgentCount
  }

  /** For checkInvariants: the envelopes queued, each author's in order, and the envelope holding a slot. */
  *queued(): IterableIterator<{ readonly frame: Uint8Array; readonly info: PayloadInfo }> {
    for (const q of this.authors.values()) for (let i = q.head; i < q.items.length; i++) yield q.items[i] as Queued
  }

  /** The queue's bound (PayloadLimits.maxQueued): `add` refuses beyond it. */
  get maxQueued(): number {
    return this.limits.maxQueued
  }

  get queuedIdCount(): number {
    return this.queuedIds.size
  }

  holderOf(slot: string): string | undefined {
    return this.slots.get(slot)?.idHex
  }

  has(idHex: string): boolean {
    return this.queuedIds.has(idHex)
  }

  /** Whether a queued envelope is urgent (see PayloadInfo.urgent). */
  get hasUrgent(): boolean {
    return this.urgentCount > 0
  }

  /** Urgent envelopes, up to `count` and `maxBytes` (but at least one, however big), without taking them. */
  peekUrgent(count: number, maxBytes: number): Uint8Array[] {
    const out: Uint8Array[] = []
    let bytes = 0
    if (this.urgentCount === 0) return out
    for (const q of this.authors.values()) {
      for (let i = q.head; i < q.items.length; i++) {
        const { frame, info } = q.items[i] as Queued
        if (!info.urgent) continue
        if (out.length === count || (out.length > 0 && bytes + frame.length > maxBytes)) return out
        out.push(frame)
        bytes += frame.length
      }
    }
    return out
  }

  /** Up to `count` envelopes in the order the next blocks would take them, without taking them. */
  peek(count: number): Uint8Array[] {
    const out: Uint8Array[] = []
    for (let pass = 0; out.length < count; pass++) {
      let any = false
      for (const q of this.authors.values()) {
        const item = q.items[q.head + pass]
        if (!item) continue
        any = true
        out.push(item.frame)
        if (out.length === count) break
      }
      if (!any) break
    }
    return out
  }

  /**
   * Queues an envelope seen first at `round`. 'conflict' when another
   * envelope holds its slot; throws SteadError('rate-limited') when the
   * queue, or the author's share of it, is full.
   */
  add(frame: Uint8Array, info: PayloadInfo, round: number): 'queued' | 'duplicate' | 'conflict' {
    if (this.queuedIds.has(info.idHex)) return 'duplicate'
    const holder = this.slots.get(info.slot)
    // The same envelope again is queued again: the block that carried it may never be ordered.
    if (holder !== undefined && holder.idHex !== info.idHex) return 'conflict'
    if (this.count >= this.limits.maxQueued) throw new SteadError('rate-limited', `${this.count} envelopes already wait for a block; retry later`)
    let q = this.authors.get(info.author)
    const held = q ? q.items.length - q.head : 0
    if (held >= this.limits.maxQueuedPerAuthor) throw new SteadError('rate-limited', `${held} envelopes of author ${info.author} already wait for a block, its share of the queue; retry later`)
    if (!q) this.authors.set(info.author, (q = { items: [], head: 0 }))
    q.items.push({ frame, info })
    this.count++
    this.bytes += frame.length
    if (info.urgent) this.urgentCount++
    this.queuedIds.set(info.idHex, info.author)
    this.slots.set(info.slot, { idHex: info.idHex, round })
    return 'queued'
  }

  /** Marks the slots of envelopes seen in a block (the first holder of a slot keeps it). */
  claim(infos: readonly PayloadInfo[], round: number): void {
    for (const info of infos) if (!this.slots.has(info.slot)) this.slots.set(info.slot, { idHex: info.idHex, round })
  }

  /**
   * Takes the next block's payload, the authors in turn: bounded in count
   * and in bytes, so a block always fits in one mesh frame (one envelope
   * larger than the byte bound goes alone).
   */
  take(): Queued[] {
    const taken: Queued[] = []
    let bytes = 0
    while (this.authors.size > 0 && taken.length < this.limits.maxBlockEnvelopes) {
      for (const author of [...this.authors.keys()]) {
        const q = this.authors.get(author) as AuthorQueue
        const next = q.items[q.head] as Queued
        if (taken.length >= this.limits.maxBlockEnvelopes || (taken.length > 0 && bytes + next.frame.length > this.limits.maxBlockBytes)) return this.took(taken, bytes)
        q.head++
        taken.push(next)
        bytes += next.frame.length
        // Served: to the back of the line.
        this.authors.delete(author)
        if (q.head < q.items.length) this.authors.set(author, compact(q))
      }
    }
    return this.took(taken, bytes)
  }

  private took(taken: Queued[], bytes: number): Queued[] {
    // Every correct peer refuses a block with two envelopes of one slot: ours must never hold one.
    assert(new Set(taken.map((q) => q.info.slot)).size === taken.length, 'a block would carry two envelopes of one slot')
    for (const { info } of taken) {
      this.queuedIds.delete(info.idHex)
      if (info.urgent) this.urgentCount--
    }
    this.count -= taken.length
    this.bytes -= bytes
    return taken
  }

  /** Drops queued envelopes that were just ordered through other relays' blocks: carrying them again is waste. */
  dropOrdered(ids: readonly string[]): void {
    const gone = new Set<string>()
    const touched = new Set<string>()
    for (const id of ids) {
      const author = this.queuedIds.get(id)
      if (author === undefined) continue
      gone.add(id)
      touched.add(author)
    }
    for (const author of touched) {
      const q = this.authors.get(author) as AuthorQueue
      const kept = q.items.slice(q.head).filter(({ frame, info }) => {
        if (!gone.has(info.idHex)) return true
        this.queuedIds.delete(info.idHex)
        this.count--
        this.bytes -= frame.length
        if (info.urgent) this.urgentCount--
        return false
      })
      if (kept.length) this.authors.set(author, { items: kept, head: 0 })
      else this.authors.delete(author)
    }
  }

  /**
   * Forgets slots seen at or below the GC round, but never the slot of an
   * envelope still queued: its holder must keep it while it waits, or a
   * conflicting envelope would be queued beside it and `take` would put both
   * in one block, which every correct relay refuses (a relay restarting far
   * behind queues envelopes at its old clock round and collects past it as
   * it catches up, before it proposes again).
   */
  collect(gcRound: number): void {
    for (const [slot, holder] of this.slots) if (holder.round <= gcRound && !this.queuedIds.has(holder.idHex)) this.slots.delete(slot)
  }
}

/** Drops the taken front of a queue once it is most of the array, so a long queue is not copied at every take. */
function compact(q: AuthorQueue): AuthorQueue {
  if (q.head < 1024 || q.head * 2 < q.items.length) return q
  return { items: q.items.slice(q.head), head: 0 }
}
