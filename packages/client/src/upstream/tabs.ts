/**
 * Tabs of one origin sharing one client.
 *
 * One tab leads: it holds a Web Lock named after the storage, owns the
 * storage, the identity, the sequence numbers and the relay sessions, and
 * runs every space the tabs use. The other tabs follow over a
 * BroadcastChannel of the same name: each keeps a replica of the spaces it
 * uses (rebuilt from a snapshot the leader sends, then fed with the same
 * envelopes and commits the leader applies, so reads stay local and
 * synchronous) and forwards its updates to the leader, which puts them in
 * its next envelope, stores it and announces it. When the leader tab goes
 * away its lock is released, the next tab in line takes it, restores every
 * space from storage, and the others attach to it. See docs/architecture.md.
 *
 * An update is never lost and never counted twice across a change of
 * leader: a follower keeps its updates (shown prospectively) until an
 * announced envelope names their request, and the leader stores the
 * request ids with the envelope, so a request sent again to a new leader
 * that finds it stored is answered with the stored envelope.
 */
import { ReliableReplica, SteadError, decode, encode, encodeEnvelope, unitTagPrefix, type Crypto, type ErrorReason, type PresenceBody, type RegisterValue } from '@stead/core'
import { deferred, type Deferred, type DraftBatch, type DraftItem } from '../space/drafts.ts'
import { ClosedError } from '../errors.ts'
import { openTrusted } from './trusted.ts'
import { envelopeKeys, outcomeOf, regularUnitsOf, type OwnDecision, type SpaceNews } from './outbox.ts'
import type { ForwardedRequest } from './persist.ts'
import type { CausalComparison, ClockProof, ProofKind } from './proofs.ts'
import type { ChainPosition } from './quorum.ts'
import type { HistoryPage, PendingUpdate, Space, Upstream } from '../space/space.ts'
import type { ClientStorage } from '../storage/types.ts'
import type { RelayUpstream } from './upstream.ts'
import type { SafeResult, SessionsStatus } from '../types.ts'
import type { SpacePort } from '../space/space-port.ts'
import type { SharedPresence } from '../space/presence.ts'

/** Bumped whenever a message changes shape: tabs of different versions do not share a client. */
const PROTOCOL = 2

/** The parts of the Web Locks API tabs use (navigator.locks). */
export interface LockManagerLike {
  request(name: string, options: { ifAvailable?: boolean; signal?: AbortSignal }, callback: (lock: unknown) => Promise<void>): Promise<void>
}

/** The parts of BroadcastChannel tabs use. */
export interface ChannelLike {
  postMessage(message: unknown): void
  addEventListener(type: 'message', listener: (event: { data: unknown }) => void): void
  close(): void
}

/** What sharing a client between tabs needs from the platform (browsers: Web Locks, BroadcastChannel, IndexedDB). */
export interface TabPlatform {
  /** The shared storage's name: the lock and the channel are named after it. */
  readonly name: string
  readonly locks: LockManagerLike
  channel(name: string): ChannelLike
  /** Opens the shared storage; only the leader does. */
  storage(): Promise<ClientStorage>
}

export interface OutboxEntry extends PendingUpdate {
  readonly accepted: boolean
}

type Failure = { reason: ErrorReason; message: string }

