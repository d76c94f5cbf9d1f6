import { SteadError, toHex } from '@stead/core'
import { roundRobin } from './committer.ts'
import { Dag, assert, type DagBlock, type Ref } from './dag.ts'
import { GENESIS_HEX, committeeSize, genesisRoundOf, quorum, validateCommittee, type Block, type BlockRef, type Message } from './messages.ts'
import { PayloadQueue, type PayloadInfo } from './payload.ts'
import { InvariantChecker } from './invariants.ts'
import { Synchronizer } from './sync.ts'
import { CatchUp } from './catch-up.ts'
import { Linearizer } from './linearizer.ts'
import { OwnLast } from './own-last.ts'
import { Proposer } from './proposer.ts'
import type { ConsensusConfig, CoreContext, Output, RecoveredState, TimerName } from './types.ts'

export { payloadInfoOf, type InspectPayload, type PayloadInfo } from './payload.ts'
export type { ArchiveQuery, Commit, ConsensusConfig, Output, PersistRecord, RecoveredState, TimerName } from './types.ts'
export { SYNC_BATCH, SYNC_BYTES, byBytes } from './catch-up.ts'

/**
 * What a stuck relay hands its peers in a wake message: one unordered envelope
 * proves the work, a few more are a bonus. Capped in bytes too: a wake goes to
 * every peer, and 64 envelopes of 800 KB each were 50 MB per peer per tick.
 */
