import {
  MAX_PEER_ADDRS,
  SteadError,
  authBytes,
  decodeClientMessage,
  encodeRelayMessage,
  fromHex,
  toHex,
  type ClientMessage,
  type ErrorReason,
  type HostClock,
  type HostTimer,
  type RelayMessage,
} from '@stead/core'
import { verifySync } from '@stead/core/node'
import { publicKeyFromRaw } from '@libp2p/crypto/keys'
import { peerIdFromPublicKey } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import { Bucket } from '../runtime/bucket.ts'
import type { ClientFacingLiar } from '../faults/client-lies.ts'
import type { CommitFeed } from '../store/feed.ts'
import { challengeNonce, type RelayNode, type Subscriber } from '../runtime/node.ts'
import { readerOf, type Reader } from '../runtime/space-access.ts'
import { PeerDirectory } from './peer-directory.ts'
import { PresenceRoom, type PresenceWatcher } from './presence.ts'
import { ReadWaits } from './read-waits.ts'
import { Inbound } from './inbound.ts'
import { SentEarly } from './sent-early.ts'
import { PacedStream } from './paced-stream.ts'
import { Shares } from './shares.ts'
import { CHUNK_BYTES } from '../store/store.ts'
import type { ApiLimits } from './server.ts'

/**
 * A client's connection as a session sees it: the `ws` WebSocket in a relay
 * process (ws-socket.ts), a simulated one in the simulator. Frames are
 * whole binary messages; `send` reports when a frame left (what backpressure
 * counts).
 */
export interface SessionSocket {
  /** Whether frames can be sent (open, not closing). */
  readonly open: boolean
  /** Sends one frame; `written` is called once it is written out (or the socket failed). */
  send(frame: Uint8Array, written: () => void): void
  /** Closes with a WebSocket close code and reason (a handshake: the peer may take a while). */
  close(code: number, reason: string): void
  /** Drops the connection at once. */
  terminate(): void
  /** Stops reading from the client (its sends then back up, as TCP pushes back); `resume` reads again. */
  pause(): void
  resume(): void
  /** Bytes of a frame begun and not finished: what the socket holds on the session's behalf. */
  unfinishedBytes(): number
  /** The largest frame taken from now on: a longer one is refused at its header. */
  setFrameLimit(bytes: number): void
  /** Each whole frame received, and whether it was binary. */
  onMessage(handler: (data: Uint8Array, isBinary: boolean) => void): void
  /** Each chunk of bytes that arrived (whole frame or not), after the socket took it in. */
  onChunk(handler: () => void): void
  /** Once, when the connection is closed for whatever reason. */
  onClose(handler: () => void): void
}

/** How often sessions are checked for auth and idle timeouts and clients that stopped reading. */
const SWEEP_MS = 1000

/** A session stops reading its commit feed while this much is queued towards its client. */
export const LOW_WATER_BYTES = 1024 * 1024
/** Largest frame a session takes before hello (a hello is a few hundred bytes): ws refuses a longer one at its header. */
const PRE_AUTH_FRAME_BYTES = 64 * 1024

/**
 * A relay's client sessions (the /v1/ws protocol) over any sockets: every
 * open session, the caps per key and per address, the shared inbound
 * budget, and the timeouts, on the node's clock. createApi hands it ws
 * sockets; the simulator hands it simulated ones (a SessionSocket each).
 */
export class ClientSessions {
  private readonly all = new Set<Session>()
  /** Open sessions by address: past maxConnections, the address holding the most gives way. */
  private readonly perAddress = new Shares<Session>()
  private readonly perKey = new Map<string, number>()
  readonly inbound: Bucket
  /** Bytes handed to sockets and not yet written out, over all sessions. */
  sending = 0
  /** Bytes received and not yet handled (throttled sessions' backlogs), over all sessions. */
  backlogged = 0
  /** Bytes paced streams hold to time their deltas (objects changed, their μ), over all sessions. */
  pacedBytes = 0
  /** Bytes of frames received and not finished yet (ws buffers them), over all sessions; past `unfinishedCap` the largest are cut. */
  unfinished = 0
  readonly unfinishedCap: number
  private sweeper: HostTimer | undefined
  /** The node's clock: sessions' timeouts and timers run on it. */
  readonly clock: HostClock

