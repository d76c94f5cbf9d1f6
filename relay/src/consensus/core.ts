import { SteadError, fromHex, toHex } from '@stead/core'
import {
  certificateQuorum,
  maxWeakLinks,
  committeeSize,
  quorum,
  signBlock,
  signVote,
  validateCommittee,
  type Block,
  type Certificate,
  type Committee,
  type Message,
  type SyncCrypto,
  type Vote,
} from './messages.ts'

/** What the core learns about a client envelope it is asked to carry, from the shell's own check of it. */
export interface PayloadInfo {
  readonly idHex: string
  /** author id and per-author sequence number: two different ids for one slot conflict. */
  readonly slot: string
}

/**
 * Classifies a payload frame. The shell verifies envelopes (signature,
 * permissions, limits) before the core sees them and answers from its cache
 * here; an Error means the frame is invalid, and a block carrying it gets no vote.
 */
export type InspectPayload = (frame: Uint8Array) => PayloadInfo | SteadError

export interface ConsensusConfig {
  readonly committee: Committee
  readonly me: number
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  readonly inspect: InspectPayload
  /** Blocks more than this many rounds ahead of ours are ignored (flood guard). */
  readonly maxRoundsAhead?: number
  /** Rounds kept in memory behind the last committed anchor. */
  readonly gcDepth?: number
  /** Envelopes in one block. */
  readonly maxBlockEnvelopes?: number
  /** Payload bytes in one block (one envelope may exceed it alone); keeps blocks far below the mesh frame limit. */
  readonly maxBlockBytes?: number
  /** Envelopes waiting for a block; more are refused with 'too-large'. */
  readonly maxQueuedEnvelopes?: number
  /** How long to wait for a leader (even round) or its votes (odd round) before moving on. */
  readonly leaderTimeoutMs?: number
  /** With nothing to carry or commit, how long to wait before an empty block. */
  readonly idleBlockDelayMs?: number
  /** How often to resend an uncertified block and ask a peer for newer certificates. */
  readonly resendIntervalMs?: number
  /** Blocks waiting for missing parents. */
  readonly maxSuspended?: number
}

/** One committed anchor and the causal history it orders. */
export interface Commit {
  readonly anchorRound: number
  readonly leader: number
  /** Certificates newly ordered by this anchor, in order. */
  readonly blocks: readonly { readonly round: number; readonly author: number; readonly digestHex: string }[]
  /** Envelope frames in commit order, each id once (its first place). */
  readonly payload: readonly Uint8Array[]
  /** Envelope ids matching `payload`. */
  readonly payloadIds: readonly string[]
}

/** Facts that must be durable before the messages that follow them are sent. */
export type PersistRecord =
  | { readonly kind: 'vote'; readonly author: number; readonly round: number; readonly digestHex: string }
  | { readonly kind: 'own-block'; readonly block: Block }
  | { readonly kind: 'cert'; readonly cert: Certificate }
  | { readonly kind: 'commit'; readonly anchorRound: number; readonly ordered: readonly string[]; readonly payloadIds: readonly string[] }

export type Output =
  | { readonly type: 'persist'; readonly record: PersistRecord }
  | { readonly type: 'send'; readonly to: number; readonly message: Message }
  | { readonly type: 'broadcast'; readonly message: Message }
  | { readonly type: 'timer'; readonly name: TimerName; readonly round: number; readonly afterMs: number }
  | { readonly type: 'commit'; readonly commit: Commit }
  | { readonly type: 'certified'; readonly cert: Certificate }
  /** Certificates older than memory holds were asked for: the shell answers from its store. */
  | { readonly type: 'archive-request'; readonly to: number; readonly query: ArchiveQuery }
  | { readonly type: 'rejected'; readonly from: number; readonly reason: string; readonly detail: string }

export type TimerName = 'leader' | 'idle' | 'resend'

/** Certificates a peer asked for that memory no longer holds: by round range, or by digest. */
export type ArchiveQuery = { readonly fromRound: number; readonly toRound: number } | { readonly digests: readonly string[] }

/** What a restarted relay reads back from its store. */
export interface RecoveredState {
  readonly votes: ReadonlyArray<{ readonly author: number; readonly round: number; readonly digestHex: string }>
  readonly ownBlocks: readonly Block[]
  readonly certs: readonly Certificate[]
  readonly commits: ReadonlyArray<{ readonly anchorRound: number; readonly ordered: readonly string[]; readonly payloadIds: readonly string[] }>
}

/** Certificates per catch-up answer: well under the mesh's frame limit even with full blocks. */
export const SYNC_BATCH = 200
/** Bytes of blocks per catch-up answer: several full blocks, well under the 64 MiB frame limit. */
export const SYNC_BYTES = 16 * 1024 * 1024