/** Everything tabs say to each other. `from`/`to` are tab ids; the rest is broadcast. */
export type TabMessage =
  | { t: 'hello'; from: string; v: number }
  | { t: 'welcome'; to: string; v: number; authorId: string; userId?: string; publicKey: string; status: SessionsStatus }
  | { t: 'leader' }
  | { t: 'leaving' }
  | { t: 'status'; status: SessionsStatus }
  | { t: 'error'; error: Failure }
  | { t: 'attach'; from: string; space: string }
  | { t: 'snapshot'; to: string; space: string; checkpoint: Uint8Array; position: ChainPosition; pending: Uint8Array[]; outbox: OutboxEntry[] }
  | { t: 'detach'; from: string; space: string }
  | { t: 'bye'; from: string }
  | { t: 'seal'; from: string; space: string; request: string; regular: DraftItem[]; safe: DraftItem[][] }
  | { t: 'sealed'; space: string; frame: Uint8Array | null; requests: ForwardedRequest[]; places?: Array<[string, { n: number; shift: number }]> }
  | { t: 'failed'; space: string; requests: string[]; error: Failure }
  | { t: 'received'; space: string; frame: Uint8Array }
  | { t: 'committed'; space: string; round: number; frames: Uint8Array[] }
  | { t: 'refused'; space: string; id: string; reason: ErrorReason; detail: string }
  | { t: 'outbox'; space: string; entries: OutboxEntry[] }
  | { t: 'space-closed'; space: string }
  | { t: 'rebased'; space: string }
  | { t: 'presence'; space: string; others: SharedPresence[] }
  | { t: 'presence-set'; from: string; space: string; state: RegisterValue | null }
  | (Call & { from: string; id: number })
  | { t: 'return'; to: string; id: number; value?: unknown; error?: Failure }

/** What a following tab asks the leader to do for it: reads that need the relay sessions. */
type Call =
  | { t: 'call'; space: string; what: 'quorum-index'; timeoutMs: number }
  | { t: 'call'; space: string; what: 'object'; key: string; atLeast: number; timeoutMs: number }
  | { t: 'call'; space: string; what: 'history'; key: string; before: number; limit: number }
  | { t: 'call'; space: string; what: 'compare'; a: string; b: string }
  | { t: 'call'; space: string; what: 'proof'; update: string | number; kind?: ProofKind; waitMs?: number }

/** Runs a following tab's call on the leader's upstream. */
function answerCall(upstream: Upstream, m: Call): Promise<unknown> {
  switch (m.what) {
    case 'quorum-index':
      return upstream.quorumIndex(m.timeoutMs)
    case 'object':
      return upstream.stableObject(m.key, m.atLeast, m.timeoutMs)
    case 'history':
      return upstream.relayHistory(m.key, m.before, m.limit)
    case 'compare':
      return upstream.compare(m.a, m.b)
    case 'proof':
      return upstream.clockProof(m.update, m.kind ?? 'any', m.waitMs ?? 0)
  }
}

function failure(err: unknown): Failure {
  if (err instanceof SteadError) return { reason: err.reason, message: err.message.startsWith(`${err.reason}: `) ? err.message.slice(err.reason.length + 2) : err.message }
  return { reason: 'unsupported', message: String((err as Error)?.message ?? err) }
}

function fromFailure(f: Failure): SteadError {
  return f.reason === 'closed' ? new ClosedError(f.message.replace(/ is closed$/, '')) : new SteadError(f.reason, f.message)
}

/** A safe update whose envelope was decided while the lead changed hands: its outcome is in the stable state, not here. */
export function decidedMeanwhile(): SteadError {
  return new SteadError('unsupported', "this update was decided while the leading tab closed; read its objects' stable values for the outcome")
}

export function newTabId(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto
  return c?.randomUUID ? c.randomUUID() : `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`
}

// ---------------------------------------------------------------- leadership

/**
 * The leader lock. `claim` takes it if it is free now; `queue` waits for it
 * (until `signal` aborts). Either way the lock is held until `release()`
 * or until the tab goes away, which is what hands the lead on.
 */
export class LeaderLock {
  private releaseHeld: (() => void) | undefined

  private readonly locks: LockManagerLike
  private readonly name: string
  constructor(
    locks: LockManagerLike,
    name: string,
  ) {
    this.locks = locks
    this.name = name
  }

  async claim(): Promise<boolean> {
    return this.take({ ifAvailable: true })
  }

  /** Resolves true once this tab holds the lock, false if `signal` aborted first. */
  async queue(signal: AbortSignal): Promise<boolean> {
    return this.take({ signal }).catch(() => false)
  }

