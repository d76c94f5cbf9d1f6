import {
  HEAD_NONCE_BYTES,
  SteadError,
  asSigned,
  authorIdOf,
  bytesEqual,
  decode,
  expect,
  freshHeadBytes,
  fromBase64Url,
  fromHex,
  historyPageBytes,
  readAuthBytes,
  stableReadBytes,
  toHex,
  encodeEnvelope,
  type Clock,
  type Crypto,
  type RelayMessage,
  type HostClock,
  type PresenceBody,
} from '@stead/core'
import { fetchVerifiedDelta, fetchVerifiedObject, fetchVerifiedSnapshot, type BootstrapRequest, type VerifiedCatchUp, type VerifiedSnapshot } from './bootstrap.ts'
import { MAX_ATTESTED_BODY, firstQuorum, getJson, httpBaseOf, type ClusterDescriptor, type Fetch } from '../transport/cluster.ts'
import type { DraftBatch } from '../space/drafts.ts'
import { ClosedError } from '../errors.ts'
import { MAX_HISTORY_BYTES, decodePage, sharedNewest } from './history-pages.ts'
import { RelayIntake } from './intake.ts'
import type { Freshness } from './pacing.ts'
import { PresenceWire } from './presence-wire.ts'
import { Outbox, type SpaceNews } from './outbox.ts'
import { ClockProofs, type CausalComparison, type ClockProof, type ProofKind, type RelayEvidence } from './proofs.ts'
import type { ClientRecords } from './persist.ts'
import type { PeerHub, PeerMember, PeerSource, SignedPresenceOf } from '../peers/peers.ts'
import type { AttestedCommit, AttestedState, Certified } from '../peers/peer-messages.ts'
import type { ChainPosition } from './quorum.ts'
import type { RelaySessions, SessionMember } from '../transport/sessions.ts'
import type { HistoryPage, PendingUpdate, Upstream } from '../space/space.ts'
import type { Identity, RelayLink } from '../transport/transport.ts'
import type { SessionsStatus } from '../types.ts'
import type { SpacePort } from '../space/space-port.ts'

/** The largest history page read from a relay, and its JSON answer (base64url, with a signature). */
const MAX_HISTORY_BODY = Math.ceil(MAX_HISTORY_BYTES / 3) * 4 + 64 * 1024
/** How long a relay may take to answer a history page, and then to send its body: a page is read from f+1 relays, and a slow one must not keep a request open after the others agreed. */
const HISTORY_READ_TIMEOUT_MS = 30_000
/** Clock votes read from one relay's answer at most: one per relay of a large cluster. */
const MAX_CLOCK_VOTES = 256
/** How long a relay may take to answer what it holds for one update's clock proof. */
const CLOCK_READ_TIMEOUT_MS = 10_000
/** Clock proofs a space keeps (of commits it applied, and of updates asked about); the oldest go first. */
const CLOCK_PROOFS_KEPT = 10_000

export interface RelayUpstreamInit {
  space: SpacePort
  records: ClientRecords
  crypto: Crypto
  identity: Identity
  sessions: RelaySessions
  fetch: Fetch | undefined
  resubmitAfterMs: number
  checkpointEvery: number
  clock: HostClock
  news: SpaceNews
  /** The author's last sequence number in this space, and that envelope's clock. */
  seq: number
  last: { base: number; clock: Clock }
  /** Options of the space's replica (a verified snapshot starts a new one). */
  replicaOptions: { space: string; historyLimit?: number }
  /** The client's peers, when it syncs peer to peer. */
  peers: PeerHub | undefined
  /** The certificate of the commit the stored stable state is at, if it had one. */
  certified: Certified | undefined
}

/**
 * A space's way to the relays, in the tab that owns the sessions: the
 * outbox (own envelopes), the intake (envelopes and commits) and the
 * reads that ask the relays over HTTP. With peers, also the space's side of
 * peer sync: its own new envelopes go to its peers too, and what they send
 * is checked like what relays send.
 */
export class RelayUpstream implements Upstream, SessionMember, PeerMember {
  readonly space: string
  readonly outbox: Outbox
  private readonly intake: RelayIntake
  private readonly presence: PresenceWire
  private readonly proofs: ClockProofs
  /** Peers the relays named as clients of this space: peer id → the relay sessions that named it. */
  private readonly peerNames = new Map<string, Set<RelayLink>>()
  private closed = false

