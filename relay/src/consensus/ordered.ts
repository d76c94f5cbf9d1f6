import { assert } from './dag.ts'

type Slot = { readonly round: number; readonly author: number }

function slotKey(b: Slot): string {
  return `${b.round}:${b.author}`
}

/**
 * What the linearizer has ordered, within the DAG's window: blocks (by
 * digest), slots (one block per author and round), and envelope ids with
 * the round of the leader that ordered them (the dedupe window: every
 * correct relay must hold the same one, since it decides what a commit
 * carries). Rounds only grow; garbage collection forgets what falls below
 * the horizon.
 */
export class OrderedRecord {
  /**
   * Ordered block digest → a round at or above the block's own: its round,
   * or for a block recovered from a commit record (whose body may never come
   * back into the DAG) the commit's anchor round. forget() drops it once the
   * horizon passes that round.
   */
  private readonly blocks = new Map<string, number>()
  /** slot key → its round. */
  private readonly slots = new Map<string, number>()
  /** Envelope id → round of the leader that ordered it, in ordering order (so in round order). */
  private readonly payload = new Map<string, number>()
  private lastPayloadRound = 0

  hasBlock(digestHex: string): boolean {
    return this.blocks.has(digestHex)
  }

  /** Whether some block of this block's slot (author, round) was ordered: the others never will be. */
  hasSlot(block: Slot): boolean {
    return this.slots.has(slotKey(block))
  }

  hasPayload(idHex: string): boolean {
    return this.payload.has(idHex)
  }

  get payloadCount(): number {
    return this.payload.size
  }

  /** The round of the last leader that ordered an envelope (0 before any). */
  get lastOrderedPayloadRound(): number {
    return this.lastPayloadRound
  }

  /** For checkInvariants: the ordered slots' rounds, and the rounds of the leaders that ordered the envelopes in the window. */
  slotRounds(): IterableIterator<number> {
    return this.slots.values()
  }

  /** For checkInvariants: the rounds the ordered blocks are kept until (see blocks). */
  blockRounds(): IterableIterator<number> {
    return this.blocks.values()
  }

  payloadRounds(): IterableIterator<number> {
    return this.payload.values()
  }

  /** A block goes into the order (its slot with it). */
  orderBlock(block: Slot & { readonly digestHex: string }): void {
    this.blocks.set(block.digestHex, block.round)
    this.slots.set(slotKey(block), block.round)
  }

  /** A block known ordered before its body reached the DAG (a restart or a checkpoint recovered the commit anchored at `anchorRound`): its slot is taken once it arrives. */
  recoverBlock(digestHex: string, anchorRound: number): void {
    this.blocks.set(digestHex, anchorRound)
  }

  /** The block arrived: if it was recovered as ordered, its slot is taken. */
  arrived(block: Slot & { readonly digestHex: string }): void {
    if (this.blocks.has(block.digestHex)) this.slots.set(slotKey(block), block.round)
  }

  /** Records an id as ordered by the leader of `round`; the window's rounds never go down (forget relies on it). */
  orderPayload(id: string, round: number): void {
    assert(round >= this.lastPayloadRound, `envelope ordered at round ${round} after round ${this.lastPayloadRound}`)
    this.lastPayloadRound = round
    this.payload.set(id, round)
  }

  /** A block fell below the horizon: false if it was never ordered, nor any block of its slot (it never will be). */
  collected(block: Slot & { readonly digestHex: string }): boolean {
    return this.blocks.delete(block.digestHex) || this.slots.has(slotKey(block))
  }

  /** Forgets blocks, slots and envelope ids of rounds at or below `gc` (recovered blocks that never came back into the DAG among them). */
  forget(gc: number): void {
    for (const [digest, round] of this.blocks) if (round <= gc) this.blocks.delete(digest)
    for (const [key, round] of this.slots) if (round <= gc) this.slots.delete(key)
    for (const [id, round] of this.payload) {
      if (round > gc) break
      this.payload.delete(id)
    }
  }
}
