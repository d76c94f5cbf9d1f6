import { SteadError, fromHex, toHex } from '@stead/core'
import { decideLeaders, roundRobin, type CommitRule } from './committer.ts'
import { Dag, assert, type DagBlock, type Ref } from './dag.ts'
import { GENESIS_DIGEST, GENESIS_HEX, committeeSize, quorum, signBlock, validateCommittee, type Block, type BlockRef, type Committee, type Message, type SyncCrypto } from './messages.ts'
import { PayloadQueue, type InspectPayload, type PayloadInfo } from './payload.ts'
import { OrderedRecord } from './ordered.ts'
import { InvariantChecker } from './invariants.ts'
import { Synchronizer } from './sync.ts'

export { payloadInfoOf, type InspectPayload, type PayloadInfo } from './payload.ts'

export interface ConsensusConfig {
  readonly committee: Committee
  readonly me: number
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  readonly inspect: InspectPayload
  /** Blocks more than this many rounds ahead of our clock are ignored (flood guard). */
  readonly maxRoundsAhead?: number
  /** Rounds kept behind the last committed leader; older blocks can never be ordered. */
  readonly gcDepth?: number
  /** Envelopes in one block. */
  readonly maxBlockEnvelopes?: number
  /** Payload bytes in one block (one envelope may exceed it alone); keeps blocks far below the mesh frame limit. */
  readonly maxBlockBytes?: number
  /** Envelopes waiting for a block; more are refused with 'rate-limited'. */
  readonly maxQueuedEnvelopes?: number
  /** How long to wait for the previous round's leader before proposing without it. */
  readonly leaderTimeoutMs?: number
  /**
   * Rounds with no urgent work (no safe update waits for them) start at
   * most one per this many ms, as Sui's min_round_delay paces its
   * proposals: regular updates made in between ride in the same blocks
   * instead of each paying three rounds. Safe updates are proposed at once.
   * 0 turns pacing off.
   */
  readonly paceMs?: number
  /** While something is missing or work is stuck: how often to ask peers again. */
  readonly syncIntervalMs?: number
  /** Blocks waiting for missing ancestors. */
  readonly maxSuspended?: number
  /**
   * At start a relay asks its peers for the latest block of its own they
   * hold (its store may have lost some: a new data dir, a lost disk, a power
   * loss before the disk sync) and proposes nothing until 2f of them
   * answered or this many ms passed, then only above the highest round they
   * named (Sui's fetch of its own last block after an amnesia start; the
   * timeout puts liveness first). 0 or absent: no asking (tests that wire
   * cores directly).
   */
  readonly ownLastTimeoutMs?: number
}

/** One committed leader and the causal history it orders. */
export interface Commit {
  /** The leader's round: strictly increasing from one commit to the next. */
  readonly anchorRound: number
  readonly leader: number
  /** Blocks newly ordered by this leader, in order. */
  readonly blocks: readonly Ref[]
  /** Envelope frames in commit order, each id once (its first place). */
  readonly payload: readonly Uint8Array[]
  /** Envelope ids matching `payload`. */
  readonly payloadIds: readonly string[]
}

/** Facts that must be durable before the messages that follow them are sent. */
export type PersistRecord =
  /** Our own block: the proof, after a crash, that this round is taken (we never sign another). */
  | { readonly kind: 'own-block'; readonly block: Block }
  /** A peer's block accepted into the DAG: written no later than our block that references it. */
  | { readonly kind: 'block'; readonly block: Block }
  | { readonly kind: 'commit'; readonly anchorRound: number; readonly ordered: readonly string[]; readonly payloadIds: readonly string[] }

export type Output =
  | { readonly type: 'persist'; readonly record: PersistRecord }
  | { readonly type: 'send'; readonly to: number; readonly message: Message }
  | { readonly type: 'broadcast'; readonly message: Message }
  | { readonly type: 'timer'; readonly name: TimerName; readonly round: number; readonly afterMs: number }
  | { readonly type: 'commit'; readonly commit: Commit }
  /** A peer's block entered the DAG: its envelopes can go to subscribers (prospective state needs no order). */
  | { readonly type: 'accepted'; readonly block: Block }
  /**
   * A block fell below the GC round without being ordered (its author
   * equivocated, or it was cut off for gcDepth rounds): it never will be.
   * Its envelopes not ordered elsewhere are listed; whoever applied them
   * prospectively reverses them (their authors resubmit).
   */
  | { readonly type: 'expired'; readonly block: Ref; readonly payloadIds: readonly string[] }
  /** Blocks older than memory holds were asked for: the shell answers from its store. */
  | { readonly type: 'archive-request'; readonly to: number; readonly query: ArchiveQuery }
  /**
   * f+1 peers (so at least one correct one) pruned the rounds this relay
   * needs next: fetching blocks cannot catch it up. Output once each time it
   * becomes so; `historyPrunedPast` says whether it still is.
   */
  | { readonly type: 'history-pruned'; readonly keptFrom: number; readonly needed: number }
  | { readonly type: 'rejected'; readonly from: number; readonly reason: string; readonly detail: string }

export type TimerName = 'leader' | 'sync' | 'pace' | 'own-last'

/** Blocks a peer asked for that memory no longer holds: by round range, or by digest. */
export type ArchiveQuery = { readonly fromRound: number; readonly toRound: number } | { readonly digests: readonly string[] }

/** What a restarted relay reads back from its store. */
export interface RecoveredState {
  readonly ownBlocks: readonly Block[]
  /** Peers' blocks above the horizon. */
  readonly blocks: readonly Block[]
  readonly commits: ReadonlyArray<{ readonly anchorRound: number; readonly ordered: readonly string[]; readonly payloadIds: readonly string[] }>
}

/** Blocks per catch-up answer: well under the mesh's frame limit even with full blocks. */
export const SYNC_BATCH = 200
/** Bytes of blocks per catch-up answer: several full blocks, well under the 64 MiB frame limit. */
export const SYNC_BYTES = 16 * 1024 * 1024
/** Our block's envelopes at most for one of them to be sent to the round's leader too (see askLeaderToCarry): at light load only. */
const LEADER_COPY_MAX_ENVELOPES = 4
/**
 * What a stuck relay hands its peers in a wake message: one unordered envelope
 * proves the work, a few more are a bonus. Capped in bytes too: a wake goes to
 * every peer, and 64 envelopes of 800 KB each were 50 MB per peer per tick.
 */
const WAKE_ENVELOPES = 64
const WAKE_BYTES = 256 * 1024
/**
 * Sync ticks without progress after which a stuck relay re-sends its block, a
 * wake and a sync request: 1, 2, 4, then every 8 (0.5, 1, 2, 4, 8, 12 s... at
 * 500 ms). Each of those may be several MiB per peer: a relay that is only
 * slow (big blocks, a busy core) must not bury its peers, and itself, in copies.
 */