const WAKE_ENVELOPES = 64
const WAKE_BYTES = 256 * 1024

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
  /*
   * The sub-protocols, each owning its state; the core routes events to them
   * and owns only the door blocks enter the DAG through (receive → accept),
   * where they all meet, and garbage collection, which touches them all.
   */
  private readonly proposer: Proposer
  private readonly ownLast: OwnLast
  private readonly catchUp: CatchUp
  private readonly linearizer: Linearizer

  /** Digests of blocks refused (bounded): never checked or fetched again; what builds on them waits for the GC round (see unmet). */
  private readonly refused = new Set<string>()
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
    this.dag = new Dag(q, n, genesisRoundOf(config.committee))
    this.sync = new Synchronizer(n, config.maxSuspended ?? 10_000)
    this.payload = new PayloadQueue({
      maxBlockEnvelopes: config.maxBlockEnvelopes ?? 1000,
      maxBlockBytes: config.maxBlockBytes ?? 4 * 1024 * 1024,
      maxQueued: config.maxQueuedEnvelopes ?? 100_000,
      // A tenth: ten authors' floods together fill it (a client holds at most as many pending, maxPendingPerClient).
      maxQueuedPerAuthor: Math.max(1, Math.floor((config.maxQueuedEnvelopes ?? 100_000) / 10)),
    })
    const { me, ctx, dag, sync, payload } = this
    this.linearizer = new Linearizer(ctx, dag)
    this.proposer = new Proposer({ me, ctx, dag, payload, hasWork: (urgentOnly) => this.hasWork(urgentOnly), accept: (block, infos, out) => void this.accept(block, infos, out) })
    this.catchUp = new CatchUp({ me, ctx, dag, sync, decidedRound: () => this.linearizer.decidedRound, hasWork: () => this.hasWork() })
    if (recovered) this.recover(recovered)
    // Made after recovery, which needs none of it.
    this.ownLast = new OwnLast({ me, ctx, dag, sync })
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
    return this.linearizer.committedRound
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
    return { rounds: this.dag.roundCount, blocks: this.dag.size, suspended: this.sync.size, slots: this.payload.slotCount, orderedPayload: this.linearizer.orderedPayloadCount }
  }

  /** A compact picture of the last few rounds, for logs, status pages and failing simulations. */
  describe(): string {
    const rounds: string[] = []
    for (let r = Math.max(genesisRoundOf(this.ctx.committee) + 1, this.dag.highestRound - 3); r <= this.dag.highestRound; r++) {
      const authors = this.dag
        .atRound(r)
        .map((b) => `${b.author}${b.block.header.payload.length ? '*' : ''}`)
        .join('')
      rounds.push(`r${r}[${authors || '-'}]`)
    }
    return `relay ${this.me} proposed ${this.proposer.lastProposed} clock ${this.dag.clockRound} decided ${this.linearizer.decidedRound} committed ${this.linearizer.committedRound} gc ${this.dag.gcRound} work ${this.linearizer.pendingCount} queue ${this.payload.length} parked ${this.sync.size} ${rounds.join(' ')}`
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
        genesisRound: genesisRoundOf(this.ctx.committee),
        dag: this.dag,
        ...this.linearizer.invariantView,
        payload: this.payload,
        sync: this.sync,
        committedRound: this.linearizer.committedRound,
        decidedRound: this.linearizer.decidedRound,
        ownRound: this.proposer.lastProposed,
        neverProposesAtOrBelow: this.proposer.neverProposesAtOrBelow,
        ownBlocks: this.proposer.blocks,
      },
      full ? 'full' : 'cheap',
    )
    if (full) this.fullCheckAt = this.changes
  }

  /** The blocks this relay holds for a slot (several when the author equivocated). */
  blocksAt(round: number, author: number): readonly Block[] {
    return this.dag.atSlot(round, author).map((b) => b.block)
  }

  /**
   * The round from which f+1 peers (so at least one correct relay) still keep
   * blocks, when that is past the round this relay needs next: it cannot catch
   * up by fetching blocks, only from a checkpoint (see checkpoint.ts). Null otherwise,
   * also once it moved on past that round.
   */
  get historyPrunedPast(): number | null {
    return this.catchUp.historyPrunedPast
  }

  /** The highest round this relay will not propose at: its last proposal, or what its peers said of its blocks and their GC rounds (see takeOwnLast). */
  get neverProposesAtOrBelow(): number {
    return this.proposer.neverProposesAtOrBelow
  }

  /** Whether this relay holds its proposals until its peers' word on its own latest block (see ConsensusConfig.ownLastTimeoutMs). */
  get awaitingOwnLast(): boolean {
    return this.ownLast.holding
  }

  /**
   * Whether a block needs its signature checked before `onMessage`: not one
   * already held, parked or refused (same bytes, same digest), nor one
   * `receive` drops unread (at or below the horizon, far ahead of the clock).
   */
  needsVerification(digestHex: string, round: number): boolean {
    if (this.dag.has(digestHex) || this.sync.isParked(digestHex) || this.refused.has(digestHex)) return false
    return round > this.dag.gcRound && round <= this.catchUp.highestAccepted
  }

  // ---- events ----

  /** Starts (or, after recovery, resumes): re-sends our latest block, which peers may have missed. */
  start(): Output[] {
    this.changes++
    const out: Output[] = []
    const own = this.proposer.latest
    if (own) out.push({ type: 'broadcast', message: { kind: 'block', block: own } })
    this.ownLast.start(out)
    this.commitAndPropose(out)
    this.catchUp.arm(out)
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
    const own = this.proposer.latest
    if (own) out.push({ type: 'send', to: peer, message: { kind: 'block', block: own } })
    this.ownLast.onPeerConnected(peer, out)
    return out
  }

  /**
   * Queues a client envelope the shell has verified. Returns 'duplicate' for
   * one already queued or ordered, 'conflict' when another envelope holds its
   * author+seq, and throws SteadError('rate-limited') when the queue is full.
   */
  submit(frame: Uint8Array, info: PayloadInfo): 'queued' | 'duplicate' | 'conflict' {
    this.changes++
    if (this.linearizer.hasPayload(info.idHex)) return 'duplicate'
    return this.payload.add(frame, info, this.dag.clockRound)
  }

  /** After envelopes were queued by `submit`: propose them (an event of its own, so the relay's drain runs it like any other). */
  onSubmitted(): Output[] {
    this.changes++
    const out: Output[] = []
    this.commitAndPropose(out, true)
    this.catchUp.arm(out)
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
        this.catchUp.answered(from, sorted, out)
        break
      }
      case 'fetch':
        this.catchUp.serveFetch(from, message.digests, (hex) => this.proposer.byDigest(hex), out)
        break
      case 'sync':
        this.catchUp.serveSync(from, message.fromRound, out)
        break
      case 'own-last-ask':
        this.ownLast.serve(from, out)
        break
      case 'own-last':
        this.takeOwnLast(from, message.block, message.gcRound, out)
        break
      case 'wake':
        // A peer has work but waits: for a quorum at a round it already proposed, or for our
        // leader block. Carry its envelopes too, which gives us a reason to propose (duplicates
        // are ordered once).
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
      case 'pruned':
        this.catchUp.pruned(from, message.keptFrom, out)
        break
    }
    this.catchUp.arm(out)
    return out
  }

  /**
   * A wake counts only with an envelope not ordered yet (so a peer cannot
   * keep the cluster busy with nothing), and buys a proposal at our clock
   * round (with our skipped leader slot filled first, see
   * Proposer.tryPropose): enough for the waiting peer's quorum or leader,
   * after which its block with the envelopes gives everyone work.
   */
  private takeWake(from: number, frames: readonly Uint8Array[], out: Output[]): void {
    for (const frame of frames) {
      const info = this.ctx.inspect(frame)
      if (info instanceof SteadError) return this.reject(from, info.reason, `wake carries an invalid envelope: ${info.message}`, out)
      if (this.linearizer.hasPayload(info.idHex)) continue
      this.proposer.woken()
      try {
        this.payload.add(frame, info, this.dag.clockRound)
      } catch (err) {
        if (!(err instanceof SteadError)) throw err
        return
      }
    }
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
   * catching up); OwnLast.heard says which of their GC rounds we go by.
   */
  private takeOwnLast(from: number, block: Block | null, gcRound: number, out: Output[]): void {
    if (block && block.header.author !== this.me) return this.reject(from, 'malformed', `relay ${from} answered own-last with a block of relay ${block.header.author}`, out)
    if (block) this.proposer.raiseFloor(block.header.round)
    const vouched = this.ownLast.heard(from, gcRound)
    if (vouched !== undefined) this.proposer.raiseFloor(vouched)
    if (block) this.receive(from, block, out, false)
    this.ownLast.settle()
    this.commitAndPropose(out)
  }

  onTimer(name: TimerName, round: number): Output[] {
    this.changes++
    const out: Output[] = []
    if (name === 'own-last') {
      this.ownLast.onTimer()
      this.commitAndPropose(out)
    } else if (name === 'leader') {
      if (this.proposer.onLeaderTimer(round)) this.commitAndPropose(out)
    } else if (name === 'pace') {
      if (this.proposer.onPaceTimer(round)) this.commitAndPropose(out, true)
    } else if (this.catchUp.tick(this.proposer.lastProposed, out)) {
      // Stuck: our latest block may have been lost on its way, and peers may idle while we wait at our round.
      const own = this.proposer.latest
      if (own) out.push({ type: 'broadcast', message: { kind: 'block', block: own } })
      if (this.hasWork() && this.proposer.lastProposed >= this.dag.clockRound) out.push({ type: 'broadcast', message: { kind: 'wake', payload: this.wakePayload() } })
    }
    this.catchUp.arm(out)
    return out
  }

  // ---- receiving blocks ----

  private receive(from: number, block: Block, out: Output[], settle = true): void {
    const { round } = block.header
    if (this.dag.has(block.digestHex) || this.sync.isParked(block.digestHex) || this.refused.has(block.digestHex)) return
    // At or below the GC round a block can never be ordered: nothing to do with it.
    if (round <= this.dag.gcRound) return
    if (round > this.catchUp.highestAccepted) {
      // Either a flood or we fell far behind (a restart, a partition): pull the rounds we
      // missed, then blocks this far ahead fit again. Dropped unread (not even verified):
      // being behind is not the sender's fault, and the pull brings the block again.
      this.catchUp.pullNeeded(from, out)
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
      if (round > this.dag.clockRound + 2) this.catchUp.pullFromClock(from, out)
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
    if (fetch.length) this.catchUp.fetch(from, fetch, out)
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
    this.linearizer.accepted(node, infos)
    this.payload.claim(infos, block.header.round)
    if (block.header.author === this.me) {
      this.proposer.handedBack(block, out)
      this.linearizer.noteWork(node, infos)
      return node
    }
    out.push({ type: 'persist', record: { kind: 'block', block } })
    // A twin of a block already ordered never will be: it is kept (it counts in the commit rule) but carries nothing.
    if (this.linearizer.slotTaken(node)) return node
    this.linearizer.noteWork(node, infos)
    out.push({ type: 'accepted', block })
    return node
  }

  private reject(from: number, reason: string, detail: string, out: Output[]): void {
    out.push({ type: 'rejected', from, reason, detail })
  }

  // ---- committing and proposing ----

  /**
   * Commits what can be committed and proposes while there is a reason.
   * `carry`: the proposal was started by a client's envelope or by our pace
   * timer, not by a quorum of peers' blocks, so the round's leader may not
   * have proposed yet and a copy of our envelopes can still ride in its
   * block (see Proposer.propose). After a quorum, the leader proposes when we do.
   */
  private commitAndPropose(out: Output[], carry = false): void {
    for (;;) {
      this.tryCommit(out)
      if (this.ownLast.holding || !this.proposer.tryPropose(out, carry)) return
    }
  }

  private tryCommit(out: Output[]): void {
    for (;;) {
      const decided = this.linearizer.decide()
      if (decided.length === 0) return
      for (const status of decided) {
        const payloadIds = this.linearizer.settle(status, out)
        if (payloadIds === null) continue
        this.payload.dropOrdered(payloadIds)
        this.collectGarbage(out)
      }
    }
  }

  /**
   * Whether envelopes wait for an order (with `urgentOnly`, urgent ones: a
   * safe update waits for a round): in our queue, or in an accepted block
   * not ordered yet (see Linearizer.hasPendingWork).
   */
  private hasWork(urgentOnly = false): boolean {
    if (urgentOnly ? this.payload.hasUrgent : this.payload.length > 0) return true
    return this.linearizer.hasPendingWork(urgentOnly)
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
    this.linearizer.unorderedFrames(take)
    return frames
  }

  // ---- garbage collection ----

  /** After a commit: everything at or below the new GC round goes, from every sub-protocol. */
  private collectGarbage(out: Output[]): void {
    const committed = this.linearizer.committedRound
    const gc = Math.max(genesisRoundOf(this.ctx.committee), committed - this.ctx.gcDepth)
    if (gc <= this.dag.gcRound) return
    assert(gc < committed, `GC round ${gc} reaches the last commit ${committed}`)
    for (const gone of this.dag.collect(gc)) this.linearizer.collected(gone, out)
    this.linearizer.forget(gc)
    this.proposer.collect(gc)
    this.payload.collect(gc)
    // Blocks that waited only for ancestors now below the horizon can go in.
    for (const { from, block } of this.sync.collect(gc)) this.acceptChain(from, block, out)
  }

  // ---- recovery ----

  private recover(state: RecoveredState): void {
    this.linearizer.recoverRounds(state.commits)
    const gc = Math.max(0, this.linearizer.committedRound - this.ctx.gcDepth)
    this.dag.collect(gc)
    this.linearizer.recoverOrdered(state.commits, gc)
    this.proposer.recover(state.ownBlocks)
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

function refOf(a: BlockRef): Ref {
  return { round: a.round, author: a.author, digestHex: toHex(a.digest) }
}
