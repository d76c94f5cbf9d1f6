import { fromHex, toHex } from '@stead/core'
import type { Dag } from './dag.ts'
import type { Block } from './messages.ts'
import type { Synchronizer } from './sync.ts'
import type { CoreContext, Output } from './types.ts'

/** Blocks per catch-up answer: well under the mesh's frame limit even with full blocks. */
export const SYNC_BATCH = 200
/** Bytes of blocks per catch-up answer: several full blocks, well under the 64 MiB frame limit. */
export const SYNC_BYTES = 16 * 1024 * 1024

/**
 * Sync ticks without progress after which a stuck relay re-sends its block, a
 * wake and a sync request: 1, 2, 4, then every 8 (0.5, 1, 2, 4, 8, 12 s... at
 * 500 ms). Each of those may be several MiB per peer: a relay that is only
 * slow (big blocks, a busy core) must not bury its peers, and itself, in copies.
 */
const stuckActs = (ticks: number): boolean => (ticks & (ticks - 1)) === 0 || ticks % 8 === 0

/** Catching up with peers: range pulls, peers that pruned, and the sync ticks that watch progress. */
interface CatchUpState {
  /**
   * The peer we are pulling missed rounds from (a `sync` whose answer has
   * not come): blocks far ahead start one pull, not one each. Cleared by
   * its last answer and at each sync tick (a lost request is asked again).
   */
  pulling: number | null
  /** Per peer, the round the latest sync sent to it asked from: a full answer goes on only past it. */
  readonly pulledFrom: Map<number, number>
  /** Peers that answered a sync with 'pruned': the round each keeps blocks from. */
  readonly prunedPeers: Map<number, number>
  historyPrunedReported: boolean
  syncTimerArmed: boolean
  syncPeer: number
  /** (clock, last proposed, last decided) at the previous sync tick: unchanged with work pending means stuck. */
  progressMark: string
  /** Sync ticks in a row without progress. */
  stuckTicks: number
  /** Sync ticks in a row without progress and without work (see arm). */
  quietTicks: number
}

/** What catching up sees of the rest of the core: the DAG, the parked blocks, and two questions about progress. */
export interface CatchUpView {
  readonly me: number
  readonly ctx: CoreContext
  readonly dag: Dag
  readonly sync: Synchronizer
  /** Leader slots up to this round are decided. */
  decidedRound(): number
  /** Whether envelopes wait for an order (see ConsensusCore.hasWork). */
  hasWork(): boolean
}

/**
 * Fetching what we miss and serving what peers miss: fetches by digest for
 * parked blocks, range pulls when far behind, the peers that pruned what we
 * need, and the sync timer that notices a relay made no progress.
 */
export class CatchUp {
  private readonly state: CatchUpState = { pulling: null, pulledFrom: new Map(), prunedPeers: new Map(), historyPrunedReported: false, syncTimerArmed: false, syncPeer: 0, progressMark: '', stuckTicks: 0, quietTicks: 0 }

  private readonly v: CatchUpView

  constructor(v: CatchUpView) {
    this.v = v
  }

  fetch(peer: number, digests: readonly string[], out: Output[]): void {
    this.v.sync.asked(peer, digests)
    out.push({ type: 'send', to: peer, message: { kind: 'fetch', digests: digests.map(fromHex) } })
  }

  arm(out: Output[]): void {
    const s = this.state
    if (s.syncTimerArmed) return
    // Idle and complete, with no pull waiting for an answer: no timer at all.
    if (!this.v.hasWork() && this.v.sync.size === 0 && s.pulling === null) return
    s.syncTimerArmed = true
    // Idle with only parked blocks (ancestors nobody sends: a Byzantine author that does not
    // answer, or a partition): ask less and less often, up to every 64 intervals.
    const onlyParked = !this.v.hasWork() && s.pulling === null
    out.push({ type: 'timer', name: 'sync', round: 0, afterMs: onlyParked ? this.v.ctx.syncIntervalMs * 2 ** Math.min(6, s.quietTicks) : this.v.ctx.syncIntervalMs })
  }

