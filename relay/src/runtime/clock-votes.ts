import { clockQuorum, encodeClockVote, fromHex, toHex, type Envelope, type HostClock, type HostTimer, type StableAudit } from '@stead/core'
import type { SteadError } from '@stead/core'
import { MAX_VOTE_FRAMES, type Committee, type Message, type SyncCrypto } from '../consensus/index.ts'

/**
 * Chrono's validators run by this relay on envelopes as they arrive,
 * before any order, and the certificates their votes make.
 *
 * On an envelope (from a client, or in a peer's block) the relay runs:
 * the update validator (`StableAudit.judgeBeforeOrder`: the clock follows
 * from its inputs, taken from the stable history or from envelopes this
 * relay voted for), the monotonicity validator (one vote per author and
 * seq, ever, in seq order: remembered on disk) and the application
 * validator (the space's write permission and the operators' rule). If
 * all pass it signs `encodeClockVote(space, id, weight)` (the weight: the
 * sum of the full clock, `StableAudit.clockWeight`) and, once that vote is
 * durable, sends it to its peers. Votes of ceil((N+f+1)/2) relays for one
 * weight are the envelope's validator certificate (see @stead/core
 * chrono.ts), which this relay serves (`certificate`) for HELD_MS, also
 * after the envelope commits (its commit's attestation proves it too).
 *
 * An input this relay does not hold yet (an envelope cited as a dep, the
 * author's previous one) parks the envelope until it arrives: from a
 * peer's block, or from the client that submitted the envelope, which is
 * asked for it. A base ahead of the relay's stable index parks it until
 * the relay gets there. Parked envelopes give up after PARK_MS.
 */

/** An envelope waits this long for its inputs, at most. */
export const PARK_MS = 30_000
/** A voted envelope that never commits is forgotten after this long. */
export const HELD_MS = 10 * 60_000
/** Votes cast within this long go to disk in one write and to peers in one message (each write is a disk sync). */
export const VOTE_FLUSH_MS = 2
/** Envelopes held at most (waiting, voted or votes only); the oldest go first past it. */
export const MAX_HELD = 50_000
/** Bytes of held envelopes (frames and bookkeeping) at most; the oldest go first past it. */
export const MAX_HELD_BYTES = 64 * 1024 * 1024
/** What one held entry costs besides its frame: ids, the votes (up to N signatures), maps. */
const ENTRY_BYTES = 512
/** Envelopes known only by peers' votes, at most: votes for more unknown ids are dropped (a liar cannot push real envelopes out with votes for nothing). */
export const MAX_VOTES_ONLY = 10_000
/** Client envelopes sent along with one clock-votes message at most (peers charge each to this relay's voteFrames budget; their decoder takes no more). */
export const MAX_FRAMES_WITH_VOTES = MAX_VOTE_FRAMES
/** Votes per clock-votes message at most (the decoder refuses more). */
export const MAX_VOTES_PER_MESSAGE = 512

/** One vote this relay cast: what its monotonicity validator remembers. */
export interface CastVote {
  readonly space: string
  readonly authorId: string
  readonly seq: number
  readonly idHex: string
}

/** What the votes need of the relay around them. */
export interface ClockVotesHost {
  readonly committee: Committee
  readonly me: number
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  readonly clock: HostClock
  /** The space's audit replica (an empty one for a space with none): the stable history a clock is judged against. */
  replica(space: string): StableAudit
  /** The application validator: why `env` may not be written (the space's policy, the operators' rule), or undefined. */
  application(env: Envelope): SteadError | undefined
  /** Makes these votes durable (each replaces its author's last); resolves once they are. */
  persist(votes: readonly CastVote[]): Promise<void>
  /** Sends a message to every peer. */
  broadcast(message: Message): void
  /** This relay's own votes on envelopes of `space`, durable: for the space's subscribers. */
  cast?(space: string, votes: ReadonlyArray<readonly [Uint8Array, number, Uint8Array]>): void
  /** A validator certificate came together here (for metrics). */
  certified?(space: string, idHex: string): void
  /** The relay's verdict on an envelope (for metrics and logs). */
  judged?(result: 'voted' | 'refused' | 'unverifiable' | 'expired', env: Envelope, detail?: string): void
}