interface Node {
  readonly cert: Certificate
  readonly round: number
  readonly author: number
  readonly digestHex: string
  readonly parents: readonly string[]
  readonly weak: readonly string[]
}

/**
 * One relay's consensus: Narwhal's certified DAG (reliable broadcast of one
 * block per relay per round, 2f+1 votes make a certificate) and Bullshark's
 * partially synchronous commit rule (the anchor of every even round is a
 * round-robin leader's block; it commits when f+1 blocks of the next round
 * reference it; earlier anchors it reaches are ordered first).
 *
 * Sans-I/O: every method takes an event and returns outputs in the order
 * they must happen. A 'persist' output must be durable before any output
 * after it is acted on: that is how a relay never votes twice for one
 * (author, round), even across a crash.
 */
export class ConsensusCore {
  readonly me: number
  private readonly committee: Committee
  private readonly n: number
  private readonly crypto: SyncCrypto
  private readonly secretKey: Uint8Array
  private readonly inspect: InspectPayload
  private readonly maxRoundsAhead: number
  private readonly gcDepth: number
  private readonly maxBlockEnvelopes: number
  private readonly maxBlockBytes: number
  private readonly maxQueued: number
  private readonly leaderTimeoutMs: number
  private readonly idleBlockDelayMs: number
  private readonly resendIntervalMs: number
  private readonly maxSuspended: number

  /** The round of our latest proposal (0 before the first). */
  private round = 0
  private readonly dag = new Map<number, Map<number, Node>>()
  private readonly byDigest = new Map<string, Node>()
  /** Certificates no other certificate in our DAG points to (strongly or weakly). */
  private readonly unreferenced = new Set<string>()
  /** Rounds of certificates fetched after they fell below the GC horizon (bounded). */
  private readonly belowHorizon = new Map<string, number>()
  /** author:round → digest we voted for. Persisted before the vote leaves. */
  private readonly voted = new Map<string, string>()
  private readonly ownBlocks = new Map<number, Block>()
  private readonly votesForOwn = new Map<number, Map<number, Uint8Array>>()
  /** Blocks and certificates waiting for parents, by digest. */
  private readonly suspended = new Map<string, { from: number; message: Message; missing: Set<string>; round: number }>()
  /** missing parent digest → digests of the suspended blocks and certificates waiting for it. */
  private readonly waitingOn = new Map<string, Set<string>>()
  private readonly suspendedBy = new Map<number, number>()
  /** Digests fetched since the last resend timer, and the round we last asked to sync from. */
  private readonly requested = new Set<string>()
  private syncedAtRound = -1

  private queue: Array<{ frame: Uint8Array; info: PayloadInfo }> = []
  private queueBytes = 0
  private readonly queuedIds = new Set<string>()
  /** slot → envelope id, for every envelope in a block we voted for or proposed. */
  private readonly slots = new Map<string, { idHex: string; round: number }>()

  private lastCommittedRound = 0
  private readonly ordered = new Set<string>()
  /** Envelope ids already ordered, with the round they were ordered in (for GC). */
  private readonly orderedPayload = new Map<string, number>()
  /** Certified blocks with payload that no anchor has ordered yet: reason to keep rounds going. */
  private unorderedWithPayload = 0
  private readonly expiredLeaderTimers = new Set<number>()
  private idleExpired = false
  private syncPeer = 0
  private lastProgressRound = 0

  constructor(config: ConsensusConfig, recovered?: RecoveredState) {
    const problem = validateCommittee(config.committee)
    if (problem) throw new SteadError('malformed', problem)
    if (!Number.isSafeInteger(config.me) || config.me < 0 || config.me >= config.committee.keys.length) throw new SteadError('malformed', `relay ${config.me} is not in the committee`)
    this.me = config.me
    this.committee = config.committee
    this.n = committeeSize(config.committee)
    this.crypto = config.crypto
    this.secretKey = config.secretKey
    this.inspect = config.inspect
    this.maxRoundsAhead = config.maxRoundsAhead ?? 50
    this.gcDepth = config.gcDepth ?? 50
    this.maxBlockEnvelopes = config.maxBlockEnvelopes ?? 1000
    this.maxBlockBytes = config.maxBlockBytes ?? 4 * 1024 * 1024
    this.maxQueued = config.maxQueuedEnvelopes ?? 100_000
    this.leaderTimeoutMs = config.leaderTimeoutMs ?? 1000
    this.idleBlockDelayMs = config.idleBlockDelayMs ?? 200
    this.resendIntervalMs = config.resendIntervalMs ?? 1000
    this.maxSuspended = config.maxSuspended ?? 10_000
    if (recovered) this.recover(recovered)
  }

  // ---- introspection (for the shell, metrics and the simulator) ----

  get currentRound(): number {
    return this.round
  }