  private take(options: { ifAvailable?: boolean; signal?: AbortSignal }): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.locks
        .request(`stead-leader:${this.name}`, options, (lock) => {
          if (!lock) {
            resolve(false)
            return Promise.resolve()
          }
          const held = new Promise<void>((done) => (this.releaseHeld = done))
          resolve(true)
          return held
        })
        .catch(reject)
    })
  }

  release(): void {
    this.releaseHeld?.()
    this.releaseHeld = undefined
  }
}

// ---------------------------------------------------------------- the leader's side

/** What the leading client offers the hub. */
export interface HubHost {
  readonly authorId: string
  /** Whom policies see: the author, or the user it is a device of. */
  readonly userId: string
  /** The identity's public key, hex. */
  readonly publicKey: string
  status(): SessionsStatus
  /** Opens (or finds) a space for other tabs, with its relay upstream. */
  openForTabs(name: string): Promise<{ space: Space; upstream: RelayUpstream }>
  /** The space if it is open in this tab now (never opens one). */
  openSpace(name: string): Space | undefined
  /** No tab uses the space any more: close it unless this tab's app opened it. */
  unusedByTabs(name: string): void
  error(err: SteadError): void
}

/**
 * The leader's end of the channel: answers hellos and attaches with
 * snapshots, takes forwarded updates into the spaces' drafts, announces
 * what each space's upstream does (SpaceNews) and answers calls.
 */
export class TabHub {
  /** Space → tabs attached to it. */
  private readonly users = new Map<string, Set<string>>()
  /** Space → the end of its presence feed to the tabs (while some tab uses it). */
  private readonly presenceFeeds = new Map<string, () => void>()
  private readonly outboxPosts = new Set<string>()
  private closed = false

  private readonly channel: ChannelLike
  private readonly host: HubHost
  constructor(
    channel: ChannelLike,
    host: HubHost,
  ) {
    this.channel = channel
    this.host = host
    channel.addEventListener('message', (e) => {
      if (this.closed) return
      void this.receive(e.data as TabMessage).catch((err: unknown) => host.error(new SteadError('malformed', `a message from another tab failed: ${(err as Error)?.message ?? String(err)}`)))
    })
  }

  /** A new leader is ready: followers (re)attach to it. */
  announce(): void {
    this.post({ t: 'leader' } satisfies TabMessage)
  }

  status(): void {
    this.post({ t: 'status', status: this.host.status() } satisfies TabMessage)
  }

  error(err: SteadError): void {
    this.post({ t: 'error', error: failure(err) } satisfies TabMessage)
  }

  spaceClosed(space: string): void {
    if (this.users.has(space)) this.post({ t: 'space-closed', space } satisfies TabMessage)
  }

  /** This tab stops leading: it says so, then nothing more (a request it did not announce is sent again to the next leader). */
  close(): void {
    this.post({ t: 'leaving' })
    this.closed = true
    this.channel.close()
  }

  private post(m: TabMessage): void {
    if (!this.closed) this.channel.postMessage(m)
  }

  /** What a space's upstream tells the other tabs (only while some tab uses it). */
  newsFor(space: string, upstream: () => RelayUpstream): SpaceNews {
    const post = (m: TabMessage): void => {
      if (this.users.get(space)?.size) this.post(m)
    }
    return {
      sealed: (frame, requests, places) => post({ t: 'sealed', space, frame: frame ?? null, requests: [...requests], ...(places?.size ? { places: [...places] } : {}) }),
      received: (frame) => post({ t: 'received', space, frame }),
      committed: (round, frames) => post({ t: 'committed', space, round, frames: [...frames] }),
      refused: (id, reason, detail) => post({ t: 'refused', space, id, reason, detail }),
      rebased: () => post({ t: 'rebased', space }),
      followed: () => (this.users.get(space)?.size ?? 0) > 0,
      failed: (requests, err) => post({ t: 'failed', space, requests: requests.map((r) => r.id), error: failure(err) }),
      outboxChanged: () => {
        // Several changes in one turn make one message.
        if (this.outboxPosts.has(space) || !this.users.get(space)?.size) return
        this.outboxPosts.add(space)
        queueMicrotask(() => {
          this.outboxPosts.delete(space)
          post({ t: 'outbox', space, entries: upstream().outbox.entries() })
        })
      },
    }
  }