/** One envelope as the votes know it. */
interface Held {
  readonly space: string
  readonly idHex: string
  /** The envelope and its frame, once this relay has them. */
  env: Envelope | undefined
  frame: Uint8Array | undefined
  state: 'votes-only' | 'waiting' | 'voted' | 'refused'
  /**
   * Votes by relay index (this relay's once it is durable), the first of
   * each relay: a peer's vote is taken as its own (the mesh authenticates
   * the sender), its signature checked only when served (`certificate`).
   */
  readonly votes: Map<number, Vote & { checked?: boolean }>
  /** Peers' votes that came before the envelope: checked once it is held (a liar's votes for nothing cost no signature check). */
  unchecked: Map<number, Vote> | undefined
  /** Relays whose vote for it did not check: their votes for it cost no more signature checks. */
  badFrom: Set<number> | undefined
  /** Asks the client that brought the envelope for envelopes of the space it cites (set for a client's envelope only). */
  ask: ((ids: readonly string[]) => void) | undefined
  /** Ids already asked for, so each is asked once. */
  asked: Set<string> | undefined
  since: number
}

/** One relay's vote: the weight it computed and its signature over `encodeClockVote(space, id, weight)`. */
export interface Vote {
  readonly weight: number
  readonly sig: Uint8Array
}

/** The clock votes this relay has for an envelope, as served to clients: the envelope's frame and the votes, [relay, weight, signature]. */
export interface HeldCertificate {
  readonly frame: Uint8Array
  readonly votes: ReadonlyArray<readonly [number, number, Uint8Array]>
}

function first<T>(set: ReadonlySet<T>): T | undefined {
  return set.values().next().value
}

export class ClockVotes {
  private readonly host: ClockVotesHost
  private readonly quorum: number
  /** Envelopes by id (hex), oldest first. */
  private readonly held = new Map<string, Held>()
  /** Waiting envelopes by space: tried again when the space commits or a vote there is cast. */
  private readonly parked = new Map<string, Set<string>>()
  /** space \0 author → the last vote cast for that author (the monotonicity validator's table). */
  private readonly lastVote = new Map<string, { seq: number; idHex: string }>()
  /** Votes signed and not yet durable; sent once they are. */
  private outgoing: Array<{ held: Held; vote: CastVote; weight: number; sig: Uint8Array; fromClient: boolean }> = []
  /**
   * What parked envelopes wait for, by wake key (`slot:` an author's seq
   * voted or committed, `id:` an envelope voted or committed, `base:` a
   * space's stable index moved), and the keys woken since the last
   * `settle`: only the envelopes a vote or a commit concerns are tried
   * again (trying every parked one after every vote was quadratic under a flood).
   */
  private readonly waiters = new Map<string, Set<string>>()
  private readonly woken = new Set<string>()
  private flushTimer: HostTimer | undefined
  private sweepTimer: HostTimer | undefined
  private stopped = false
  /** Held entries in state 'votes-only'. */
  private votesOnly = 0
  /** What the held entries cost: ENTRY_BYTES each and their frames. */
  private heldBytes = 0

  constructor(host: ClockVotesHost) {
    this.host = host
    this.quorum = clockQuorum({ f: host.committee.f, relayKeys: host.committee.keys })
  }

  /** What the relay voted before it stopped (from its store): it never votes against it. */
  load(votes: Iterable<CastVote>): void {
    for (const v of votes) this.lastVote.set(`${v.space}\0${v.authorId}`, { seq: v.seq, idHex: v.idHex })
  }

  /** Envelopes held. */
  get size(): number {
    return this.held.size
  }

  /** Bytes held (see MAX_HELD_BYTES), for the relay's memory budget. */
  get bytes(): number {
    return this.heldBytes
  }

  /**
   * An envelope this relay now holds (a client's, or from a peer's block):
   * vote for its clock, or park it until its inputs are here. `ask` reaches
   * the client that brought it, to fetch envelopes it cites.
   */
  see(env: Envelope, frame: Uint8Array, ask?: (ids: readonly string[]) => void): void {
    if (this.stopped) return
    let h = this.held.get(env.idHex)
    if (h && h.env) {
      // A peer's frame brought it first: the client that submitted it can still be asked for what it cites.
      if (ask && !h.ask && h.space === env.space) {
        h.ask = ask
        if (h.state === 'waiting') {
          this.tryVote(h)
          this.settle()
        }
      }
      return
    }
    // Decided already, or refused by the application validator: nothing to hold (nor to push others out for).
    if (this.host.replica(env.space).decided(env) !== null) return
    const denied = this.host.application(env)
    if (denied) return this.host.judged?.('refused', env, `${denied.reason}: ${denied.message}`)
    // Votes that named another space for this id were a liar's: they go, the envelope says which space it is of.
    if (h && h.space !== env.space) {
      this.forget(h)
      h = undefined
    }
    if (!h) h = this.hold(env.space, env.idHex)
    if (h.state === 'votes-only') this.votesOnly--
    h.env = env
    h.frame = frame
    h.state = 'waiting'
    this.heldBytes += frame.length
    this.evict()
    h.ask = ask
    const unchecked = h.unchecked
    h.unchecked = undefined
    for (const [relay, vote] of unchecked ?? []) this.count(h, relay, vote)
    this.tryVote(h)
    this.settle()
  }