  private readonly o: RelayUpstreamInit
  constructor(o: RelayUpstreamInit) {
    this.o = o
    this.space = o.space.space
    this.proofs = new ClockProofs(CLOCK_PROOFS_KEPT, {
      space: this.space,
      crypto: o.crypto,
      clock: o.clock,
      cluster: async () => {
        const { cluster } = await this.relayReads()
        return { f: cluster.f, relayKeys: cluster.relays.map((r) => r.publicKey) }
      },
      evidence: (idHex) => this.clockEvidence(idHex),
      envelope: (idHex) => this.o.space.replica.pendingEnvelope(idHex)?.signed,
    })
    const peers = o.peers
    const news: SpaceNews = {
      ...o.news,
      sealed: (frame, requests, places) => {
        o.news.sealed(frame, requests, places)
        if (frame && peers) peers.publish(this.space, toHex(o.crypto.sha256(asSigned(decode(frame)).bytes)), frame)
      },
      // An update of this client's own in flight: the space follows commits until it is decided (see Pacing).
      outboxChanged: () => {
        o.news.outboxChanged()
        // Later: the outbox may say so before the intake exists, and several changes in a row make one check.
        queueMicrotask(() => {
          if (!this.closed) this.intake.repace()
        })
      },
    }
    this.outbox = new Outbox({ ...o, news, member: this })
    this.presence = new PresenceWire({ space: this.space, presence: o.space.presence, crypto: o.crypto, identity: o.identity, links: () => o.sessions.links, peers: o.peers })
    this.intake = new RelayIntake({
      ...o,
      outbox: this.outbox,
      proofs: this.proofs,
      bootstrap: (relays) => this.verifiedSnapshot(relays),
      catchUp: (relays) => this.verifiedDelta(relays),
      quorumIndex: (timeoutMs) => this.quorumIndex(timeoutMs),
      subscribed: (link) => (o.peers ? this.announce(link, o.peers.addresses()) : undefined),
    })
  }

  follow(freshness: Freshness | undefined): void {
    if (!this.closed) this.intake.setFreshness(freshness)
  }

  // ---- Upstream

  publishPresence(body: PresenceBody): void {
    if (!this.closed) this.presence.publish(body)
  }

  seal(batch: DraftBatch): Promise<void> {
    return this.outbox.seal(batch)
  }

  pendingUpdates(): PendingUpdate[] {
    return this.outbox.pendingUpdates()
  }

  allAccepted(): boolean {
    return this.outbox.allAccepted()
  }

  allDecided(): boolean {
    return this.outbox.size === 0
  }

  async compare(a: string, b: string): Promise<CausalComparison> {
    return this.proofs.compare(a, b)
  }

  async clockProof(update: string | number, kind: ProofKind = 'any', waitMs = 0): Promise<ClockProof> {
    return this.proofs.proof(update, kind, waitMs)
  }

  sessionsStatus(closed: boolean, problem: string | undefined): SessionsStatus {
    return this.o.sessions.statusFor(closed, problem)
  }

  now(): number {
    return this.o.sessions.now()
  }

  async close(): Promise<void> {
    this.closed = true
    this.o.sessions.leave(this)
    this.o.peers?.leave(this)
    await this.intake.close()
    this.outbox.close(new ClosedError(`space ${this.space}`))
  }

  // ---- PeerMember

  held(): string[] {
    return this.o.space.replica.pendingEnvelopes().map((e) => e.idHex)
  }

  frame(idHex: string): Uint8Array | undefined {
    const env = this.o.space.replica.pendingEnvelope(idHex)
    return env && encodeEnvelope(env)
  }

  fromPeer(frame: Uint8Array, source: PeerSource): void {
    if (!this.closed) this.intake.fromPeer(frame, source)
  }

  ownPresence(): SignedPresenceOf | undefined {
    return this.closed ? undefined : this.presence.own()
  }

  presenceFromPeer(presence: SignedPresenceOf, source: PeerSource): void {
    if (!this.closed) this.presence.fromPeer(presence, source)
  }

  knows(idHex: string): boolean {
    return this.intake.knows(idHex)
  }

  reachableAt(addresses: readonly string[]): void {
    if (this.closed) return
    for (const link of this.o.sessions.links) if (link.ready) this.announce(link, addresses)
  }