const stuckActs = (ticks: number): boolean => (ticks & (ticks - 1)) === 0 || ticks % 8 === 0

/** Who a core is among whom, and its settings: fixed for its life. */
interface CoreContext {
  readonly committee: Committee
  readonly n: number
  readonly crypto: SyncCrypto
  readonly secretKey: Uint8Array
  readonly inspect: InspectPayload
  readonly rule: CommitRule
  readonly maxRoundsAhead: number
  readonly gcDepth: number
  readonly leaderTimeoutMs: number
  readonly paceMs: number
  readonly syncIntervalMs: number
  readonly ownLastTimeoutMs: number
}

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
}

/**
 * Recovery of our own latest block after a restart: we ask peers for their
 * word on it (ConsensusConfig.ownLastTimeoutMs), again whenever a connection
 * to one that has not answered opens, until 2f answered.
 */
interface OwnLastState {
  asking: boolean
  /** Each peer that answered, with its GC round (see takeOwnLast). */
  readonly gcRounds: Map<number, number>
  /** No proposal until 2f peers answered or the own-last timer fired. */
  holding: boolean
}

/** Catching up with peers: range pulls, peers that pruned, and the sync ticks that watch progress. */
interface CatchUpState {
  /**
   * The peer we are pulling missed rounds from (a `sync` whose answer has
   * not come): blocks far ahead start one pull, not one each. Cleared by
   * its last answer and at each sync tick (a lost request is asked again).
   */
  pulling: number | null
  /** Peers that answered a sync with 'pruned': the round each keeps blocks from. */
  readonly prunedPeers: Map<number, number>
  historyPrunedReported: boolean
  syncTimerArmed: boolean
  syncPeer: number
  /** (clock, last proposed, last decided) at the previous sync tick: unchanged with work pending means stuck. */
  progressMark: string
  /** Sync ticks in a row without progress. */
  stuckTicks: number
  /** Sync ticks in a row without progress and without work (see armSync). */
  quietTicks: number
}

/**
 * One relay's consensus: an uncertified DAG with Mysticeti's commit rule.
 * Each relay signs one block per round referencing blocks of earlier
 * rounds (2f+1 of the previous one); a round's leader commits once 2f+1
 * blocks two rounds later each reference 2f+1 blocks that reference it.
 * No votes, no certificates: one signature per block. Relays propose only
 * while there is work (payload to carry or to order), so an idle cluster
 * makes no rounds. The rules are in ./README.md.
 *
 * Sans-I/O: every method takes an event and returns outputs in the order
 * they must happen. A 'persist' output must be durable before any output
 * after it is acted on: that is how a relay never signs two blocks for one
 * round, even across a crash.
 */
export class ConsensusCore {
  readonly me: number
  /** Who we are among whom, and the settings: fixed for the core's life. */
  private readonly ctx: CoreContext

  private readonly dag: Dag
  private readonly sync: Synchronizer
  private readonly payload: PayloadQueue

  /** Our blocks by round; the latest is kept even below the GC round (the next one references it). */
  private readonly ownBlocks = new Map<number, Block>()
  /** The proposer's state: when and above what round we make our next block (see ProposerState). */
  private readonly proposer: ProposerState = { lastProposed: 0, paced: true, paceRound: 0, proposeAbove: 0, lastIncluded: new Map(), forcedRound: 0, wakeRound: 0, leaderTimerRound: 0 }
  /** Recovery of our own latest block after a restart (see OwnLastState). */
  private readonly ownLast: OwnLastState = { asking: false, gcRounds: new Map(), holding: false }

  /** Leader slots up to this round are decided (committed or skipped). */
  private lastDecided = 0
  private lastCommitRound = 0
  /** Blocks, slots and envelope ids already ordered (at most one block per slot ever is), within the window. */
  private readonly ordered = new OrderedRecord()
  /**
   * Accepted blocks not yet ordered, with their envelopes not yet ordered:
   * while one of those envelopes is still unordered, the cluster has work.
   */
  private readonly pendingWork = new Map<string, { readonly block: DagBlock; readonly ids: readonly PayloadInfo[] }>()

  /** What `inspect` said of each accepted block's envelopes, in payload order: asked once per block. */
  private readonly infosOf = new Map<string, readonly PayloadInfo[]>()
  /** Digests of blocks refused (bounded): never checked or fetched again; what builds on them waits for the GC round (see unmet). */
  private readonly refused = new Set<string>()
  /** Catching up with peers: range pulls, pruned peers, the sync ticks (see CatchUpState). */
  private readonly catchUp: CatchUpState = { pulling: null, prunedPeers: new Map(), historyPrunedReported: false, syncTimerArmed: false, syncPeer: 0, progressMark: '', stuckTicks: 0, quietTicks: 0 }
  /** checkInvariants, with what it remembers from one call to the next. */
  private readonly invariants = new InvariantChecker()
  /** Calls of the methods that change the core's state (start, submit, onSubmitted, onMessage, onTimer), and their count at the last full check. */
  private changes = 0
  private fullCheckAt = -1

  constructor(config: ConsensusConfig, recovered?: RecoveredState) {
    const problem = validateCommittee(config.committee)
    if (problem) throw new SteadError('malformed', problem)
    if (!Number.isSafeInteger(config.me) || config.me < 0 || config.me >= config.committee.keys.length) throw new SteadError('malformed', `relay ${config.me} is not in the committee`)
    this.me = config.me
    const n = committeeSize(config.committee)
    const q = quorum(config.committee)
    this.ctx = {
      committee: config.committee,
      n,
      crypto: config.crypto,
      secretKey: config.secretKey,
      inspect: config.inspect,
      rule: { quorum: q, directQuorum: config.committee.directQuorum ?? q, leaderOf: roundRobin(n) },
      maxRoundsAhead: config.maxRoundsAhead ?? 50,
      gcDepth: config.gcDepth ?? 50,
      leaderTimeoutMs: config.leaderTimeoutMs ?? 250,
      paceMs: config.paceMs ?? 50,
      syncIntervalMs: config.syncIntervalMs ?? 500,
      ownLastTimeoutMs: config.ownLastTimeoutMs ?? 0,
    }
    this.dag = new Dag(q, n)
    this.sync = new Synchronizer(n, config.maxSuspended ?? 10_000)
    this.payload = new PayloadQueue({
      maxBlockEnvelopes: config.maxBlockEnvelopes ?? 1000,
      maxBlockBytes: config.maxBlockBytes ?? 4 * 1024 * 1024,
      maxQueued: config.maxQueuedEnvelopes ?? 100_000,
      // A tenth: ten authors' floods together fill it (a client holds at most as many pending, maxPendingPerClient).
      maxQueuedPerAuthor: Math.max(1, Math.floor((config.maxQueuedEnvelopes ?? 100_000) / 10)),
    })
    if (recovered) this.recover(recovered)
    if (this.ctx.ownLastTimeoutMs > 0 && this.ctx.n > 1) this.ownLast.asking = this.ownLast.holding = true
  }

