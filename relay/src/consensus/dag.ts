import { toHex } from '@stead/core'
import { GENESIS_HEX, type Block } from './messages.ts'

/** A broken invariant of the protocol: more than f relays are faulty, or there is a bug. The relay stops. */
export class ConsensusInvariantError extends Error {
  override readonly name = 'ConsensusInvariantError'
}

export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new ConsensusInvariantError(message)
}

export interface Ref {
  readonly round: number
  readonly author: number
  readonly digestHex: string
}

/** A block in the DAG, with its ancestors as hex refs. */
export interface DagBlock extends Ref {
  readonly block: Block
  readonly ancestors: readonly Ref[]
}

function dagBlockOf(block: Block): DagBlock {
  const { round, author, ancestors } = block.header
  return { block, round, author, digestHex: block.digestHex, ancestors: ancestors.map((a) => ({ round: a.round, author: a.author, digestHex: toHex(a.digest) })) }
}

const slotKey = (round: number, author: number) => `${round}:${author}`

/**
 * The blocks one relay has accepted: every ancestor of an accepted block is
 * accepted too, or at or below the garbage-collection round. Several blocks
 * may share a slot (round, author) when their author equivocates; all are
 * kept, and every count in the commit rule counts authors, not blocks.
 *
 * The genesis blocks of round 0 are implicit and always present.
 */
export class Dag {
  private readonly quorum: number
  private readonly authors: number
  private readonly byDigest = new Map<string, DagBlock>()
  /** round → author → blocks at that slot (usually one). */
  private readonly rounds = new Map<number, Map<number, DagBlock[]>>()
  /** Per block: slot → the block of that slot it supports, or null (the first one met depth first). Goes with the block. */
  private readonly supportMemo = new WeakMap<DagBlock, Map<string, string | null>>()
  private clock: number
  private highest: number
  private gc: number

  /**
   * `quorum` authors make a round (2f+1) of the committee's `authors` (n).
   * `genesis` is the epoch's genesis round (0 for epoch 0): its blocks are
   * implicit, as if collected, and the clock starts right above it.
   */
  constructor(quorum: number, authors: number, genesis = 0) {
    this.quorum = quorum
    this.authors = authors
    this.clock = genesis + 1
    this.highest = genesis
    this.gc = genesis
  }

  /** Blocks at or below this round are gone and never needed again. */
  get gcRound(): number {
    return this.gc
  }

  /** The round this relay may propose next: 2f+1 authors are known at the round before it (threshold clock). */
  get clockRound(): number {
    return this.clock
  }

  get highestRound(): number {
    return this.highest
  }

  get size(): number {
    return this.byDigest.size
  }

  get roundCount(): number {
    return this.rounds.size
  }

  has(digestHex: string): boolean {
    return digestHex === GENESIS_HEX || this.byDigest.has(digestHex)
  }

  get(digestHex: string): DagBlock | undefined {
    return this.byDigest.get(digestHex)
  }

  /** Whether a reference needs no block: genesis, or at or below the GC round. */
  settled(ref: Ref): boolean {
    return ref.round <= this.gc
  }

  accept(block: Block): DagBlock {
    assert(!this.byDigest.has(block.digestHex), `block ${block.digestHex.slice(0, 8)} accepted twice`)
    const node = dagBlockOf(block)
    for (const a of node.ancestors) {
      const held = this.byDigest.get(a.digestHex)
      assert(this.settled(a) || (held && held.round === a.round && held.author === a.author), `block ${node.digestHex.slice(0, 8)} accepted before its ancestor ${a.digestHex.slice(0, 8)}`)
    }
    let authors = this.rounds.get(node.round)
    if (!authors) this.rounds.set(node.round, (authors = new Map()))
    const slot = authors.get(node.author)
    if (slot) slot.push(node)
    else authors.set(node.author, [node])
    this.byDigest.set(node.digestHex, node)
    if (node.round > this.highest) this.highest = node.round
    // The block's ancestors prove a quorum at round - 1, so the clock is at least its round.
    if (node.round > this.clock) this.clock = node.round
    if (authors.size >= this.quorum && node.round + 1 > this.clock) this.clock = node.round + 1
    return node
  }