  get committedRound(): number {
    return this.lastCommittedRound
  }

  /** Bytes of the envelope frames waiting for a block: the relay's memory budget counts them. */
  get queuedBytes(): number {
    return this.queueBytes
  }

  get queuedEnvelopes(): number {
    return this.queue.length
  }

  /** Rounds and certificates held in memory: bounded by gcDepth plus what is ahead. */
  get memory(): { rounds: number; certificates: number; suspended: number; slots: number; orderedPayload: number } {
    return { rounds: this.dag.size, certificates: this.byDigest.size, suspended: this.suspended.size, slots: this.slots.size, orderedPayload: this.orderedPayload.size }
  }

  /** A compact picture of the last few rounds, for logs, status pages and failing simulations. */
  describe(): string {
    const rounds: string[] = []
    for (let r = Math.max(1, this.round - 2); r <= this.highestRound(); r++) {
      const authors = [...(this.dag.get(r)?.keys() ?? [])].sort().join('')
      const votes = this.votesForOwn.get(r)?.size ?? 0
      rounds.push(`r${r}[certs:${authors || '-'}${this.ownBlocks.has(r) ? ` own,votes:${votes}` : ''}]`)
    }
    const frontier = [...this.waitingOn.keys()].filter((d) => !this.suspended.has(d))
    return `relay ${this.me} round ${this.round} committed ${this.lastCommittedRound} suspended ${this.suspended.size} queue ${this.queue.length} ${rounds.join(' ')}${frontier.length ? ` missing ${frontier.map((d) => d.slice(0, 8)).join(',')}` : ''}`
  }

  certificate(round: number, author: number): Certificate | undefined {
    return this.dag.get(round)?.get(author)?.cert
  }

  /** The leader whose block is the anchor of an even round. */
  leaderOf(round: number): number {
    return (round / 2) % this.n
  }

  // ---- events ----

  /** Starts (or, after recovery, resumes) proposing. */
  start(): Output[] {
    const out: Output[] = []
    const own = this.ownBlocks.get(this.round)
    if (own && !this.dag.get(this.round)?.has(this.me)) {
      // Votes gathered before a crash were not persisted: gather them again, starting with ours.
      this.sendVote(own, out, false)
      out.push({ type: 'broadcast', message: { kind: 'block', block: own } })
    }
    this.advance(out)
    out.push({ type: 'timer', name: 'resend', round: this.round, afterMs: this.resendIntervalMs })
    return out
  }

  /**
   * Queues a client envelope the shell has verified. Returns 'duplicate' for
   * one already queued or ordered, 'conflict' when another envelope holds its
   * author+seq, and throws SteadError('rate-limited') when the queue is full.
   */
  submit(frame: Uint8Array, info: PayloadInfo): { status: 'queued' | 'duplicate' | 'conflict'; outputs: Output[] } {
    if (this.queuedIds.has(info.idHex) || this.orderedPayload.has(info.idHex)) return { status: 'duplicate', outputs: [] }
    const holder = this.slots.get(info.slot)
    // The same envelope again is queued again: the block that carried it may never be certified.
    if (holder !== undefined && holder.idHex !== info.idHex) return { status: 'conflict', outputs: [] }
    if (this.queue.length >= this.maxQueued) throw new SteadError('rate-limited', `${this.queue.length} envelopes already wait for a block; retry later`)
    this.queue.push({ frame, info })
    this.queueBytes += frame.length
    this.queuedIds.add(info.idHex)
    this.slots.set(info.slot, { idHex: info.idHex, round: this.round + 1 })
    const out: Output[] = []
    this.advance(out)
    return { status: 'queued', outputs: out }
  }

  onMessage(from: number, message: Message): Output[] {
    const out: Output[] = []
    switch (message.kind) {
      case 'block':
        this.onBlock(from, message.block, out)
        break
      case 'vote':
        this.onVote(from, message, out)
        break
      case 'cert':
        this.onCertificate(from, message.cert, out)
        break
      case 'certs': {
        const sorted = [...message.certs].sort((a, b) => a.block.header.round - b.block.header.round)
        for (const cert of sorted) this.onCertificate(from, cert, out)
        // A full answer means more is waiting: keep pulling while behind.
        const last = sorted[sorted.length - 1]?.block.header.round ?? 0
        const size = sorted.reduce((n, c) => n + c.block.signed.bytes.length, 0)
        if (sorted.length >= SYNC_BATCH || size >= SYNC_BYTES) out.push({ type: 'send', to: from, message: { kind: 'sync', fromRound: last + 1 } })
        break
      }
      case 'fetch': {
        const certs: Certificate[] = []
        const archived: string[] = []
        for (const d of message.digests) {
          const hex = toHex(d)
          const node = this.byDigest.get(hex)
          if (node) certs.push(node.cert)
          else archived.push(hex)
        }
        if (certs.length) out.push({ type: 'send', to: from, message: { kind: 'certs', certs } })
        if (archived.length) out.push({ type: 'archive-request', to: from, query: { digests: archived } })
        break
      }
      case 'sync':
        this.onSync(from, message.fromRound, out)
        break
    }
    return out
  }

