import { ReliableReplica, SteadError, authorIdOf, bytesEqual, certifyDevice, clockInit, deviceCertificateHoldsAsync, fromHex, followEpochs, isSteadError, toHex, userIdOf, MAX_EPOCHS_FOLLOWED, type Clock, type EpochCertificate, type ClockRecord, type Crypto, type DeviceCertificate, type Envelope } from '@stead/core'
import { decodeDeviceToken, encodeDeviceToken } from './handles/device-token.ts'
import { decodeCluster, descriptorOf, encodeCluster, epochCommitteeOf, sameCluster, type ClusterDescriptor, type Fetch } from './transport/cluster.ts'
import { decodeRelayUrls, encodeRelayUrls, startUrls } from './transport/relay-urls.ts'
import { decodeCertificates, encodeCertificates } from './transport/epoch-follower.ts'
import { checkClientOptions, checkStorage, clockOf } from './options.ts'
import { checkTimeout } from './wait.ts'
import type { Deferred } from './space/drafts.ts'
import { ClosedError } from './errors.ts'
import { openTrusted } from './upstream/trusted.ts'
import { Listeners } from './listeners.ts'
import { PeerHub, type PeerStats } from './peers/peers.ts'
import { NO_NEWS } from './upstream/outbox.ts'
import { ClientRecords, type AuthorState, type Restored } from './upstream/persist.ts'
import { RelaySessions } from './transport/sessions.ts'
import { Space, type Upstream } from './space/space.ts'
import { initOp, type SpacePolicyInit } from './handles/members-handle.ts'
import { decodeInvitation, spaceNameProblem } from './handles/invitation-token.ts'
import type { ClientStorage, StorageChange } from './storage/types.ts'
import { LeaderLink, LeaderLock, TabHub, TabUpstream, decidedMeanwhile, newTabId, type TabPlatform } from './upstream/tabs.ts'
import type { Identity, SocketFactory } from './transport/transport.ts'
import type { ClientOptions, SafeResult, SessionsStatus, WaitOptions } from './types.ts'
import { RelayUpstream } from './upstream/upstream.ts'

export { Space, type SettledUpdate } from './space/space.ts'

/** How long `join` waits for its redemption to be seen committed, by default. */
const DEFAULT_JOIN_TIMEOUT_MS = 30_000

/** What a platform entry (browser or Node) supplies when the caller does not. */
export interface PlatformDefaults {
  storage(): ClientStorage | Promise<ClientStorage>
  crypto(): Promise<Crypto>
  connect: SocketFactory | undefined
  fetch: Fetch | undefined
  /** Where tabs can share one client (browsers with Web Locks and BroadcastChannel, default storage). */
  tabs?: TabPlatform
}

/** What the leading tab (or a client without tabs) owns. */
interface Lead {
  readonly storage: ClientStorage
  readonly identity: Identity
  readonly sessions: RelaySessions
  /** Peer sync, when the app gave a peer network. */
  readonly peers: PeerHub | undefined
}

/** How this client shares itself with other tabs, when it does. */
interface Tabs {
  readonly platform: TabPlatform
  readonly tab: string
  readonly lock: LeaderLock
  /** Ends the wait for the lead when this client closes. */
  readonly stopWaiting: AbortController
  /** The leader's end of the channel, while this tab leads. */
  hub?: TabHub
  /** The followers' end, while another tab leads. */
  link?: LeaderLink
}

interface ClientInit {
  options: ClientOptions
  platform: PlatformDefaults
  crypto: Crypto
  /** The cluster the app pinned in its options, parsed. */
  cluster: ClusterDescriptor | undefined
  authorId: string
  /** The user the identity acts for: its own id, or its device certificate's user's. */
  userId: string
  /** The identity's Ed25519 public key, hex. */
  publicKey: string
  tabs?: Tabs
}

/**
 * A signed-in user: one identity, one storage, one session per relay, and
 * any number of spaces sharing them (`space(name)`). In browsers the tabs
 * of one origin share one client (see "Tabs" in docs/architecture.md): the
 * leading tab owns all that, the others follow it.
 *
 * Make one with {@link createClient}, one per user and device, and keep it
 * for the life of the app; {@link SteadClient.close} when done.
 */