  readonly node: RelayNode
  readonly limits: ApiLimits
  readonly log: Logger
  readonly liar: ClientFacingLiar | undefined
  /** Where the clients of each space can be reached peer to peer, as they announced. */
  readonly directory: PeerDirectory<Session>
  /** Who is present in each space, as its sessions published (memory only). */
  readonly presence: PresenceRoom<Session>
  /** Subscriptions a space's policy refused, served once it lets their session read. */
  readonly readWaits: ReadWaits<Session>
  readonly peerAddresses: (() => string[]) | undefined
  constructor(node: RelayNode, limits: ApiLimits, log: Logger, liar?: ClientFacingLiar, peerAddresses?: () => string[]) {
    this.node = node
    this.limits = limits
    this.log = log
    this.liar = liar
    this.peerAddresses = peerAddresses
    this.readWaits = new ReadWaits<Session>((space, sub) => node.reads.watch(space, sub))
    this.directory = new PeerDirectory<Session>(limits.peerAnnouncements, (to, space, addrs) => to.peersOf(space, addrs))
    this.presence = new PresenceRoom<Session>(limits.presence, { now: () => node.clock.now(), verify: verifySync, admits: (bytes) => node.budget.admits(bytes), counted: (result) => node.metrics.presence.inc({ result }) })
    this.inbound = new Bucket(limits.globalRateLimit)
    node.trackSessions(() => this.count)
    node.budget.track('send-buffers', () => this.sending)
    node.budget.track('receive-backlogs', () => this.backlogged)
    node.budget.track('unfinished-frames', () => this.unfinished)
    node.budget.track('paced-streams', () => this.pacedBytes)
    node.budget.track('presence', () => this.presence.held, (bytes) => this.presence.reclaim(bytes))
    this.unfinishedCap = Math.floor(node.budget.totalBytes / 4)
    this.clock = node.clock
    this.sweep()
  }

  /** Every second: auth and idle timeouts, and clients that stopped reading (see Session.sweep). */
  private sweep(): void {
    this.sweeper = this.clock.setTimer(SWEEP_MS, () => {
      this.sweep()
      const now = this.clock.now()
      for (const s of this.all) s.sweep(now)
    })
    this.sweeper.unref?.()
  }

  get count(): { open: number; addresses: number; keys: number } {
    return { open: this.all.size, addresses: this.perAddress.holders, keys: this.perKey.size }
  }

  /** Unfinished frames past their cap: the sessions holding the most are cut until they fit (an honest frame finishes quickly). */
  shedUnfinished(): void {
    const holders = [...this.all].filter((s) => s.heldUnfinished > 0).sort((a, b) => b.heldUnfinished - a.heldUnfinished)
    for (const s of holders) {
      if (this.unfinished <= this.unfinishedCap) return
      s.cut(`${this.unfinished} bytes of unfinished frames are held for clients of this relay, more than ${this.unfinishedCap}; send whole frames`)
    }
  }

