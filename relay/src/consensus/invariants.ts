import { ConsensusInvariantError, type Dag, type DagBlock } from './dag.ts'
import type { Block } from './messages.ts'
import type { OrderedRecord } from './ordered.ts'
import type { PayloadQueue } from './payload.ts'
import type { Synchronizer } from './sync.ts'

/**
 * What ConsensusCore.checkInvariants reads of the core: its parts and the
 * few numbers it keeps itself, read only. Built by the core for each check.
 */
export interface CoreView {
  readonly me: number
  readonly gcDepth: number
  /** The epoch's genesis round: the GC round starts there, and no own block exists at it. */
  readonly genesisRound: number
  readonly dag: Dag
  readonly ordered: OrderedRecord
  readonly payload: PayloadQueue
  readonly sync: Synchronizer
  /** The round of the last committed leader (lastCommitRound). */
  readonly committedRound: number
  /** Leader slots up to this round are decided (lastDecided). */
  readonly decidedRound: number
  /** The round of our latest block (proposer.lastProposed). */
  readonly ownRound: number
  /** The round we never propose at or below (max of lastProposed and proposeAbove). */
  readonly neverProposesAtOrBelow: number
  readonly ownBlocks: ReadonlyMap<number, Block>
  /** Per accepted block, what `inspect` said of its envelopes. */
  readonly infosOf: ReadonlyMap<string, readonly unknown[]>
  /** Accepted blocks not ordered yet that carry envelopes not ordered yet. */
  readonly pendingWork: ReadonlyMap<string, unknown>
}

/** What the previous check saw of the numbers that only grow: the next check compares against it. */
interface Marks {
  readonly committedRound: number
  readonly decidedRound: number
  readonly ownRound: number
  readonly neverProposesAtOrBelow: number
  readonly clockRound: number
}

function fail(message: string): never {
  throw new ConsensusInvariantError(message)
}

const short = (hex: string): string => hex.slice(0, 8)

/**
 * The core's invariants, at rest between two events (every public method
 * of ConsensusCore leaves them true), and what one core's checks remember
 * from one to the next. 'cheap': O(1), or O(n) in the committee, for after
 * every drain in production. 'full': also the walks over the DAG, the
 * ordered window, the queue and the parked blocks, for the simulator after
 * every event. Throws ConsensusInvariantError (the relay stops on it, as on
 * the asserts inside the core).
 */
export class InvariantChecker {
  private marks: Marks = { committedRound: 0, decidedRound: 0, ownRound: 0, neverProposesAtOrBelow: 0, clockRound: 1 }
  /** DAG blocks whose own checks (indexed, ancestors held, envelope checks) passed once: they do not change while the block is held. */
  private readonly seen = new WeakSet<DagBlock>()
  /** Blocks per round at the last full check: none leaves the DAG above the GC round, so no count goes down there. */
  private perRound = new Map<number, number>()

  check(v: CoreView, level: 'cheap' | 'full'): void {
    this.cheap(v)
    if (level === 'full') this.full(v)
  }

