import { assert, type Dag } from './dag.ts'
import { GENESIS_DIGEST, epochOf, genesisRoundOf, signBlock, type Block, type BlockRef } from './messages.ts'
import type { PayloadInfo, PayloadQueue } from './payload.ts'
import type { CoreContext, Output, RecoveredState } from './types.ts'

/** Safe envelopes a relay hands a leader it waits for (see wake): a few prove the work and carry the urgency. */
const LEADER_WAKE_ENVELOPES = 4
const LEADER_WAKE_BYTES = 256 * 1024

/** Our block's envelopes at most for one of them to be sent to the round's leader too (see propose): at light load only. */
const LEADER_COPY_MAX_ENVELOPES = 4

/** When and above what round the proposer makes our next block. */
interface ProposerState {
  /** The round of our latest block. */
  lastProposed: number
  /** Whether a round without urgent work may start now (paceMs passed since our last proposal). */
  paced: boolean
  /** The round of our proposal whose pace timer counts (lastProposed may move on without one: a peer hands back our own block). */
  paceRound: number
  /** The highest round of a block of ours that peers handed back: we never propose at or below it. */
  proposeAbove: number
  /** author → round of its latest block we referenced: each block references only newer ones. */
  readonly lastIncluded: Map<number, number>
  /** A leader timeout fired for this clock round: propose without waiting for the leader. */
  forcedRound: number
  /** A peer with work waits for a quorum at this round: propose up to it even with no work of our own. */
  wakeRound: number
  /** The clock round the leader timer runs for. */
  leaderTimerRound: number
  /** The clock round at which we last woke the previous round's leader for a queued safe envelope. */
  leaderWakeRound: number
}

/**
 * What the proposer sees of the rest of the core: the DAG and the queue it
 * reads, whether there is work, and the door its own block enters the DAG
 * through (the same one as peers' blocks, so the DAG and the ordering see
 * no difference).
 */
export interface ProposerView {
  readonly me: number
  readonly ctx: CoreContext
  readonly dag: Dag
  readonly payload: PayloadQueue
  hasWork(urgentOnly?: boolean): boolean
  accept(block: Block, infos: readonly PayloadInfo[], out: Output[]): void
}

/**
 * Makes our blocks: the clock round, the pacing of rounds without urgent
 * work, the leader timeout, the rounds a wake buys, the ancestors a block
 * references, and our blocks themselves (the latest is kept even below the
 * GC round: the next one references it).
 */
export class Proposer {
  private readonly state: ProposerState = { lastProposed: 0, paced: true, paceRound: 0, proposeAbove: 0, lastIncluded: new Map(), forcedRound: 0, wakeRound: 0, leaderTimerRound: 0, leaderWakeRound: 0 }
  /** Our blocks by round. */
  private readonly ownBlocks = new Map<number, Block>()

  private readonly v: ProposerView

  constructor(v: ProposerView) {
    this.v = v
    // Nothing of ours below the epoch's genesis round exists, nor may be referenced.
    this.state.lastProposed = this.genesis
  }

  private get genesis(): number {
    return genesisRoundOf(this.v.ctx.committee)
  }

  /** The round of our latest block (the epoch's genesis round before the first). */
  get lastProposed(): number {
    return this.state.lastProposed
  }

  /** The highest round we will not propose at: our last proposal, or what peers said of our blocks and their GC rounds. */
  get neverProposesAtOrBelow(): number {
    return Math.max(this.state.lastProposed, this.state.proposeAbove)
  }

  get blocks(): ReadonlyMap<number, Block> {
    return this.ownBlocks
  }

  /** Our latest block, which peers may have missed. */
  get latest(): Block | undefined {
    return this.ownBlocks.get(this.state.lastProposed)
  }

  byDigest(digestHex: string): Block | undefined {
    for (const b of this.ownBlocks.values()) if (b.digestHex === digestHex) return b
    return undefined
  }

  /** Never propose at or below `round` (a peer's word on our blocks, see OwnLast). */
  raiseFloor(round: number): void {
    if (round > this.state.proposeAbove) this.state.proposeAbove = round
  }