  private async receive(m: TabMessage): Promise<void> {
    switch (m.t) {
      case 'hello':
        this.post({ t: 'welcome', to: m.from, v: PROTOCOL, authorId: this.host.authorId, userId: this.host.userId, publicKey: this.host.publicKey, status: this.host.status() } satisfies TabMessage)
        return
      case 'attach': {
        let users = this.users.get(m.space)
        if (!users) this.users.set(m.space, (users = new Set()))
        users.add(m.from)
        const { space, upstream } = await this.host.openForTabs(m.space)
        this.feedPresence(m.space, space)
        // Taken and posted in one step: every announcement after it is news to the follower.
        this.post({
          t: 'snapshot',
          to: m.from,
          space: m.space,
          checkpoint: encode(space.replica.checkpoint()),
          position: space.position,
          pending: space.replica.pendingEnvelopes().map((e) => encodeEnvelope(e)),
          outbox: upstream.outbox.entries(),
        } satisfies TabMessage)
        return
      }
      case 'detach':
        this.leave(m.space, m.from)
        return
      case 'bye':
        for (const space of [...this.users.keys()]) this.leave(space, m.from)
        return
      case 'seal': {
        const { space, upstream } = await this.host.openForTabs(m.space)
        // Sent twice (a follower attached again before the envelope was announced): it is in the drafts.
        if (space.drafts.some((d) => d.requests.some((r) => r.id === m.request))) return
        const stored = upstream.outbox.carrying(m.request)
        if (stored) {
          // Sent again after a change of leader: it is in a stored envelope already (null: one decided since).
          this.post({ t: 'sealed', space: m.space, frame: stored.frame ?? null, requests: [{ id: stored.request.id, safe: stored.request.safe }] } satisfies TabMessage)
          return
        }
        try {
          space.queueForwarded(m.request, m.regular, m.safe)
        } catch (err) {
          // A space closing here is not the update's fault: the follower sends it again to whoever runs the space next.
          if (!(err instanceof ClosedError)) this.post({ t: 'failed', space: m.space, requests: [m.request], error: failure(err) } satisfies TabMessage)
        }
        return
      }
      case 'presence-set': {
        // One presence per client: it shows the latest state a tab set (see Presence.setFor). Only from a tab
        // that uses the space: a late one from a tab that left must not open it again.
        if (!this.users.get(m.space)?.has(m.from)) return
        try {
          this.host.openSpace(m.space)?.presence.setFor(m.from, m.state)
        } catch (err) {
          // A space closing here takes its presence with it; anything else is the tab's fault.
          if (!(err instanceof ClosedError)) throw err
        }
        return
      }
      case 'call': {
        let reply: TabMessage
        try {
          const { upstream } = await this.host.openForTabs(m.space)
          const value = await answerCall(upstream, m)
          reply = { t: 'return', to: m.from, id: m.id, value }
        } catch (err) {
          reply = { t: 'return', to: m.from, id: m.id, error: failure(err) }
        }
        this.post(reply)
        return
      }
      default:
        return
    }
  }

  /** Posts who is present in `space` to the tabs that use it, now and whenever it changes. */
  private feedPresence(name: string, space: Space): void {
    const post = (): void => this.post({ t: 'presence', space: name, others: space.presence.shared() } satisfies TabMessage)
    if (!this.presenceFeeds.has(name)) this.presenceFeeds.set(name, space.presence.subscribe((change) => (change.local ? undefined : post())))
    post()
  }