  private cheap(v: CoreView): void {
    const { dag, payload, sync, ordered } = v
    const gc = dag.gcRound
    const marks = this.marks

    // -- what only grows --
    // A committed leader is final: commits go strictly up in round (commitLeader asserts it per commit), and a
    // core never takes one back. (A restarted relay is a new core: a crash may lose commits its disk had not written.)
    if (!(v.committedRound >= marks.committedRound)) fail(`last committed leader round went down from ${marks.committedRound} to ${v.committedRound}`)
    // Decided slots (committed or skipped) are final too, and every commit decided its slot.
    if (!(v.decidedRound >= marks.decidedRound)) fail(`last decided leader round went down from ${marks.decidedRound} to ${v.decidedRound}`)
    if (!(v.decidedRound >= v.committedRound)) fail(`leader round ${v.committedRound} committed but slots decided only up to ${v.decidedRound}`)
    // Our own round never goes down, nor the round we never propose at or below: going back is how a relay would sign
    // a second block for a round.
    if (!(v.ownRound >= marks.ownRound)) fail(`own round went down from ${marks.ownRound} to ${v.ownRound}`)
    if (!(v.neverProposesAtOrBelow >= marks.neverProposesAtOrBelow)) fail(`the round we never propose at or below went down from ${marks.neverProposesAtOrBelow} to ${v.neverProposesAtOrBelow}`)
    // The threshold clock: a quorum seen at a round stays seen.
    if (!(dag.clockRound >= marks.clockRound && dag.clockRound >= 1)) fail(`clock round went down from ${marks.clockRound} to ${dag.clockRound}`)

    // -- the GC horizon --
    // It moves only with commits, by the same rule on every relay (README, "Garbage collection"): the blocks a commit
    // orders, and the dedupe window, depend on it, so it must be exactly this or correct relays' commits differ.
    if (!(gc === Math.max(v.genesisRound, v.committedRound - v.gcDepth))) fail(`GC round ${gc} is not the last commit ${v.committedRound} minus gcDepth ${v.gcDepth}`)
    // The last envelope ordered was ordered by a committed leader.
    if (!(ordered.lastOrderedPayloadRound <= v.committedRound)) fail(`an envelope was ordered at round ${ordered.lastOrderedPayloadRound}, after the last commit ${v.committedRound}`)

    // -- own blocks --
    // Our latest block is kept (below the GC round too): the next one references it, and it is re-sent to peers that missed it.
    if (!(v.ownRound === v.genesisRound || v.ownBlocks.get(v.ownRound) !== undefined)) fail(`own block of round ${v.ownRound}, our latest, is not held`)

    // -- counters and budgets --
    // The queue's counters are decremented by take and dropOrdered: they never go negative, the queue stays within its
    // bound (add refuses beyond it), and an empty queue holds no bytes (the relay's memory budget counts them).
    const queued = payload.length
    if (!(queued >= 0 && queued <= payload.maxQueued)) fail(`payload queue holds ${queued} envelopes (bound ${payload.maxQueued})`)
    if (!(payload.queuedBytes >= 0 && (queued > 0 || payload.queuedBytes === 0))) fail(`payload queue accounts ${payload.queuedBytes} bytes for ${queued} envelopes`)
    if (!(payload.urgentQueued >= 0 && payload.urgentQueued <= queued)) fail(`payload queue counts ${payload.urgentQueued} urgent envelopes of ${queued}`)
    if (!(payload.queuedIdCount === queued)) fail(`payload queue indexes ${payload.queuedIdCount} envelope ids for ${queued} envelopes`)
    // Parked blocks per sender: each counts its own, within its share, and they add up to what is parked.
    let parked = 0
    for (const [from, count] of sync.parkedBySender) {
      if (!(count > 0 && count <= sync.perSenderLimit)) fail(`relay ${from} counts ${count} parked blocks (share ${sync.perSenderLimit})`)
      parked += count
    }
    if (!(parked === sync.size)) fail(`parked blocks counted per sender add up to ${parked}, ${sync.size} parked`)
    // Every accepted block has its envelope checks, kept as long as the block (both go at GC); work is only in accepted blocks.
    if (!(v.infosOf.size === dag.size)) fail(`${v.infosOf.size} blocks with envelope checks, ${dag.size} in the DAG`)
    if (!(v.pendingWork.size <= dag.size)) fail(`${v.pendingWork.size} blocks with pending work, ${dag.size} in the DAG`)
    this.marks = { committedRound: v.committedRound, decidedRound: v.decidedRound, ownRound: v.ownRound, neverProposesAtOrBelow: v.neverProposesAtOrBelow, clockRound: dag.clockRound }
  }

