import { SteadError, fromHex, toHex, type Envelope, type HostClock } from '@stead/core'
import type { Logger } from 'pino'
import { exact, type Admission } from './admission.ts'
import { MAX_FRAMES_WITH_VOTES } from './clock-votes.ts'
import { SYNC_BATCH, SYNC_BYTES, byBytes, encodeMessage, type ArchiveQuery, type Block, type Committee, type Message, type Output, type SyncCrypto } from '../consensus/index.ts'
import { MeshBudget, peekBlockCount, peekKind, type MeshLimits, type Throttled } from '../mesh/budget.ts'
import type { Mesh } from '../mesh/types.ts'
import type { Metrics } from './metrics.ts'
import type { RelayStore } from '../store/store.ts'

/** Bytes of one peer's frames that may wait for the event loop: two full catch-up answers (SYNC_BYTES). */
export const MESH_BACKLOG_BYTES = 2 * SYNC_BYTES

export interface PeerServingOptions {
  readonly committee: Committee
  readonly crypto: SyncCrypto
  readonly clock: HostClock
  readonly mesh: Mesh
  readonly metrics: Metrics
  readonly log: Logger
  readonly admission: Admission
  /** The relay's store (opened at start, so asked for when needed). */
  readonly store: () => RelayStore
  /** A relay's name in the cluster file, by committee index. */
  readonly nameOf: (index: number) => string
  readonly limits?: Partial<MeshLimits> | undefined
}

/**
 * This relay's side of its peers: what each peer's frames may cost at the
 * door, what it may be served from the archive, what its wakes may bring
 * in, and how far the cluster has come by their blocks. A Byzantine peer
 * gets no more of this relay's CPU, memory or disk than its budget.
 *
 * A fetch or sync asks for up to SYNC_BYTES in a few bytes, so a peer
 * asking over and over would otherwise cost a core: the budget is checked
 * before anything is read and caps what is read; answers past it are
 * dropped (an honest asker asks again on its timers), and a relay catching
 * up pulls far less than this from any one peer.
 */
export class PeerServing {
  /** Per peer: what its frames may cost at the door, its requests waiting, what it may be served, its frames' bytes waiting. */
  readonly budget: MeshBudget<Output[]>
  private readonly o: PeerServingOptions
  /**
   * The latest round each relay has signed a block for, as received. The
   * (f+1)-th highest is a round some correct relay reached: f liars cannot
   * inflate it. How far this relay trails it says whether it is caught up.
   */
  private readonly latestRoundOf: number[]
  private warnedAt = 0

  constructor(options: PeerServingOptions) {
    this.o = options
    this.latestRoundOf = options.committee.keys.map(() => 0)
    this.budget = new MeshBudget(options.committee.keys.length, () => options.clock.now(), (t) => this.throttled(t), options.limits)
  }

  /**
   * The checks a peer's frame passes before it is decoded: the bytes of its
   * frames waiting for the event loop, its kind's rate, and for `blocks`
   * how many of the declared blocks may be opened (`keep`). Undefined: dropped.
   */
  admitFrame(from: number, frame: Uint8Array): { kind: string; keepBlock?: (digestHex: string) => boolean } | undefined {
    // Frames arrive while the loop awaits the disk; what waits for it is bounded per peer.
    // Past the bound a frame is dropped before any work is spent on it: consensus tolerates
    // loss (sync fetches what is missing), and one peer cannot fill the relay's memory.
    const waiting = this.budget.backlogBytes(from)
    if (waiting + frame.length > MESH_BACKLOG_BYTES) {
      this.o.metrics.rejected.inc({ reason: 'overloaded', source: 'mesh' })
      this.warn({ from: this.o.nameOf(from), waiting, limit: MESH_BACKLOG_BYTES }, 'mesh: dropping frames from a peer while its earlier ones wait to be processed')
      return undefined
    }
    // Each kind of message has a per-peer rate, charged before the frame is decoded or its signatures checked.
    const kind = peekKind(frame) ?? 'malformed'
    if (!this.budget.admit(from, kind, frame.length)) return undefined
    // A `blocks` message is charged per block too (MeshBudget.blockGate): answers to what this relay
    // asked the peer for first, then the peer's unrequested-block budget; blocks past it are not opened.
    if (kind !== 'blocks') return { kind }
    if (!this.budget.mayOpenBlocks(from, peekBlockCount(frame) ?? 0)) return undefined
    return { kind, keepBlock: this.budget.blockGate(from) }
  }

  /** Notes the rounds of the blocks a peer sent (see clusterRound). */
  sawBlocks(message: Message): void {
    for (const block of message.kind === 'block' ? [message.block] : message.kind === 'blocks' ? message.blocks : []) {
      const { author, round } = block.header
      if (round > (this.latestRoundOf[author] as number)) this.latestRoundOf[author] = round
    }
  }

  /** The (f+1)-th highest round relays signed blocks for, as received: one some correct relay reached. */
  clusterRound(): number {
    return [...this.latestRoundOf].sort((a, b) => b - a)[this.o.committee.f] ?? 0
  }