  // ---- introspection (for the shell, metrics and the simulator) ----

  /** The round of our latest block (0 before the first). */
  get currentRound(): number {
    return this.proposer.lastProposed
  }

  /** The highest round this relay knows 2f+1 blocks of, plus one. */
  get clockRound(): number {
    return this.dag.clockRound
  }

  /** The round of the last committed leader. */
  get committedRound(): number {
    return this.lastCommitRound
  }

  /** Bytes of the envelope frames waiting for a block: the relay's memory budget counts them. */
  get queuedBytes(): number {
    return this.payload.queuedBytes
  }

  get queuedEnvelopes(): number {
    return this.payload.length
  }

  /** Whether the relay has work: envelopes to carry, or accepted ones to order. */
  get busy(): boolean {
    return this.hasWork()
  }

  /** What is held in memory: bounded by gcDepth plus what is ahead. */
  get memory(): { rounds: number; blocks: number; suspended: number; slots: number; orderedPayload: number } {
    return { rounds: this.dag.roundCount, blocks: this.dag.size, suspended: this.sync.size, slots: this.payload.slotCount, orderedPayload: this.ordered.payloadCount }
  }

  /** A compact picture of the last few rounds, for logs, status pages and failing simulations. */
  describe(): string {
    const rounds: string[] = []
    for (let r = Math.max(1, this.dag.highestRound - 3); r <= this.dag.highestRound; r++) {
      const authors = this.dag
        .atRound(r)
        .map((b) => `${b.author}${b.block.header.payload.length ? '*' : ''}`)
        .join('')
      rounds.push(`r${r}[${authors || '-'}]`)
    }
    return `relay ${this.me} proposed ${this.proposer.lastProposed} clock ${this.dag.clockRound} decided ${this.lastDecided} committed ${this.lastCommitRound} gc ${this.dag.gcRound} work ${this.pendingWork.size} queue ${this.payload.length} parked ${this.sync.size} ${rounds.join(' ')}`
  }

  /**
   * Checks the core's invariants between events (invariants.ts says which and
   * why): 'cheap' is O(1) or O(committee), for after every drain in
   * production; 'full' also walks the DAG (a block's ancestors only once,
   * when it is new), the ordered window, the queue and the parked blocks (the
   * simulator runs it after every event of every relay), unless no method
   * that changes the core's state ran since the last full check: the walk
   * would see what it saw then. Throws
   * ConsensusInvariantError, on which the relay stops. Each call remembers
   * what only grows (commit, decided, own and clock rounds) for the next one.
   */
  checkInvariants(level: 'cheap' | 'full'): void {
    const full = level === 'full' && this.fullCheckAt !== this.changes
    this.invariants.check(
      {
        me: this.me,
        gcDepth: this.ctx.gcDepth,
        dag: this.dag,
        ordered: this.ordered,
        payload: this.payload,
        sync: this.sync,
        committedRound: this.lastCommitRound,
        decidedRound: this.lastDecided,
        ownRound: this.proposer.lastProposed,
        neverProposesAtOrBelow: this.neverProposesAtOrBelow,
        ownBlocks: this.ownBlocks,
        infosOf: this.infosOf,
        pendingWork: this.pendingWork,
      },
      full ? 'full' : 'cheap',
    )
    if (full) this.fullCheckAt = this.changes
  }

  /** The blocks this relay holds for a slot (several when the author equivocated). */
  blocksAt(round: number, author: number): readonly Block[] {
    return this.dag.atSlot(round, author).map((b) => b.block)
  }

  // ---- events ----

  /** Starts (or, after recovery, resumes): re-sends our latest block, which peers may have missed. */
  start(): Output[] {
    this.changes++
    const out: Output[] = []
    const own = this.ownBlocks.get(this.proposer.lastProposed)
    if (own) out.push({ type: 'broadcast', message: { kind: 'block', block: own } })
    if (this.ownLast.asking) out.push({ type: 'broadcast', message: { kind: 'own-last-ask' } })
    if (this.ownLast.holding) out.push({ type: 'timer', name: 'own-last', round: 0, afterMs: this.ctx.ownLastTimeoutMs })
    this.commitAndPropose(out)
    this.armSync(out)
    return out
  }

  /**
   * The connection to `peer` opened (again, after a partition or a restart
   * on either side): what we sent it meanwhile is lost, and an idle cluster
   * sends nothing more. Our latest block goes to it, so a peer that fell
   * behind (or restarted from its store) learns how far we are and pulls
   * the rest, even when nobody has work; it would otherwise miss the last
   * commits until new work came.
   */
  onPeerConnected(peer: number): Output[] {
    if (peer === this.me) return []
    const out: Output[] = []
    const own = this.ownBlocks.get(this.proposer.lastProposed)
    if (own) out.push({ type: 'send', to: peer, message: { kind: 'block', block: own } })
    // Our ask may have gone before this connection was up (also after the timer let us propose).
    if (this.ownLast.asking && !this.ownLast.gcRounds.has(peer)) out.push({ type: 'send', to: peer, message: { kind: 'own-last-ask' } })
    return out
  }

  /** The highest round this relay will not propose at: its last proposal, or what its peers said of its blocks and their GC rounds (see takeOwnLast). */
  get neverProposesAtOrBelow(): number {
    return Math.max(this.proposer.lastProposed, this.proposer.proposeAbove)
  }

  /** Whether this relay holds its proposals until its peers' word on its own latest block (see ConsensusConfig.ownLastTimeoutMs). */
  get awaitingOwnLast(): boolean {
    return this.ownLast.holding
  }

  /**
   * Queues a client envelope the shell has verified. Returns 'duplicate' for
   * one already queued or ordered, 'conflict' when another envelope holds its
   * author+seq, and throws SteadError('rate-limited') when the queue is full.
   */
  submit(frame: Uint8Array, info: PayloadInfo): 'queued' | 'duplicate' | 'conflict' {
    this.changes++
    if (this.ordered.hasPayload(info.idHex)) return 'duplicate'
    return this.payload.add(frame, info, this.dag.clockRound)
  }

  /** After envelopes were queued by `submit`: propose them (an event of its own, so the relay's drain runs it like any other). */
  onSubmitted(): Output[] {
    this.changes++
    const out: Output[] = []
    this.commitAndPropose(out, true)
    this.armSync(out)
    return out
  }