export class SteadClient {
  /**
   * This client's author id, derived from its public key: what other
   * clients see as the author of its updates, and what bounded counter
   * rights are held under. The same in every tab sharing the client.
   */
  readonly authorId: string
  /**
   * Who this client is in a space's policy (see "Members and permissions"
   * in the README): the user id `createSpace` and `space.members.grant`
   * take. Hand it to an admin of a space to be given a role there. It is
   * {@link SteadClient.authorId} unless this client is a device of a user
   * (options.deviceCertificate): then it is that user's id, the same on
   * each of the user's devices. The same in every tab sharing the client.
   */
  readonly userId: string
  /**
   * This client's Ed25519 public key, as 64 hex characters: what it signs
   * its updates and relay sessions with. Its author id is derived from it
   * (the first 12 bytes of its SHA-256, base64url), and so is its user id
   * unless it is a device of a user (then `certifyDevice` on the user's
   * client takes this key); policies name user ids, not keys. A cluster
   * file's static `writers`/`readers` lists name keys.
   */
  readonly publicKey: string
  /** Spaces open or opening, by name. */
  private readonly spaces = new Map<string, Promise<Space>>()
  private readonly opened = new Map<string, Space>()
  /** Spaces whose close() is still writing: reopening one waits for it. */
  private readonly closing = new Map<string, Promise<void>>()
  /** Spaces this tab's app asked for (others run only for other tabs). */
  private readonly appSpaces = new Set<string>()
  /** Relay upstreams of the open spaces, while this tab leads. */
  private readonly upstreams = new Map<string, RelayUpstream>()
  private closeRun: Promise<void> | undefined
  private promoting: Promise<void> | undefined
  /** A following tab's wait for the lead. */
  private leadQueued: Promise<boolean> | undefined
  private readonly statusListeners = new Listeners<SessionsStatus>((err) => this.emitError(new SteadError('malformed', `an onStatus listener threw: ${(err as Error)?.message ?? String(err)}`)))
  private readonly errorListeners = new Listeners<SteadError>()
  private closed = false
  private lead: Lead | undefined
  private problem: string | undefined

  private readonly init: ClientInit
  /** @internal Use `createClient`. */
  constructor(init: ClientInit) {
    this.init = init
    this.authorId = init.authorId
    this.userId = init.userId
    this.publicKey = init.publicKey
  }

  /**
   * Certifies another client's key as a device of this client's user: give
   * the token to that client as its `options.deviceCertificate`. It then
   * acts for this user in every space (same `userId`, same roles) while
   * signing with its own key, and can be revoked on its own
   * (`space.members.revokeDevice`), e.g. a lost phone. Only a client that
   * holds the user's own key certifies (not a device: a stolen device must
   * not mint others).
   *
   * @param devicePublicKey The other client's `publicKey` (64 hex characters).
   * @returns The token (`stead-device:…`): public, it proves nothing without that client's secret key.
   * @throws SteadError `malformed` for a key that is not 64 hex characters or is this client's own; `unsupported` on a device, or in a tab that does not lead.
   */
  async certifyDevice(devicePublicKey: string): Promise<string> {
    if (this.closed) throw new ClosedError()
    const key = typeof devicePublicKey === 'string' && /^[0-9a-fA-F]{64}$/.test(devicePublicKey) ? fromHex(devicePublicKey.toLowerCase()) : undefined
    if (!key) throw new SteadError('malformed', `a device key is the other client's publicKey, 64 hex characters; got ${JSON.stringify(devicePublicKey)}`)
    if (devicePublicKey.toLowerCase() === this.publicKey) throw new SteadError('malformed', "that is this client's own key: certify another client's publicKey")
    if (this.userId !== this.authorId) throw new SteadError('unsupported', `this client is a device of user ${this.userId}: certify devices on a client holding that user's key`)
    const lead = this.lead
    if (!lead) throw new SteadError('unsupported', 'certify devices in the tab that leads (it holds the key)')
    return encodeDeviceToken(key, await certifyDevice(this.init.crypto, lead.identity, key))
  }

  /** @internal Takes the lead: the storage, identity and cluster it opened, and relay sessions started over them. */
  startLead({ storage, identity, cluster, certificates, relays }: LeadStorage): void {
    const { options, platform, crypto } = this.init
    const sessions = new RelaySessions({
      relays,
      crypto,
      identity,
      cluster,
      connect: options.connect ?? platform.connect,
      fetch: options.fetch ?? platform.fetch,
      ...(options.backoff ? { backoff: options.backoff } : {}),
      ...(options.heartbeat ? { heartbeat: options.heartbeat } : {}),
      ...(options.random ? { random: options.random } : {}),
      tickMs: Math.max(50, Math.min(500, (options.resubmitAfterMs ?? 2000) / 4)),
      clock: clockOf(options),
      pin: (c) => storage.write([clusterRecord(c)]),
      pinEpoch: (followed, urls) =>
        storage.write([
          clusterRecord(followed.cluster),
          { key: EPOCHS_KEY, value: encodeCertificates(followed.certificates) },
          { key: RELAY_URLS_KEY, value: encodeRelayUrls({ epoch: followed.cluster.epoch ?? 0, given: options.relays, urls }) },
        ]),
      certificates,
      ...(options.epochPollMs !== undefined ? { epochPollMs: options.epochPollMs } : {}),
      error: (err) => {
        this.emitError(err)
        this.init.tabs?.hub?.error(err)
      },
      changed: () => {
        this.emitStatus()
        this.init.tabs?.hub?.status()
      },
    })
    const peers = options.peers && new PeerHub(options.peers, (peer, why) => this.emitError(new SteadError('untrusted', `peer ${peer} ${why}; it is refused from now on`)), undefined, clockOf(options))
    this.lead = { storage, identity, sessions, peers }
    const tabs = this.init.tabs
    if (tabs) {
      tabs.hub = new TabHub(tabs.platform.channel(channelName(tabs.platform)), {
        authorId: this.authorId,
        userId: this.userId,
        publicKey: this.publicKey,
        status: () => sessions.statusFor(this.closed),
        openForTabs: async (name) => {
          // While this tab takes the lead, its spaces move to the relays one by one: answer once they all did.
          await this.promoting
          const space = await this.openShared(name)
          const upstream = this.upstreams.get(name)
          if (!upstream) throw new ClosedError(`space ${name}`)
          return { space, upstream }
        },
        openSpace: (name) => this.opened.get(name),
        unusedByTabs: (name) => {
          if (!this.appSpaces.has(name)) void this.opened.get(name)?.close()
        },
        error: (err) => this.emitError(err),
      })
    }
    sessions.start()
    peers?.start(identity).catch((err: unknown) => this.emitError(new SteadError('unsupported', `peer sync could not start: ${err instanceof Error ? err.message : String(err)}`, { cause: err })))
  }