  /** Whether this relay holds envelope `idHex`, not refused (waiting for its inputs, or voted on). */
  holds(idHex: string): boolean {
    const h = this.held.get(idHex)
    return h?.env !== undefined && h.state !== 'refused'
  }

  /** A peer's votes: kept if valid, for envelopes held; for others, unchecked until the envelope comes (bounded). */
  onVotes(from: number, votes: ReadonlyArray<readonly [string, Uint8Array, number, Uint8Array]>): void {
    if (this.stopped || from === this.host.me) return
    for (const [space, id, weight, sig] of votes) {
      const idHex = toHex(id)
      let h = this.held.get(idHex)
      if (h && h.space !== space) continue
      if (!h && this.votesOnly >= MAX_VOTES_ONLY) continue
      if (!h) h = this.hold(space, idHex)
      if (h.env) this.count(h, from, { weight, sig })
      else if (!h.unchecked?.has(from)) (h.unchecked ??= new Map()).set(from, { weight, sig })
    }
  }

  /**
   * The clock votes held for `idHex` of `space` with its frame, for a
   * client gathering a certificate (it unions several relays' answers);
   * undefined for an envelope this relay does not hold.
   */
  certificate(space: string, idHex: string): HeldCertificate | undefined {
    const h = this.held.get(idHex)
    if (!h || h.space !== space || !h.frame) return undefined
    // Checked now, once each: under load a relay would spend N-1 signature checks per envelope on
    // votes nobody asks for (a client checks what it is served anyway, this keeps what is served honest).
    for (const [relay, v] of [...h.votes]) {
      if (v.checked || relay === this.host.me) continue
      const key = this.host.committee.keys[relay] as Uint8Array
      if (this.host.crypto.verify(key, encodeClockVote(h.space, fromHex(h.idHex), v.weight), v.sig)) v.checked = true
      else {
        h.votes.delete(relay)
        ;(h.badFrom ??= new Set()).add(relay)
      }
    }
    if (h.votes.size === 0) return undefined
    return { frame: h.frame, votes: [...h.votes].map(([relay, v]) => [relay, v.weight, v.sig] as const) }
  }

  /**
   * The audit decided envelope `idHex` of `space`: its commit proves its
   * clock from now on (its votes are still served, for HELD_MS: they state
   * its weight), and envelopes waiting on it may pass (at the next
   * `settle`, once the replica is done with the commit).
   */
  decided(space: string, idHex: string, authorId: string, seq: number): void {
    const h = this.held.get(idHex)
    if (h?.space === space && h.state !== 'voted') this.forget(h)
    if (!this.parked.get(space)?.size) return
    this.wake(`id:${idHex}`)
    this.wake(`slot:${space}\0${authorId}\0${seq}`)
    this.wake(`base:${space}`)
  }

  private wake(key: string): void {
    if (this.waiters.has(key)) this.woken.add(key)
  }

  stop(): void {
    this.stopped = true
    this.flushTimer?.cancel()
    this.sweepTimer?.cancel()
  }

  private hold(space: string, idHex: string): Held {
    const h: Held = { space, idHex, env: undefined, frame: undefined, state: 'votes-only', votes: new Map(), unchecked: undefined, badFrom: undefined, ask: undefined, asked: undefined, since: this.host.clock.now() }
    this.held.set(idHex, h)
    this.votesOnly++
    this.heldBytes += ENTRY_BYTES
    this.evict()
    this.armSweep()
    return h
  }

  /** The oldest entries go while there are too many or they weigh too much (never the newest: the caller holds it). */
  private evict(): void {
    while (this.held.size > 1 && (this.held.size > MAX_HELD || this.heldBytes > MAX_HELD_BYTES)) this.forget(this.held.values().next().value as Held)
  }

  private forget(h: Held): void {
    if (!this.held.delete(h.idHex)) return
    if (h.state === 'votes-only') this.votesOnly--
    this.heldBytes -= ENTRY_BYTES + (h.frame?.length ?? 0)
    this.parked.get(h.space)?.delete(h.idHex)
  }