  onMessage(from: number, message: Message): Output[] {
    this.changes++
    const out: Output[] = []
    switch (message.kind) {
      case 'block':
        // Pushed blocks come from their author; fetched ones (below) from anyone.
        if (message.block.header.author !== from) this.reject(from, 'unauthorized', `relay ${from} pushed a block of ${message.block.header.author}`, out)
        else this.receive(from, message.block, out)
        break
      case 'blocks': {
        const sorted = [...message.blocks].sort((a, b) => a.header.round - b.header.round)
        // Commit and propose once the whole answer is in: a relay catching up through many
        // rounds would otherwise sign a block for each round it passes, which nobody needs.
        for (const block of sorted) this.receive(from, block, out, false)
        this.commitAndPropose(out)
        // A full answer means more is waiting: keep pulling while behind.
        const last = sorted[sorted.length - 1]?.header.round ?? 0
        const size = sorted.reduce((n, b) => n + b.signed.bytes.length, 0)
        if (sorted.length >= SYNC_BATCH || size >= SYNC_BYTES) this.pull(from, last, out)
        else if (this.catchUp.pulling === from) this.catchUp.pulling = null
        break
      }
      case 'fetch': {
        const blocks: Block[] = []
        const archived: string[] = []
        for (const d of message.digests) {
          const hex = toHex(d)
          const held = this.dag.get(hex)?.block ?? this.ownBlockByDigest(hex)
          if (held) blocks.push(held)
          else archived.push(hex)
        }
        // In answers of at most SYNC_BYTES each: full blocks are MiBs, a mesh frame is 64 MiB at most.
        for (const part of byBytes(blocks)) out.push({ type: 'send', to: from, message: { kind: 'blocks', blocks: part } })
        if (archived.length) out.push({ type: 'archive-request', to: from, query: { digests: archived } })
        break
      }
      case 'sync':
        this.serveSync(from, message.fromRound, out)
        break
      case 'own-last-ask':
        // Answered every time (a restarted peer asks again, perhaps before we see its new
        // connection); the shell's per-peer serving budget bounds what a peer asking over and over gets.
        if (from !== this.me) out.push({ type: 'send', to: from, message: { kind: 'own-last', block: this.latestBlockOf(from), gcRound: this.dag.gcRound } })
        break
      case 'own-last':
        this.takeOwnLast(from, message.block, message.gcRound, out)
        break
      case 'wake':
        // A peer has work but waits for a quorum at a round it already proposed: carry its
        // envelopes too, which gives us a reason to propose (duplicates are ordered once).
        this.takeWake(from, message.payload, out)
        this.commitAndPropose(out)
        break
      case 'unknown':
        // The author of a parked block lacks one of its ancestors, at a round it keeps: that block
        // cannot be complete now, and is dropped unless another relay vouches for it (see
        // Synchronizer.disowned). Otherwise a Byzantine relay naming ancestors that do not exist
        // keeps every correct relay fetching them for good, an idle cluster too.
        for (const hex of new Set(message.digests.map((d) => toHex(d)))) {
          for (const block of this.sync.disowned(hex, from, message.keptFrom)) {
            this.reject(from, 'unknown-ancestors', `relay ${from}'s block of round ${block.header.round} waits for ancestor ${hex.slice(0, 8)}, which relay ${from} says it does not hold: dropped`, out)
          }
        }
        break
      case 'pruned': {
        this.catchUp.prunedPeers.set(from, message.keptFrom)
        if (this.catchUp.pulling === from) this.catchUp.pulling = null
        const keptFrom = this.historyPrunedPast
        if (keptFrom !== null && !this.catchUp.historyPrunedReported) out.push({ type: 'history-pruned', keptFrom, needed: this.neededRound() })
        this.catchUp.historyPrunedReported = keptFrom !== null
        break
      }
    }
    this.armSync(out)
    return out
  }

  /**
   * A wake counts only with an envelope not ordered yet (so a peer cannot
   * keep the cluster busy with nothing), and buys one proposal at our clock
   * round: enough for the waiting peer's quorum, after which its block with
   * the envelopes gives everyone work.
   */
  private takeWake(from: number, frames: readonly Uint8Array[], out: Output[]): void {
    for (const frame of frames) {
      const info = this.ctx.inspect(frame)
      if (info instanceof SteadError) return this.reject(from, info.reason, `wake carries an invalid envelope: ${info.message}`, out)
      if (this.ordered.hasPayload(info.idHex)) continue
      this.proposer.wakeRound = Math.max(this.proposer.wakeRound, this.dag.clockRound)
      try {
        this.payload.add(frame, info, this.dag.clockRound)
      } catch (err) {
        if (!(err instanceof SteadError)) throw err
        return
      }
    }
  }

  /**
   * The latest block of `author` we hold, in the DAG (of twins, the highest
   * digest) or parked for its ancestors: what a peer that lost its store
   * asks us for.
   */
  private latestBlockOf(author: number): Block | null {
    const inDag = this.dag.latestPerAuthor(this.dag.highestRound + 1).get(author)?.block ?? null
    const parked = this.sync.latestOf(author)
    return parked && parked.header.round > (inDag?.header.round ?? 0) ? parked : inDag
  }

  /**
   * A peer's word on our latest block. Its round is taken at once, whether
   * or not the block can enter the DAG yet (it may be far ahead of our
   * clock): we never propose at or below it, also when the answer comes
   * after we stopped waiting. The block itself goes the way of any other.
   *
   * Our blocks the peers no longer hold in memory are at or below their GC
   * rounds, where they ignore blocks anyway: we do not propose there either
   * (after a long absence we would otherwise sign old rounds again while
   * catching up). A peer's GC round is its word alone, so we go by the
   * (f+1)-th highest of those we heard: at least one correct peer's is as
   * high, and the cluster gets there.
   */
  private takeOwnLast(from: number, block: Block | null, gcRound: number, out: Output[]): void {
    if (block && block.header.author !== this.me) return this.reject(from, 'malformed', `relay ${from} answered own-last with a block of relay ${block.header.author}`, out)
    if (block && block.header.round > this.proposer.proposeAbove) this.proposer.proposeAbove = block.header.round
    this.ownLast.gcRounds.set(from, gcRound)
    const vouched = [...this.ownLast.gcRounds.values()].sort((a, b) => b - a)[this.ctx.committee.f]
    if (vouched !== undefined && vouched > this.proposer.proposeAbove) this.proposer.proposeAbove = vouched
    if (block) this.receive(from, block, out, false)
    // Enough once 2f peers answered (with us, a quorum): what the honest among them hold is what a
    // quorum of the cluster built on. Best effort, as in Sui: a block of ours that reached only the
    // peers that did not answer (or lied) can still be missed.
    if (this.ownLast.asking && this.ownLast.gcRounds.size >= this.ctx.rule.quorum - 1) this.ownLast.asking = this.ownLast.holding = false
    this.commitAndPropose(out)
  }