  /** Distinct authors with a block at `round` in the DAG (none at or below the GC round: those are gone). */
  authorsAt(round: number): number {
    return this.rounds.get(round)?.size ?? 0
  }

  atSlot(round: number, author: number): readonly DagBlock[] {
    return this.rounds.get(round)?.get(author) ?? []
  }

  atRound(round: number): DagBlock[] {
    const out: DagBlock[] = []
    for (const blocks of this.rounds.get(round)?.values() ?? []) out.push(...blocks)
    return out
  }

  /**
   * The latest block of each author below `round` (and above the GC round);
   * of twins in one slot, the one with the highest digest, so the choice is
   * the same whatever order they arrived in.
   */
  latestPerAuthor(round: number): Map<number, DagBlock> {
    const out = new Map<number, DagBlock>()
    // Down from the round before: an author's first slot met is its latest. Usually every
    // author is found a round or two down; one that went quiet costs a walk to the GC round.
    for (let r = Math.min(round - 1, this.highest); r > this.gc && out.size < this.authors; r--) {
      for (const [author, blocks] of this.rounds.get(r) ?? []) {
        if (!out.has(author)) out.set(author, blocks.reduce((a, b) => (b.digestHex > a.digestHex ? b : a)))
      }
    }
    return out
  }

  /**
   * The block of slot (round, author) that `from` supports: the first
   * reference to that slot found depth first through `from`'s ancestors in
   * their listed order (Mysticeti: only the first block of a slot in a
   * causal history counts). Null when `from`'s history has none.
   */
  supported(from: DagBlock, round: number, author: number): string | null {
    if (from.round <= round) return null
    let memo = this.supportMemo.get(from)
    if (!memo) this.supportMemo.set(from, (memo = new Map()))
    const key = slotKey(round, author)
    const known = memo.get(key)
    if (known !== undefined) return known
    let found: string | null = null
    for (const a of from.ancestors) {
      if (a.round === round && a.author === author) {
        found = a.digestHex
        break
      }
      if (a.round <= round) continue
      const next = this.byDigest.get(a.digestHex)
      if (!next) continue
      found = this.supported(next, round, author)
      if (found !== null) break
    }
    memo.set(key, found)
    return found
  }

  /** The blocks of `round` in the causal history of `from` (through ancestor links). */
  reachableAt(from: DagBlock, round: number): DagBlock[] {
    let frontier = new Map<string, DagBlock>([[from.digestHex, from]])
    for (let r = from.round; r > round; r--) {
      const next = new Map<string, DagBlock>()
      for (const b of frontier.values()) {
        if (b.round !== r) {
          next.set(b.digestHex, b)
          continue
        }
        for (const a of b.ancestors) {
          if (a.round < round || next.has(a.digestHex)) continue
          const block = this.byDigest.get(a.digestHex)
          if (block) next.set(a.digestHex, block)
        }
      }
      frontier = next
    }
    return [...frontier.values()].filter((b) => b.round === round)
  }

  /** The round index, read only: round → author → the blocks of that slot. For checkInvariants (byDigest must hold the same blocks). */
  get roundIndex(): ReadonlyMap<number, ReadonlyMap<number, readonly DagBlock[]>> {
    return this.rounds
  }

  /** Forgets every block at or below `gcRound`; returns the forgotten blocks. */
  collect(gcRound: number): DagBlock[] {
    if (gcRound <= this.gc) return []
    this.gc = gcRound
    const gone: DagBlock[] = []
    for (const [round, authors] of this.rounds) {
      if (round > gcRound) continue
      for (const blocks of authors.values()) {
        for (const b of blocks) {
          this.byDigest.delete(b.digestHex)
          gone.push(b)
        }
      }
      this.rounds.delete(round)
    }
    return gone
  }
}