  /** Takes a relay's vote for a held envelope (its first; one whose signature failed to check, none more). */
  private count(h: Held, relay: number, vote: Vote): void {
    if (!this.host.committee.keys[relay] || h.votes.has(relay) || h.badFrom?.has(relay)) return
    const before = this.certifiedWeight(h)
    h.votes.set(relay, vote)
    if (before === undefined && this.certifiedWeight(h) !== undefined) this.host.certified?.(h.space, h.idHex)
  }

  /** The weight a quorum of the votes held agree on, if any. */
  private certifiedWeight(h: Held): number | undefined {
    const tally = new Map<number, number>()
    for (const v of h.votes.values()) {
      const n = (tally.get(v.weight) ?? 0) + 1
      if (n >= this.quorum) return v.weight
      tally.set(v.weight, n)
    }
    return undefined
  }

  /** Runs the three validators on a held envelope: votes, refuses, or parks it. */
  private tryVote(h: Held): void {
    const env = h.env as Envelope
    const replica = this.host.replica(h.space)
    const park = (...keys: string[]): void => {
      let set = this.parked.get(h.space)
      if (!set) this.parked.set(h.space, (set = new Set()))
      set.add(h.idHex)
      for (const key of keys) {
        let ids = this.waiters.get(key)
        if (!ids) this.waiters.set(key, (ids = new Set()))
        ids.add(h.idHex)
      }
    }
    const refuse = (result: 'refused' | 'unverifiable', detail: string): void => {
      h.state = 'refused'
      this.parked.get(h.space)?.delete(h.idHex)
      this.host.judged?.(result, env, detail)
    }
    // Decided already: its commit is its proof (or it never will be).
    if (replica.decided(env) !== null) return this.forget(h)
    // Application validator.
    const denied = this.host.application(env)
    if (denied) return refuse('refused', `${denied.reason}: ${denied.message}`)
    // Monotonicity: one envelope per author and seq, voted in seq order.
    const slot = `${h.space}\0${env.authorId}`
    const last = this.lastVote.get(slot)
    if (last && last.seq > env.seq) return refuse('refused', `conflict: this relay voted for ${env.authorId}:${last.seq} already`)
    if (last && last.seq === env.seq) {
      // The same envelope again (this relay restarted since, or forgot it): the same vote, signed again.
      const again = last.idHex === env.idHex ? replica.clockWeight(env) : undefined
      return again !== undefined ? this.vote(h, env, again) : refuse('refused', `conflict: this relay voted for another envelope as ${env.authorId}:${env.seq}`)
    }
    const prevCommitted = replica.nextSeq(env.authorId) === env.seq
    const prevVoted = last?.seq === env.seq - 1 ? this.held.get(last.idHex)?.env : undefined
    if (env.seq > 1 && !prevCommitted && !(last?.seq === env.seq - 1)) return park(`slot:${h.space}\0${env.authorId}\0${env.seq - 1}`)
    // Update validator, with the inputs this relay vouched for.
    const verdict = replica.judgeBeforeOrder(env, { prev: prevVoted, byId: (idHex) => this.votedEnvelope(idHex) }, true)
    if (verdict === undefined) return park(`base:${h.space}`)
    if (!verdict.ok) return refuse('refused', `bad-clock: ${verdict.detail}`)
    const weight = verdict.ok ? replica.clockWeight(env) : undefined
    if (verdict.ok && verdict.verified && weight === undefined) return refuse('unverifiable', `its weight needs F(${env.base}) where this relay no longer knows it`)
    if (!verdict.verified) {
      const missing = env.deps.map(toHex).filter((idHex) => !replica.hasCommitted(idHex) && !this.votedEnvelope(idHex))
      if (!missing.length) return refuse('unverifiable', verdict.detail ?? 'its inputs are not all verified')
      const fresh = missing.filter((idHex) => !h.asked?.has(idHex) && !this.held.get(idHex)?.env)
      if (fresh.length && h.ask) {
        for (const idHex of fresh) (h.asked ??= new Set()).add(idHex)
        h.ask(fresh)
      }
      return park(...missing.map((idHex) => `id:${idHex}`))
    }
    this.vote(h, env, weight as number)
  }

  /** An envelope this relay voted for, by id. */
  private votedEnvelope(idHex: string): Envelope | undefined {
    const h = this.held.get(idHex)
    return h?.state === 'voted' ? h.env : undefined
  }