  /** The first round this relay still needs blocks of to go on deciding. */
  neededRound(): number {
    return Math.max(this.v.dag.gcRound + 1, this.v.decidedRound())
  }

  /**
   * The round from which f+1 peers (so at least one correct relay) still keep
   * blocks, when that is past the round this relay needs next: it cannot catch
   * up by fetching blocks, only from a checkpoint (see checkpoint.ts). Null otherwise,
   * also once it moved on past that round.
   */
  get historyPrunedPast(): number | null {
    const needed = this.neededRound()
    const past = [...this.state.prunedPeers.values()].filter((r) => r > needed).sort((a, b) => a - b)
    const f = this.v.ctx.n - this.v.ctx.rule.quorum
    return past.length > f ? (past[past.length - 1 - f] as number) : null
  }

  /**
   * `peer`, unless it said it keeps no blocks of `round` any more: then the
   * next peer that did not say so (asking it again would bring the same
   * 'pruned' answer, round trip after round trip, and never the f+1 that
   * tell this relay to fetch a checkpoint).
   */
  private keeperOf(peer: number, round: number): number {
    const { n } = this.v.ctx
    for (let i = 0; i < n; i++) {
      const p = (peer + i) % n
      if (p !== this.v.me && (this.state.prunedPeers.get(p) ?? 0) <= round) return p
    }
    return peer
  }

  /** Asks `peer` for the blocks of rounds from `fromRound` on; its answers keep the pull going while they come full. */
  private pull(peer: number, fromRound: number, out: Output[]): void {
    this.state.pulling = peer
    this.state.pulledFrom.set(peer, fromRound)
    out.push({ type: 'send', to: peer, message: { kind: 'sync', fromRound } })
  }

  /** A block far ahead of the clock came from `from`: unless a pull runs, pull the rounds we need next from it (or a peer that keeps them). */
  pullNeeded(from: number, out: Output[]): void {
    if (this.state.pulling === null) this.pull(this.keeperOf(from, this.neededRound()), this.neededRound(), out)
  }

  /** A block a few rounds ahead came from `from`: unless a pull runs, pull from our clock round on. */
  pullFromClock(from: number, out: Output[]): void {
    const clock = this.v.dag.clockRound
    if (this.state.pulling === null) this.pull(this.keeperOf(from, clock), clock, out)
  }

  /**
   * Blocks of rounds above this are far ahead: dropped unread, and the
   * rounds before them pulled. Counted from the clock, or from the round
   * this relay needs next when that is higher (after starting over from a
   * checkpoint, the DAG is empty and the clock has not moved).
   */
  get highestAccepted(): number {
    return Math.max(this.v.dag.clockRound, this.neededRound()) + this.v.ctx.maxRoundsAhead
  }

  /** An answer to a pull or a fetch, sorted by round, has been taken in. */
  answered(from: number, sorted: readonly Block[], out: Output[]): void {
    // A full answer means more is waiting: keep pulling while behind. Only past the round asked
    // from: a full answer of one round is a peer's equivocations, and pulling that round again
    // would let it send as many for each pull, as long as it likes.
    const last = sorted[sorted.length - 1]?.header.round ?? 0
    const size = sorted.reduce((n, b) => n + b.signed.bytes.length, 0)
    if ((sorted.length >= SYNC_BATCH || size >= SYNC_BYTES) && last > (this.state.pulledFrom.get(from) ?? -1)) this.pull(from, last, out)
    else if (this.state.pulling === from) this.state.pulling = null
  }

  /** `from` keeps no blocks below `keptFrom`. */
  pruned(from: number, keptFrom: number, out: Output[]): void {
    const s = this.state
    s.prunedPeers.set(from, keptFrom)
    if (s.pulling === from) s.pulling = null
    const past = this.historyPrunedPast
    if (past !== null && !s.historyPrunedReported) out.push({ type: 'history-pruned', keptFrom: past, needed: this.neededRound() })
    s.historyPrunedReported = past !== null
  }