  /** @internal Follows the leading tab over `link`; takes the lead when the lock comes to this tab. */
  startFollowing(link: LeaderLink, lead: Promise<boolean>): void {
    const tabs = this.init.tabs as Tabs
    tabs.link = link
    this.leadQueued = lead
    // Even while closing: this tab's own drafts may wait for a leader, and it may be the last tab.
    void lead.then((won) => {
      if (won) {
        this.promoting = this.promote().catch((err: unknown) => {
          const e = err instanceof SteadError ? err : new SteadError('unsupported', String(err))
          this.problem = `could not take the lead from the tab that closed: ${e.message}`
          this.emitError(e)
          this.emitStatus()
        })
      }
    })
  }

  /**
   * A space of this client, opened on first use: its stored state is
   * restored (so the first read is right), then it follows the relays. The
   * same Space on every call until it is closed.
   *
   * A space is a unit of data and of authorisation (a document, a board, an
   * account book): relays order and audit each space on its own, and a
   * cluster file can restrict who writes or reads it. Open as many as the
   * app needs; they share this client's identity, storage and sessions.
   *
   * @param name 1 to 128 characters; the same name is the same data on every client.
   * @throws SteadError `malformed` for a bad name (the promise rejects), {@link ClosedError} after `close()`.
   */
  space(name: string): Promise<Space> {
    if (typeof name === 'string') this.appSpaces.add(name)
    return this.openShared(name)
  }

  /**
   * Opens a space (as {@link SteadClient.space}) and gives it a policy: who
   * administers, writes and reads it, by user id (`client.userId`), and what
   * anybody else may do. This client is always an admin. The policy is
   * created by a safe update, ordered and audited like any other: the
   * promise resolves with the space once it committed. From then on every
   * replica checks each update against the policy in force at its place in
   * the stable order; change it with `space.members`.
   *
   * A space gets a policy once: the first creation the stable order
   * commits wins, and any later one (from any client) is rejected with
   * `malformed`. A space already in use without a policy can be given one;
   * what was written before stands.
   *
   * @param name The space (see {@link SteadClient.space}).
   * @param policy `admins`, `writers`, `readers` (arrays of user ids) and `everyone` (`'none'`, the default, `'reader'` or `'writer'`).
   * @throws SteadError `malformed` up front for a bad name, user id, role or `everyone`, a user named twice, or this client listed in another role than admin; if the stable order rejects the creation, a SteadError with its reason (`malformed` when the space has a policy already, `unauthorized` when the cluster file does not let this client write the space); `timeout` after the client's `safeTimeoutMs` (the creation may still commit); {@link ClosedError} after `close()`.
   * @example
   * ```ts
   * const board = await client.createSpace('board:42', { writers: [bobUserId], everyone: 'reader' })
   * console.log(board.members.myRole)  // 'admin'
   * ```
   */
  async createSpace(name: string, policy?: SpacePolicyInit): Promise<Space> {
    const op = initOp(this.userId, policy)
    const space = await this.space(name)
    const r = await space.members.create(op)
    if (r.status === 'rejected') throw new SteadError(r.reason, `space ${name} could not be given a policy: ${r.detail}`)
    return space
  }

