import { SteadError, bytesEqual, toHex, type Crypto, type EpochCertificate, type HostClock, type HostTimer, type RelayMessage } from '@stead/core'
import { CLOCK_SKEW_WARNING_MS, ClockOffset } from './clock-offset.ts'
import { fetchCluster, type ClusterDescriptor, type Fetch } from './cluster.ts'
import { EpochFollower, type FollowedCluster } from './epoch-follower.ts'
import { TrustError } from '../errors.ts'
import { StorageError } from '../storage/errors.ts'
import { RelayLink, type Identity, type SocketFactory } from './transport.ts'
import type { RelayStatus, SessionsStatus } from '../types.ts'

/** A space using the sessions: what they tell it. */
export interface SessionMember {
  readonly space: string
  /** A session became ready (or the member joined one that is): subscribe and resend. */
  ready(link: RelayLink): void
  /** An envelope or commit of this space, or the answer to one of its submits. */
  message(link: RelayLink, m: RelayMessage): void
  /** The cluster became trusted, or a session came up or went down: status changed. */
  changed(): void
  /** Every few hundred ms: resend what waits too long. */
  tick(): void
  /** A trust problem of the sessions (a relay with a wrong key, or serving another cluster). */
  error(err: SteadError): void
  /**
   * The cluster moved to another epoch's committee: relay indexes now name
   * other relays, and f may differ. Whatever was counted per relay index
   * (commits, refusals, votes) starts over; sessions to the new committee
   * follow (ready).
   */
  committeeChanged(): void
}

export interface SessionsOptions {
  /** The URLs the sessions start from: the app's, or where the relays of the committee it followed to were reached (see relay-urls.ts). */
  readonly relays: readonly string[]
  readonly crypto: Crypto
  readonly identity: Identity
  /** The pinned cluster, if known (given or stored); else trust on first use. */
  readonly cluster: ClusterDescriptor | undefined
  readonly connect: SocketFactory | undefined
  readonly fetch: Fetch | undefined
  readonly backoff?: { readonly initialMs: number; readonly maxMs: number }
  readonly heartbeat?: { readonly pingAfterMs: number; readonly deadAfterMs: number }
  readonly tickMs: number
  readonly clock: HostClock
  /** Reconnect jitter; default Math.random. */
  readonly random?: () => number
  /** Called once a cluster is trusted on first use, before any session opens (to pin it). */
  pin(cluster: ClusterDescriptor): Promise<void>
  /** Called when the client followed epoch certificates to a later committee: pin it, with the certificates from the epoch first pinned and the URLs its relays are reached at. */
  pinEpoch(followed: FollowedCluster, urls: readonly string[]): Promise<void>
  /** The certificates followed so far (stored), from the epoch first pinned. */
  readonly certificates?: readonly EpochCertificate[]
  /** How often to ask the relays for epoch certificates (ms); default 30 s. A relay with an unknown key makes the client ask at once. */
  readonly epochPollMs?: number
  /** Trust problems: a relay with a wrong key, or serving another cluster (members hear of them too). */
  error(err: SteadError): void
  /** Trust, a session up or down: the client's status changed. */
  changed(): void
}

/**
 * One session per relay, shared by every space of a client: trust (pinned
 * or first use), connections with backoff and heartbeat, the browser's
 * offline/online events, and routing. Spaces join to get their messages
 * (by space name) and the answers to their submits (by submit id).
 */
export class RelaySessions {
  cluster: ClusterDescriptor | undefined
  links: RelayLink[] = []
  /** Why trust or connecting is stuck, when it is. */
  problem: string | undefined
  /** The relays' URLs: the app's, then those of the committee followed to (what HTTP reads ask too). */
  get relayUrls(): readonly string[] {
    return this.urls
  }
  private readonly members = new Map<string, SessionMember>()
  private readonly submits = new Map<number, SessionMember>()
  private nextSubmit = 1
  private closed = false
  private pump: HostTimer | undefined
  private trustTimer: HostTimer | undefined
  private unfollowNetwork: (() => void) | undefined
  /** Why each relay URL did not answer while the cluster is not trusted yet (no sessions then). */
  private readonly trustErrors = new Map<string, string>()
  /** How far the relays' clocks are from this device's (see `now`). */
  private clockOffset = new ClockOffset(() => this.cluster?.f ?? 0)
  /** Whether the app was told this device's clock is off (once per client). */
  private skewReported = false
  /** The relays' URLs: the app's, then those of each committee followed to. */
  private urls: readonly string[]
  /** Keys of the committees this client moved on from (hex): a relay proving one is behind, not lying. */
  private readonly earlierKeys = new Set<string>()
  private readonly epochs: EpochFollower