  /** A client connected from `address` (its IP, see addressKey): a session, unless the caps refuse it. */
  open(socket: SessionSocket, address: string): void {
    const refuse = (detail: string): void => {
      this.node.metrics.rejected.inc({ reason: 'too-many-sessions', source: 'client' })
      socket.send(encodeRelayMessage({ type: 'error', id: null, reason: 'too-many-sessions', detail }), () => undefined)
      socket.close(1013, 'too many sessions')
    }
    const fromAddress = this.perAddress.count(address)
    if (fromAddress >= this.limits.maxSessionsPerAddress) return refuse(`${fromAddress} sessions are open from ${address}, the most one address may hold`)
    if (this.all.size >= this.limits.maxConnections) {
      // Full: an address holding fewer sessions than the heaviest one takes the newest of that
      // one's, so a few addresses cannot hold every session and lock the others out.
      const heaviest = this.perAddress.heaviest()
      if (!heaviest || heaviest.count <= fromAddress + 1) return refuse('this relay has too many open sessions; try another relay or later')
      const newest = [...this.perAddress.itemsOf(heaviest.who)].pop() as Session
      this.node.metrics.rejected.inc({ reason: 'too-many-sessions', source: 'client' })
      newest.giveWay(`this relay is full and ${heaviest.who} holds the most sessions (${heaviest.count}): closed to make room for a client of another address`)
      // Gone now, not at its socket's close event: the next newcomer must not count it.
      this.all.delete(newest)
      this.perAddress.delete(heaviest.who, newest)
    }
    const session = new Session(this, socket, address)
    this.perAddress.add(address, session)
    this.all.add(session)
    socket.onChunk(() => session.trackUnfinished())
    socket.onClose(() => {
      this.all.delete(session)
      this.perAddress.delete(address, session)
      if (session.key) decrement(this.perKey, session.key)
    })
    session.start()
  }

  /** Counts a session under its proven key; false when the key already holds the most sessions allowed. */
  claimKey(keyHex: string): boolean {
    const n = this.perKey.get(keyHex) ?? 0
    if (n >= this.limits.maxSessionsPerKey) return false
    this.perKey.set(keyHex, n + 1)
    return true
  }

  close(): void {
    this.sweeper?.cancel()
    this.sweeper = undefined
    for (const s of this.all) s.terminate()
  }
}

function decrement(map: Map<string, number>, key: string): void {
  const n = (map.get(key) ?? 1) - 1
  if (n <= 0) map.delete(key)
  else map.set(key, n)
}

/** A subscription: its feed of stored commits, and whether that feed had nothing more when last read. */
interface FeedEntry {
  readonly feed: CommitFeed
  readonly unsubscribe: () => void
  idle: boolean
  /** Whether commits may name envelopes this session sent early by id (the subscription's `refs`). */
  readonly refs: boolean
  /** Whether the session takes this relay's clock votes on the space (the subscription's `votes`). */
  readonly votes: boolean
}

/** A paced subscription (BENDY's live stream): deltas at the client's freshness bound instead of the commit feed. */
interface PacedEntry {
  readonly paced: PacedStream
  readonly unsubscribe: () => void
}

/** How long a paced delta may wait for f+1 relays' signatures on its attestation. */
const CERTIFY_TIMEOUT_MS = 2_000

/** One client connection: authenticate, then subscribe and submit. */
class Session implements Subscriber, PresenceWatcher {
  private readonly nonce = challengeNonce()
  /** The key proven at hello (hex), fixed for the session's life. */
  key: string | undefined
  /** The key proven at hello (bytes), and who it proved to be (its user: see readerOf). */
  private proven: (Reader & { readonly key: Uint8Array }) | undefined
  /** The libp2p peer id of the session's key (what its peer addresses must name), once it announced. */
  private peerId: string | undefined
  private readonly feeds = new Map<string, FeedEntry | PacedEntry>()
  private readonly sentEarly = new SentEarly()
  /** This session's envelopes not decided yet, each with the function that stops watching it. */
  private readonly pending = new Map<string, () => void>()
  private readonly inbound: Inbound
  private readonly log: Logger
  /** Bytes handed to the socket and not yet written out. */
  private inflight = 0
  /** When the client last took something we sent (or when we started waiting on it). */
  private lastDrain: number
  private lastHeard: number
  private readonly openedAt: number
  private pumping = false
  private retryTimer: HostTimer | undefined
  /** `closing` once it is being closed (nothing more is queued, overflow is not checked again), `closed` once its socket is. */
  private state: 'open' | 'closing' | 'closed' = 'open'
  /** What this session's unfinished frame holds, as last counted in ClientSessions.unfinished. */
  heldUnfinished = 0
  private readonly sessions: ClientSessions
  private readonly socket: SessionSocket
  private readonly address: string
  constructor(
    sessions: ClientSessions,
    socket: SessionSocket,
    address: string,
  ) {
    this.lastDrain = this.lastHeard = this.openedAt = sessions.clock.now()
    this.sessions = sessions
    this.socket = socket
    this.address = address
    this.inbound = new Inbound(sessions.limits.rateLimit, {
      clock: sessions.clock,
      shared: sessions.inbound,
      held: (delta) => void (sessions.backlogged += delta),
      repliesPiled: () => this.inflight >= LOW_WATER_BYTES,
      isClosed: () => this.state === 'closed',
      handle: (data, isBinary) => this.onMessage(data, isBinary),
      pause: () => socket.pause(),
      resume: () => socket.resume(),
      refuse: (err) => this.fail(null, err),
    })
    this.log = sessions.log.child({ session: toHex(this.nonce.subarray(0, 4)) })
  }