  /**
   * Joins a space with an invitation token (made by an admin's
   * `space.members.invite`): opens the space, redeems the invitation (a
   * safe update signed with the token's secret key, for this client's user
   * id and the relays' time as this client measures it) and resolves with
   * the space once the redemption committed. The relays then serve the
   * space to this client, which catches up as usual.
   *
   * It always redeems, even when this client is a member already: a
   * redemption never lowers a role, but it takes one of the invitation's
   * uses. Redemptions are ordered like any update: of two redemptions of a
   * single-use invitation only the first in the stable order succeeds.
   *
   * A rejected redemption (the invitation used up, expired or closed)
   * leaves a client that may not read the space unable to see the verdict:
   * the relays serve it nothing. So `join` rejects with `timeout` after
   * `timeoutMs` (default 30 s, on the client's clock) unless the redemption
   * was seen committed; a client that can read the space (a member
   * already, or `everyone` may read) gets the audit's reason instead.
   *
   * @param token The invitation's token (`stead-invite:…`); whitespace around it is ignored.
   * @param options `timeoutMs` (default 30,000; `Infinity` waits for ever) and `signal`.
   * @throws SteadError `malformed` at once for anything that is not an invitation token (nothing is sent); `timeout` when the redemption was not seen committed in time (the invitation may be used up, expired or closed, or the relays unreachable); the audit's reason when this client sees the redemption rejected (`unauthorized`); the relays' reason when f+1 refuse it at their door (`clock-ahead` or `unauthorized` for a device clock more than 5 minutes off theirs); `aborted`; {@link ClosedError} after `close()`.
   * @example
   * ```ts
   * const board = await client.join(token)   // token from a link an admin shared
   * console.log(board.members.myRole)        // 'writer'
   * ```
   */
  async join(token: string, options: WaitOptions = {}): Promise<Space> {
    const { space: name, secret } = decodeInvitation(token)
    const timeoutMs = options.timeoutMs ?? DEFAULT_JOIN_TIMEOUT_MS
    // Checked before anything is sent (the wait would refuse it only once the redemption is queued).
    checkTimeout(timeoutMs, 'join: timeoutMs')
    const space = await this.space(name)
    let r: SafeResult
    try {
      r = await space.members.redeem(secret, { ...options, timeoutMs })
    } catch (err) {
      if (!isSteadError(err) || err.reason !== 'timeout') throw err
      const s = this.status
      const relays = s.online ? '' : ` This client is not online (${s.problem ?? `${s.relays.filter((r) => r.connected).length} of ${s.relays.length} relays connected`}): the relays may not have it yet.`
      throw new SteadError(
        'timeout',
        `join: the redemption of an invitation to space ${name} was not seen committed within ${timeoutMs} ms. The invitation may be used up, expired or closed: a rejected redemption leaves this client unable to read the space, so it cannot learn the verdict.${relays} Ask an admin of the space for a new invitation.`,
        { cause: err },
      )
    }
    if (r.status === 'rejected') throw new SteadError(r.reason, `join: the redemption of an invitation to space ${name} was rejected: ${r.detail}`)
    return space
  }

  private openShared(name: string): Promise<Space> {
    if (this.closed) return Promise.reject(new ClosedError())
    const problem = spaceNameProblem(name)
    if (problem) return Promise.reject(new SteadError('malformed', problem))
    let open = this.spaces.get(name)
    if (!open) {
      const closing = this.closing.get(name)
      open = closing ? closing.then(() => this.openSpace(name)) : this.openSpace(name)
      this.spaces.set(name, open)
      const mine = open
      open.catch(() => {
        if (this.spaces.get(name) === mine) this.spaces.delete(name)
      })
    }
    return open
  }

  /** A space began to close: forget it (a later space(name) opens a new one once this close is done). */
  private spaceClosing(name: string, space: Space, done: Promise<void>): void {
    if (this.opened.get(name) === space) {
      this.opened.delete(name)
      this.spaces.delete(name)
      this.appSpaces.delete(name)
      this.upstreams.delete(name)
      if (!this.closed) this.init.tabs?.hub?.spaceClosed(name)
    }
    this.closing.set(name, done)
    void done.finally(() => {
      if (this.closing.get(name) === done) this.closing.delete(name)
    })
  }

  /** The relay sessions every space shares: online once f+1 trusted relays are connected. */
  get status(): SessionsStatus {
    return (this.lead?.sessions ?? (this.init.tabs?.link as LeaderLink)).statusFor(this.closed, this.problem)
  }

  /** Peer sync counts (links open, frames, faulty peers) when the client has a `peers` network and this tab leads; otherwise undefined. */
  get peers(): PeerStats | undefined {
    return this.lead?.peers?.status
  }

  /** Whether this tab owns the storage and the relay sessions (true without tabs); the other tabs follow it. */
  get leading(): boolean {
    return this.lead !== undefined
  }

  /** Calls `listener` whenever {@link SteadClient.status} may have changed. Returns the unsubscribe function. */
  onStatus(listener: (status: SessionsStatus) => void): () => void {
    return this.statusListeners.add(listener)
  }