  /**
   * What of a peer's wake may reach the core: each envelope is charged to
   * the peer's wake budget, and must pass the door a client's envelope
   * passes (Admission.door: signature, the cluster file's rules (not the
   * space's own policy, which the audit applies), the audit's
   * decisions, clock and stamps, and the new-space quota of its author's
   * key, charged as if the peer were the address it came from): a
   * Byzantine relay cannot start spaces, or queue envelopes, that a client
   * could not. The rest is dropped and counted.
   */
  wakePayload(from: number, frames: readonly Uint8Array[]): Uint8Array[] {
    const wanted = frames.slice(0, this.budget.wakeMaxEnvelopes)
    if (!wanted.length || !this.budget.admit(from, 'wake', 0, wanted.length)) return []
    const out: Uint8Array[] = []
    for (const frame of wanted) {
      try {
        // One the audit decided already still goes to the core: a relay holding a twin of a decided
        // envelope needs a round to see it dropped (the core wakes only for what is not ordered yet).
        const { charge } = this.o.admission.door(frame, `relay:${this.o.nameOf(from)}`, true)
        // Charged now: the core takes the wake's envelopes later, and one it would not queue (queued
        // already) costs the relay that sent it, not an honest client.
        charge?.()
        out.push(exact(frame))
      } catch (err) {
        if (!(err instanceof SteadError)) throw err
        if (err.reason === 'rate-limited') this.throttled({ peer: from, kind: 'wake', why: 'rate' })
        else this.o.metrics.rejected.inc({ reason: err.reason, source: 'mesh' })
      }
    }
    return out
  }

  /**
   * The envelopes a peer sent with its clock votes (ones it got from
   * clients), opened (signature checked, cached) for this relay's own
   * votes: charged to the peer's budget per envelope (`voteFrames`), and
   * never queued for a block (the peer's block carries them).
   */
  votedEnvelopes(from: number, frames: readonly Uint8Array[]): Array<{ env: Envelope; frame: Uint8Array }> {
    const wanted = frames.slice(0, MAX_FRAMES_WITH_VOTES)
    if (!wanted.length || !this.budget.admit(from, 'vote-frames', wanted.reduce((n, f) => n + f.length, 0), wanted.length)) return []
    return wanted.flatMap((frame) => {
      const env = this.o.admission.open(frame)
      if (!(env instanceof SteadError)) return [{ env, frame: exact(frame) }]
      this.o.metrics.rejected.inc({ reason: env.reason, source: 'mesh' })
      return []
    })
  }

  /** Sends what the consensus core says to a peer, within the peer's serving budget; what this relay asks for, the peer may send back. */
  send(to: number, message: Message): void {
    if (message.kind === 'blocks' && !this.mayServe(to, message.blocks)) return
    // What we ask a peer for, it may send: its answers are charged against that, not its unrequested-block budget
    // (a sync is answered from memory and from the store, up to SYNC_BATCH blocks each).
    if (message.kind === 'sync') this.budget.pulledFrom(to, 2 * SYNC_BATCH)
    if (message.kind === 'fetch') this.budget.fetchedFrom(to, message.digests.map(toHex))
    if (message.kind === 'own-last' && message.block && !this.mayServe(to, [message.block])) return
    this.o.mesh.send(to, encodeMessage(message))
  }

  /** Answers a peer's request for blocks the core no longer holds in memory, from the store, within its budget. */
  serveArchive(to: number, query: ArchiveQuery): void {
    const { mesh, crypto, committee } = this.o
    const store = this.o.store()
    // Rounds below the retention window are gone: say so, and the asker knows why nothing comes.
    if ('fromRound' in query && query.fromRound < store.blocksKeptFrom) mesh.send(to, encodeMessage({ kind: 'pruned', keptFrom: store.blocksKeptFrom }))
    // Nothing read from the store for a peer past its budget, and never more than the budget has room for.
    if (!this.budget.mayServe(to, 'digests' in query ? 'fetch' : 'sync')) return
    const room = this.budget.allowance(to)
    const digests = 'digests' in query ? query.digests.slice(0, Math.max(1, room.blocks)) : []
    const blocks =
      'digests' in query
        ? store.blocksByDigest(crypto, committee, digests)
        : store.blocksInRounds(crypto, committee, query.fromRound, query.toRound, Math.max(1, Math.min(SYNC_BATCH, room.blocks)), Math.min(SYNC_BYTES, room.bytes))
    if ('digests' in query) {
      // Neither in memory (the core looked) nor on disk: say so, so that a block of ours naming one
      // of these could be recognised as one we never made (see the core's 'unknown'). Only of those looked up.
      const found = new Set(blocks.map((b) => b.digestHex))
      const unknown = digests.filter((d) => !found.has(d))
      if (unknown.length) mesh.send(to, encodeMessage({ kind: 'unknown', digests: unknown.map(fromHex), keptFrom: store.blocksKeptFrom }))
    }
    for (const part of byBytes(blocks)) {
      if (!this.mayServe(to, part)) break
      mesh.send(to, encodeMessage({ kind: 'blocks', blocks: part }))
    }
  }

  /** Whether `blocks` may be sent to peer `to` as an answer now (its serving budget, MeshBudget); counted and logged if not. */
  private mayServe(to: number, blocks: readonly Block[]): boolean {
    let bytes = 0
    for (const b of blocks) bytes += b.signed.bytes.length
    return this.budget.charge(to, 'blocks', blocks.length, bytes)
  }

  /** A peer's frame or request refused by its mesh budget: counted, and logged once in a while. */
  private throttled(t: Throttled): void {
    this.o.metrics.rejected.inc({ reason: 'rate-limited', source: 'mesh' })
    this.o.metrics.meshThrottled.inc({ peer: this.o.nameOf(t.peer), kind: t.kind })
    this.warn({ from: this.o.nameOf(t.peer), kind: t.kind, why: t.why }, 'mesh: a peer sends more than its budget allows; dropping what is over it')
  }

  /** Logs a warning about peers' traffic at most every ten seconds: a flood must not flood the log too. */
  private warn(fields: Record<string, unknown>, msg: string): void {
    const now = this.o.clock.now()
    if (now - this.warnedAt <= 10_000) return
    this.warnedAt = now
    this.o.log.warn(fields, msg)
  }
}