  onTimer(name: TimerName, round: number): Output[] {
    this.changes++
    const out: Output[] = []
    if (name === 'own-last') {
      // Liveness first (as Sui): the peers that did not answer may be down for good. We go on
      // asking those whose connection opens later; a late answer still raises proposeAbove.
      this.ownLast.holding = false
      this.commitAndPropose(out)
    } else if (name === 'leader') {
      if (round === this.proposer.leaderTimerRound) this.proposer.leaderTimerRound = 0
      if (round === this.dag.clockRound) {
        this.proposer.forcedRound = round
        this.commitAndPropose(out)
      }
    } else if (name === 'pace') {
      // Only the timer of our latest proposal counts: an urgent proposal since started a newer one.
      if (round === this.proposer.paceRound) {
        this.proposer.paced = true
        this.commitAndPropose(out, true)
      }
    } else {
      this.catchUp.syncTimerArmed = false
      this.onSyncTick(out)
    }
    this.armSync(out)
    return out
  }

  // ---- receiving blocks ----

  private receive(from: number, block: Block, out: Output[], settle = true): void {
    const { round } = block.header
    if (this.dag.has(block.digestHex) || this.sync.isParked(block.digestHex) || this.refused.has(block.digestHex)) return
    // At or below the GC round a block can never be ordered: nothing to do with it.
    if (round <= this.dag.gcRound) return
    if (round > this.highestAccepted) {
      // Either a flood or we fell far behind (a restart, a partition): pull the rounds we
      // missed, then blocks this far ahead fit again. Dropped unread (not even verified):
      // being behind is not the sender's fault, and the pull brings the block again.
      if (this.catchUp.pulling === null) this.pull(this.keeperOf(from, this.neededRound()), this.neededRound(), out)
      return
    }
    // Skipped when it came (see needsVerification), but taken now: the clock moved meanwhile.
    if (!block.verified && !this.ctx.crypto.verify(this.ctx.committee.keys[block.header.author] as Uint8Array, block.signed.bytes, block.signed.sig)) {
      return this.reject(from, 'bad-signature', `block of relay ${block.header.author} round ${round} has a bad signature`, out)
    }
    const missing = this.unmet(block)
    if (missing.length) {
      this.park(from, block, missing, out)
      // Far ahead: we missed whole rounds, and asking for them by range is quicker than by ancestors.
      if (round > this.dag.clockRound + 2 && this.catchUp.pulling === null) this.pull(this.keeperOf(from, this.dag.clockRound), this.dag.clockRound, out)
      return
    }
    this.acceptChain(from, block, out)
    if (settle) this.commitAndPropose(out)
  }

  /**
   * The references of `block` not met yet. A reference (round, author, digest)
   * is met by the block of that digest in the DAG at that slot, or by its
   * round being at or below the GC round (genesis: round 0). Nothing else
   * meets one: a refused block never enters the DAG, and no block but the one
   * held has its digest. So a refused ancestor is like one never received,
   * and a block's fate does not depend on whether this relay saw a bad
   * ancestor before its GC round passed it (a relay that did not never checks
   * it). Those that only the GC round can meet (refused, a held block under
   * another slot, genesis above round 0) are not fetched.
   */
  private unmet(block: Block): Array<{ ref: Ref; fetch: boolean }> {
    const unmet: Array<{ ref: Ref; fetch: boolean }> = []
    for (const a of block.header.ancestors) {
      const ref = refOf(a)
      if (this.dag.settled(ref)) continue
      const held = this.dag.get(ref.digestHex)
      if (held && held.round === ref.round && held.author === ref.author) continue
      unmet.push({ ref, fetch: !held && ref.digestHex !== GENESIS_HEX && !this.refused.has(ref.digestHex) })
    }
    return unmet
  }

  /** Parks a block until its unmet references are met, fetching what can be fetched. */
  private park(from: number, block: Block, missing: ReadonlyArray<{ ref: Ref; fetch: boolean }>, out: Output[]): void {
    const fetch = this.sync.park(from, block, missing)
    if (fetch === 'full') return this.reject(from, 'too-large', `relay ${from} has too many blocks waiting for ancestors`, out)
    if (fetch.length) this.fetch(from, fetch, out)
  }

  /** Accepts a block whose references are all met, then whatever waited only for it, in causal order. */
  private acceptChain(from: number, first: Block, out: Output[]): void {
    const ready = [{ from, block: first }]
    while (ready.length) {
      const { from: sender, block } = ready.shift() as { from: number; block: Block }
      if (this.dag.has(block.digestHex) || block.header.round <= this.dag.gcRound) continue
      // Released because a digest it waited for arrived: that block may sit at another slot than named.
      const missing = this.unmet(block)
      if (missing.length) {
        this.park(sender, block, missing, out)
        continue
      }
      const checked = this.checkPayload(block)
      if ('reason' in checked) {
        this.refuse(sender, block, checked, out)
        continue
      }
      this.accept(block, checked.infos, out)
      ready.push(...this.sync.arrived(block.digestHex))
    }
  }

  /**
   * Refuses a block for good: it never enters the DAG, and is never fetched
   * or checked again. The blocks built on it stay parked until the GC round
   * passes it, then go the way they go on a relay that never saw it: a
   * refusal must not depend on when the bad block came (a relay whose GC
   * round had passed it drops it unchecked and takes its descendants;
   * refusing them here split the correct relays for good).
   */
  private refuse(from: number, block: Block, problem: { reason: string; detail: string }, out: Output[]): void {
    this.reject(from, problem.reason, problem.detail, out)
    if (this.refused.size >= 10_000) this.refused.delete(this.refused.values().next().value as string)
    this.refused.add(block.digestHex)
    this.sync.unfetchable(block.digestHex)
  }

  /**
   * The checks of a block's payload, once its references are met: every
   * envelope valid, no two for one (author, seq) slot. A pure function of
   * the block's bytes, so every correct relay refuses the same blocks.
   * Returns what `inspect` said of each envelope, kept with the block.
   */
  private checkPayload(block: Block): { reason: string; detail: string } | { infos: PayloadInfo[] } {
    const seen = new Set<string>()
    const infos: PayloadInfo[] = []
    for (const frame of block.header.payload) {
      const info = this.ctx.inspect(frame)
      if (info instanceof SteadError) return { reason: info.reason, detail: `block of relay ${block.header.author} round ${block.header.round} carries an invalid envelope: ${info.message}` }
      // No correct relay puts two envelopes for one slot in a block: its own queue refuses the second.
      if (seen.has(info.slot)) return { reason: 'conflict', detail: `block carries two envelopes for ${info.slot}` }
      seen.add(info.slot)
      infos.push(info)
      // A conflict with an envelope seen elsewhere is not refused: a Byzantine client can hand
      // twins to two correct relays. The audit keeps at most one twin (G4).
    }
    return { infos }
  }