  mayShare(peer: string, key?: Uint8Array): boolean {
    const f = this.o.sessions.cluster?.f
    if (f === undefined) return false
    const by = this.peerNames.get(peer)
    // One vote per relay: sessions that are not faulty, counted by the relay index each proved (its welcome
    // signature), so one relay reached at two URLs is one vote.
    const relays = new Set<number>()
    for (const link of by ?? []) if (!link.faulty && link.provenRelay !== undefined) relays.add(link.provenRelay)
    return relays.size > f || (key !== undefined && this.policyLetsRead(key))
  }

  /**
   * Whether the space's stable policy (f+1 relays attested the state it is
   * in) lets the holder of `key` read: so peers share a space without a
   * relay naming them, as when every relay is down. The policy is as stale
   * as this client's stable state: a member removed since it was attested
   * is still let read until the removal reaches this client. A key that
   * acts for a user through a device certificate is not known here as that
   * user: only relays vouch for it.
   */
  private policyLetsRead(key: Uint8Array): boolean {
    const policy = this.o.space.replica.policy()
    if (!policy || policy.deleted) return false
    const authorId = authorIdOf(this.o.crypto, key)
    return policy.mayReadAs({ authorId, userId: authorId })
  }

  position(): ChainPosition {
    return this.o.space.position
  }

  followsCommits(): boolean {
    return !this.closed && this.intake.followsCommits()
  }

  catchUpFor(at: ChainPosition, maxBytes: number, withState: boolean): ReturnType<PeerMember['catchUpFor']> {
    return this.closed ? undefined : this.intake.catchUpFor(at, maxBytes, withState)
  }

  async commitsFromPeer(commits: readonly AttestedCommit[], source: PeerSource): Promise<void> {
    if (!this.closed) await this.intake.commitsFromPeer(commits, source)
  }

  async snapshotFromPeer(snapshot: AttestedState, source: PeerSource): Promise<void> {
    if (!this.closed) await this.intake.snapshotFromPeer(snapshot, source)
  }

  /** A relay named these addresses as the space's other clients: count which relays vouch for each peer, and dial them. */
  private named(link: RelayLink, addrs: readonly string[]): void {
    const peers = this.o.peers
    if (!peers) return
    const vouched: string[] = []
    for (const addr of addrs) {
      const peer = /\/p2p\/([^/]+)$/.exec(addr)?.[1]
      if (!peer) continue
      let by = this.peerNames.get(peer)
      if (!by) {
        // Bounded: a peer named by too few relays yet makes room, the oldest first; one already vouched for stays.
        if (this.peerNames.size >= MAX_NAMED_PEERS) {
          const spare = [...this.peerNames].find(([p]) => !this.mayShare(p))
          if (!spare) continue
          this.peerNames.delete(spare[0])
        }
        this.peerNames.set(peer, (by = new Set()))
      }
      const before = this.mayShare(peer)
      // Counted per relay session, not per the index a relay claims (a session does not prove it): one relay is one vote.
      by.add(link)
      if (!before && this.mayShare(peer)) peers.authorized(this, peer)
      if (this.mayShare(peer)) vouched.push(addr)
    }
    // Only peers f+1 relays vouch for are dialled: one relay cannot make this client dial where it likes.
    peers.dial(vouched)
  }

  /** Tells a relay where this client can be reached for this space (after subscribing: the relay needs that first). */
  private announce(link: RelayLink, addrs: readonly string[]): void {
    if (addrs.length > 0) link.send({ type: 'announce', space: this.space, addrs: [...addrs] })
  }

  // ---- SessionMember

  ready(link: RelayLink): void {
    if (this.closed) return
    this.intake.ready(link)
    this.presence.linkReady(link)
    // Browsers are reached through a relay's peer service: connect to it (this client announces where it is once it subscribed).
    this.o.peers?.dial(link.peerAddresses)
    this.outbox.resubmit()
    this.o.space.emitStatus()
  }