  private leave(space: string, tab: string): void {
    const users = this.users.get(space)
    if (!users?.delete(tab)) return
    // What that tab showed goes with it (a tab that vanished said nothing).
    try {
      this.host.openSpace(space)?.presence.setFor(tab, null)
    } catch {
      // The space is closing: its presence goes anyway.
    }
    if (users.size) return
    this.presenceFeeds.get(space)?.()
    this.presenceFeeds.delete(space)
    this.users.delete(space)
    this.host.unusedByTabs(space)
  }
}

// ---------------------------------------------------------------- the followers' side

/**
 * A following tab's end of the channel: one per client. It introduces the
 * tab to the leader, routes the leader's messages to the spaces that
 * follow, and carries calls.
 */
export class LeaderLink {
  status: SessionsStatus = { online: false, relays: [], trusted: false, epoch: 0, problem: 'waiting for the leading tab' }
  private readonly spaces = new Map<string, TabUpstream>()
  private readonly calls = new Map<number, Deferred<unknown>>()
  private nextCall = 1
  private welcome: Deferred<{ authorId: string; userId: string; publicKey: string }> | undefined
  private closed = false

  readonly tab: string
  private readonly channel: ChannelLike
  private readonly events: { status(): void; error(err: SteadError): void }
  constructor(
    tab: string,
    channel: ChannelLike,
    events: { status(): void; error(err: SteadError): void },
  ) {
    this.tab = tab
    this.channel = channel
    this.events = events
    channel.addEventListener('message', (e) => this.receive(e.data as TabMessage))
  }

  /** The leader's sessions as this client or one of its spaces reports them (`problem`: theirs, which comes first), like RelaySessions.statusFor. */
  statusFor(closed: boolean, problem?: string): SessionsStatus {
    const why = problem ?? (closed ? 'closed' : this.status.problem)
    return { online: !closed && this.status.online, relays: this.status.relays, trusted: this.status.trusted, epoch: this.status.epoch ?? 0, ...(why ? { problem: why } : {}) }
  }

  /** Asks the leader who this client is; resolves when a leader answers. */
  hello(): Promise<{ authorId: string; userId: string; publicKey: string }> {
    this.welcome ??= deferred()
    this.post({ t: 'hello', from: this.tab, v: PROTOCOL })
    return this.welcome.promise
  }

  follow(upstream: TabUpstream): void {
    this.spaces.set(upstream.spaceName, upstream)
  }

  unfollow(upstream: TabUpstream): void {
    if (this.spaces.get(upstream.spaceName) !== upstream) return
    this.spaces.delete(upstream.spaceName)
    this.post({ t: 'detach', from: this.tab, space: upstream.spaceName })
  }

  /** The spaces following the leader (handed over when this tab takes the lead). */
  followers(): TabUpstream[] {
    return [...this.spaces.values()]
  }

  post(m: TabMessage): void {
    if (!this.closed) this.channel.postMessage(m)
  }

  call<T>(m: Call): Promise<T> {
    const id = this.nextCall++
    const d = deferred<unknown>()
    this.calls.set(id, d)
    this.post({ ...m, from: this.tab, id } as TabMessage)
    return d.promise.finally(() => this.calls.delete(id)) as Promise<T>
  }

  /** This tab leaves (closing) or leads now (`handedOver`): the channel is no longer its way in. */
  close(handedOver = false): void {
    if (this.closed) return
    if (!handedOver) this.post({ t: 'bye', from: this.tab })
    this.closed = true
    this.channel.close()
    for (const d of this.calls.values()) d.reject(new SteadError('unsupported', 'the leading tab changed during the call; try again'))
    this.calls.clear()
  }