  /** Trust problems (a relay with a wrong key or serving another cluster); every open space's `onError` hears of them too. */
  onError(listener: (error: SteadError) => void): () => void {
    return this.errorListeners.add(listener)
  }

  /**
   * Closes every space (each seals and stores what is queued), the relay
   * sessions and the storage; in browsers the next tab takes the lead.
   * Safe updates still waiting reject with {@link ClosedError} (they stay
   * stored and are sent again next time). Later calls fail with
   * ClosedError; calling it again returns the same promise.
   */
  close(): Promise<void> {
    this.closeRun ??= this.shutDown()
    return this.closeRun
  }

  private async shutDown(): Promise<void> {
    this.closed = true
    const spaces = await Promise.allSettled([...this.spaces.values()])
    await Promise.allSettled(spaces.map((s) => (s.status === 'fulfilled' ? s.value.close() : undefined)))
    await Promise.allSettled([...this.closing.values()])
    const tabs = this.init.tabs
    tabs?.stopWaiting.abort()
    // Settles once the lock came (a promotion started) or the wait ended; then the promotion, if any, finishes.
    await this.leadQueued
    await this.promoting
    tabs?.link?.close()
    tabs?.hub?.close()
    if (this.lead) {
      this.lead.sessions.close()
      await this.lead.peers?.stop().catch(() => undefined)
      await this.lead.storage.close()
    }
    // After the storage: the next leader opens it.
    tabs?.lock.release()
    this.emitStatus()
  }

  private async openSpace(name: string): Promise<Space> {
    const { options } = this.init
    const replicaOptions = replicaOptionsOf(name, options)
    if (!this.lead) {
      const link = this.init.tabs?.link as LeaderLink
      const space = new Space({ space: name, authorId: this.authorId, userId: this.userId, options, onClose: (done) => this.spaceClosing(name, space, done), replica: new ReliableReplica(replicaOptions), position: { stableIndex: 0, lastRound: 0 }, crypto: this.init.crypto })
      const upstream = new TabUpstream(space, link, this.init.crypto, replicaOptions)
      space.attach(upstream)
      this.opened.set(name, space)
      await upstream.attach()
      if (this.closed) throw new ClosedError()
      return space
    }
    const records = new ClientRecords(this.lead.storage, name)
    const restored = await records.restore()
    if (this.closed) throw new ClosedError()
    const { replica, outbox } = this.rebuild(name, restored)
    const space = new Space({ space: name, authorId: this.authorId, userId: this.userId, options, onClose: (done) => this.spaceClosing(name, space, done), replica, position: restored.position, crypto: this.init.crypto })
    this.leadSpace(space, records, restored, outbox)
    return space
  }

  /** The replica a space's stored records make, and its stored outbox opened. */
  private rebuild(name: string, restored: Restored): { replica: ReliableReplica; outbox: Array<{ env: Envelope; frame: Uint8Array }> } {
    const { crypto } = this.init
    const trusted = (frame: Uint8Array): Envelope => openTrusted(crypto, frame)
    const options = replicaOptionsOf(name, this.init.options)
    const replica = restored.checkpoint === undefined ? new ReliableReplica(options) : ReliableReplica.restore(options, restored.checkpoint, (signed) => openTrusted(crypto, signed))
    // Replaying the attested commits after the checkpoint rebuilds the stable state exactly (gap timers included).
    for (const c of restored.commits) replica.commit(c.frames.map(trusted), c.round)
    for (const frame of restored.inbox) replica.receive(trusted(frame), { expires: true })
    const outbox = restored.outbox.map((frame) => ({ env: trusted(frame), frame }))
    for (const { env } of outbox) replica.receive(env)
    return { replica, outbox }
  }

  /** Connects a space to the relays through a new RelayUpstream (this tab leads). */
  private leadSpace(
    space: Space,
    records: ClientRecords,
    restored: Restored,
    outbox: Array<{ env: Envelope; frame: Uint8Array }>,
    waiters?: ReadonlyMap<string, ReadonlyArray<Deferred<SafeResult>>>,
  ): RelayUpstream {
    const { options, platform, crypto } = this.init
    const lead = this.lead as Lead
    const name = space.space
    const hub = this.init.tabs?.hub
    // The stored sequence is this identity's unless it names another author.
    const ours = restored.author.authorId === undefined || restored.author.authorId === this.authorId
    const own = (): RelayUpstream => upstream
    const upstream: RelayUpstream = new RelayUpstream({
      space,
      records,
      crypto,
      identity: lead.identity,
      sessions: lead.sessions,
      fetch: options.fetch ?? platform.fetch,
      resubmitAfterMs: options.resubmitAfterMs ?? 2000,
      checkpointEvery: options.checkpointEvery ?? 1000,
      clock: clockOf(options),
      news: hub ? hub.newsFor(name, own) : NO_NEWS,
      peers: lead.peers,
      certified: restored.certified,
      replicaOptions: replicaOptionsOf(name, options),
      seq: ours ? Math.max(restored.author.seq, space.replica.nextSeq(this.authorId) - 1) : space.replica.nextSeq(this.authorId) - 1,
      last: lastClock(restored.author, ours, space.replica.nextSeq(this.authorId) - 1, (seq) => space.replica.clockRecord(this.authorId, seq)),
    })
    upstream.outbox.restore(outbox, waiters)
    // Anchors an app kept from before the restart may name drafts signed since (see ClientRecords.names).
    for (const n of restored.names) space.draftIds.signedAs(n.places, n.prefix)
    space.attach(upstream)
    this.opened.set(name, space)
    this.upstreams.set(name, upstream)
    lead.sessions.join(upstream)
    lead.peers?.join(upstream)
    // Waits check the new upstream from now on.
    space.progress()
    return upstream
  }

