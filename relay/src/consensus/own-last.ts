import type { Dag } from './dag.ts'
import type { Block } from './messages.ts'
import type { Synchronizer } from './sync.ts'
import type { CoreContext, Output } from './types.ts'

/** What own-last recovery sees: who we are, the settings, and where blocks of a peer may be (to answer its ask). */
export interface OwnLastView {
  readonly me: number
  readonly ctx: CoreContext
  readonly dag: Dag
  readonly sync: Synchronizer
}

/**
 * Recovery of our own latest block after a restart: we ask peers for their
 * word on it (ConsensusConfig.ownLastTimeoutMs), again whenever a connection
 * to one that has not answered opens, until 2f answered. Also the other
 * side: answering a peer that asks for its own.
 */
export class OwnLast {
  private asking = false
  /** Each peer that answered, with its GC round (see heard). */
  private readonly gcRounds = new Map<number, number>()
  /** No proposal until 2f peers answered or the own-last timer fired. */
  private hold = false

  private readonly v: OwnLastView

  constructor(v: OwnLastView) {
    this.v = v
    if (v.ctx.ownLastTimeoutMs > 0 && v.ctx.n > 1) this.asking = this.hold = true
  }

  /** Whether proposals wait for the peers' word on our latest block. */
  get holding(): boolean {
    return this.hold
  }

  start(out: Output[]): void {
    if (this.asking) out.push({ type: 'broadcast', message: { kind: 'own-last-ask' } })
    if (this.hold) out.push({ type: 'timer', name: 'own-last', round: 0, afterMs: this.v.ctx.ownLastTimeoutMs })
  }

  onPeerConnected(peer: number, out: Output[]): void {
    // Our ask may have gone before this connection was up (also after the timer let us propose).
    if (this.asking && !this.gcRounds.has(peer)) out.push({ type: 'send', to: peer, message: { kind: 'own-last-ask' } })
  }

  /** A peer asks for its own latest block. */
  serve(from: number, out: Output[]): void {
    // Answered every time (a restarted peer asks again, perhaps before we see its new
    // connection); the shell's per-peer serving budget bounds what a peer asking over and over gets.
    if (from !== this.v.me) out.push({ type: 'send', to: from, message: { kind: 'own-last', block: this.latestBlockOf(from), gcRound: this.v.dag.gcRound } })
  }

  /**
   * The latest block of `author` we hold, in the DAG (of twins, the highest
   * digest) or parked for its ancestors: what a peer that lost its store
   * asks us for.
   */
  private latestBlockOf(author: number): Block | null {
    const { dag, sync } = this.v
    const inDag = dag.latestPerAuthor(dag.highestRound + 1).get(author)?.block ?? null
    const parked = sync.latestOf(author)
    return parked && parked.header.round > (inDag?.header.round ?? 0) ? parked : inDag
  }

  /**
   * `from` answered with its GC round. Returns the round our blocks are
   * vouched to lie at or below: a peer's GC round is its word alone, so the
   * (f+1)-th highest of those heard (at least one correct peer's is as
   * high), or undefined while fewer than f+1 answered.
   */
  heard(from: number, gcRound: number): number | undefined {
    this.gcRounds.set(from, gcRound)
    return [...this.gcRounds.values()].sort((a, b) => b - a)[this.v.ctx.committee.f]
  }

  /**
   * Enough once 2f peers answered (with us, a quorum): what the honest among them hold is what a
   * quorum of the cluster built on. Best effort, as in Sui: a block of ours that reached only the
   * peers that did not answer (or lied) can still be missed.
   */
  settle(): void {
    if (this.asking && this.gcRounds.size >= this.v.ctx.rule.quorum - 1) this.asking = this.hold = false
  }

  /**
   * Liveness first (as Sui): the peers that did not answer may be down for good. We go on
   * asking those whose connection opens later; a late answer still raises the proposer's floor.
   */
  onTimer(): void {
    this.hold = false
  }
}