  onTimer(name: TimerName, round: number): Output[] {
    const out: Output[] = []
    if (name === 'leader' && round === this.round) {
      this.expiredLeaderTimers.add(round)
      this.advance(out)
    } else if (name === 'idle' && round === this.round) {
      this.idleExpired = true
      this.advance(out)
    } else if (name === 'resend') {
      this.requested.clear()
      this.syncedAtRound = -1
      // Links may have dropped our block or its votes; peers may know rounds we missed.
      const own = this.ownBlocks.get(this.round)
      const mine = this.dag.get(this.round)?.get(this.me) ?? this.dag.get(this.round - 1)?.get(this.me)
      if (own && !this.dag.get(this.round)?.has(this.me)) out.push({ type: 'broadcast', message: { kind: 'block', block: own } })
      if (mine) out.push({ type: 'broadcast', message: { kind: 'cert', cert: mine.cert } })
      if (this.round === this.lastProgressRound) {
        // Stuck in this round: someone may hold the certificates we miss.
        this.syncPeer = (this.syncPeer + 1) % this.n
        if (this.syncPeer === this.me) this.syncPeer = (this.syncPeer + 1) % this.n
        out.push({ type: 'send', to: this.syncPeer, message: { kind: 'sync', fromRound: this.round } })
        // Ask again for what suspended blocks still wait on and nobody is about to deliver.
        const frontier = [...this.waitingOn.keys()].filter((d) => !this.suspended.has(d)).slice(0, 1000)
        if (frontier.length) out.push({ type: 'send', to: this.syncPeer, message: { kind: 'fetch', digests: frontier.map(fromHex) } })
      }
      this.lastProgressRound = this.round
      out.push({ type: 'timer', name: 'resend', round: this.round, afterMs: this.resendIntervalMs })
    }
    return out
  }

  // ---- reliable broadcast ----

  private onBlock(from: number, block: Block, out: Output[]): void {
    const { round, author } = block.header
    if (from !== author) return this.reject(from, 'unauthorized', `relay ${from} relayed a block of ${author}`, out)
    if (round > this.round + this.maxRoundsAhead) return this.reject(from, 'too-large', `block round ${round} is too far ahead of ${this.round}`, out)
    // At the horizon we no longer hold the parents, so we cannot check them: no vote.
    const gc = this.gcRound()
    if (round <= gc || (gc > 0 && round === gc + 1)) return
    const key = `${author}:${round}`
    const votedFor = this.voted.get(key)
    if (votedFor !== undefined) {
      if (votedFor !== block.digestHex) return this.reject(from, 'conflict', `relay ${author} sent two blocks for round ${round}`, out)
      // A retransmission: our vote may have been lost. Same digest, so voting again is no equivocation.
      return this.sendVote(block, out, false)
    }
    const parentProblem = this.checkParents(block)
    if (parentProblem) return this.reject(from, 'malformed', parentProblem, out)
    const missing = this.missingParents(block)
    if (missing.length) return this.suspend(from, { kind: 'block', block }, missing, round, out)
    const payloadProblem = this.checkPayload(block)
    if (payloadProblem) return this.reject(from, payloadProblem.reason, payloadProblem.detail, out)
    this.claimSlots(block)
    this.voted.set(key, block.digestHex)
    this.sendVote(block, out, true)
  }

  private sendVote(block: Block, out: Output[], persist: boolean): void {
    const { round, author } = block.header
    if (persist) out.push({ type: 'persist', record: { kind: 'vote', author, round, digestHex: block.digestHex } })
    const vote = signVote(this.crypto, this.secretKey, this.me, block)
    if (author === this.me) this.onVote(this.me, vote, out)
    else out.push({ type: 'send', to: author, message: vote })
  }

  private onVote(from: number, vote: Vote, out: Output[]): void {
    if (vote.author !== this.me || vote.voter !== from) return
    const own = this.ownBlocks.get(vote.round)
    if (!own || toHex(vote.digest) !== own.digestHex || this.dag.get(vote.round)?.has(this.me)) return
    let votes = this.votesForOwn.get(vote.round)
    if (!votes) this.votesForOwn.set(vote.round, (votes = new Map()))
    votes.set(vote.voter, vote.sig)
    const needed = certificateQuorum(this.committee)
    if (votes.size < needed) return
    const cert: Certificate = { block: own, votes: [...votes.entries()].slice(0, needed) }
    this.votesForOwn.delete(vote.round)
    this.onCertificate(this.me, cert, out)
    out.push({ type: 'broadcast', message: { kind: 'cert', cert } })
  }

