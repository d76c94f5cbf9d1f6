import { decideLeaders, type LeaderStatus } from './committer.ts'
import { assert, type Dag, type DagBlock } from './dag.ts'
import { OrderedRecord } from './ordered.ts'
import type { PayloadInfo } from './payload.ts'
import type { CoreContext, Output, RecoveredState } from './types.ts'

/** A block accepted and not ordered yet, with those of its envelopes not ordered yet. */
interface PendingWork {
  readonly block: DagBlock
  readonly ids: readonly PayloadInfo[]
}

/**
 * What has been decided and ordered, and what still waits for an order:
 * the leader slots decided, the committed leaders' sub-DAGs in their one
 * order, the dedupe window over envelope ids, and the blocks that expired
 * unordered. Every correct relay must reach the same sequence from the same
 * DAG, so nothing here depends on when a block arrived.
 */
export class Linearizer {
  /** Leader slots up to this round are decided (committed or skipped). */
  private lastDecided: number
  private lastCommitRound: number
  /** Blocks, slots and envelope ids already ordered (at most one block per slot ever is), within the window. */
  private readonly ordered = new OrderedRecord()
  /**
   * Accepted blocks not yet ordered, with their envelopes not yet ordered:
   * while one of those envelopes is still unordered, the cluster has work.
   */
  private readonly pendingWork = new Map<string, PendingWork>()
  /** What `inspect` said of each accepted block's envelopes, in payload order: asked once per block. */
  private readonly infosOf = new Map<string, readonly PayloadInfo[]>()

  private readonly ctx: Pick<CoreContext, 'rule'>
  private readonly dag: Dag

  constructor(ctx: Pick<CoreContext, 'rule'>, dag: Dag) {
    this.ctx = ctx
    this.dag = dag
    // A new DAG starts collected up to its epoch's genesis round: nothing there is left to decide.
    this.lastDecided = dag.gcRound
    this.lastCommitRound = dag.gcRound
  }

  get decidedRound(): number {
    return this.lastDecided
  }

  get committedRound(): number {
    return this.lastCommitRound
  }

  get pendingCount(): number {
    return this.pendingWork.size
  }

  get orderedPayloadCount(): number {
    return this.ordered.payloadCount
  }

  /** What checkInvariants reads (invariants.ts): the records themselves, never to be changed through it. */
  get invariantView(): { readonly ordered: OrderedRecord; readonly infosOf: ReadonlyMap<string, readonly PayloadInfo[]>; readonly pendingWork: ReadonlyMap<string, PendingWork> } {
    return { ordered: this.ordered, infosOf: this.infosOf, pendingWork: this.pendingWork }
  }

  hasPayload(idHex: string): boolean {
    return this.ordered.hasPayload(idHex)
  }

  /** The leader slots the commit rule can decide now, after the last decided one. */
  decide(): LeaderStatus[] {
    return decideLeaders(this.dag, this.ctx.rule, this.lastDecided)
  }

  /**
   * Records one decided slot; a committed leader's sub-DAG is ordered.
   * Returns the envelope ids it ordered (for the queue to drop), or null
   * when the slot was skipped.
   */
  settle(status: LeaderStatus, out: Output[]): string[] | null {
    assert(status.round > this.lastDecided, `leader of round ${status.round} decided after round ${this.lastDecided}`)
    this.lastDecided = status.round
    return status.kind === 'commit' ? this.commitLeader(status.block, out) : null
  }

  /** Orders the leader's causal history that no earlier leader ordered (Sui's linearizer, with one block per slot). */
  private commitLeader(leader: DagBlock, out: Output[]): string[] {
    const gc = this.dag.gcRound
    assert(!this.ordered.hasBlock(leader.digestHex), `leader ${leader.digestHex.slice(0, 8)} ordered twice`)
    const history: DagBlock[] = []
    if (!this.ordered.hasSlot(leader)) {
      this.ordered.orderBlock(leader)
      const stack = [leader]
      while (stack.length) {
        const block = stack.pop() as DagBlock
        history.push(block)
        for (const a of block.ancestors) {
          if (a.round <= gc || this.ordered.hasBlock(a.digestHex) || this.ordered.hasSlot(a)) continue
          const ancestor = this.dag.get(a.digestHex)
          assert(ancestor, `ancestor ${a.digestHex.slice(0, 8)} of an ordered block is missing`)
          this.ordered.orderBlock(ancestor)
          stack.push(ancestor)
        }
      }
    }
    history.sort((a, b) => a.round - b.round || a.author - b.author || (a.digestHex < b.digestHex ? -1 : a.digestHex > b.digestHex ? 1 : 0))
    const payload: Uint8Array[] = []
    const payloadIds: string[] = []
    for (const block of history) {
      assert(block.round <= leader.round && block.round > gc, `block of round ${block.round} ordered under leader ${leader.round} (GC round ${gc})`)
      this.pendingWork.delete(block.digestHex)
      const infos = this.infosOf.get(block.digestHex) ?? []
      block.block.header.payload.forEach((frame, i) => {
        const id = (infos[i] as PayloadInfo).idHex
        if (this.ordered.hasPayload(id)) return
        this.ordered.orderPayload(id, leader.round)
        payload.push(frame)
        payloadIds.push(id)
      })
    }
    // The twins of what was just ordered are dead.
    for (const block of history) for (const twin of this.dag.atSlot(block.round, block.author)) if (!this.ordered.hasBlock(twin.digestHex)) this.expire(twin, out)
    // Blocks still waiting whose envelopes all went into the order through others hold no work any more.
    for (const [digest, work] of this.pendingWork) if (this.holdsNoWork(work)) this.pendingWork.delete(digest)
    assert(leader.round > this.lastCommitRound, `commit of round ${leader.round} after round ${this.lastCommitRound}`)
    this.lastCommitRound = leader.round
    const ordered = history.map((b) => b.digestHex)
    out.push({ type: 'persist', record: { kind: 'commit', anchorRound: leader.round, ordered, payloadIds } })
    out.push({
      type: 'commit',
      commit: { anchorRound: leader.round, leader: leader.author, blocks: history.map(({ round, author, digestHex }) => ({ round, author, digestHex })), payload, payloadIds },
    })
    return payloadIds
  }