  /**
   * Our own block from before we lost our store, handed back by a peer and
   * accepted: that round is taken, and we must never sign another block for
   * it (or below).
   */
  handedBack(block: Block, out: Output[]): void {
    const { round } = block.header
    if (this.ownBlocks.has(round)) return
    this.ownBlocks.set(round, block)
    if (round > this.state.lastProposed) this.state.lastProposed = round
    out.push({ type: 'persist', record: { kind: 'own-block', block } })
  }

  /** A peer with work waits at our clock round: one proposal there even with no work of our own. */
  woken(): void {
    this.state.wakeRound = Math.max(this.state.wakeRound, this.v.dag.clockRound)
  }

  /** Returns whether the timer let a proposal go ahead (the caller then proposes). */
  onLeaderTimer(round: number): boolean {
    if (round === this.state.leaderTimerRound) this.state.leaderTimerRound = 0
    if (round !== this.v.dag.clockRound) return false
    this.state.forcedRound = round
    return true
  }

  /** Returns whether the timer let a proposal go ahead. Only the timer of our latest proposal counts: an urgent proposal since started a newer one. */
  onPaceTimer(round: number): boolean {
    if (round !== this.state.paceRound) return false
    this.state.paced = true
    return true
  }

  /**
   * Proposes the clock round when there is work, the round is new, and the
   * previous round's leader is in (so our block votes for it), or its
   * timeout fired, or we were idle last round (waiting would only delay).
   * If we lead the previous round and skipped it while idle, that slot is
   * filled first: the peers that proposed that round wait for it.
   * While a safe envelope waits in our queue, a leader we wait for is
   * woken at once (see wake). The caller holds off while our own last
   * block is being recovered.
   */
  tryPropose(out: Output[], carry: boolean): boolean {
    const { dag, ctx } = this.v
    const s = this.state
    const round = dag.clockRound
    if (round <= s.proposeAbove) return false
    if (round <= s.lastProposed || !(this.v.hasWork() || round <= s.wakeRound)) return false
    // The clock may be at a round whose predecessors we do not hold: a block of round r is accepted
    // once its ancestors are in or at or below the GC round, and it moves the clock to r. Right after
    // a checkpoint install (GC round r - 1) that left no round r - 1 blocks to reference.
    if (round > this.genesis + 1 && dag.authorsAt(round - 1) < ctx.rule.quorum) return false
    const previousLeader = ctx.rule.leaderOf(round - 1)
    if (previousLeader === this.v.me && this.canFill(round - 1)) {
      this.propose(round - 1, out, false, false)
      return true
    }
    const leaderIn = round === this.genesis + 1 || dag.atSlot(round - 1, previousLeader).length > 0
    if (!leaderIn && s.forcedRound !== round && s.lastProposed === round - 1) {
      if (s.leaderTimerRound !== round) {
        s.leaderTimerRound = round
        out.push({ type: 'timer', name: 'leader', round, afterMs: ctx.leaderTimeoutMs })
      }
      // The leader may be idle (no work when its round came): a wake makes it fill its slot.
      if (s.leaderWakeRound !== round && this.v.payload.hasUrgent) {
        s.leaderWakeRound = round
        this.wake(previousLeader, out)
      }
      return false
    }
    if (!s.paced && s.forcedRound !== round && !this.v.hasWork(true)) return false
    this.propose(round, out, carry, true)
    return true
  }

  /** Whether we may still sign a block for `round`, below the clock: one we never signed, above every floor, on a quorum of the round before. */
  private canFill(round: number): boolean {
    const s = this.state
    if (round <= this.genesis || round <= s.lastProposed || round <= s.proposeAbove || round <= this.v.dag.gcRound) return false
    return round === this.genesis + 1 || this.v.dag.authorsAt(round - 1) >= this.v.ctx.rule.quorum
  }

  /** Hands peer `to` our queued safe envelopes: they give it a reason to propose at its clock round, and carry the urgency. */
  private wake(to: number, out: Output[]): void {
    // Our own block of that round may be parked (recovered before its ancestors came back): nobody to wake.
    if (to === this.v.me) return
    const payload = this.v.payload.peekUrgent(LEADER_WAKE_ENVELOPES, LEADER_WAKE_BYTES)
    if (payload.length > 0) out.push({ type: 'send', to, message: { kind: 'wake', payload } })
  }