  private onCertificate(from: number, cert: Certificate, out: Output[]): void {
    const { round, author } = cert.block.header
    const digestHex = cert.block.digestHex
    if (this.byDigest.has(digestHex)) return
    if (round <= this.gcRound()) {
      // Too old to hold; remember its round so what waited for it can be judged, then let it go on.
      if (this.belowHorizon.size >= 10_000) this.belowHorizon.clear()
      this.belowHorizon.set(digestHex, round)
      this.resume(digestHex, out)
      return
    }
    const existing = this.dag.get(round)?.get(author)
    if (existing) {
      // Two certificates for one (author, round) need f+1 double-voting relays: more than f are faulty.
      return this.reject(from, 'conflict', `second certificate for relay ${author} round ${round}`, out)
    }
    const parentProblem = this.checkParents(cert.block)
    if (parentProblem) return this.reject(from, 'malformed', parentProblem, out)
    const missing = this.missingParents(cert.block)
    if (missing.length) return this.suspend(from, { kind: 'cert', cert }, missing, round, out)
    this.insert(cert, out)
  }

  /** Puts a certificate into the DAG (its parents are present or below the horizon). */
  private addNode(cert: Certificate): Node {
    const node = nodeOf(cert)
    let r = this.dag.get(node.round)
    if (!r) this.dag.set(node.round, (r = new Map()))
    r.set(node.author, node)
    this.byDigest.set(node.digestHex, node)
    this.reference(node)
    if (cert.block.header.payload.length && !this.ordered.has(node.digestHex)) this.unorderedWithPayload++
    return node
  }

  private insert(cert: Certificate, out: Output[]): void {
    const node = this.addNode(cert)
    // Slots of certified payload are taken whether or not we voted for the block.
    this.claimSlots(cert.block)
    out.push({ type: 'persist', record: { kind: 'cert', cert } })
    out.push({ type: 'certified', cert })
    this.resume(node.digestHex, out)
    this.tryCommit(out)
    this.advance(out)
  }

  private checkParents(block: Block): string | null {
    const { round, parents, weak } = block.header
    const weakHex = weak.map(toHex)
    if (new Set(weakHex).size !== weak.length) return 'duplicate weak links'
    for (const w of weakHex) {
      const node = this.byDigest.get(w)
      if (node && node.round >= round - 1) return `weak link ${w.slice(0, 8)} is from round ${node.round}; weak links point further back`
    }
    if (round === 1) return parents.length === 0 && weak.length === 0 ? null : 'round 1 blocks have no parents'
    const distinct = new Set(parents.map(toHex))
    if (distinct.size !== parents.length) return 'duplicate parents'
    if (weakHex.some((w) => distinct.has(w))) return 'a parent cannot also be a weak link'
    if (parents.length < quorum(this.committee)) return `a round ${round} block needs ${quorum(this.committee)} parents, has ${parents.length}`
    for (const p of distinct) {
      const parentRound = this.byDigest.get(p)?.round ?? this.belowHorizon.get(p)
      if (parentRound !== undefined && parentRound !== round - 1) return `parent ${p.slice(0, 8)} is from round ${parentRound}, not ${round - 1}`
    }
    return null
  }

  private missingParents(block: Block): string[] {
    // Parents at or below the GC horizon are no longer held: they were settled long ago.
    const strong = block.header.round - 1 <= this.gcRound() ? [] : block.header.parents.map(toHex)
    // A weak link that is fetched and turns out to be below the horizon resolves as settled (see onCertificate).
    return [...strong, ...block.header.weak.map(toHex)].filter((hex) => !this.byDigest.has(hex) && !this.belowHorizon.has(hex))
  }

  private suspend(from: number, message: Message, missing: string[], round: number, out: Output[]): void {
    const digest = message.kind === 'block' ? message.block.digestHex : message.kind === 'cert' ? message.cert.block.digestHex : ''
    const waiting = this.suspended.get(digest)
    if (waiting) {
      // The block waits already; its certificate supersedes it (same digest, same parents).
      if (waiting.message.kind === 'block' && message.kind === 'cert') waiting.message = message
      return
    }
    // Bounded per sender, so one relay's flood cannot crowd out the others' blocks.
    const mine = (this.suspendedBy.get(from) ?? 0) + 1
    if (mine > Math.ceil(this.maxSuspended / this.n)) return this.reject(from, 'too-large', `relay ${from} has too many blocks waiting for parents`, out)
    this.suspendedBy.set(from, mine)
    this.suspended.set(digest, { from, message, missing: new Set(missing), round })

    for (const m of missing) {
      let waiters = this.waitingOn.get(m)
      if (!waiters) this.waitingOn.set(m, (waiters = new Set()))
      waiters.add(digest)
    }
    // Ask once per digest and once per round; the resend timer clears both so lost requests are retried.
    const toFetch = missing.filter((d) => !this.requested.has(d))
    for (const d of toFetch) this.requested.add(d)
    if (toFetch.length) out.push({ type: 'send', to: from, message: { kind: 'fetch', digests: toFetch.map(fromHex) } })
    if (round > this.round + 1 && this.syncedAtRound !== this.round) {
      this.syncedAtRound = this.round
      out.push({ type: 'send', to: from, message: { kind: 'sync', fromRound: this.round } })
    }
  }