  /** A block entered the DAG with what `inspect` said of its envelopes (asked once per block, kept until GC). */
  accepted(node: DagBlock, infos: readonly PayloadInfo[]): void {
    // Ordered before it reached this DAG (a restart, or a checkpoint, recovered the commit that did).
    this.ordered.arrived(node)
    this.infosOf.set(node.digestHex, infos)
  }

  /** Whether another block of this block's slot was ordered: then this one never will be. */
  slotTaken(node: DagBlock): boolean {
    return this.ordered.hasSlot(node)
  }

  noteWork(node: DagBlock, infos: readonly PayloadInfo[]): void {
    const fresh = infos.filter((i) => !this.ordered.hasPayload(i.idHex))
    if (fresh.length && !this.ordered.hasBlock(node.digestHex)) this.pendingWork.set(node.digestHex, { block: node, ids: fresh })
  }

  /** A block that will never be ordered: its envelopes not ordered elsewhere are reported, for whoever applied them. */
  private expire(block: DagBlock, out: Output[]): void {
    this.pendingWork.delete(block.digestHex)
    const payloadIds = (this.infosOf.get(block.digestHex) ?? []).map((i) => i.idHex).filter((id) => !this.ordered.hasPayload(id))
    if (payloadIds.length) out.push({ type: 'expired', block: { round: block.round, author: block.author, digestHex: block.digestHex }, payloadIds })
  }

  /**
   * Whether an accepted block still waits for an order with envelopes not
   * ordered elsewhere (with `urgentOnly`, urgent ones) and can still be
   * ordered (no other block of its slot was: a lost twin of an equivocator
   * never will). A question only: what holds no work any more is
   * forgotten when an order makes it so (see commitLeader).
   */
  hasPendingWork(urgentOnly: boolean): boolean {
    for (const work of this.pendingWork.values()) {
      if (this.holdsNoWork(work)) continue
      if (!urgentOnly || work.ids.some((i) => i.urgent && !this.ordered.hasPayload(i.idHex))) return true
    }
    return false
  }

  private holdsNoWork(work: PendingWork): boolean {
    return this.ordered.hasSlot(work.block) || work.ids.every((i) => this.ordered.hasPayload(i.idHex))
  }

  /** Hands `take` the unordered envelopes of unordered blocks until it refuses one; returns false then. */
  unorderedFrames(take: (frame: Uint8Array) => boolean): boolean {
    for (const work of this.pendingWork.values()) {
      // A twin of a block ordered since (its slot taken when a recovered block arrived) will never be ordered.
      if (this.ordered.hasSlot(work.block)) continue
      const infos = this.infosOf.get(work.block.digestHex) ?? []
      const payload = work.block.block.header.payload
      for (let i = 0; i < payload.length; i++) {
        if (this.ordered.hasPayload((infos[i] as PayloadInfo).idHex)) continue
        if (!take(payload[i] as Uint8Array)) return false
      }
    }
    return true
  }

  /** A block the DAG dropped below the GC round `gc`. */
  collected(gone: DagBlock, out: Output[]): void {
    // A block never ordered by now never will be; its clients resubmit what it carried.
    // (Twins of ordered blocks were reported when their slot was ordered.)
    if (!this.ordered.collected(gone)) this.expire(gone, out)
    this.pendingWork.delete(gone.digestHex)
    this.infosOf.delete(gone.digestHex)
  }

  forget(gc: number): void {
    this.ordered.forget(gc)
  }

  /** The last commit a restarted relay's store holds: decided up to it. */
  recoverRounds(commits: RecoveredState['commits']): void {
    for (const c of commits) if (c.anchorRound > this.lastCommitRound) this.lastCommitRound = c.anchorRound
    this.lastDecided = this.lastCommitRound
  }

  /** The ordered blocks and the dedupe window of the commits above the GC round `gc`. */
  recoverOrdered(commits: RecoveredState['commits'], gc: number): void {
    for (const c of [...commits].sort((a, b) => a.anchorRound - b.anchorRound)) {
      if (c.anchorRound <= gc) continue
      for (const d of c.ordered) this.ordered.recoverBlock(d, c.anchorRound)
      // The dedupe window must match the other relays' exactly: it decides what a commit carries.
      for (const id of c.payloadIds) if (!this.ordered.hasPayload(id)) this.ordered.orderPayload(id, c.anchorRound)
    }
  }
}