  private readonly o: SessionsOptions
  constructor(o: SessionsOptions) {
    this.o = o
    this.cluster = o.cluster
    this.urls = o.relays
    this.epochs = new EpochFollower({
      crypto: o.crypto,
      clock: o.clock,
      fetch: o.fetch,
      everyMs: o.epochPollMs ?? 30_000,
      certificates: o.certificates ?? [],
      cluster: () => this.cluster,
      urls: () => this.urls,
      lied: (url, why) => {
        const link = this.links.find((l) => l.url === url)
        if (link) link.markFaulty(why)
        else this.trustProblem(`relay at ${url}: ${why}`)
      },
      moved: (followed) => this.moveTo(followed),
    })
  }

  start(): void {
    if (this.cluster) this.connect()
    else this.trustOnFirstUse(0)
    this.tick()
    this.followNetwork()
    this.epochs.start()
  }

  /** Every tickMs while open: members' resubmits and the sessions' heartbeats. The timer does not keep a Node process alive. */
  private tick(): void {
    this.pump = this.o.clock.setTimer(this.o.tickMs, () => {
      if (this.closed) return
      // Armed first: a member that throws does not stop the pump.
      this.tick()
      for (const m of this.members.values()) m.tick()
      const { pingAfterMs, deadAfterMs } = this.o.heartbeat ?? { pingAfterMs: 5000, deadAfterMs: 15_000 }
      for (const l of this.links) l.heartbeat(this.o.clock.now(), pingAfterMs, deadAfterMs)
    })
    this.pump.unref?.()
  }

  join(member: SessionMember): void {
    this.members.set(member.space, member)
    for (const l of this.links) if (l.ready) member.ready(l)
  }

  leave(member: SessionMember): void {
    if (this.members.get(member.space) !== member) return
    this.members.delete(member.space)
    for (const [id, m] of this.submits) if (m === member) this.submits.delete(id)
    for (const l of this.links) l.send({ type: 'unsubscribe', space: member.space })
  }

  /** Sends a submit over `link`; its answer goes to `member`. Undefined when the session is not ready. */
  submit(member: SessionMember, link: RelayLink, envelope: Uint8Array): number | undefined {
    const id = this.nextSubmit++
    if (!link.send({ type: 'submit', id, envelope })) return undefined
    this.submits.set(id, member)
    // Answers lost with a session never come: forget the oldest instead of growing.
    if (this.submits.size > 50_000) this.submits.delete(this.submits.keys().next().value as number)
    return id
  }

  /**
   * The relays' time as this client measured it: the device clock plus the
   * offset f lying relays cannot move past the honest ones (see
   * ClockOffset); the device clock alone before any relay answered. What
   * register writes are stamped with.
   */
  now(): number {
    return this.o.clock.now() + this.clockOffset.offset()
  }

  /** Whether any relay's clock was measured yet (until then `now` is the device clock alone). */
  get clockMeasured(): boolean {
    return this.clockOffset.size > 0
  }

  /** The sessions' status as the client or one of its spaces reports it (`problem`: theirs, which comes first). */
  statusFor(closed: boolean, problem?: string): SessionsStatus {
    const why = problem ?? (closed ? 'closed' : this.whyOffline)
    return { online: !closed && this.online, relays: this.relayStatus, trusted: this.cluster !== undefined, epoch: this.cluster?.epoch ?? 0, ...(why ? { problem: why } : {}) }
  }

  /** Per relay, for status. */
  private get relayStatus(): RelayStatus[] {
    if (!this.links.length) return this.urls.map((url) => ({ url, connected: false, ...(this.trustErrors.has(url) ? { error: this.trustErrors.get(url) as string } : {}) }))
    return this.links.map((l) => ({
      url: l.url,
      connected: l.ready,
      ...(l.relay !== undefined && this.cluster?.relays[l.relay] ? { relay: this.cluster.relays[l.relay]?.id } : {}),
      ...(l.faulty ? { faulty: l.faulty } : {}),
      ...(!l.ready && l.lastError && !l.faulty ? { error: l.lastError } : {}),
    }))
  }

  private get online(): boolean {
    return this.cluster !== undefined && this.links.filter((l) => l.ready).length >= this.cluster.f + 1
  }

  /** Why the sessions are not online, in words an app can show; undefined when they are. */
  private get whyOffline(): string | undefined {
    if (this.online) return undefined
    if (this.closed) return 'closed'
    if (this.problem) return this.problem
    if (!this.cluster) return 'asking the relays which cluster to trust'
    const connected = this.links.filter((l) => l.ready).length
    const reasons = [...new Set(this.links.filter((l) => !l.ready).map((l) => l.faulty ?? l.lastError ?? 'connecting'))]
    return `${connected} of ${this.urls.length} relays connected, ${this.cluster.f + 1} needed${reasons.length ? ` (${reasons.slice(0, 3).join('; ')})` : ''}`
  }