  /**
   * The sync timer fired: re-asks a pull that got no answer and fetches
   * what parked blocks miss. `ownRound` is our latest proposal's round.
   * Returns whether we are stuck (no progress for a while, see stuckActs):
   * then a sync request went out, and the caller re-sends our block and a
   * wake.
   */
  tick(ownRound: number, out: Output[]): boolean {
    const s = this.state
    const { n } = this.v.ctx
    const { me } = this.v
    s.syncTimerArmed = false
    const unanswered = s.pulling
    s.pulling = null
    this.v.sync.tick()
    const mark = `${this.v.dag.clockRound}/${ownRound}/${this.v.decidedRound()}`
    s.stuckTicks = mark === s.progressMark ? s.stuckTicks + 1 : 0
    s.progressMark = mark
    s.quietTicks = s.stuckTicks > 0 && !this.v.hasWork() ? s.quietTicks + 1 : 0
    // A pull whose answer never came (every answer ends or continues it, an empty one too): the next keeper.
    if (unanswered !== null) this.pull(this.keeperOf((unanswered + 1) % n, this.neededRound()), this.neededRound(), out)
    const stuck = s.stuckTicks > 0 && stuckActs(s.stuckTicks)
    const frontier = this.v.sync.frontier(1000)
    if (!stuck && frontier.length === 0) return false
    s.syncPeer = (s.syncPeer + 1) % n
    if (s.syncPeer === me) s.syncPeer = (s.syncPeer + 1) % n
    if (frontier.length) this.fetch(s.syncPeer, frontier, out)
    if (!stuck) return false
    // No progress for a whole interval: peers may hold rounds we missed, may have missed our
    // latest block (a partition drops it), or may be idle while we wait for them at our round.
    s.pulledFrom.set(s.syncPeer, this.neededRound())
    out.push({ type: 'send', to: s.syncPeer, message: { kind: 'sync', fromRound: this.neededRound() } })
    return true
  }

  /** A peer asked for the blocks from `fromRound` on. */
  serveSync(from: number, fromRound: number, out: Output[]): void {
    const { dag } = this.v
    const lowest = dag.gcRound + 1
    if (fromRound < lowest) out.push({ type: 'archive-request', to: from, query: { fromRound, toRound: lowest - 1 } })
    const blocks: Block[] = []
    let bytes = 0
    for (let r = Math.max(fromRound, lowest); r <= dag.highestRound && blocks.length < SYNC_BATCH && bytes < SYNC_BYTES; r++) {
      for (const b of dag.atRound(r)) {
        blocks.push(b.block)
        bytes += b.block.signed.bytes.length
      }
    }
    // Also when empty: the answer ends the asker's pull.
    out.push({ type: 'send', to: from, message: { kind: 'blocks', blocks } })
  }

  /** A peer asked for blocks by digest; `ownByDigest` finds ours that the DAG let go. */
  serveFetch(from: number, digests: readonly Uint8Array[], ownByDigest: (digestHex: string) => Block | undefined, out: Output[]): void {
    const blocks: Block[] = []
    const archived: string[] = []
    for (const d of digests) {
      const hex = toHex(d)
      const held = this.v.dag.get(hex)?.block ?? ownByDigest(hex)
      if (held) blocks.push(held)
      else archived.push(hex)
    }
    // In answers of at most SYNC_BYTES each: full blocks are MiBs, a mesh frame is 64 MiB at most.
    for (const part of byBytes(blocks)) out.push({ type: 'send', to: from, message: { kind: 'blocks', blocks: part } })
    if (archived.length) out.push({ type: 'archive-request', to: from, query: { digests: archived } })
  }
}

/** Splits blocks into runs of at most SYNC_BYTES of signed bytes (a run holds at least one block). */
export function byBytes(blocks: readonly Block[]): Block[][] {
  const runs: Block[][] = []
  let bytes = 0
  for (const b of blocks) {
    const last = runs[runs.length - 1]
    if (!last || (last.length > 0 && bytes + b.signed.bytes.length > SYNC_BYTES)) {
      runs.push([b])
      bytes = b.signed.bytes.length
    } else {
      last.push(b)
      bytes += b.signed.bytes.length
    }
  }
  return runs
}
