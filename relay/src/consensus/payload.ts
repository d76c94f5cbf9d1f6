import { SteadError, type Envelope } from '@stead/core'

/** What the core learns about a client envelope it is asked to carry, from the shell's own check of it. */
export interface PayloadInfo {
  readonly idHex: string
  /** author id and per-author sequence number: two different ids for one slot conflict. */
  readonly slot: string
  /** A client waits for its order (it carries safe updates): rounds that carry it are not paced. */
  readonly urgent: boolean
}

/** What the core needs of an envelope: its id, its author's slot, and whether a client waits for its order (safe updates). */
export function payloadInfoOf(env: Envelope): PayloadInfo {
  return { idHex: env.idHex, slot: `${env.space}/${env.authorId}:${env.seq}`, urgent: env.safe.length > 0 }
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
}

/**
 * Client envelopes waiting for this relay's next block, and which envelope
 * holds each (author, seq) slot among those queued or seen in blocks: a
 * second envelope for a held slot is a conflict.
 */
export class PayloadQueue {
  private queue: Array<{ frame: Uint8Array; info: PayloadInfo }> = []
  private bytes = 0
  private urgentCount = 0
  private readonly queuedIds = new Set<string>()
  /** slot → the envelope holding it and the round it was seen in (for GC). */
  private readonly slots = new Map<string, { idHex: string; round: number }>()
  private readonly limits: PayloadLimits

  constructor(limits: PayloadLimits) {
    this.limits = limits
  }

  get length(): number {
    return this.queue.length
  }

  get queuedBytes(): number {
    return this.bytes
  }

  get slotCount(): number {
    return this.slots.size
  }

  has(idHex: string): boolean {
    return this.queuedIds.has(idHex)
  }

  /** Whether a queued envelope is urgent (see PayloadInfo.urgent). */
  get hasUrgent(): boolean {
    return this.urgentCount > 0
  }

  /** Envelopes at the head of the queue, without taking them. */
  peek(count: number): Uint8Array[] {
    return this.queue.slice(0, count).map((q) => q.frame)
  }

  /**
   * Queues an envelope seen first at `round`. 'conflict' when another
   * envelope holds its slot; throws SteadError('rate-limited') when full.
   */
  add(frame: Uint8Array, info: PayloadInfo, round: number): 'queued' | 'duplicate' | 'conflict' {
    if (this.queuedIds.has(info.idHex)) return 'duplicate'
    const holder = this.slots.get(info.slot)
    // The same envelope again is queued again: the block that carried it may never be ordered.
    if (holder !== undefined && holder.idHex !== info.idHex) return 'conflict'
    if (this.queue.length >= this.limits.maxQueued) throw new SteadError('rate-limited', `${this.queue.length} envelopes already wait for a block; retry later`)
    this.queue.push({ frame, info })
    this.bytes += frame.length
    if (info.urgent) this.urgentCount++
    this.queuedIds.add(info.idHex)
    this.slots.set(info.slot, { idHex: info.idHex, round })
    return 'queued'
  }

  /** Marks the slots of envelopes seen in a block (the first holder of a slot keeps it). */
  claim(infos: readonly PayloadInfo[], round: number): void {
    for (const info of infos) if (!this.slots.has(info.slot)) this.slots.set(info.slot, { idHex: info.idHex, round })
  }

  /** Takes the next block's payload: bounded in count and in bytes, so a block always fits in one mesh frame. */
  take(): Array<{ readonly frame: Uint8Array; readonly info: PayloadInfo }> {
    let bytes = 0
    let n = 0
    while (n < this.queue.length && n < this.limits.maxBlockEnvelopes) {
      const size = (this.queue[n] as { frame: Uint8Array }).frame.length
      if (n > 0 && bytes + size > this.limits.maxBlockBytes) break
      bytes += size
      n++
    }
    const taken = this.queue.splice(0, n)
    for (const { info } of taken) {
      this.queuedIds.delete(info.idHex)
      if (info.urgent) this.urgentCount--
    }
    this.bytes -= bytes
    return taken
  }

  /** Drops queued envelopes that were just ordered through other relays' blocks: carrying them again is waste. */
  dropOrdered(ids: readonly string[]): void {
    if (!ids.some((id) => this.queuedIds.has(id))) return
    const gone = new Set(ids)
    this.queue = this.queue.filter(({ frame, info }) => {
      if (!gone.has(info.idHex)) return true
      this.queuedIds.delete(info.idHex)
      this.bytes -= frame.length
      if (info.urgent) this.urgentCount--
      return false
    })
  }

  /** Forgets slots seen at or below the GC round. */
  collect(gcRound: number): void {
    for (const [slot, holder] of this.slots) if (holder.round <= gcRound) this.slots.delete(slot)
  }
}