  /**
   * The link to relay `index` of the cluster, once a session proved it
   * holds that relay's key (a relay can claim another's index in its
   * challenge: blame must not reach the relay it named).
   */
  linkTo(index: number): RelayLink | undefined {
    return this.links.find((l) => l.provenRelay === index)
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    this.pump?.cancel()
    this.trustTimer?.cancel()
    this.epochs.stop()
    this.unfollowNetwork?.()
    // Members first: sessions going down now is no news to spaces that are gone.
    this.members.clear()
    this.submits.clear()
    for (const l of this.links) l.stop()
  }

  // ---- trust and connections ----

  private trustOnFirstUse(attempt: number): void {
    const fetchFn = this.o.fetch
    if (!fetchFn) {
      this.setProblem('no cluster given and no fetch() on this platform to ask the relays for it')
      return
    }
    const dissenters = new Set<string>()
    const dissent = (url: string): void => {
      dissenters.add(url)
      this.links.find((l) => l.url === url)?.markFaulty('served a cluster descriptor other than the one 2f+1 relays agree on')
    }
    const failed = (url: string, why: string): void => {
      if (this.closed || this.links.length) return
      this.trustErrors.set(url, why)
      this.changed()
    }
    void fetchCluster(this.urls, fetchFn, dissent, undefined, failed).then(
      async (cluster) => {
        if (this.closed) return
        try {
          await this.o.pin(cluster)
        } catch {
          // Could not be stored: it is asked for again on the next start.
        }
        if (this.closed) return
        this.cluster = cluster
        this.problem = undefined
        this.trustErrors.clear()
        this.connect()
        for (const url of dissenters) dissent(url)
      },
      (err: SteadError) => {
        if (this.closed) return
        // Relays not reachable or not agreeing yet: spaces keep working offline; ask again.
        this.setProblem(`cluster not trusted yet: ${err.message}`)
        this.trustTimer = this.o.clock.setTimer(Math.min(10_000, 500 * 2 ** attempt), () => this.trustOnFirstUse(attempt + 1))
      },
    )
  }

  private connect(): void {
    const cluster = this.cluster as ClusterDescriptor
    const connect = this.o.connect
    if (!connect) {
      this.setProblem('no WebSocket on this platform: pass `connect`')
      return
    }
    this.links = this.urls.map(
      (url) =>
        new RelayLink({
          url,
          connect,
          crypto: this.o.crypto,
          identity: this.o.identity,
          keyOf: (i) => cluster.relays[i]?.publicKey,
          knownElsewhere: (key) => this.earlierKeys.has(toHex(key)) || cluster.relays.some((r) => bytesEqual(r.publicKey, key)),
          clock: this.o.clock,
          ...(this.o.random ? { random: this.o.random } : {}),
          ...(this.o.backoff ? { backoff: this.o.backoff } : {}),
          handlers: {
            ready: (link) => {
              for (const m of this.members.values()) m.ready(link)
              this.changed()
            },
            message: (link, m) => this.route(link, m),
            down: () => this.changed(),
            clock: (link, relayTime, sentAt, receivedAt) => {
              if (link.provenRelay === undefined || this.clockOffset.sample(link.provenRelay, relayTime, sentAt, receivedAt) === undefined) return
              this.reportSkew()
            },
            // Behind or ahead of this client: the certificates may say more now.
            otherEpoch: () => void this.epochs.check(),
            untrusted: (link, why) => {
              // A relay of a later committee than the one trusted proves a key this client does not
              // know yet: look for the certificates first, and only then call it a lie.
              const epoch = this.cluster?.epoch ?? 0
              void this.epochs.check().then(() => {
                if ((this.cluster?.epoch ?? 0) === epoch) this.trustProblem(`relay at ${link.url}: ${why}`)
              })
              this.changed()
            },
          },
        }),
    )
    for (const l of this.links) l.start()
    this.changed()
  }

  /** A trust problem (a lie, a wrong key) for the app and every space. */
  private trustProblem(why: string): void {
    if (this.closed) return
    const err = new TrustError(why)
    this.o.error(err)
    for (const m of this.members.values()) m.error(err)
    this.changed()
  }

  /**
   * The client followed epoch certificates to a later committee: pin it,
   * then close every session and open one to each relay of the new
   * committee. Per-relay state (spaces' counts by relay index, the clock
   * offsets) starts over; what spaces sent and was not decided is sent again,
   * and the relays' dedupe (which crosses epochs) orders it once.
   */
  private async moveTo(followed: FollowedCluster): Promise<void> {
    const urls = urlsOf(followed.cluster, this.provenUrls(), this.urls)
    try {
      await this.o.pinEpoch(followed, urls)
    } catch (err) {
      // Not stored: the client moves all the same, and follows again from the stored epoch at its next start; the app hears why.
      if (!this.closed) this.o.error(err instanceof SteadError ? err : new StorageError('io', `the committee of epoch ${followed.cluster.epoch ?? 0} was not stored: ${(err as Error).message}`, { cause: err }))
    }
    if (this.closed) return
    this.urls = urls
    for (const r of this.cluster?.relays ?? []) this.earlierKeys.add(toHex(r.publicKey))
    this.cluster = followed.cluster
    this.problem = undefined
    this.clockOffset = new ClockOffset(() => this.cluster?.f ?? 0)
    for (const l of this.links) l.stop()
    this.links = []
    for (const m of this.members.values()) m.committeeChanged()
    this.connect()
  }