  private get clock(): HostClock {
    return this.sessions.clock
  }

  private get node(): RelayNode {
    return this.sessions.node
  }

  private get limits(): ApiLimits {
    return this.sessions.limits
  }

  start(): void {
    this.node.metrics.clients.inc()
    this.socket.setFrameLimit(Math.min(PRE_AUTH_FRAME_BYTES, this.limits.maxFrameBytes))
    this.socket.onMessage((data, isBinary) => this.receive(data, isBinary))
    this.socket.onClose(() => this.onClose())
    this.send({ type: 'challenge', nonce: this.nonce, relay: this.node.me, relayKey: this.node.publicKey })
  }

  /** Called every second: auth and idle timeouts, and clients that stopped reading. */
  sweep(now: number): void {
    if (this.state === 'closed') return
    if (!this.key && now - this.openedAt > this.limits.authTimeoutMs) return this.end('unauthenticated', 'no answer to the challenge in time', 4003)
    if (now - this.lastHeard > this.limits.idleTimeoutMs) return this.end('closed', `nothing received for ${Math.round(this.limits.idleTimeoutMs / 1000)} s; ping to keep a session open`, 4000)
    if (this.inflight > 0 && now - this.lastDrain > this.limits.slowConsumerMs) {
      return this.end('slow-consumer', `read nothing of ${this.inflight} queued bytes for ${Math.round(this.limits.slowConsumerMs / 1000)} s; reconnect and resume from your stable index`, 4008)
    }
  }

  // ---- Subscriber ----

  envelope(space: string, frame: Uint8Array, idHex: string): void {
    if (!this.stillReads(space)) return
    const entry = this.feeds.get(space)
    // Paced: deltas only. Attestations only: this client takes its frames from another relay.
    if (!entry || 'paced' in entry || entry.feed.frames === false) return
    // Once: an envelope reaches a relay in each block that carries it (a leader's copy, a peer's wake).
    if (entry?.refs && this.sentEarly.has(frame)) return
    // The prospective feed is an early view of what the commit feed delivers anyway: a
    // client that is behind skips it rather than grow its buffer.
    if (this.inflight >= LOW_WATER_BYTES || !this.node.budget.admits(frame.length)) {
      this.node.metrics.prospectiveSkipped.inc()
      return
    }
    this.send({ type: 'envelope', space, envelope: frame })
    if (entry?.refs) this.sentEarly.remember(frame, idHex)
  }

  votes(space: string, frame: Uint8Array): void {
    const entry = this.feeds.get(space)
    if (!entry || 'paced' in entry || !entry.votes || !this.stillReads(space)) return
    // Votes are an early proof: a client that is behind skips them (it can ask for them: GET …/clock/:id).
    if (this.inflight >= LOW_WATER_BYTES || !this.node.budget.admits(frame.length)) return
    this.sendFrame(frame)
  }

  deliverPresence(frame: Uint8Array): boolean {
    // Presence is renewed by its authors: a client that is behind skips it rather than grow its buffer.
    if (this.state !== 'open' || this.inflight >= LOW_WATER_BYTES || !this.node.budget.admits(frame.length)) return false
    this.sendFrame(frame)
    return true
  }

  committed(space: string): void {
    const f = this.feeds.get(space)
    if (!f || !this.stillReads(space)) return
    if ('paced' in f) return f.paced.committed()
    f.idle = false
    this.pump()
  }