  /**
   * The leading tab went away and the lock came to this one: open the
   * storage, start the sessions, and move every space from following to
   * leading, restored from storage, the truth the last leader left. What
   * this tab had forwarded is either in a stored envelope (found by its
   * request id) or signed here; what it waited on keeps waiting here.
   */
  private async promote(): Promise<void> {
    const tabs = this.init.tabs as Tabs
    const link = tabs.link as LeaderLink
    const handovers = link.followers().map((up) => {
      const next = deferredUpstream()
      return { up, next, handed: up.handOver(next.promise) }
    })
    const opened = await openLeadStorage(this.init.options, this.init.cluster, this.init.crypto, await tabs.platform.storage())
    const { storage, identity } = opened
    if (authorIdOf(this.init.crypto, identity.publicKey) !== this.authorId) {
      await storage.close()
      throw new SteadError('conflict', 'the storage holds another identity than the tab that led used')
    }
    link.close(true)
    tabs.link = undefined
    this.startLead(opened)
    for (const { up, next, handed } of handovers) {
      // The space a following tab's upstream served, as this client opened it (see openSpace), or
      // one it is closing: its close waits for its last seal, which only a leader can store.
      const name = up.space.space
      const closing = this.opened.get(name) === undefined && this.closing.has(name)
      const space = closing ? (up.space as Space) : this.opened.get(name)
      if (!space || space !== up.space) throw new Error(`tabs: the upstream of ${name} serves a space this client no longer holds open`)
      const records = new ClientRecords(storage, space.space)
      const restored = await records.restore()
      const { replica, outbox } = this.rebuild(space.space, restored)
      const waiters = new Map<string, Array<Deferred<SafeResult>>>()
      for (const [idHex, groups] of handed.awaiting) waiters.set(idHex, groupsArray(groups))
      const inFlight = handed.inFlight
      // The request this tab had forwarded: stored by the last leader (its envelope pending or decided already), or not.
      const stored = inFlight && records.request(inFlight.request)
      const carrier = stored && outbox.find((o) => o.env.idHex === stored.envelope)
      const lost: Array<Deferred<SafeResult>> = []
      if (inFlight && stored) {
        const groups = stored.safe.map((g, i): [number, Deferred<SafeResult>] => [g, inFlight.batch.safe[i]?.waiter as Deferred<SafeResult>])
        if (carrier) waiters.set(carrier.env.idHex, groupsArray(new Map(groups)))
        else lost.push(...groups.map(([, w]) => w))
      }
      for (const [idHex, groups] of handed.awaiting) if (!outbox.some((o) => o.env.idHex === idHex)) lost.push(...groups.values())
      for (const w of lost) w.reject(decidedMeanwhile())
      space.adopt(replica, restored.position)
      const upstream = this.leadSpace(space, records, restored, outbox, waiters)
      next.resolve(upstream)
      // A closing space is led only until its close is done: then it is no longer this client's.
      if (closing) {
        void this.closing.get(name)?.finally(() => {
          if (this.opened.get(name) !== space) return
          this.opened.delete(name)
          this.upstreams.delete(name)
        })
      }
      if (inFlight) {
        if (stored) space.batchSigned(inFlight.batch, carrier?.env)
        else await upstream.seal(inFlight.batch)
        inFlight.done()
      }
    }
    this.problem = undefined
    tabs.hub?.announce()
    this.emitStatus()
  }

  /** @internal */
  emitStatus(): void {
    this.statusListeners.emit(() => this.status)
  }

  /** @internal */
  emitError(err: SteadError): void {
    this.errorListeners.emit(() => err)
  }
}

function replicaOptionsOf(space: string, options: ClientOptions): { space: string; historyLimit?: number } {
  return { space, ...(options.historyLimit !== undefined ? { historyLimit: options.historyLimit } : {}) }
}

function groupsArray(groups: ReadonlyMap<number, Deferred<SafeResult>>): Array<Deferred<SafeResult>> {
  const out: Array<Deferred<SafeResult>> = []
  for (const [g, w] of groups) out[g] = w
  return out
}