  private receive(m: TabMessage): void {
    if (this.closed) return
    switch (m.t) {
      case 'welcome':
        if (m.to !== this.tab || !this.welcome) return
        if (m.v !== PROTOCOL) this.welcome.reject(new SteadError('unsupported', `another tab runs a different version of Stead (tab protocol ${m.v}, this one ${PROTOCOL}); reload the other tabs`))
        else {
          this.status = m.status
          this.welcome.resolve({ authorId: m.authorId, userId: m.userId ?? m.authorId, publicKey: m.publicKey })
        }
        return
      case 'leader':
        // A new leader: introduce this tab again and attach every space to it.
        this.post({ t: 'hello', from: this.tab, v: PROTOCOL })
        for (const s of this.spaces.values()) s.reattach()
        for (const d of this.calls.values()) d.reject(new SteadError('unsupported', 'the leading tab changed during the call; try again'))
        this.calls.clear()
        return
      case 'leaving':
        // What the leader said of its outbox may be out of date now: waits hold until the next one answers.
        for (const s of this.spaces.values()) s.leaderLeft()
        return
      case 'status':
        this.status = m.status
        this.events.status()
        for (const s of this.spaces.values()) s.space.emitStatus()
        return
      case 'error':
        this.events.error(fromFailure(m.error))
        return
      case 'return': {
        if (m.to !== this.tab) return
        const d = this.calls.get(m.id)
        if (m.error) d?.reject(fromFailure(m.error))
        else d?.resolve(m.value)
        return
      }
      case 'snapshot':
        if (m.to === this.tab) this.spaces.get(m.space)?.snapshot(m)
        return
      case 'sealed':
      case 'failed':
      case 'received':
      case 'committed':
      case 'refused':
      case 'outbox':
      case 'space-closed':
      case 'rebased':
      case 'presence':
        this.spaces.get(m.space)?.news(m)
        return
      default:
        return
    }
  }
}

/** A request forwarded to the leader and not yet announced in an envelope. */
export interface InFlight {
  readonly request: string
  readonly batch: DraftBatch
  /** Resolves the `seal` promise the space waits on. */
  readonly done: () => void
}

/**
 * A space's upstream in a following tab: its drafts go to the leader, its
 * replica follows the leader's announcements, its waits see the leader's
 * outbox.
 */
export class TabUpstream implements Upstream {
  readonly spaceName: string
  /** Sealed envelopes this tab's safe groups wait in: envelope id → group index → waiter. */
  readonly awaiting = new Map<string, Map<number, Deferred<SafeResult>>>()
  private inFlight: InFlight | undefined
  private outbox: OutboxEntry[] = []
  private attached: Deferred<void> = deferred()
  /** The replica follows the leader's current snapshot: news before it are already in it. */
  private synced = false
  /** Set while this tab takes the lead: updates wait for the upstream it builds. */
  private next: Promise<Upstream> | undefined
  private closed = false
  /** Request ids are unique per upstream instance (a space closed and opened again must not reuse one the leader stored). */
  private readonly requestPrefix = newTabId()
  private nextRequest = 0

  readonly space: SpacePort
  private readonly link: LeaderLink
  private readonly crypto: Crypto
  private readonly replicaOptions: { space: string; historyLimit?: number }
  constructor(
    space: SpacePort,
    link: LeaderLink,
    crypto: Crypto,
    replicaOptions: { space: string; historyLimit?: number },
  ) {
    this.space = space
    this.link = link
    this.crypto = crypto
    this.replicaOptions = replicaOptions
    this.spaceName = space.space
    link.follow(this)
  }

  /** Asks the leader for a snapshot; resolves once the replica follows it. */
  attach(): Promise<void> {
    this.link.post({ t: 'attach', from: this.link.tab, space: this.spaceName })
    return this.attached.promise
  }

  leaderLeft(): void {
    this.synced = false
  }

  reattach(): void {
    if (this.closed || this.next) return
    // Whoever waits for the first attach keeps waiting for this one.
    if (this.synced) this.attached = deferred()
    this.synced = false
    void this.attach()
  }