  private unsuspend(key: string, from: number): void {
    this.suspended.delete(key)
    const left = (this.suspendedBy.get(from) ?? 1) - 1
    if (left > 0) this.suspendedBy.set(from, left)
    else this.suspendedBy.delete(from)
  }

  /** A certificate arrived: retry whatever waited for it. */
  private resume(digest: string, out: Output[]): void {
    const waiters = this.waitingOn.get(digest)
    if (!waiters) return
    this.waitingOn.delete(digest)
    for (const key of waiters) {
      const s = this.suspended.get(key)
      if (!s || !s.missing.delete(digest) || s.missing.size > 0) continue
      this.unsuspend(key, s.from)
      // Re-checked in full: a parent that turned out to be from the wrong round now gets it refused.
      if (s.message.kind === 'block') this.onBlock(s.from, s.message.block, out)
      else if (s.message.kind === 'cert') this.onCertificate(s.from, s.message.cert, out)
    }
  }

  private checkPayload(block: Block): { reason: string; detail: string } | null {
    const seen = new Set<string>()
    for (const frame of block.header.payload) {
      const info = this.inspect(frame)
      if (info instanceof SteadError) return { reason: info.reason, detail: `block of relay ${block.header.author} round ${block.header.round} carries an invalid envelope: ${info.message}` }
      // No correct relay puts two envelopes for one slot in a block: its own slot map refuses the second.
      if (seen.has(info.slot)) return { reason: 'conflict', detail: `block carries two envelopes for ${info.slot}` }
      seen.add(info.slot)
      // A conflict with an envelope seen elsewhere is not refused: a Byzantine client can hand
      // twins to two correct relays, and refusing their blocks would let it stall the DAG
      // (simulator seed 7, silent relay). The audit keeps at most one twin (G4).
    }
    return null
  }

  private claimSlots(block: Block): void {
    for (const frame of block.header.payload) {
      const info = this.inspect(frame)
      if (info instanceof SteadError) continue
      if (!this.slots.has(info.slot)) this.slots.set(info.slot, { idHex: info.idHex, round: block.header.round })
    }
  }

  // ---- proposing ----

  /** Moves to the next round(s) while the Bullshark proposer rules allow. */
  private advance(out: Output[]): void {
    for (;;) {
      if (this.round === 0) {
        this.propose(1, [], out)
        continue
      }
      // Back from a crash or a partition: join the newest round the others completed.
      const newest = this.newestQuorumRound()
      if (newest > this.round) this.round = newest
      const certs = this.dag.get(this.round)
      if (!certs || certs.size < quorum(this.committee)) return
      if (!this.leaderRuleAllows(this.round, certs, out)) return
      if (!this.hasWork() && !this.idleExpired) {
        out.push({ type: 'timer', name: 'idle', round: this.round, afterMs: this.idleBlockDelayMs })
        return
      }
      this.propose(this.round + 1, [...certs.values()].map((c) => c.cert.block.digest), out)
    }
  }

  private leaderRuleAllows(round: number, certs: Map<number, Node>, out: Output[]): boolean {
    if (this.expiredLeaderTimers.has(round)) return true
    let ok: boolean
    if (round % 2 === 0) {
      // Wait for the anchor so that our next block can vote for it.
      ok = certs.has(this.leaderOf(round))
    } else {
      const anchor = this.dag.get(round - 1)?.get(this.leaderOf(round - 1))
      const votes = anchor ? [...certs.values()].filter((c) => c.parents.includes(anchor.digestHex)).length : 0
      ok = votes >= this.committee.f + 1 || certs.size - votes >= quorum(this.committee) || certs.size === this.n
    }
    if (!ok) out.push({ type: 'timer', name: 'leader', round, afterMs: this.leaderTimeoutMs })
    return ok
  }

  private hasWork(): boolean {
    return this.queue.length > 0 || this.unorderedWithPayload > 0
  }