  message(link: RelayLink, m: RelayMessage): void {
    if (this.closed) return
    if (m.type === 'envelope' || m.type === 'commit' || m.type === 'attest' || m.type === 'delta') this.intake.message(link, m)
    else if (m.type === 'unpaced' && m.space === this.space) this.intake.unpaced(link)
    else if (m.type === 'pruned' && m.space === this.space) this.intake.prunedAt(m.from)
    else if (m.type === 'unreadable' && m.space === this.space) this.intake.unreadableAt(link, m.detail)
    else if (m.type === 'peers' && m.space === this.space) this.named(link, m.addrs)
    else if (m.type === 'presence') this.presence.heard(m, link)
    else if (m.type === 'accepted' || m.type === 'error') this.outbox.answer(m, link)
    else if (m.type === 'want' && m.space === this.space) this.outbox.supply(link, m.ids)
    else if (m.type === 'votes' && m.space === this.space && link.provenRelay !== undefined) this.proofs.heard(link.provenRelay, m.votes)
  }

  changed(): void {
    if (this.closed) return
    this.presence.linksChanged()
    this.intake.sessionsChanged()
    this.o.space.emitStatus()
  }

  committeeChanged(): void {
    if (this.closed) return
    // Vouches were counted per session of the old committee: a relay at two indexes must not count twice.
    this.peerNames.clear()
    this.intake.committeeChanged()
    this.outbox.committeeChanged()
    this.proofs.committeeChanged()
  }

  tick(): void {
    if (this.closed) return
    this.outbox.resubmit()
    this.intake.tick()
  }

  error(err: SteadError): void {
    this.o.space.emitError(err)
  }

  // ---- reads over HTTP

  /** A history page that f+1 relays signed identically (at least one of them is correct). */
  /**
   * Up to `limit` entries of `key`'s stable history before `before`, oldest
   * first. Relays stop a page at their byte limit and say where the next
   * starts: the pages are read in turn (each one f+1 relays signed alike)
   * until `limit` entries or the start of the history, or MAX_HISTORY_BYTES.
   */
  async relayHistory(key: string, before: number, limit: number): Promise<HistoryPage> {
    const pairs: Array<[number, unknown]> = []
    let at = before
    let bytes = 0
    for (;;) {
      const page = await this.relayHistoryPage(key, at, limit - pairs.length)
      pairs.push(...page.pairs)
      bytes += page.bytes
      if (pairs.length >= limit || page.next === null || bytes >= MAX_HISTORY_BYTES) break
      at = page.next
    }
    return pairs.map(([index, value]) => ({ index: expect.uint(index, 'history.index'), value })).reverse()
  }

  /** One signed page, newest first, with the `before` of the next page when the relays cut it short (null: no more, or an older relay). */
  private async relayHistoryPage(key: string, before: number, limit: number): Promise<{ pairs: Array<[number, unknown]>; bytes: number; next: number | null }> {
    const { cluster, fetchFn, headers } = await this.relayReads()
    const path = `/v1/spaces/${encodeURIComponent(this.space)}/history/${encodeURIComponent(key)}?before=${before}&limit=${limit}`
    const agreed = await firstQuorum(
      this.o.sessions.relayUrls.map(async (url) => {
        try {
          const p = (await getJson(fetchFn, `${httpBaseOf(url)}${path}`, { headers, maxBytes: MAX_HISTORY_BODY, timeoutMs: HISTORY_READ_TIMEOUT_MS })) as { relay: number; entries: string; sig: string; next?: unknown } | undefined
          if (p === undefined) return undefined
          const relayKey = cluster.relays[p.relay]?.publicKey
          const entries = fromBase64Url(p.entries)
          if (!relayKey || !(await this.o.crypto.verify(relayKey, historyPageBytes(this.space, key, before, entries), fromHex(p.sig)))) return undefined
          return { relay: p.relay, entries, next: typeof p.next === 'number' ? p.next : null }
        } catch {
          return undefined
        }
      }),
      (answers, done) => {
        for (const a of answers) {
          const alike = answers.filter((b) => bytesEqual(a.entries, b.entries))
          if (new Set(alike.map((b) => b.relay)).size >= cluster.f + 1) return { pairs: decodePage(a.entries), bytes: a.entries.length, more: alike.some((b) => b.next !== null) }
        }
        // Relays prune a space's history as its retention says, each when it compacts: at the old end their
        // pages may differ. What f+1 of them served alike, newest first, is history; past it, none is.
        return done ? sharedNewest(answers, cluster.f + 1) : undefined
      },
    )
    if (!agreed) throw new SteadError('unsupported', `fewer than ${cluster.f + 1} relays served the same page of ${key}'s history`)
    const pairs = agreed.pairs
    // Where the next page starts is the oldest entry here (signed): a relay's word only says whether to ask.
    const oldest = pairs.length > 0 && pairs.length < limit && agreed.more ? pairs[pairs.length - 1]?.[0] : undefined
    return { pairs, bytes: agreed.bytes, next: typeof oldest === 'number' && Number.isSafeInteger(oldest) && oldest < before ? oldest : null }
  }