  /** `paces`: a round of the clock starts the pace timer; filling a slot we skipped does not. */
  private propose(round: number, out: Output[], carry: boolean, paces: boolean): void {
    const { ctx, me } = this.v
    const s = this.state
    assert(round > s.lastProposed && round > s.proposeAbove && !this.ownBlocks.has(round), `a second own block for round ${round}`)
    const taken = this.v.payload.take()
    const frames = taken.map((t) => t.frame)
    const epoch = epochOf(ctx.committee)
    const block = signBlock(ctx.crypto, ctx.secretKey, { round, author: me, ancestors: this.chooseAncestors(round), payload: frames, ...(epoch ? { epoch } : {}) })
    // What every peer's door checks of it (openBlock): a block of ours that fails it would be refused everywhere.
    assert(block.header.ancestors.every((a) => a.round < round) && block.header.ancestors.filter((a) => a.round === round - 1).length >= ctx.rule.quorum, `own block of round ${round} lacks a quorum of round ${round - 1}`)
    s.lastProposed = round
    this.ownBlocks.set(round, block)
    for (const a of block.header.ancestors) s.lastIncluded.set(a.author, a.round)
    this.v.accept(block, taken.map((t) => t.info), out)
    // At light load the envelopes go to the round's leader first (see README, "The leader carries it too"):
    // our block commits only through the next round's leader, three rounds on; the leader's own block, if
    // it carries them too, two rounds on. Sent before our block, so the leader has them when our block
    // makes it propose; each envelope is ordered once.
    const leader = ctx.rule.leaderOf(round)
    if (carry && leader !== me && frames.length > 0 && frames.length <= LEADER_COPY_MAX_ENVELOPES) out.push({ type: 'send', to: leader, message: { kind: 'wake', payload: frames } })
    // Persisted before it leaves: after a crash, we resend this block and never sign another for this round.
    out.push({ type: 'persist', record: { kind: 'own-block', block, payloadIds: taken.map((t) => t.info.idHex) } })
    out.push({ type: 'broadcast', message: { kind: 'block', block } })
    if (paces && ctx.paceMs > 0) {
      s.paced = false
      s.paceRound = round
      out.push({ type: 'timer', name: 'pace', round, afterMs: ctx.paceMs })
    }
  }

  /** Our previous block first, then each other relay's latest block newer than the one we last referenced. */
  private chooseAncestors(round: number): BlockRef[] {
    const { dag, ctx, me } = this.v
    const own = this.ownBlocks.get(this.state.lastProposed)
    const genesis = this.genesis
    const ancestors: BlockRef[] = [own ? { round: own.header.round, author: me, digest: own.digest } : { round: genesis, author: me, digest: GENESIS_DIGEST }]
    if (round === genesis + 1) {
      for (let a = 0; a < ctx.n; a++) if (a !== me) ancestors.push({ round: genesis, author: a, digest: GENESIS_DIGEST })
      return ancestors
    }
    const latest = dag.latestPerAuthor(round)
    for (let a = 0; a < ctx.n; a++) {
      if (a === me) continue
      const block = latest.get(a)
      if (block && block.round > (this.state.lastIncluded.get(a) ?? 0)) ancestors.push({ round: block.round, author: a, digest: block.block.digest })
    }
    assert(ancestors.filter((a) => a.round === round - 1).length >= ctx.rule.quorum, `proposing round ${round} without a quorum of round ${round - 1}`)
    return ancestors
  }

  /** Forgets our blocks and references at or below the GC round `gc`, all but our latest block. */
  collect(gc: number): void {
    for (const round of this.ownBlocks.keys()) if (round <= gc && round !== this.state.lastProposed) this.ownBlocks.delete(round)
    for (const [author, round] of this.state.lastIncluded) if (round <= gc) this.state.lastIncluded.delete(author)
  }

  /** Our blocks from the store: their rounds are taken, and the next block references what the latest did not. */
  recover(ownBlocks: RecoveredState['ownBlocks']): void {
    for (const b of ownBlocks) {
      this.ownBlocks.set(b.header.round, b)
      if (b.header.round > this.state.lastProposed) this.state.lastProposed = b.header.round
    }
    const last = this.ownBlocks.get(this.state.lastProposed)
    for (const a of last?.header.ancestors ?? []) this.state.lastIncluded.set(a.author, a.round)
  }
}