  private propose(round: number, parents: Uint8Array[], out: Output[]): void {
    const existing = this.ownBlocks.get(round)
    // After a restart our block for this round may already exist: resend it, never make another.
    const block =
      existing ??
      signBlock(this.crypto, this.secretKey, {
        round,
        author: this.me,
        parents,
        payload: this.takePayload(),
        weak: this.weakLinks(round),
      })
    this.round = round
    this.idleExpired = false
    if (!existing) {
      this.ownBlocks.set(round, block)
      out.push({ type: 'persist', record: { kind: 'own-block', block } })
    }
    // Our own vote goes through the same path as everyone's, persisted first.
    this.voted.set(`${this.me}:${round}`, block.digestHex)
    this.sendVote(block, out, !existing)
    out.push({ type: 'broadcast', message: { kind: 'block', block } })
  }

  /** Certificates nothing references yet, from rounds our parents cannot reach, oldest first. */
  private weakLinks(round: number): Uint8Array[] {
    const gc = this.gcRound()
    return [...this.unreferenced]
      .map((d) => this.byDigest.get(d) as Node)
      .filter((n) => n.round < round - 1 && n.round > gc)
      .sort((a, b) => a.round - b.round || a.author - b.author)
      .slice(0, maxWeakLinks(this.committee))
      .map((n) => n.cert.block.digest)
  }

  /** A certificate joins the DAG: it is unreferenced, and what it points to no longer is. */
  private reference(node: Node): void {
    this.unreferenced.add(node.digestHex)
    for (const p of node.parents) this.unreferenced.delete(p)
    for (const w of node.weak) this.unreferenced.delete(w)
  }

  private takePayload(): Uint8Array[] {
    // Bounded in count and in bytes: a block must always fit in one mesh frame.
    let bytes = 0
    let n = 0
    while (n < this.queue.length && n < this.maxBlockEnvelopes) {
      const size = (this.queue[n] as { frame: Uint8Array }).frame.length
      if (n > 0 && bytes + size > this.maxBlockBytes) break
      bytes += size
      n++
    }
    const take = this.queue.splice(0, n)
    for (const { info } of take) this.queuedIds.delete(info.idHex)
    this.queueBytes -= bytes
    return take.map((t) => t.frame)
  }

  // ---- Bullshark commit rule ----

  private tryCommit(out: Output[]): void {
    // The highest anchor with f+1 votes in our DAG commits directly; older ones through paths from it.
    let anchor: Node | undefined
    for (let r = this.highestRound() - 1; r > this.lastCommittedRound; r--) {
      if (r % 2 !== 0) continue
      const candidate = this.dag.get(r)?.get(this.leaderOf(r))
      if (!candidate) continue
      const next = this.dag.get(r + 1)
      let votes = 0
      for (const c of next?.values() ?? []) if (c.parents.includes(candidate.digestHex)) votes++
      if (votes >= this.committee.f + 1) {
        anchor = candidate
        break
      }
    }
    if (!anchor) return
    const chain: Node[] = [anchor]
    let current = anchor
    for (let r = anchor.round - 2; r > this.lastCommittedRound; r -= 2) {
      const leader = this.dag.get(r)?.get(this.leaderOf(r))
      if (leader && this.reaches(current, leader)) {
        chain.push(leader)
        current = leader
      }
    }
    for (const a of chain.reverse()) this.commitAnchor(a, out)
  }

  private reaches(from: Node, to: Node): boolean {
    let frontier = new Set<string>([from.digestHex])
    for (let r = from.round; r > to.round; r--) {
      const next = new Set<string>()
      for (const d of frontier) for (const p of this.byDigest.get(d)?.parents ?? []) next.add(p)
      if (next.has(to.digestHex)) return true
      frontier = next
      if (frontier.size === 0) return false
    }
    return false
  }

  private commitAnchor(anchor: Node, out: Output[]): void {
    const horizon = this.gcRound()
    // Collect the anchor's causal history that no earlier anchor ordered.
    const history: Node[] = []
    const stack = [anchor.digestHex]
    const visited = new Set<string>()
    while (stack.length) {
      const d = stack.pop() as string
      if (visited.has(d) || this.ordered.has(d)) continue
      visited.add(d)
      const node = this.byDigest.get(d)
      if (!node || node.round <= horizon) continue
      history.push(node)
      stack.push(...node.parents, ...node.weak)
    }
    history.sort((a, b) => a.round - b.round || a.author - b.author)
    const payload: Uint8Array[] = []
    const payloadIds: string[] = []
    for (const node of history) {
      this.ordered.add(node.digestHex)
      if (node.cert.block.header.payload.length) this.unorderedWithPayload--
      for (const frame of node.cert.block.header.payload) {
        const info = this.inspect(frame)
        if (info instanceof SteadError || this.orderedPayload.has(info.idHex)) continue
        this.orderedPayload.set(info.idHex, anchor.round)
        payload.push(frame)
        payloadIds.push(info.idHex)
      }
    }
    this.lastCommittedRound = anchor.round
    const ordered = history.map((n) => n.digestHex)
    out.push({ type: 'persist', record: { kind: 'commit', anchorRound: anchor.round, ordered, payloadIds } })
    out.push({
      type: 'commit',
      commit: {
        anchorRound: anchor.round,
        leader: anchor.author,
        blocks: history.map((n) => ({ round: n.round, author: n.author, digestHex: n.digestHex })),
        payload,
        payloadIds,
      },
    })
    this.collectGarbage()
  }