  /** Adds a checked block to the DAG; `infos` match its payload, envelope for envelope. */
  private accept(block: Block, infos: readonly PayloadInfo[], out: Output[]): DagBlock {
    assert(block.header.round > this.dag.gcRound, `block of round ${block.header.round} accepted at or below the GC round ${this.dag.gcRound}`)
    assert(infos.length === block.header.payload.length, `block ${block.digestHex.slice(0, 8)} accepted with ${infos.length} envelope checks for ${block.header.payload.length} envelopes`)
    const node = this.dag.accept(block)
    // Ordered before it reached this DAG (a restart, or a checkpoint, recovered the commit that did).
    this.ordered.arrived(node)
    this.infosOf.set(block.digestHex, infos)
    this.payload.claim(infos, block.header.round)
    if (block.header.author === this.me) {
      const { round } = block.header
      if (!this.ownBlocks.has(round)) {
        // Our own block from before we lost our store, handed back by a peer: that round is
        // taken, and we must never sign another block for it (or below).
        this.ownBlocks.set(round, block)
        if (round > this.proposer.lastProposed) this.proposer.lastProposed = round
        out.push({ type: 'persist', record: { kind: 'own-block', block } })
      }
      this.noteWork(node, infos)
      return node
    }
    out.push({ type: 'persist', record: { kind: 'block', block } })
    // A twin of a block already ordered never will be: it is kept (it counts in the commit rule) but carries nothing.
    if (this.ordered.hasSlot(node)) return node
    this.noteWork(node, infos)
    out.push({ type: 'accepted', block })
    return node
  }

  /** A block that will never be ordered: its envelopes not ordered elsewhere are reported, for whoever applied them. */
  private expire(block: DagBlock, out: Output[]): void {
    this.pendingWork.delete(block.digestHex)
    const payloadIds = (this.infosOf.get(block.digestHex) ?? []).map((i) => i.idHex).filter((id) => !this.ordered.hasPayload(id))
    if (payloadIds.length) out.push({ type: 'expired', block: { round: block.round, author: block.author, digestHex: block.digestHex }, payloadIds })
  }

  private noteWork(node: DagBlock, infos: readonly PayloadInfo[]): void {
    const fresh = infos.filter((i) => !this.ordered.hasPayload(i.idHex))
    if (fresh.length && !this.ordered.hasBlock(node.digestHex)) this.pendingWork.set(node.digestHex, { block: node, ids: fresh })
  }


  // ---- committing and proposing ----

  /** Decides what can be decided, then proposes if there is a reason to; again while either makes progress. */
  /**
   * Commits what can be committed and proposes while there is a reason.
   * `carry`: the proposal was started by a client's envelope or by our pace
   * timer, not by a quorum of peers' blocks, so the round's leader may not
   * have proposed yet and a copy of our envelopes can still ride in its
   * block (see propose). After a quorum, the leader proposes when we do.
   */
  private commitAndPropose(out: Output[], carry = false): void {
    for (;;) {
      this.tryCommit(out)
      if (!this.tryPropose(out, carry)) return
    }
  }

  private tryCommit(out: Output[]): void {
    for (;;) {
      const decided = decideLeaders(this.dag, this.ctx.rule, this.lastDecided)
      if (decided.length === 0) return
      for (const status of decided) {
        assert(status.round > this.lastDecided, `leader of round ${status.round} decided after round ${this.lastDecided}`)
        this.lastDecided = status.round
        if (status.kind === 'commit') this.commitLeader(status.block, out)
      }
    }
  }

  /** Orders the leader's causal history that no earlier leader ordered (Sui's linearizer, with one block per slot). */
  private commitLeader(leader: DagBlock, out: Output[]): void {
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
    this.payload.dropOrdered(payloadIds)
    // The twins of what was just ordered are dead.
    for (const block of history) for (const twin of this.dag.atSlot(block.round, block.author)) if (!this.ordered.hasBlock(twin.digestHex)) this.expire(twin, out)
    assert(leader.round > this.lastCommitRound, `commit of round ${leader.round} after round ${this.lastCommitRound}`)
    this.lastCommitRound = leader.round
    const ordered = history.map((b) => b.digestHex)
    out.push({ type: 'persist', record: { kind: 'commit', anchorRound: leader.round, ordered, payloadIds } })
    out.push({
      type: 'commit',
      commit: { anchorRound: leader.round, leader: leader.author, blocks: history.map(({ round, author, digestHex }) => ({ round, author, digestHex })), payload, payloadIds },
    })
    this.collectGarbage(out)
  }

  /**
   * Whether envelopes wait for an order (with `urgentOnly`, urgent ones: a
   * safe update waits for a round): in our queue, or in an accepted block
   * whose envelopes are not all ordered yet and that can still be ordered
   * (no other block of its slot was: a lost twin of an equivocator never
   * will). Forgets the blocks that hold none any more.
   */
  private hasWork(urgentOnly = false): boolean {
    if (urgentOnly ? this.payload.hasUrgent : this.payload.length > 0) return true
    for (const [digest, work] of this.pendingWork) {
      if (this.ordered.hasSlot(work.block) || work.ids.every((i) => this.ordered.hasPayload(i.idHex))) this.pendingWork.delete(digest)
      else if (!urgentOnly || work.ids.some((i) => i.urgent && !this.ordered.hasPayload(i.idHex))) return true
    }
    return false
  }

  /** Envelopes to hand idle peers when we are stuck: ours in the queue, then those of unordered blocks. */
  private wakePayload(): Uint8Array[] {
    const frames: Uint8Array[] = []
    let bytes = 0
    // At least one envelope, however big; then as many as fit in WAKE_BYTES.
    const take = (frame: Uint8Array): boolean => {
      if (frames.length >= WAKE_ENVELOPES || (frames.length > 0 && bytes + frame.length > WAKE_BYTES)) return false
      frames.push(frame)
      bytes += frame.length
      return true
    }
    for (const frame of this.payload.peek(WAKE_ENVELOPES)) if (!take(frame)) return frames
    for (const work of this.pendingWork.values()) {
      const infos = this.infosOf.get(work.block.digestHex) ?? []
      const payload = work.block.block.header.payload
      for (let i = 0; i < payload.length; i++) {
        if (this.ordered.hasPayload((infos[i] as PayloadInfo).idHex)) continue
        if (!take(payload[i] as Uint8Array)) return frames
      }
    }
    return frames
  }