  private vote(h: Held, env: Envelope, weight: number): void {
    h.state = 'voted'
    this.parked.get(h.space)?.delete(h.idHex)
    const vote: CastVote = { space: h.space, authorId: env.authorId, seq: env.seq, idHex: env.idHex }
    this.lastVote.set(`${h.space}\0${env.authorId}`, { seq: env.seq, idHex: env.idHex })
    this.outgoing.push({ held: h, vote, weight, sig: this.host.crypto.sign(this.host.secretKey, encodeClockVote(h.space, env.id, weight)), fromClient: h.ask !== undefined })
    this.host.judged?.('voted', env)
    this.flushTimer ??= this.host.clock.setTimer(VOTE_FLUSH_MS, () => this.flush())
    // Envelopes that cite this one (or follow it) may pass now.
    this.wake(`slot:${h.space}\0${env.authorId}\0${env.seq}`)
    this.wake(`id:${env.idHex}`)
  }

  /**
   * Persist, then speak: the votes of this turn go to disk in one write,
   * then to the peers in one message. The frames of the clients'
   * envelopes among them go to the peers at once, before the write: a
   * client's envelope reaches the peers in this relay's next block, and
   * sent along now, they judge it while this relay's votes are written.
   */
  private flush(): void {
    this.flushTimer = undefined
    const batch = this.outgoing
    this.outgoing = []
    if (!batch.length || this.stopped) return
    const frames = batch.flatMap((b) => (b.fromClient && b.held.frame ? [b.held.frame] : []))
    for (let i = 0; i < frames.length; i += MAX_FRAMES_WITH_VOTES) this.host.broadcast({ kind: 'clock-votes', votes: [], frames: frames.slice(i, i + MAX_FRAMES_WITH_VOTES) })
    this.host.persist(batch.map((b) => b.vote)).then(
      () => {
        if (this.stopped) return
        const cast = batch.map((b) => [b.vote.space, fromHex(b.vote.idHex), b.weight, b.sig] as const)
        for (let i = 0; i < cast.length; i += MAX_VOTES_PER_MESSAGE) this.host.broadcast({ kind: 'clock-votes', votes: cast.slice(i, i + MAX_VOTES_PER_MESSAGE) })
        for (const b of batch) this.count(b.held, this.host.me, { weight: b.weight, sig: b.sig })
        // And to the spaces' subscribers.
        const bySpace = new Map<string, Array<readonly [Uint8Array, number, Uint8Array]>>()
        for (const [space, id, weight, sig] of cast) {
          let list = bySpace.get(space)
          if (!list) bySpace.set(space, (list = []))
          list.push([id, weight, sig])
        }
        for (const [space, votes] of bySpace) this.host.cast?.(space, votes)
      },
      // The store failed: the relay stops on its own write path; these votes are never sent.
      () => undefined,
    )
  }

  /** Tries the parked envelopes of spaces where something moved, until nothing more passes. */
  settle(): void {
    for (let key = first(this.woken); key !== undefined; key = first(this.woken)) {
      this.woken.delete(key)
      const ids = this.waiters.get(key)
      this.waiters.delete(key)
      for (const idHex of ids ?? []) {
        const h = this.held.get(idHex)
        if (!h?.env || h.state !== 'waiting' || !this.parked.get(h.space)?.has(idHex)) continue
        this.parked.get(h.space)?.delete(idHex)
        if (this.parked.get(h.space)?.size === 0) this.parked.delete(h.space)
        this.tryVote(h)
      }
    }
  }

  /** Drops what waited too long (PARK_MS parked, HELD_MS otherwise); armed while anything is held, as background work (it keeps no process or run alive). */
  private armSweep(): void {
    if (this.sweepTimer || this.stopped) return
    const timer = this.host.clock.setTimer(PARK_MS, () => {
      this.sweepTimer = undefined
      const now = this.host.clock.now()
      for (const h of [...this.held.values()]) {
        const age = now - h.since
        if (h.state === 'waiting' && age >= PARK_MS) {
          this.forget(h)
          if (h.env) this.host.judged?.('expired', h.env, 'its inputs never came')
        } else if (age >= (h.state === 'voted' ? HELD_MS : PARK_MS)) this.forget(h)
      }
      // Wake keys nothing waits on any more (their envelopes went, or never came back).
      for (const [key, ids] of this.waiters) {
        for (const idHex of ids) if (!this.held.has(idHex)) ids.delete(idHex)
        if (!ids.size) this.waiters.delete(key)
      }
      if (this.held.size) this.armSweep()
    })
    timer.unref?.()
    this.sweepTimer = timer
  }
}