  private full(v: CoreView): void {
    const { dag, payload, sync, ordered } = v
    const gc = dag.gcRound
    const queued = payload.length

    // -- the DAG: O(blocks), and O(ancestors) of the blocks new since the last full check --
    // (Messages are built only on failure: this runs after every simulated event.)
    let held = 0
    const perRound = new Map<number, number>()
    for (const [round, authors] of dag.roundIndex) {
      // GC drops every round at or below the GC round, and nothing at or below it is accepted since.
      if (round <= gc || round > dag.highestRound) fail(`the DAG holds blocks of round ${round}, outside (GC round ${gc}, highest round ${dag.highestRound}]`)
      let inRound = 0
      for (const [author, slot] of authors) {
        let orderedHere: DagBlock | undefined
        for (const b of slot) {
          inRound++
          if (b.round !== round || b.author !== author) fail(`block ${short(b.digestHex)} of relay ${b.author} round ${b.round} is indexed under relay ${author} round ${round}`)
          if (!this.seen.has(b)) {
            // What is true of a block once stays true while it is held: checked once.
            if (dag.get(b.digestHex) !== b) fail(`block ${short(b.digestHex)} of round ${b.round} is in the DAG's round index but not its digest index`)
            // Causal completeness: every ancestor of an accepted block is accepted too, at the slot named, or at or
            // below the GC round (genesis: round 0). The commit rule and the linearizer walk ancestors and rely on it.
            // Checked when the block is new; after that only an ancestor leaving the DAG above the GC round could
            // break it, which the per-round counts below catch.
            for (const a of b.ancestors) {
              if (a.round <= gc) continue
              const ancestor = dag.get(a.digestHex)
              if (!ancestor || ancestor.round !== a.round || ancestor.author !== a.author) fail(`block ${short(b.digestHex)} of round ${b.round} has ancestor ${short(a.digestHex)} (round ${a.round}) neither in the DAG nor at or below the GC round ${gc}`)
            }
            // The envelope checks `inspect` made when the block came, one per envelope (commits and expiries read them).
            if (v.infosOf.get(b.digestHex)?.length !== b.block.header.payload.length) fail(`block ${short(b.digestHex)} has no envelope check per envelope`)
            this.seen.add(b)
          }
          if (!ordered.hasBlock(b.digestHex)) continue
          // At most one block per slot (author, round) is ever ordered, and ordering it takes the slot: an
          // equivocator's twins can both be in the DAG, never both in the order.
          if (orderedHere) fail(`two blocks of relay ${b.author} round ${b.round} are ordered (${short(orderedHere.digestHex)} and ${short(b.digestHex)})`)
          orderedHere = b
          if (!ordered.hasSlot(b)) fail(`block ${short(b.digestHex)} is ordered but its slot (relay ${b.author} round ${b.round}) is not taken`)
        }
      }
      held += inRound
      perRound.set(round, inRound)
    }
    // The round index and the digest index hold the same blocks.
    if (held !== dag.size) fail(`the DAG's round index holds ${held} blocks, its digest index ${dag.size}`)
    // Only GC removes blocks, whole rounds at or below the GC round: above it no round's count goes down. (So an
    // ancestor checked present stays present; one removed while another block of its round came in the same event
    // would slip past.)
    for (const [round, before] of this.perRound) {
      const now = perRound.get(round) ?? 0
      if (round > gc && now < before) fail(`${before - now} block(s) of round ${round} left the DAG above the GC round ${gc}`)
    }
    this.perRound = perRound

    // -- the ordered window --
    // Slots and envelope ids of rounds at or below the GC round are forgotten (every correct relay forgets the same
    // ones: the dedupe window decides what a commit carries); none of a round after the last commit exists yet.
    for (const round of ordered.slotRounds()) if (round <= gc || round > v.committedRound) fail(`ordered slot of round ${round} outside (${gc}, ${v.committedRound}]`)
    for (const round of ordered.payloadRounds()) if (round <= gc || round > v.committedRound) fail(`envelope ordered at round ${round} is kept outside (${gc}, ${v.committedRound}]`)
    // Ordered block digests are kept no longer than the window either, also those a restart recovered whose bodies never came back.
    for (const round of ordered.blockRounds()) if (round <= gc || round > v.committedRound) fail(`an ordered block is kept until round ${round}, outside (${gc}, ${v.committedRound}]`)
    // Pending work is in accepted blocks that are not ordered (ordering one clears its entry).
    for (const digest of v.pendingWork.keys()) if (!dag.has(digest) || ordered.hasBlock(digest)) fail(`block ${short(digest)} has pending work but is ${dag.has(digest) ? 'ordered' : 'not in the DAG'}`)

    // -- parked blocks --
    // A parked block is not accepted (it waits for ancestors), and none is at or below the GC round (those are dropped).
    for (const block of sync.parked()) if (dag.has(block.digestHex) || block.header.round <= gc) fail(`parked block ${short(block.digestHex)} of round ${block.header.round} is ${dag.has(block.digestHex) ? 'in the DAG' : `at or below the GC round ${gc}`}`)

    // -- own blocks --
    for (const [round, block] of v.ownBlocks) if (round > v.ownRound || block.header.round !== round || block.header.author !== v.me) fail(`own block kept under round ${round} is of round ${block.header.round} by relay ${block.header.author} (own round ${v.ownRound})`)

    // -- the payload queue (O(queued)) --
    // Its byte, envelope and urgent counts are what it holds: the relay's memory budget and the pacing read them.
    let count = 0
    let bytes = 0
    let urgent = 0
    for (const { frame, info } of payload.queued()) {
      count++
      bytes += frame.length
      if (info.urgent) urgent++
      if (!payload.has(info.idHex)) fail(`queued envelope ${short(info.idHex)} is not indexed`)
      // A queued envelope holds its slot (GC never frees it): a second envelope for it is refused, never queued
      // beside it, so no block of ours carries two envelopes of one slot (every correct relay refuses such a block).
      if (payload.holderOf(info.slot) !== info.idHex) fail(`queued envelope ${short(info.idHex)} does not hold its slot ${info.slot}`)
      // An envelope ordered (within the window) is not queued: submit and wake refuse it, and a commit drops it.
      if (ordered.hasPayload(info.idHex)) fail(`envelope ${short(info.idHex)} is queued and already ordered`)
    }
    if (count !== queued || bytes !== payload.queuedBytes || urgent !== payload.urgentQueued) fail(`payload queue counts ${queued} envelopes, ${payload.queuedBytes} bytes, ${payload.urgentQueued} urgent; it holds ${count}, ${bytes}, ${urgent}`)
  }
}