  /**
   * Proposes the clock round when there is work, the round is new, and the
   * previous round's leader is in (so our block votes for it), or its
   * timeout fired, or we were idle last round (waiting would only delay).
   */
  private tryPropose(out: Output[], carry: boolean): boolean {
    const round = this.dag.clockRound
    if (this.ownLast.holding || round <= this.proposer.proposeAbove) return false
    if (round <= this.proposer.lastProposed || !(this.hasWork() || round <= this.proposer.wakeRound)) return false
    // The clock may be at a round whose predecessors we do not hold: a block of round r is accepted
    // once its ancestors are in or at or below the GC round, and it moves the clock to r. Right after
    // a checkpoint install (GC round r - 1) that left no round r - 1 blocks to reference.
    if (round > 1 && this.dag.authorsAt(round - 1) < this.ctx.rule.quorum) return false
    const previousLeader = this.ctx.rule.leaderOf(round - 1)
    const leaderIn = round === 1 || this.dag.atSlot(round - 1, previousLeader).length > 0
    if (!leaderIn && this.proposer.forcedRound !== round && this.proposer.lastProposed === round - 1) {
      if (this.proposer.leaderTimerRound !== round) {
        this.proposer.leaderTimerRound = round
        out.push({ type: 'timer', name: 'leader', round, afterMs: this.ctx.leaderTimeoutMs })
      }
      return false
    }
    if (!this.proposer.paced && this.proposer.forcedRound !== round && !this.hasWork(true)) return false
    this.propose(round, out, carry)
    return true
  }

  private propose(round: number, out: Output[], carry: boolean): void {
    assert(round > this.proposer.lastProposed && round > this.proposer.proposeAbove && !this.ownBlocks.has(round), `a second own block for round ${round}`)
    const taken = this.payload.take()
    const frames = taken.map((t) => t.frame)
    const block = signBlock(this.ctx.crypto, this.ctx.secretKey, { round, author: this.me, ancestors: this.chooseAncestors(round), payload: frames })
    // What every peer's door checks of it (openBlock): a block of ours that fails it would be refused everywhere.
    assert(block.header.ancestors.every((a) => a.round < round) && block.header.ancestors.filter((a) => a.round === round - 1).length >= this.ctx.rule.quorum, `own block of round ${round} lacks a quorum of round ${round - 1}`)
    this.proposer.lastProposed = round
    this.ownBlocks.set(round, block)
    for (const a of block.header.ancestors) this.proposer.lastIncluded.set(a.author, a.round)
    this.accept(block, taken.map((t) => t.info), out)
    // At light load the envelopes go to the round's leader first (see README, "The leader carries it too"):
    // our block commits only through the next round's leader, three rounds on; the leader's own block, if
    // it carries them too, two rounds on. Sent before our block, so the leader has them when our block
    // makes it propose; each envelope is ordered once.
    const leader = this.ctx.rule.leaderOf(round)
    if (carry && leader !== this.me && frames.length > 0 && frames.length <= LEADER_COPY_MAX_ENVELOPES) out.push({ type: 'send', to: leader, message: { kind: 'wake', payload: frames } })
    // Persisted before it leaves: after a crash, we resend this block and never sign another for this round.
    out.push({ type: 'persist', record: { kind: 'own-block', block } })
    out.push({ type: 'broadcast', message: { kind: 'block', block } })
    if (this.ctx.paceMs > 0) {
      this.proposer.paced = false
      this.proposer.paceRound = round
      out.push({ type: 'timer', name: 'pace', round, afterMs: this.ctx.paceMs })
    }
  }

  /** Our previous block first, then each other relay's latest block newer than the one we last referenced. */
  private chooseAncestors(round: number): BlockRef[] {
    const own = this.ownBlocks.get(this.proposer.lastProposed)
    const ancestors: BlockRef[] = [own ? { round: own.header.round, author: this.me, digest: own.digest } : { round: 0, author: this.me, digest: GENESIS_DIGEST }]
    if (round === 1) {
      for (let a = 0; a < this.ctx.n; a++) if (a !== this.me) ancestors.push({ round: 0, author: a, digest: GENESIS_DIGEST })
      return ancestors
    }
    const latest = this.dag.latestPerAuthor(round)
    for (let a = 0; a < this.ctx.n; a++) {
      if (a === this.me) continue
      const block = latest.get(a)
      if (block && block.round > (this.proposer.lastIncluded.get(a) ?? 0)) ancestors.push({ round: block.round, author: a, digest: block.block.digest })
    }
    assert(ancestors.filter((a) => a.round === round - 1).length >= this.ctx.rule.quorum, `proposing round ${round} without a quorum of round ${round - 1}`)
    return ancestors
  }

  // ---- catching up ----

  private fetch(peer: number, digests: readonly string[], out: Output[]): void {
    this.sync.asked(peer, digests)
    out.push({ type: 'send', to: peer, message: { kind: 'fetch', digests: digests.map(fromHex) } })
  }

  private armSync(out: Output[]): void {
    if (this.catchUp.syncTimerArmed) return
    // Idle and complete, with no pull waiting for an answer: no timer at all.
    if (!this.hasWork() && this.sync.size === 0 && this.catchUp.pulling === null) return
    this.catchUp.syncTimerArmed = true
    // Idle with only parked blocks (ancestors nobody sends: a Byzantine author that does not
    // answer, or a partition): ask less and less often, up to every 64 intervals.
    const onlyParked = !this.hasWork() && this.catchUp.pulling === null
    out.push({ type: 'timer', name: 'sync', round: 0, afterMs: onlyParked ? this.ctx.syncIntervalMs * 2 ** Math.min(6, this.catchUp.quietTicks) : this.ctx.syncIntervalMs })
  }

  /** The first round this relay still needs blocks of to go on deciding. */
  private neededRound(): number {
    return Math.max(this.dag.gcRound + 1, this.lastDecided)
  }

  /**
   * The round from which f+1 peers (so at least one correct relay) still keep
   * blocks, when that is past the round this relay needs next: it cannot catch
   * up by fetching blocks, only from a checkpoint (see checkpoint.ts). Null otherwise,
   * also once it moved on past that round.
   */
  get historyPrunedPast(): number | null {
    const needed = this.neededRound()
    const past = [...this.catchUp.prunedPeers.values()].filter((r) => r > needed).sort((a, b) => a - b)
    const f = this.ctx.n - this.ctx.rule.quorum
    return past.length > f ? (past[past.length - 1 - f] as number) : null
  }

  /**
   * `peer`, unless it said it keeps no blocks of `round` any more: then the
   * next peer that did not say so (asking it again would bring the same
   * 'pruned' answer, round trip after round trip, and never the f+1 that
   * tell this relay to fetch a checkpoint).
   */
  private keeperOf(peer: number, round: number): number {
    for (let i = 0; i < this.ctx.n; i++) {
      const p = (peer + i) % this.ctx.n
      if (p !== this.me && (this.catchUp.prunedPeers.get(p) ?? 0) <= round) return p
    }
    return peer
  }

  /** Asks `peer` for the blocks of rounds from `fromRound` on; its answers keep the pull going while they come full. */
  private pull(peer: number, fromRound: number, out: Output[]): void {
    this.catchUp.pulling = peer
    out.push({ type: 'send', to: peer, message: { kind: 'sync', fromRound } })
  }