  /**
   * Whether this session may still read `space`. A policy change that took
   * its key off the readers ends its feed, presence and peer listing there
   * at once, before anything committed after the change is sent, and tells
   * the client so; the feed waits (ReadWaits) where the client stands, and
   * goes on from there as soon as a policy change lets it read again.
   */
  private stillReads(space: string): boolean {
    if (this.mayRead(space)) return true
    const entry = this.feeds.get(space)
    if (!entry) return false
    const resume =
      'paced' in entry
        ? { type: 'pace' as const, space, fromIndex: entry.paced.resumeIndex, freshnessMs: entry.paced.freshnessMs, mode: entry.paced.mode }
        : { type: 'subscribe' as const, space, fromIndex: entry.feed.resumeIndex, frames: entry.feed.frames, ...(entry.refs ? { refs: true } : {}), ...(entry.votes ? { votes: true } : {}) }
    this.leave(space)
    this.sessions.readWaits.wait(this, resume)
    this.send({ type: 'unreadable', space, detail: `key ${this.key} may no longer read space ${space}` })
    return false
  }

  /** Follows a space from `message.fromIndex` (paced for a `pace`), if the space's policy lets this session read it (see ReadWaits otherwise). */
  subscribe(message: Extract<ClientMessage, { type: 'subscribe' | 'pace' }>): void {
    if (!this.mayRead(message.space)) {
      this.leave(message.space)
      // Served as soon as a policy change lets this key read the space: no asking again.
      this.sessions.readWaits.wait(this, message)
      return this.send({ type: 'unreadable', space: message.space, detail: `key ${this.key} may not read space ${message.space}` })
    }
    this.sessions.readWaits.cancel(this, message.space)
    const had = this.feeds.get(message.space)
    if (!had && this.feeds.size >= this.limits.maxSubscriptions) return this.fail(null, new SteadError('too-large', `a session may subscribe to ${this.limits.maxSubscriptions} spaces`))
    had?.unsubscribe()
    this.feeds.delete(message.space)
    if (message.type === 'pace') return this.pace(message)
    // Older than the commits kept here: a client that wants them starts again from a verified snapshot. One that
    // wants attestations only (to count 2f+1 on its own commits) gets them from there on: a relay attests a
    // space's commits in chain order, so each one vouches for every commit before it too.
    const start = this.node.reads.feedStart(message.space)
    const frames = message.frames !== false
    if (start !== undefined && message.fromIndex < start && frames) return this.send({ type: 'pruned', space: message.space, from: start })
    const fromIndex = start === undefined ? message.fromIndex : Math.max(message.fromIndex, start)
    const refs = frames && message.refs === true
    const { feed, unsubscribe } = this.node.reads.subscribe(message.space, fromIndex, this, frames, refs ? (chunk) => this.sentEarly.refer(chunk) : undefined)
    this.feeds.delete(message.space)
    this.feeds.set(message.space, { feed, unsubscribe, idle: false, refs, votes: message.votes === true })
    // What this relay attested up to where the client stands: it counts towards the 2f+1 the client's own
    // outcomes wait for, even when no commit follows (the feed only sends what comes after).
    const vouch = fromIndex > 0 ? this.node.reads.attestedBy(message.space, fromIndex) : undefined
    if (vouch) this.send({ type: 'attest', space: message.space, round: vouch.round, sig: vouch.sig })
    this.pump()
    this.sessions.presence.watch(message.space, this)
  }