function deferredUpstream(): { promise: Promise<Upstream>; resolve(u: Upstream): void } {
  let resolve!: (u: Upstream) => void
  const promise = new Promise<Upstream>((ok) => (resolve = ok))
  return { promise, resolve }
}

function channelName(tabs: TabPlatform): string {
  return `stead-tabs:${tabs.name}`
}

/** Where a client keeps what all its spaces share; '' is no space's name. */
const IDENTITY_KEY = ['', 'identity'] as const
/** The device certificate of the identity, if it is a device of a user: the token. */
const DEVICE_KEY = ['', 'device'] as const
const CLUSTER_KEY = ['', 'cluster'] as const
/** The epoch certificates the client followed from the committee it first pinned. */
const EPOCHS_KEY = ['', 'epochs'] as const
/** Where the relays of the committee followed to were reached (see relay-urls.ts). */
const RELAY_URLS_KEY = ['', 'relay-urls'] as const

/** What a client that leads opens its sessions with. */
interface LeadStorage {
  readonly storage: ClientStorage
  readonly identity: Lead['identity']
  readonly cluster: ClusterDescriptor | undefined
  readonly certificates: readonly EpochCertificate[]
  /** The URLs its sessions start from. */
  readonly relays: readonly string[]
}

function clusterRecord(c: ClusterDescriptor): StorageChange {
  return { key: CLUSTER_KEY, value: encodeCluster(c) }
}

/** Stored certificates; a record that does not decode counts as none (they are checked before use anyway). */
function certificatesOf(bytes: Uint8Array): EpochCertificate[] {
  try {
    return decodeCertificates(bytes)
  } catch {
    return []
  }
}

/** Whether `certificates`, checked from `given`'s committee, lead to `stored`'s (a later epoch of the same cluster). */
async function followsTo(crypto: Crypto, given: ClusterDescriptor, certificates: readonly EpochCertificate[], stored: ClusterDescriptor): Promise<boolean> {
  if ((stored.epoch ?? 0) <= (given.epoch ?? 0)) return false
  try {
    const at = await followEpochs(crypto, epochCommitteeOf(given), certificates.slice(0, MAX_EPOCHS_FOLLOWED))
    return sameCluster(descriptorOf(at.epoch, at.committee, at.startRound), stored)
  } catch {
    return false
  }
}

/** Reads (or creates and stores) the identity and the pinned cluster of a storage. Closes the storage if that fails. */
async function openLeadStorage(
  options: ClientOptions,
  given: ClusterDescriptor | undefined,
  crypto: Crypto,
  storage: ClientStorage,
): Promise<LeadStorage> {
  try {
    const [storedKey, storedCluster, storedDevice, storedEpochs, storedUrls] = await Promise.all([storage.load(IDENTITY_KEY), storage.load(CLUSTER_KEY), storage.load(DEVICE_KEY), storage.load(EPOCHS_KEY), storage.load(RELAY_URLS_KEY)])
    const restoredCluster = storedCluster && decodeCluster(storedCluster)
    const certificates = storedEpochs ? certificatesOf(storedEpochs) : []
    const secretKey = options.identity?.secretKey ?? storedKey ?? crypto.generateSecretKey()
    const publicKey = await crypto.publicKeyOf(secretKey)
    const pins: StorageChange[] = []
    const sameKey = storedKey !== undefined && bytesEqual(storedKey, secretKey)
    if (!sameKey) pins.push({ key: IDENTITY_KEY, value: secretKey })
    // An app passes the cluster file it started with: a committee the client followed certificates to from it stays.
    const followed = given && restoredCluster && !sameCluster(restoredCluster, given) && (await followsTo(crypto, given, certificates, restoredCluster))
    // A new pin starts a new chain: certificates followed from another committee say nothing of this one.
    const repinned = given && !followed && !(restoredCluster && sameCluster(restoredCluster, given))
    if (repinned) pins.push(clusterRecord(given), { key: EPOCHS_KEY, value: encodeCertificates([]) }, { key: RELAY_URLS_KEY, value: undefined })
    // A stored certificate is of the stored key: another key given in the options is a user of its own, unless certified too.
    const token = options.deviceCertificate ?? (sameKey && storedDevice ? new TextDecoder().decode(storedDevice) : undefined)
    const certificate = token === undefined ? undefined : await deviceCertificateOf(crypto, token, publicKey)
    if (options.deviceCertificate !== undefined) pins.push({ key: DEVICE_KEY, value: new TextEncoder().encode(options.deviceCertificate.trim()) })
    if (pins.length) await storage.write(pins)
    const cluster = followed ? restoredCluster : (given ?? restoredCluster)
    const relays = startUrls(cluster, repinned || !storedUrls ? undefined : decodeRelayUrls(storedUrls), options.relays)
    return { storage, identity: { secretKey, publicKey, ...(certificate ? { certificate } : {}) }, cluster, certificates: followed || !given ? certificates : [], relays }
  } catch (err) {
    // Nothing opened on it survives a failed start.
    await storage.close().catch(() => undefined)
    throw err
  }
}