  /** The app's URL of each relay a session proved the key of, by key: where it is reached while its address does not change. */
  private provenUrls(): Map<string, { url: string; api: string | undefined }> {
    const out = new Map<string, { url: string; api: string | undefined }>()
    for (const l of this.links) {
      const relay = l.provenRelay === undefined ? undefined : this.cluster?.relays[l.provenRelay]
      if (relay) out.set(toHex(relay.publicKey), { url: l.url, api: relay.api })
    }
    return out
  }

  private route(link: RelayLink, m: RelayMessage): void {
    // A session of the committee before a move may still deliver what it read: not counted any more.
    if (this.closed || !this.links.includes(link)) return
    switch (m.type) {
      case 'envelope':
      case 'commit':
      case 'attest':
      case 'delta':
      case 'unpaced':
      case 'pruned':
      case 'unreadable':
      case 'peers':
      case 'presence':
      case 'want':
      case 'votes':
        this.members.get(m.space)?.message(link, m)
        return
      case 'accepted':
      case 'error': {
        if (m.id === null) return
        const member = this.submits.get(m.id)
        this.submits.delete(m.id)
        member?.message(link, m)
        return
      }
      default:
        return
    }
  }

  /** In browsers: drop sessions when the device goes offline, reconnect at once when it is back. */
  private followNetwork(): void {
    const target = globalThis as { addEventListener?: (t: string, l: () => void) => void; removeEventListener?: (t: string, l: () => void) => void }
    if (typeof target.addEventListener !== 'function' || typeof target.removeEventListener !== 'function') return
    const offline = (): void => {
      for (const l of this.links) l.pause()
      this.changed()
    }
    const online = (): void => {
      for (const l of this.links) if (!l.ready) l.restart()
    }
    target.addEventListener('offline', offline)
    target.addEventListener('online', online)
    this.unfollowNetwork = () => {
      target.removeEventListener?.('offline', offline)
      target.removeEventListener?.('online', online)
    }
  }

  /**
   * Tells the app, once, that this device's clock is more than a few
   * seconds off the relays' (through the client's and every space's
   * onError, as `clock-skew`): its register writes are stamped with the
   * relays' time instead, but the user may want to fix the clock.
   */
  private reportSkew(): void {
    const offset = this.clockOffset.offset()
    if (this.skewReported || Math.abs(offset) <= CLOCK_SKEW_WARNING_MS) return
    this.skewReported = true
    const err = new SteadError('clock-skew', `this device's clock is ${describeSkew(-offset)} the relays' (measured against ${this.clockOffset.size} of them); register writes are stamped with the relays' time instead`)
    this.o.error(err)
    for (const m of this.members.values()) m.error(err)
  }

  private setProblem(p: string): void {
    this.problem = p
    this.changed()
  }

  private changed(): void {
    for (const m of this.members.values()) m.changed()
    this.o.changed()
  }
}

/**
 * Where to reach each relay of a committee followed to: the URL of a
 * session that proved its key while the relay keeps its API address (the
 * app's URL of that relay: TLS names, paths), else its API address from the
 * certificate, with the scheme of the app's URLs (wss:// when they are secure).
 */
export function urlsOf(cluster: ClusterDescriptor, proven: ReadonlyMap<string, { url: string; api: string | undefined }>, before: readonly string[]): string[] {
  const secure = before.some((u) => u.startsWith('wss:') || u.startsWith('https:'))
  return cluster.relays.map((r) => {
    const known = proven.get(toHex(r.publicKey))
    return known && known.api === r.api ? known.url : `${secure ? 'wss' : 'ws'}://${r.api ?? r.id}`
  })
}

/** "3 h 0 min 12 s ahead of" / "40 s behind": how far a device clock is off (`ms` > 0: ahead). */
function describeSkew(ms: number): string {
  const s = Math.round(Math.abs(ms) / 1000)
  const h = Math.floor(s / 3600)
  const min = Math.floor((s % 3600) / 60)
  const parts = [h ? `${h} h` : '', h || min ? `${min} min` : '', `${s % 60} s`].filter(Boolean)
  return `${parts.join(' ')} ${ms > 0 ? 'ahead of' : 'behind'}`
}