  /** Follows a space at a freshness bound (see PacedStream): deltas instead of envelopes and commits. Called by subscribe, which checks that the session may read it and drops what it followed before. */
  private pace(message: Extract<ClientMessage, { type: 'pace' }>): void {
    const { space } = message
    const reads = this.node.reads
    const paced = new PacedStream(space, message.fromIndex, message.freshnessMs, message.mode ?? 'adaptive', {
      clock: this.clock,
      stableIndex: () => reads.stableIndexOf(space),
      changedSince: (after, maxOps) => reads.changedKeys(space, after, maxOps),
      certifiedDelta: (from, mode) => reads.certifiedDelta(space, from, mode, CERTIFY_TIMEOUT_MS),
      send: (m) => {
        // A stream that gives up hands the space back to the client to subscribe: it leaves the session's feeds.
        if (m.type === 'unpaced' && this.feeds.get(space) === entry) this.leave(space)
        this.node.metrics.pacedDeltas.inc({ result: m.type === 'delta' ? 'sent' : 'unpaced' })
        this.send(m)
      },
      backedUp: () => this.inflight >= LOW_WATER_BYTES,
      hold: (bytes) => {
        if (bytes > 0 && !this.node.budget.admits(bytes)) return false
        this.sessions.pacedBytes += bytes
        return true
      },
    })
    const stop = reads.watch(space, this)
    const entry: PacedEntry = {
      paced,
      unsubscribe: () => {
        paced.close()
        stop()
      },
    }
    this.feeds.set(space, entry)
    this.sessions.presence.watch(space, this)
  }

  /** Whether the space's policy lets this session's key read `space` now. */
  mayRead(space: string): boolean {
    return this.node.reads.canRead(space, this.proven)
  }

  /** Stops following `space`: its feed, presence and peer listing. */
  private leave(space: string): void {
    // A commit half sent stays half sent: the client drops it with the subscription.
    this.feeds.get(space)?.unsubscribe()
    this.feeds.delete(space)
    this.sessions.directory.withdraw(space, this)
    this.sessions.presence.unwatch(space, this)
  }

  // ---- the commit feeds ----

  /**
   * Sends stored commits while the client keeps up: at most LOW_WATER_BYTES
   * plus one frame are queued towards it at any time, whatever the history.
   * The chunks of one commit go out in a row; spaces take turns otherwise.
   */
  private pump(): void {
    if (this.pumping || this.state === 'closed') return
    this.pumping = true
    try {
      while (this.inflight < LOW_WATER_BYTES) {
        const f = this.nextFeed()
        if (!f) return
        if (!this.node.budget.admits(2 * CHUNK_BYTES)) {
          // The relay is at its budget: try again shortly instead of growing.
          this.retryTimer ??= this.clock.setTimer(50, () => {
            this.retryTimer = undefined
            this.pump()
          })
          return
        }
        const frame = f.feed.next()
        if (!frame) {
          f.idle = true
          continue
        }
        // Round robin: the served space goes to the back unless its commit continues.
        if (!f.feed.midCommit) {
          this.feeds.delete(f.feed.space)
          this.feeds.set(f.feed.space, f)
        }
        this.sendFrame(frame)
      }
    } catch (err) {
      this.log.error({ err }, 'cannot read the commit feed from the store')
      this.end('malformed', 'this relay cannot read its store; try another relay', 1011)
    } finally {
      this.pumping = false
    }
  }

  private nextFeed(): FeedEntry | undefined {
    let first: FeedEntry | undefined
    for (const f of this.feeds.values()) {
      if ('paced' in f) continue
      if (f.feed.midCommit) return f
      if (!f.idle) first ??= f
    }
    return first
  }

  // ---- inbound ----

  /** Over the rate, messages wait in the inbound backlog (see Inbound). */
  private receive(data: Uint8Array, isBinary: boolean): void {
    this.lastHeard = this.clock.now()
    this.trackUnfinished()
    if (this.state === 'closed') return
    this.inbound.receive(data, isBinary)
  }