/** The ids and key a client shows for `identity`. */
function whoIs(crypto: Crypto, identity: Identity): Pick<ClientInit, 'authorId' | 'userId' | 'publicKey'> {
  const authorId = authorIdOf(crypto, identity.publicKey)
  return { authorId, userId: userIdOf(crypto, identity.publicKey, identity.certificate), publicKey: toHex(identity.publicKey) }
}

/**
 * The certificate a device token gives `publicKey`.
 *
 * @throws SteadError `malformed` for a bad token, `unauthorized` for one of another key or one whose signature fails.
 */
async function deviceCertificateOf(crypto: Crypto, token: string, publicKey: Uint8Array): Promise<DeviceCertificate> {
  const { device, certificate } = decodeDeviceToken(token)
  if (!bytesEqual(device, publicKey)) throw new SteadError('unauthorized', `options.deviceCertificate certifies key ${toHex(device).slice(0, 16)}…, not this client's ${toHex(publicKey).slice(0, 16)}…: certify client.publicKey of this client`)
  if (!(await deviceCertificateHoldsAsync(crypto, publicKey, certificate))) throw new SteadError('unauthorized', "options.deviceCertificate does not verify: its user key did not sign it for this client's key")
  return certificate
}

/** Builds a client: restores its state from storage (or joins the tab that leads), then connects in the background. */
export async function createClientWith(options: ClientOptions, platform: PlatformDefaults): Promise<SteadClient> {
  const given = checkClientOptions(options)
  const crypto = options.crypto ?? (await platform.crypto())
  const shared = options.storage === undefined ? platform.tabs : undefined
  if (!shared) {
    const storage = options.storage === undefined ? await platform.storage() : checkStorage(await options.storage)
    const opened = await openLeadStorage(options, given, crypto, storage)
    const client = new SteadClient({ options, platform, crypto, cluster: given, ...whoIs(crypto, opened.identity) })
    client.startLead(opened)
    return client
  }
  const tabs: Tabs = { platform: shared, tab: newTabId(), lock: new LeaderLock(shared.locks, shared.name), stopWaiting: new AbortController() }
  if (await tabs.lock.claim()) return leadTabs(options, given, platform, crypto, tabs)
  // Another tab leads: ask it who this client is, unless the lead comes to this tab first.
  const events = { client: undefined as SteadClient | undefined }
  const link = new LeaderLink(tabs.tab, shared.channel(channelName(shared)), {
    status: () => events.client?.emitStatus(),
    error: (err) => events.client?.emitError(err),
  })
  const lead = tabs.lock.queue(tabs.stopWaiting.signal)
  const first = await Promise.race([link.hello(), lead.then((won) => ({ won }))])
  if ('won' in first) {
    link.close(true)
    if (first.won) return leadTabs(options, given, platform, crypto, tabs)
    throw new ClosedError()
  }
  if (options.identity) {
    const mine = authorIdOf(crypto, await crypto.publicKeyOf(options.identity.secretKey))
    if (mine !== first.authorId) {
      tabs.stopWaiting.abort()
      link.close()
      throw new SteadError('conflict', 'another tab of this app leads with another identity on the same storage; tabs sharing a storage share its identity')
    }
  }
  const client = new SteadClient({ options, platform, crypto, cluster: given, authorId: first.authorId, userId: first.userId, publicKey: first.publicKey, tabs })
  events.client = client
  client.startFollowing(link, lead)
  return client
}

async function leadTabs(options: ClientOptions, given: ClusterDescriptor | undefined, platform: PlatformDefaults, crypto: Crypto, tabs: Tabs): Promise<SteadClient> {
  try {
    const opened = await openLeadStorage(options, given, crypto, await tabs.platform.storage())
    const client = new SteadClient({ options, platform, crypto, cluster: given, ...whoIs(crypto, opened.identity), tabs })
    client.startLead(opened)
    tabs.hub?.announce()
    return client
  } catch (err) {
    tabs.lock.release()
    throw err
  }
}

/**
 * The clock of this author's last envelope in a space: the stored one, or
 * the audit's record when the stable history has a later envelope of the
 * author (signed from another storage) or the storage was another identity's.
 */
function lastClock(stored: AuthorState, ours: boolean, committed: number, recordOf: (seq: number) => ClockRecord | undefined): { base: number; clock: Clock } {
  if (ours && stored.seq >= committed) return { base: stored.base, clock: stored.clock }
  const r = recordOf(committed)
  return { base: r?.base ?? 0, clock: r?.clock ?? clockInit() }
}