  /** What each relay holds to prove update `idHex`'s clock (GET …/clock/:id), as it answered: checked by the caller, not here. */
  private async clockEvidence(idHex: string): Promise<RelayEvidence[]> {
    const { fetchFn, headers } = await this.relayReads()
    const path = `/v1/spaces/${encodeURIComponent(this.space)}/clock/${idHex}`
    const answers = await Promise.all(
      this.o.sessions.relayUrls.map(async (url): Promise<RelayEvidence | undefined> => {
        try {
          const e = (await getJson(fetchFn, `${httpBaseOf(url)}${path}`, { headers, maxBytes: MAX_ATTESTED_BODY, timeoutMs: CLOCK_READ_TIMEOUT_MS })) as { relay?: unknown; envelope?: unknown; votes?: unknown; attestation?: unknown; sig?: unknown } | undefined
          if (!e || typeof e.relay !== 'number') return undefined
          const votes = Array.isArray(e.votes) ? e.votes.slice(0, MAX_CLOCK_VOTES).flatMap((v: unknown) => (Array.isArray(v) && typeof v[0] === 'number' && typeof v[1] === 'number' && typeof v[2] === 'string' ? [[v[0], v[1], fromHex(v[2])] as const] : [])) : []
          const attestation = typeof e.attestation === 'string' && typeof e.sig === 'string' ? { bytes: fromBase64Url(e.attestation), sig: fromHex(e.sig) } : undefined
          return { relay: e.relay, frame: typeof e.envelope === 'string' ? fromBase64Url(e.envelope) : undefined, votes, attestation }
        } catch {
          return undefined
        }
      }),
    )
    return answers.filter((a): a is RelayEvidence => a !== undefined)
  }

  async quorumIndex(timeoutMs: number): Promise<number> {
    const { cluster, fetchFn, headers } = await this.relayReads()
    const nonce = globalThis.crypto.getRandomValues(new Uint8Array(HEAD_NONCE_BYTES))
    // Done at 2f+1 valid heads (or when every relay answered or gave up): a slow relay delays nobody.
    const heads = await firstQuorum(
      this.o.sessions.relayUrls.map(async (url) => {
        try {
          const h = (await getJson(fetchFn, `${httpBaseOf(url)}/v1/spaces/${encodeURIComponent(this.space)}/head?nonce=${toHex(nonce)}`, { headers, maxBytes: MAX_ATTESTED_BODY, timeoutMs })) as { relay: number; index: number; stateHash: string; sig: string; proof?: unknown } | undefined
          if (h === undefined) return undefined
          const key = cluster.relays[h.relay]?.publicKey
          if (!key || !Number.isSafeInteger(h.index)) return undefined
          const hash = fromHex(h.stateHash)
          // Signed over this read's nonce: a head recorded earlier does not verify.
          if (!(await this.o.crypto.verify(key, freshHeadBytes(this.space, h.index, hash, nonce), fromHex(h.sig)))) return undefined
          // A head f+1 relays did not sign may be made up: the relay that vouched for it over our nonce lies.
          if (h.index > 0 && !(await this.headProven(cluster, h.index, hash, h.proof))) {
            this.o.sessions.linkTo(h.relay)?.markFaulty(`answered a quorum read with head ${h.index}, which f+1 relays did not sign`)
            return undefined
          }
          return { relay: h.relay, index: h.index, hash }
        } catch {
          return undefined
        }
      }),
      (answers, done) => {
        const distinct = [...new Map(answers.map((h) => [h.relay, h])).values()]
        return distinct.length >= 2 * cluster.f + 1 || done ? distinct : undefined
      },
    )
    const valid = heads ?? []
    const needed = 2 * cluster.f + 1
    if (valid.length < needed) throw new SteadError('unsupported', `only ${valid.length} relays answered a quorum read with a proven head; it needs ${needed}`)
    // Every safe update that resolved before this read was attested by 2f+1 relays, so at least
    // one correct relay among these 2f+1 had applied it: the highest proven head includes it.
    return Math.max(...valid.map((h) => h.index))
  }