  private onMessage(data: Uint8Array, isBinary: boolean): void {
    const size = data.byteLength
    let message: ClientMessage
    try {
      if (!isBinary) throw new SteadError('malformed', 'frames must be binary msgpack')
      if (size > this.limits.maxFrameBytes) throw new SteadError('too-large', `frame of ${size} bytes exceeds ${this.limits.maxFrameBytes}`)
      message = decodeClientMessage(new Uint8Array(data.buffer, data.byteOffset, size))
    } catch (err) {
      return this.fail(null, err)
    }
    if (!this.key && message.type !== 'hello') return this.fail(null, new SteadError('unauthenticated', 'answer the challenge with hello first'))
    switch (message.type) {
      case 'hello':
        return this.hello(message)
      case 'subscribe':
        return this.subscribe(message)
      case 'pace':
        return this.subscribe(message)
      case 'applied': {
        const entry = this.feeds.get(message.space)
        if (entry && 'paced' in entry) entry.paced.applied(message.index)
        return
      }
      case 'unsubscribe':
        this.sessions.readWaits.cancel(this, message.space)
        return this.leave(message.space)
      case 'presence':
        if (!this.node.reads.canRead(message.space, this.proven)) return this.fail(null, new SteadError('unauthorized', `key ${this.key} may not read space ${message.space}, so it cannot be present there`))
        try {
          this.sessions.presence.publish(message.space, this, (this.proven as { key: Uint8Array }).key, message.signed, message.leave)
        } catch (err) {
          this.fail(null, err)
        }
        return
      case 'announce': {
        // Only for a space it follows: what it may read, and a bound on what it can make the relay keep.
        if (!this.feeds.has(message.space)) return this.fail(null, new SteadError('malformed', `announce for space ${message.space}, which this session does not follow: subscribe first`))
        // Only its own addresses: other clients trust a peer id the relays name as one that may read the space.
        this.peerId ??= peerIdFromPublicKey(publicKeyFromRaw((this.proven as { key: Uint8Array }).key)).toString()
        const foreign = message.addrs.find((a) => !a.endsWith(`/p2p/${this.peerId}`))
        if (foreign !== undefined) return this.fail(null, new SteadError('malformed', `announce ${foreign}: each address must end with /p2p/${this.peerId}, this session's key`))
        try {
          this.sessions.directory.announce(message.space, this, { key: this.key as string, address: this.address }, message.addrs)
        } catch (err) {
          this.fail(null, err)
        }
        return
      }
      case 'submit':
        // A relay told to censor answers as if it took the envelope, and drops it.
        if (this.sessions.liar && !this.sessions.liar.admits(message)) return this.send({ type: 'accepted', id: message.id, status: 'queued' })
        try {
          if (this.pending.size >= this.limits.maxPendingPerClient) throw new SteadError('rate-limited', `${this.pending.size} envelopes of this session are still undecided; wait for commits`)
          let decided = false
          const { status, idHex, stopWatching } = this.node.submit(
            message.envelope,
            this.address,
            (id) => {
              decided = true
              this.pending.delete(id)
            },
            (space, ids) => this.send({ type: 'want', space, ids: ids.map(fromHex) }),
          )
          if (status === 'queued' && !decided && !this.pending.has(idHex)) this.pending.set(idHex, stopWatching)
          else stopWatching()
          this.send({ type: 'accepted', id: message.id, status })
        } catch (err) {
          this.fail(message.id, err)
        }
        return
      case 'ping':
        this.sessions.directory.renew(this)
        // With this relay's clock: clients measure their device clock's offset from it (register stamps).
        this.send({ type: 'pong', n: message.n, time: Math.floor(this.clock.now()) })
        return
    }
  }

  private hello(message: Extract<ClientMessage, { type: 'hello' }>): void {
    if (this.key) return this.fail(null, new SteadError('unauthorized', `this session is already authenticated as ${this.key}; open another session for another key`))
    if (!verifySync(message.publicKey, authBytes(this.nonce, this.node.publicKey), message.sig)) {
      return this.end('bad-signature', 'hello signature does not match the challenge', 4001)
    }
    let reader: Reader
    try {
      reader = readerOf(message.publicKey, message.device)
    } catch (err) {
      return this.end('bad-signature', (err as Error).message, 4001)
    }
    const key = toHex(message.publicKey)
    if (!this.sessions.claimKey(key)) return this.end('too-many-sessions', `key ${key} already holds ${this.limits.maxSessionsPerKey} sessions on this relay`, 1013)
    this.key = key
    this.proven = { ...reader, key: message.publicKey }
    this.socket.setFrameLimit(this.limits.maxFrameBytes)
    const peers = this.sessions.peerAddresses?.().slice(0, MAX_PEER_ADDRS)
    const sig = message.nonce ? this.node.signWelcome(message.nonce, message.publicKey) : undefined
    this.send({ type: 'welcome', relay: this.node.me, n: this.node.committee.keys.length, f: this.node.committee.f, ...(peers?.length ? { peers } : {}), ...(sig ? { sig } : {}) })
  }