  snapshot(m: Extract<TabMessage, { t: 'snapshot' }>): void {
    const replica = ReliableReplica.restore(this.replicaOptions, decode(m.checkpoint, 1024 * 1024 * 1024), (signed) => openTrusted(this.crypto, signed))
    for (const frame of m.pending) replica.receive(openTrusted(this.crypto, frame))
    this.outbox = m.outbox
    this.space.adopt(replica, m.position)
    // Envelopes this tab waits on that the leader decided while leadership changed hands.
    for (const [idHex, groups] of this.awaiting) {
      if (replica.isPending(idHex) || this.outbox.some((o) => o.id === idHex)) continue
      this.awaiting.delete(idHex)
      for (const w of groups.values()) w.reject(decidedMeanwhile())
    }
    this.synced = true
    this.attached.resolve()
    // A request the previous leader may not have taken: send it again (a leader that stored it says so).
    if (this.inFlight) this.forward(this.inFlight)
  }

  news(m: Extract<TabMessage, { space: string }>): void {
    if (this.closed || this.next) return
    // The leader's replica went away, or was replaced by a snapshot: follow its new one.
    if (m.t === 'space-closed' || m.t === 'rebased') return this.reattach()
    // Presence is no part of the replica: it needs no snapshot first.
    if (m.t === 'presence') return this.space.presence.mirror(m.others)
    if (!this.synced) return
    const { space } = this
    switch (m.t) {
      case 'sealed': {
        const env = m.frame && openTrusted(this.crypto, m.frame)
        // Drafts of this tab in it are named by their signed tags from now on (views and later ops name them).
        if (env && m.places) space.draftIds.signedAs(new Map(m.places), unitTagPrefix(env.id))
        const mine = this.inFlight && m.requests.find((r) => r.id === this.inFlight?.request)
        if (mine && this.inFlight) {
          const { batch, done } = this.inFlight
          this.inFlight = undefined
          // Counted as pending until the leader's outbox says more: `pending` never dips.
          if (env && !this.outbox.some((o) => o.id === env.idHex)) this.outbox = [...this.outbox, { id: env.idHex, keys: envelopeKeys(env), safe: env.safe.length, regular: regularUnitsOf(env), sent: false, accepted: false }]
          if (env && mine.safe.length) this.awaiting.set(env.idHex, new Map(mine.safe.map((g, i) => [g, batch.safe[i]?.waiter as Deferred<SafeResult>])))
          // Its envelope was decided while the lead changed hands.
          else if (!env && mine.safe.length) for (const g of batch.safe) g.waiter.reject(decidedMeanwhile())
          space.batchSigned(batch, env ?? undefined)
          done()
        } else if (env) space.notify(space.replica.receive(env).changed)
        return
      }
      case 'failed': {
        if (!this.inFlight || !m.requests.includes(this.inFlight.request)) return
        const { batch, done } = this.inFlight
        this.inFlight = undefined
        space.batchFailed(batch, fromFailure(m.error))
        done()
        return
      }
      case 'received':
        space.notify(space.replica.receive(openTrusted(this.crypto, m.frame), { expires: true }).changed)
        return
      case 'committed': {
        const result = space.replica.commit(
          m.frames.map((f) => openTrusted(this.crypto, f)),
          m.round,
        )
        space.decided(result.decisions)
        space.advance({ stableIndex: result.stableIndex, lastRound: m.round })
        for (const d of result.decisions) this.settle(d.env.idHex, d)
        space.notify(result.changed)
        space.progress()
        space.emitStatus()
        return
      }
      case 'refused':
        space.notify(space.replica.discard(m.id))
        this.settle(m.id, { kind: 'refused', reason: m.reason, detail: m.detail })
        return
      case 'outbox':
        this.outbox = m.entries
        space.progress()
        space.emitStatus()
        return
      default:
        return
    }
  }

  /** Resolves this tab's safe groups in a decided envelope (the leader's outbox reports the rest of it). */
  private settle(idHex: string, d: OwnDecision): void {
    const groups = this.awaiting.get(idHex)
    if (!groups) return
    const env = d.kind === 'refused' ? undefined : d.env
    if (d.kind === 'dropped' && (d.reason === 'gap' || d.reason === 'duplicate')) return
    this.awaiting.delete(idHex)
    const outcome = env ? outcomeOf(env, regularUnitsOf(env), d) : undefined
    for (const [group, waiter] of groups) {
      const result: SafeResult | undefined = outcome ? outcome.safe[group] : d.kind === 'refused' ? { status: 'rejected', reason: d.reason, detail: d.detail } : undefined
      if (result) waiter.resolve(result)
    }
    if (env && outcome) this.space.emitSettled({ id: idHex, keys: envelopeKeys(env), safe: [...groups.keys()].map((g) => outcome.safe[g] as SafeResult), ...(outcome.index !== undefined ? { index: outcome.index } : {}) })
  }