  /**
   * Whether a block needs its signature checked before `onMessage`: not one
   * already held, parked or refused (same bytes, same digest), nor one
   * `receive` drops unread (at or below the horizon, far ahead of the clock).
   */
  needsVerification(digestHex: string, round: number): boolean {
    if (this.dag.has(digestHex) || this.sync.isParked(digestHex) || this.refused.has(digestHex)) return false
    return round > this.dag.gcRound && round <= this.highestAccepted
  }

  /**
   * Blocks of rounds above this are far ahead: dropped unread, and the
   * rounds before them pulled. Counted from the clock, or from the round
   * this relay needs next when that is higher (after starting over from a
   * checkpoint, the DAG is empty and the clock has not moved).
   */
  private get highestAccepted(): number {
    return Math.max(this.dag.clockRound, this.neededRound()) + this.ctx.maxRoundsAhead
  }

  private onSyncTick(out: Output[]): void {
    const unanswered = this.catchUp.pulling
    this.catchUp.pulling = null
    this.sync.tick()
    const mark = `${this.dag.clockRound}/${this.proposer.lastProposed}/${this.lastDecided}`
    this.catchUp.stuckTicks = mark === this.catchUp.progressMark ? this.catchUp.stuckTicks + 1 : 0
    this.catchUp.progressMark = mark
    this.catchUp.quietTicks = this.catchUp.stuckTicks > 0 && !this.hasWork() ? this.catchUp.quietTicks + 1 : 0
    // A pull whose answer never came (every answer ends or continues it, an empty one too): the next keeper.
    if (unanswered !== null) this.pull(this.keeperOf((unanswered + 1) % this.ctx.n, this.neededRound()), this.neededRound(), out)
    const stuck = this.catchUp.stuckTicks > 0 && stuckActs(this.catchUp.stuckTicks)
    const frontier = this.sync.frontier(1000)
    if (!stuck && frontier.length === 0) return
    this.catchUp.syncPeer = (this.catchUp.syncPeer + 1) % this.ctx.n
    if (this.catchUp.syncPeer === this.me) this.catchUp.syncPeer = (this.catchUp.syncPeer + 1) % this.ctx.n
    if (frontier.length) this.fetch(this.catchUp.syncPeer, frontier, out)
    if (!stuck) return
    // No progress for a whole interval: peers may hold rounds we missed, may have missed our
    // latest block (a partition drops it), or may be idle while we wait for them at our round.
    out.push({ type: 'send', to: this.catchUp.syncPeer, message: { kind: 'sync', fromRound: this.neededRound() } })
    const own = this.ownBlocks.get(this.proposer.lastProposed)
    if (own) out.push({ type: 'broadcast', message: { kind: 'block', block: own } })
    if (this.hasWork() && this.proposer.lastProposed >= this.dag.clockRound) out.push({ type: 'broadcast', message: { kind: 'wake', payload: this.wakePayload() } })
  }

  private serveSync(from: number, fromRound: number, out: Output[]): void {
    const lowest = this.dag.gcRound + 1
    if (fromRound < lowest) out.push({ type: 'archive-request', to: from, query: { fromRound, toRound: lowest - 1 } })
    const blocks: Block[] = []
    let bytes = 0
    for (let r = Math.max(fromRound, lowest); r <= this.dag.highestRound && blocks.length < SYNC_BATCH && bytes < SYNC_BYTES; r++) {
      for (const b of this.dag.atRound(r)) {
        blocks.push(b.block)
        bytes += b.block.signed.bytes.length
      }
    }
    // Also when empty: the answer ends the asker's pull.
    out.push({ type: 'send', to: from, message: { kind: 'blocks', blocks } })
  }

  private ownBlockByDigest(digestHex: string): Block | undefined {
    for (const b of this.ownBlocks.values()) if (b.digestHex === digestHex) return b
    return undefined
  }

  // ---- garbage collection ----

  private collectGarbage(out: Output[]): void {
    const gc = Math.max(0, this.lastCommitRound - this.ctx.gcDepth)
    if (gc <= this.dag.gcRound) return
    assert(gc < this.lastCommitRound || this.lastCommitRound === 0, `GC round ${gc} reaches the last commit ${this.lastCommitRound}`)
    for (const gone of this.dag.collect(gc)) {
      // A block never ordered by now never will be; its clients resubmit what it carried.
      // (Twins of ordered blocks were reported when their slot was ordered.)
      if (!this.ordered.collected(gone)) this.expire(gone, out)
      this.pendingWork.delete(gone.digestHex)
      this.infosOf.delete(gone.digestHex)
    }
    this.ordered.forget(gc)
    for (const round of this.ownBlocks.keys()) if (round <= gc && round !== this.proposer.lastProposed) this.ownBlocks.delete(round)
    for (const [author, round] of this.proposer.lastIncluded) if (round <= gc) this.proposer.lastIncluded.delete(author)
    this.payload.collect(gc)
    // Blocks that waited only for ancestors now below the horizon can go in.
    for (const { from, block } of this.sync.collect(gc)) this.acceptChain(from, block, out)
  }

  private reject(from: number, reason: string, detail: string, out: Output[]): void {
    out.push({ type: 'rejected', from, reason, detail })
  }

  // ---- recovery ----

  private recover(state: RecoveredState): void {
    for (const c of state.commits) if (c.anchorRound > this.lastCommitRound) this.lastCommitRound = c.anchorRound
    this.lastDecided = this.lastCommitRound
    const gc = Math.max(0, this.lastCommitRound - this.ctx.gcDepth)
    this.dag.collect(gc)
    for (const c of [...state.commits].sort((a, b) => a.anchorRound - b.anchorRound)) {
      if (c.anchorRound <= gc) continue
      for (const d of c.ordered) this.ordered.recoverBlock(d)
      // The dedupe window must match the other relays' exactly: it decides what a commit carries.
      for (const id of c.payloadIds) if (!this.ordered.hasPayload(id)) this.ordered.orderPayload(id, c.anchorRound)
    }
    for (const b of state.ownBlocks) {
      this.ownBlocks.set(b.header.round, b)
      if (b.header.round > this.proposer.lastProposed) this.proposer.lastProposed = b.header.round
    }
    const last = this.ownBlocks.get(this.proposer.lastProposed)
    for (const a of last?.header.ancestors ?? []) this.proposer.lastIncluded.set(a.author, a.round)
    // The same path as blocks from peers, minus the messages (the shell resends our latest block at start).
    const ignored: Output[] = []
    const blocks = [...state.blocks, ...state.ownBlocks].filter((b) => b.header.round > gc).sort((a, b) => a.header.round - b.header.round)
    for (const block of blocks) {
      if (this.dag.has(block.digestHex)) continue
      const missing = this.unmet(block)
      if (missing.length) this.sync.park(this.me, block, missing)
      else this.acceptChain(this.me, block, ignored)
    }
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

function refOf(a: BlockRef): Ref {
  return { round: a.round, author: a.author, digestHex: toHex(a.digest) }
}