  /** Other clients of `space` can be reached at `addrs` (see PeerDirectory). */
  peersOf(space: string, addrs: string[]): void {
    this.send({ type: 'peers', space, addrs })
  }

  // ---- outbound ----

  private fail(id: number | null, err: unknown): void {
    const e = err instanceof SteadError ? err : new SteadError('malformed', (err as Error)?.message ?? String(err))
    this.node.metrics.rejected.inc({ reason: e.reason, source: 'client' })
    this.send({ type: 'error', id, reason: e.reason, detail: e.message })
  }

  /** Sends a typed error and closes the session; a client that does not read is cut off shortly after. */
  private end(reason: ErrorReason, detail: string, code: number): void {
    if (this.state !== 'open') return
    // Closing first: the error below must not trip the overflow check that may have called us.
    this.state = 'closing'
    this.fail(null, new SteadError(reason, detail))
    this.log.info({ reason, address: this.address, key: this.key }, 'closing client session')
    this.socket.close(code, reason)
    this.clock.setTimer(2000, () => this.terminate()).unref?.()
    this.onClose()
  }

  terminate(): void {
    this.socket.terminate()
  }

  /** Counts what this session's unfinished frame holds; past the relays' cap, the largest holders are cut. */
  trackUnfinished(): void {
    if (this.state === 'closed') return
    const now = this.socket.unfinishedBytes()
    this.sessions.unfinished += now - this.heldUnfinished
    this.heldUnfinished = now
    if (this.sessions.unfinished > this.sessions.unfinishedCap) this.sessions.shedUnfinished()
  }

  /** Closes the session at once with `rate-limited`: its buffers go now, not after the close handshake. */
  cut(detail: string): void {
    this.end('rate-limited', detail, 1013)
    this.terminate()
  }

  /** Closes this session to make room for another address's (see ClientSessions.open). */
  giveWay(detail: string): void {
    this.end('too-many-sessions', detail, 1013)
  }

  private send(m: RelayMessage): void {
    if (this.state === 'closed' || !this.socket.open) return
    this.sendFrame(encodeRelayMessage(m))
  }

  private sendFrame(bytes: Uint8Array): void {
    if (this.sessions.liar) this.sessions.liar.outgoing(bytes, (b) => this.write(b))
    else this.write(bytes)
  }

  private write(bytes: Uint8Array): void {
    if (this.state === 'closed' || !this.socket.open) return
    const size = bytes.length
    if (this.inflight === 0) this.lastDrain = this.clock.now()
    this.inflight += size
    this.sessions.sending += size
    this.socket.send(bytes, () => {
      this.inflight -= size
      this.sessions.sending -= size
      this.lastDrain = this.clock.now()
      if (this.inflight >= LOW_WATER_BYTES) return
      this.pump()
      this.inbound.wake()
    })
    if (this.state === 'open' && this.inflight > this.limits.maxBufferedBytes) {
      this.end('slow-consumer', `${this.inflight} bytes queued towards this client, more than ${this.limits.maxBufferedBytes}; reconnect and resume from your stable index`, 4008)
    }
  }

  private onClose(): void {
    if (this.state === 'closed') return
    this.state = 'closed'
    this.node.metrics.clients.dec()
    for (const stopWatching of this.pending.values()) stopWatching()
    this.pending.clear()
    this.retryTimer?.cancel()
    this.inbound.close()
    this.sessions.unfinished -= this.heldUnfinished
    this.heldUnfinished = 0
    for (const [space, f] of this.feeds) {
      f.unsubscribe()
      this.sessions.directory.withdraw(space, this)
    }
    this.feeds.clear()
    this.sessions.presence.closed(this)
    this.sessions.readWaits.forget(this)
  }
}