  // ---- Upstream

  publishPresence(body: PresenceBody): void {
    if (!this.closed) this.link.post({ t: 'presence-set', from: this.link.tab, space: this.spaceName, state: body.state })
  }

  seal(batch: DraftBatch): Promise<void> {
    if (this.next) return this.next.then((up) => up.seal(batch))
    if (this.closed) {
      this.space.batchFailed(batch, new ClosedError(`space ${this.spaceName}`))
      return Promise.resolve()
    }
    return new Promise<void>((done) => {
      this.inFlight = { request: `${this.requestPrefix}:${this.nextRequest++}`, batch, done }
      this.forward(this.inFlight)
    })
  }

  private forward(f: InFlight): void {
    this.link.post({
      t: 'seal',
      from: this.link.tab,
      space: this.spaceName,
      request: f.request,
      regular: [...f.batch.regular],
      safe: f.batch.safe.map((g) => [...g.items]),
    })
  }

  /**
   * This tab takes the lead: returns what it had forwarded and what it
   * waits on, for the upstream being built; updates made meanwhile wait for `next`.
   */
  handOver(next: Promise<Upstream>): { inFlight: InFlight | undefined; awaiting: Map<string, Map<number, Deferred<SafeResult>>> } {
    this.next = next
    // What the last leader said no longer holds: nothing is known until `next` takes over.
    this.synced = false
    const handed = { inFlight: this.inFlight, awaiting: new Map(this.awaiting) }
    this.inFlight = undefined
    this.awaiting.clear()
    return handed
  }

  pendingUpdates(): PendingUpdate[] {
    return this.outbox.map(({ accepted: _accepted, ...p }) => p)
  }

  /** Known only while a leader answers: between leaders nothing is known to be accepted or decided. */
  allAccepted(): boolean {
    return this.synced && !this.inFlight && this.outbox.every((o) => o.accepted)
  }

  allDecided(): boolean {
    return this.synced && !this.inFlight && this.outbox.length === 0
  }

  quorumIndex(timeoutMs: number): Promise<number> {
    return this.link.call<number>({ t: 'call', space: this.spaceName, what: 'quorum-index', timeoutMs })
  }

  relayHistory(key: string, before: number, limit: number): Promise<HistoryPage> {
    return this.link.call<HistoryPage>({ t: 'call', space: this.spaceName, what: 'history', key, before, limit })
  }

  compare(a: string, b: string): Promise<CausalComparison> {
    return this.link.call<CausalComparison>({ t: 'call', space: this.spaceName, what: 'compare', a, b })
  }

  clockProof(update: string | number, kind: ProofKind = 'any', waitMs = 0): Promise<ClockProof> {
    return this.link.call<ClockProof>({ t: 'call', space: this.spaceName, what: 'proof', update, kind, waitMs })
  }

  stableObject(key: string, atLeast: number, timeoutMs: number): Promise<{ index: number; value: unknown } | undefined> {
    return this.link.call<{ index: number; value: unknown } | undefined>({ t: 'call', space: this.spaceName, what: 'object', key, atLeast, timeoutMs })
  }

  sessionsStatus(closed: boolean, problem: string | undefined): SessionsStatus {
    return this.link.statusFor(closed, problem)
  }

  async close(): Promise<void> {
    this.closed = true
    this.link.unfollow(this)
    for (const groups of this.awaiting.values()) for (const w of groups.values()) w.reject(new ClosedError(`space ${this.spaceName}`))
    this.awaiting.clear()
  }
}