  /** Rounds at or below this are dropped from memory. */
  private gcRound(): number {
    return Math.max(0, this.lastCommittedRound - this.gcDepth)
  }

  private collectGarbage(): void {
    const gc = this.gcRound()
    for (const [round, nodes] of this.dag) {
      if (round > gc) continue
      for (const node of nodes.values()) {
        // A block never ordered by now never will be; its clients resubmit what it carried.
        if (node.cert.block.header.payload.length && !this.ordered.has(node.digestHex)) this.unorderedWithPayload--
        this.byDigest.delete(node.digestHex)
        this.ordered.delete(node.digestHex)
        this.unreferenced.delete(node.digestHex)
      }
      this.dag.delete(round)
    }
    for (const [round] of this.ownBlocks) if (round <= gc) this.ownBlocks.delete(round)
    for (const key of this.voted.keys()) if (Number(key.slice(key.indexOf(':') + 1)) <= gc) this.voted.delete(key)
    for (const [id, round] of this.orderedPayload) if (round <= gc) this.orderedPayload.delete(id)
    for (const [key, s] of this.suspended) if (s.round <= gc) this.unsuspend(key, s.from)
    for (const [slot, holder] of this.slots) if (holder.round <= gc) this.slots.delete(slot)
    for (const r of this.votesForOwn.keys()) if (r <= gc) this.votesForOwn.delete(r)
    for (const [d, waiters] of this.waitingOn) {
      for (const key of waiters) if (!this.suspended.has(key)) waiters.delete(key)
      if (waiters.size === 0) this.waitingOn.delete(d)
    }
    for (const r of this.expiredLeaderTimers) if (r <= gc) this.expiredLeaderTimers.delete(r)
  }

  // ---- catching up ----

  private onSync(from: number, fromRound: number, out: Output[]): void {
    const lowest = this.gcRound() + 1
    if (fromRound < lowest) out.push({ type: 'archive-request', to: from, query: { fromRound, toRound: lowest - 1 } })
    const certs: Certificate[] = []
    let bytes = 0
    for (let r = Math.max(fromRound, lowest); r <= this.highestRound() && certs.length < SYNC_BATCH && bytes < SYNC_BYTES; r++) {
      for (const node of this.dag.get(r)?.values() ?? []) {
        certs.push(node.cert)
        bytes += node.cert.block.signed.bytes.length
      }
    }
    if (certs.length) out.push({ type: 'send', to: from, message: { kind: 'certs', certs } })
  }

  private newestQuorumRound(): number {
    let best = 0
    for (const [r, nodes] of this.dag) if (r > best && nodes.size >= quorum(this.committee)) best = r
    return best
  }

  private highestRound(): number {
    let max = 0
    for (const r of this.dag.keys()) if (r > max) max = r
    return max
  }

  private reject(from: number, reason: string, detail: string, out: Output[]): void {
    out.push({ type: 'rejected', from, reason, detail })
  }

  // ---- recovery ----

  private recover(state: RecoveredState): void {
    for (const v of state.votes) this.voted.set(`${v.author}:${v.round}`, v.digestHex)
    for (const b of state.ownBlocks) {
      this.ownBlocks.set(b.header.round, b)
      if (b.header.round > this.round) this.round = b.header.round
    }
    for (const c of state.commits) {
      for (const d of c.ordered) this.ordered.add(d)
      if (c.anchorRound > this.lastCommittedRound) this.lastCommittedRound = c.anchorRound
    }
    const gc = this.gcRound()
    // The dedupe window must match the other relays' exactly: it decides what a commit carries.
    for (const c of state.commits) if (c.anchorRound > gc) for (const id of c.payloadIds) this.orderedPayload.set(id, c.anchorRound)
    for (const cert of [...state.certs].sort((a, b) => a.block.header.round - b.block.header.round)) {
      if (cert.block.header.round <= gc) continue
      this.addNode(cert)
      this.claimSlots(cert.block)
    }
    for (const b of state.ownBlocks) this.claimSlots(b)
  }
}

function nodeOf(cert: Certificate): Node {
  const { round, author, parents, weak } = cert.block.header
  return { cert, round, author, digestHex: cert.block.digestHex, parents: parents.map(toHex), weak: weak.map(toHex) }
}