  /** Whether `proof` holds f+1 distinct relays' valid signatures that the space's stable state at `index` has `hash`. */
  private async headProven(cluster: ClusterDescriptor, index: number, hash: Uint8Array, proof: unknown): Promise<boolean> {
    if (!Array.isArray(proof)) return false
    const bytes = stableReadBytes(this.space, index, hash)
    const signers = new Set<number>()
    for (const entry of proof.slice(0, cluster.relays.length)) {
      if (!Array.isArray(entry) || typeof entry[0] !== 'number' || typeof entry[1] !== 'string' || signers.has(entry[0])) continue
      const key = cluster.relays[entry[0]]?.publicKey
      if (key && (await this.o.crypto.verify(key, bytes, fromHex(entry[1])))) signers.add(entry[0])
      if (signers.size > cluster.f) return true
    }
    return false
  }

  /**
   * `key`'s stable value at a stable index of at least `atLeast`, proven by
   * one relay's Merkle path against a state hash f+1 relays attested (see
   * fetchVerifiedObject); undefined when no relay could prove one.
   */
  async stableObject(key: string, atLeast: number, timeoutMs: number): Promise<{ index: number; value: unknown } | undefined> {
    const relays = this.o.sessions.links.filter((l) => !l.faulty).map((l) => ({ relay: l.provenRelay, url: l.url }))
    const request = await this.attestedReads(relays, timeoutMs)
    const found = request && (await fetchVerifiedObject(request, key, atLeast))
    return found && { index: found.index, value: found.value }
  }

  /** The latest snapshot of the space that f+1 relays vouch for (see fetchVerifiedSnapshot), asked of `relays` in turn. */
  private async verifiedSnapshot(relays: ReadonlyArray<{ relay: number | undefined; url: string }>): Promise<VerifiedSnapshot | undefined> {
    const request = await this.attestedReads(relays, BOOTSTRAP_TIMEOUT_MS)
    return request && fetchVerifiedSnapshot(request)
  }

  /** What changed in the space since its replica's stable index, as a delta f+1 relays vouch for (see fetchVerifiedDelta), asked of `relays` in turn. */
  private async verifiedDelta(relays: ReadonlyArray<{ relay: number | undefined; url: string }>): Promise<VerifiedCatchUp | undefined> {
    const request = await this.attestedReads(relays, BOOTSTRAP_TIMEOUT_MS)
    return request && fetchVerifiedDelta(request, this.o.space.replica)
  }

  /** A read of what relays serve with their attestation, asked of `relays` in turn (undefined without fetch()). */
  private async attestedReads(relays: ReadonlyArray<{ relay: number | undefined; url: string }>, timeoutMs: number): Promise<BootstrapRequest | undefined> {
    if (!this.o.fetch) return undefined
    const { cluster, fetchFn, headers } = await this.relayReads()
    return { space: this.space, cluster, crypto: this.o.crypto, fetch: fetchFn, headers, relays, timeoutMs, faulty: (url, why) => this.o.sessions.links.find((l) => l.url === url)?.markFaulty(why) }
  }

  /** What reading from the relays over HTTP needs: the trusted cluster, fetch, and this client's reader proof. */
  private async relayReads(): Promise<{ cluster: ClusterDescriptor; fetchFn: Fetch; headers: Record<string, string> }> {
    const cluster = this.o.sessions.cluster
    const fetchFn = this.o.fetch
    if (!cluster) throw new SteadError('unsupported', 'no trusted cluster yet: the relays have not been reached')
    if (!fetchFn) throw new SteadError('unsupported', 'no fetch() on this platform for relay reads')
    // Proves this client's key to relays of a space with readers (others ignore it).
    const t = this.o.clock.now()
    const sig = await this.o.crypto.sign(this.o.identity.secretKey, readAuthBytes(this.space, t))
    const cert = this.o.identity.certificate
    const device = cert ? `.${toHex(cert.user)}${toHex(cert.sig)}` : ''
    return { cluster, fetchFn, headers: { 'x-stead-reader': `${toHex(this.o.identity.publicKey)}.${t}.${toHex(sig)}${device}` } }
  }
}

/** How many peers a space remembers the relays naming. */
const MAX_NAMED_PEERS = 4096

/** How long one request of a snapshot bootstrap may take before the next relay is asked. */
const BOOTSTRAP_TIMEOUT_MS = 10_000
