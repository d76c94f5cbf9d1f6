import { MAX_PEER_ADDRS, fromHex, systemClock, toHex, type HostClock, type HostTimer } from '@stead/core'
import { MAX_FRAMES_PER_MESSAGE, MAX_PEER_IDS, decodePeerMessage, encodePeerMessage, type AttestedCommit, type AttestedState, type PeerMessage, type SignedPresenceOf } from './peer-messages.ts'
import type { ChainPosition } from '../upstream/quorum.ts'

export { MAX_PEER_IDS, PEER_TAG, decodePeerMessage, type SignedPresenceOf } from './peer-messages.ts'

/**
 * Peer-to-peer sync between the clients of a space (Merkle-CRDTs): envelopes
 * are content-addressed and signed, so a client can take them from any peer
 * and check them itself, with no relay in between. While the relays are
 * unreachable, connected clients keep collaborating; when the relays come
 * back, every signed envelope flows into the stable order as usual (whoever
 * holds one may submit it).
 *
 * The hub speaks one small protocol over whatever links a {@link PeerNetwork}
 * gives it (libp2p in Node: `libp2pPeers`; an in-memory pair in tests):
 *
 * - `have` lists the ids of the envelopes a client holds undecided for a
 *   space. Each side sends it once it may exchange the space with the peer
 *   (f+1 relays named the peer as a client of the space: at least one
 *   correct relay let its key read it); the other answers with every
 *   envelope it holds that the list lacks. One round trip and both hold the
 *   union. Nothing a peer says about a space it is not vouched for is
 *   answered or shown. Every keepalive period each side sends `have`
 *   again, and gets what it lacks (at most once per half period):
 *   anti-entropy behind the gossip below, for a peer that missed news.
 * - `env` carries envelope frames. A client sends its own new envelopes to
 *   every peer of the space at once.
 * - `news` lists the ids of envelopes a client first got from a peer: it
 *   passes them on, batched, to some of its peers, which ask for those they
 *   lack. A peer that said it exchanges the space with `d` peers gets the
 *   news with probability min(1, {@link NEWS_FANOUT} / d):
 *   so each peer hears news from about NEWS_FANOUT of its peers whatever
 *   the shape of the mesh, and one linked only to a few (a newcomer that
 *   dialled one peer) hears it from each of them, not by luck. In a full
 *   mesh every peer already has an envelope from its author, so passing it
 *   on costs an id, not a copy; in a sparser one the news spreads as gossip.
 * - `links` says how many peers a client exchanges a space with: sent
 *   when the exchange starts, every keepalive period, and to every peer of
 *   the space once the count moved by a quarter since it last went out.
 * - `want` asks for envelopes by id: the deps a received envelope names that
 *   the client does not have.
 * - `sync` says where a client stands in a space's chain of attested
 *   commits (stable index, last round). A client sends it on each link
 *   that exchanges the space when the exchange starts and every keepalive
 *   period after that, and to a peer it does not share the space with only
 *   in answer to that peer's `sync` from further ahead; a peer it may
 *   share the space with answers with what the sender lacks and it can
 *   prove: `commits` (the attested commits that follow, each with the
 *   signatures of f+1 relays and its envelope frames), or, when the sender
 *   is before the commits it keeps, `snapshot` (its state, with the
 *   certificate of the commit it is at). The sender believes either only on
 *   those relay signatures, never on the peer's word, and only a run of
 *   commits that follows its own position: this is how a client catches
 *   up, or joins a space, while every relay is down. A peer that is behind
 *   the sender gets a `sync` back, so it is answered in turn.
 * - `presence` carries a client's presence as its author signed it (the
 *   same bytes relays pass on): each client sends its own to its peers of
 *   the space, and passes on once what it heard first from a peer, so
 *   presence keeps flowing while the relays are down. A peer that sends
 *   one whose signature does not verify is faulty.
 *
 * A peer that sends anything malformed, an envelope whose signature does
 * not verify or that belongs to another space is faulty: its link is closed
 * and the hub refuses it from then on (an honest peer checks all that before
 * it passes an envelope on). An envelope whose clock its inputs contradict
 * is not shown; its author is faulty when it sent it itself, but a peer
 * passing it on is not blamed: it may have lacked the inputs that show it.
 */

/** A connection to one peer, as a {@link PeerNetwork} gives it. */
export interface PeerLink {
  /** Who the peer is: an authenticated id (libp2p's peer id), stable across its connections. */
  readonly peer: string
  /** The peer's Ed25519 public key, when the transport authenticated one (libp2p does): it tells an author from a peer passing its envelope on. */
  readonly key?: Uint8Array | undefined
  /** Queues one message; false when it was dropped (the link is closed or its queue full). */
  send(message: Uint8Array): boolean
  /** Closes the link, saying why (for the peer's and this client's logs). */
  close(reason: string): void
}

/** What a {@link PeerNetwork} tells the hub. */
export interface PeerEvents {
  /** A link to a peer is open: messages may go both ways. */
  opened(link: PeerLink): void
  /** One whole message from the peer of `link`. */
  message(link: PeerLink, message: Uint8Array): void
  /** The link closed (either side, or the network failed). */
  closed(link: PeerLink): void
  /** Where this client can be reached changed (see {@link PeerNetwork.addresses}). */
  addressesChanged(): void
}

/** The links to a client's peers: a transport behind a handful of methods. One network serves one client. */
export interface PeerNetwork {
  /**
   * Starts listening and dialling; `events` hears of every link. `identity`
   * is the client's Ed25519 key pair, which a transport may take as its own
   * (libp2p does, so peers are authenticated).
   */
  start(events: PeerEvents, identity: { readonly secretKey: Uint8Array; readonly publicKey: Uint8Array }): Promise<void>
  /** Closes every link and stops. */
  stop(): Promise<void>
  /**
   * Where other clients can reach this one (announced to the relays of each
   * space, which pass them on); empty when it cannot be reached.
   */
  addresses(): string[]
  /**
   * Connects to an address a relay passed on: another client's, or a
   * relay's own peer service (what its `welcome` offered). Addresses this
   * transport cannot use are ignored.
   */
  dial(address: string): void
}

/** A peer a space heard an envelope from: blamed when the envelope proves bad. */
export interface PeerSource {
  readonly peer: string
  /** The peer's authenticated public key, if the transport knows it. */
  readonly key: Uint8Array | undefined
  markFaulty(why: string): void
}

/** A space's side of peer sync (a space of the leading tab). */
export interface PeerMember {
  readonly space: string
  /** Ids (hex) of the envelopes this space holds undecided: what it can hand a peer. */
  held(): string[]
  /** The frame of an envelope this space holds, by id. */
  frame(idHex: string): Uint8Array | undefined
  /** An envelope frame from a peer: verify it, then show it or blame the peer. */
  fromPeer(frame: Uint8Array, source: PeerSource): void
  /** Whether this space has (or is checking, or has decided) the envelope with this id. */
  knows(idHex: string): boolean
  /**
   * Whether `peer` (authenticated as `key`, when the transport knows it)
   * may exchange this space's envelopes: f+1 relays named it for the space
   * (so at least one correct relay let its key read it), or the space's
   * stable policy, as f+1 relays attested it, lets its key read.
   */
  mayShare(peer: string, key: Uint8Array | undefined): boolean
  /** Where this space stands in its chain of attested commits. */
  position(): ChainPosition
  /** Whether it applies commits one by one (a paced space follows deltas instead, and asks peers for none). */
  followsCommits(): boolean
  /** What a peer at `at` lacks of the attested chain that this space can prove, within about `maxBytes` (its state only if `state`); undefined: nothing. */
  catchUpFor(at: ChainPosition, maxBytes: number, state: boolean): { commits: AttestedCommit[] } | { snapshot: AttestedState } | undefined
  /** Attested commits from a peer: checked against the relays' keys and applied, or the peer blamed. Resolves once applied. */
  commitsFromPeer(commits: readonly AttestedCommit[], source: PeerSource): Promise<void>
  /** A state from a peer that this space asked (`sync`): checked against the relays' keys and adopted if ahead, or the peer blamed. */
  snapshotFromPeer(snapshot: AttestedState, source: PeerSource): Promise<void>
  /** This client can now be reached at `addresses`: tell the space's relays. */
  reachableAt(addresses: readonly string[]): void
  /** This client's latest presence in the space, signed: what a peer gets when the exchange starts. */
  ownPresence(): SignedPresenceOf | undefined
  /** A presence a peer sent (its own or one it passes on): check it, show it if news, pass it on; a bad one blames the peer. */
  presenceFromPeer(presence: SignedPresenceOf, source: PeerSource): void
}

/** Counts of what the hub did, for status and tests. */
export interface PeerStats {
  /** Links open now. */
  readonly peers: number
  /** Links exchanging at least one space (the relays vouch for the peer there). */
  readonly exchanging: number
  /** Envelope frames sent to peers. */
  readonly framesSent: number
  /** Envelope frames received from peers (before they are checked). */
  readonly framesReceived: number
  /** Attested commits received from peers (before they are checked): what catching up from peers took. */
  readonly commitsReceived: number
  /** Attested states received from peers (before they are checked). */
  readonly statesReceived: number
  /** Bytes of the messages sent to peers (transport framing and encryption not counted). */
  readonly bytesSent: number
  /** Bytes of the messages received from peers. */
  readonly bytesReceived: number
  /** Messages a full or closed link dropped. */
  readonly dropped: number
  /** Peers found faulty (each is refused from then on). */
  readonly faulty: number
}

/** From about how many of its peers each peer hears `news` of an envelope (see sendNews). */
export const NEWS_FANOUT = 6
/**
 * How far a space's count of peers may move before every peer of it hears
 * the new count: a peer that believes this client has fewer peers than it
 * has sends it news that often more (measured: announcing only when the
 * count doubled sent 18-65% more bytes per update in a 50-peer mesh).
 */
const LINKS_SAID_FACTOR = 1.25
/** How long news waits to travel with more news (ms). */
const NEWS_BATCH_MS = 20
const MAX_FRAME_BYTES_PER_MESSAGE = 1 << 20
/** About the most bytes of commits, or of a state, in one answer to `sync` (a peer message is at most 4 MiB). */
const CATCH_UP_BYTES = 3 * 1024 * 1024
/** Spaces a link remembers a peer was ahead in before this client opened them. */
const MAX_HEARD_AHEAD = 8
/** How long deps asked of the peer that named them may take before other peers are asked (ms). */
const WANT_AGAIN_MS = 500
/** How often one link may be answered with a space's whole state (ms): encoding it costs this client. */
const SNAPSHOT_EVERY_MS = 10_000

interface LinkState {
  readonly link: PeerLink
  /** Spaces exchanged with this peer (the relays vouch that it may read them): what it is sent and heard on. */
  readonly spaces: Set<string>
  /** Spaces whose `have` this link asked to be answered with ours already: it is not sent twice. */
  readonly answered: Set<string>
  /** Per space, when this peer's `have` was last answered with what it lacks (at most once per half keepalive period; shared by its links). */
  readonly served: Map<string, number>
  /** Spaces this client has not opened (yet) that the peer said it is ahead in, with the round: answered when one opens (see join). */
  readonly heardAhead: Map<string, number>
  /** Envelopes already sent to this peer, on any of its links (the latest SENT_KEPT): not sent again, whatever it asks. */
  readonly sent: Set<string>
  /** Per space, how many peers this peer said (`links`, on any of its links) it exchanges the space with: how likely it is to be sent news. */
  readonly peerLinks: Map<string, number>
  /** Spaces this side sent `sync` for on this link: only those may be answered with a state. */
  readonly synced: Set<string>
  /** Per space, when this link was last answered with a state (see SNAPSHOT_EVERY_MS). */
  readonly snapshotAt: Map<string, number>
  /** When this side last sent on the link (the client's clock). */
  lastSent: number
  closed: boolean
}

/** How many envelope ids a link remembers having sent. */
const SENT_KEPT = 16_384
/** Most links at once: more are refused. */
const MAX_LINKS = 256

/**
 * One client's peer sync: the links its {@link PeerNetwork} opens, shared by
 * every space of the client (see the module comment above for the protocol).
 */
export class PeerHub {
  private readonly links = new Map<PeerLink, LinkState>()
  private readonly members = new Map<string, PeerMember>()
  /** Peers found faulty: their links are refused. */
  private readonly refused = new Set<string>()
  /** News waiting to be passed on: space → envelope id → the peer it came from. */
  private news = new Map<string, Map<string, string>>()
  private newsTimer: HostTimer | undefined
  /** Per space, the count of its peers every peer of it heard last (see linksChanged). */
  private readonly linksSaid = new Map<string, number>()
  /** Deps asked of the peer that named them, to ask of others if still missing (see want): by space and peer. */
  private readonly retries = new Map<string, { ids: Set<string>; timer: HostTimer }>()
  private stats = { framesSent: 0, framesReceived: 0, commitsReceived: 0, statesReceived: 0, bytesSent: 0, bytesReceived: 0, dropped: 0 }
  private stopped = false
  private readonly network: PeerNetwork
  private readonly onFault: (peer: string, why: string) => void

  private readonly keepaliveMs: number
  private keepalive: HostTimer | undefined
  private readonly clock: HostClock

  /**
   * `keepaliveMs`: a link that sent nothing for this long sends an empty
   * news message (transports close idle connections: TCP after 2 minutes).
   * `clock`: the client's time and timers.
   */
  constructor(network: PeerNetwork, onFault: (peer: string, why: string) => void, keepaliveMs = 30_000, clock: HostClock = systemClock) {
    this.network = network
    this.onFault = onFault
    this.keepaliveMs = keepaliveMs
    this.clock = clock
  }

  /** Checks for quiet links every keepaliveMs, in the background (it keeps no process alive). */
  private scheduleKeepAlive(): void {
    this.keepalive = this.clock.setTimer(this.keepaliveMs, () => {
      if (this.stopped) return
      this.keepAlive()
      this.scheduleKeepAlive()
    })
    this.keepalive.unref?.()
  }

  start(identity: { readonly secretKey: Uint8Array; readonly publicKey: Uint8Array }): Promise<void> {
    this.scheduleKeepAlive()
    return this.network.start(
      {
        opened: (link) => this.opened(link),
        message: (link, bytes) => this.message(link, bytes),
        closed: (link) => {
          this.links.delete(link)
          this.linksChanged()
        },
        addressesChanged: () => {
          for (const m of this.members.values()) m.reachableAt(this.addresses())
        },
      },
      identity,
    )
  }

  /** Where this client can be reached: what each space announces to its relays. */
  addresses(): string[] {
    return this.stopped ? [] : this.network.addresses().slice(0, MAX_PEER_ADDRS)
  }

  /** Connects to addresses the relays passed on (other clients', or a relay's peer service); the network skips those it holds already. */
  dial(addresses: readonly string[]): void {
    if (this.stopped) return
    for (const a of addresses) this.network.dial(a)
  }

  async stop(): Promise<void> {
    this.stopped = true
    this.members.clear()
    this.newsTimer?.cancel()
    this.keepalive?.cancel()
    for (const r of this.retries.values()) r.timer.cancel()
    this.retries.clear()
    await this.network.stop()
    this.links.clear()
  }

  get status(): PeerStats {
    let exchanging = 0
    // Counted as sends go: a space whose vouching relays turned faulty no longer counts.
    for (const s of this.links.values()) if ([...s.spaces].some((space) => this.shares(s, space))) exchanging++
    return { peers: this.links.size, exchanging, ...this.stats, faulty: this.refused.size }
  }

  /** A space takes part: its peers learn what it holds, and answer with what it lacks. */
  join(member: PeerMember): void {
    if (this.stopped) return
    this.members.set(member.space, member)
    for (const s of this.links.values()) {
      const ahead = s.heardAhead.get(member.space)
      s.heardAhead.delete(member.space)
      if (member.mayShare(s.link.peer, s.link.key)) this.exchange(s, member, true)
      else if (ahead !== undefined && ahead > member.position().lastRound) this.sync(s, member)
    }
  }

  /** `member`'s stable policy may now let more peers read: exchange the space on the links to them. */
  recheck(member: PeerMember): void {
    if (this.members.get(member.space) !== member) return
    for (const s of this.links.values()) if (!s.spaces.has(member.space) && member.mayShare(s.link.peer, s.link.key)) this.exchange(s, member, true)
  }

  /**
   * Tells the peer where `member` stands in its chain of commits, asking for
   * what it lacks: to peers it shares the space with, and in answer to a
   * peer that is ahead and said so first (what it answers is believed on
   * relay signatures alone: so a space that holds nothing yet learns whom
   * its policy lets read).
   */
  private sync(s: LinkState, member: PeerMember): void {
    // A paced space follows deltas from the relays: commits from peers would be thrown away.
    if (!member.followsCommits()) return
    s.synced.add(member.space)
    const at = member.position()
    this.send(s, { kind: 'sync', space: member.space, stableIndex: at.stableIndex, lastRound: at.lastRound })
  }

  /** The relays now vouch for `peer` in `member`'s space: exchange it on the links to that peer. */
  authorized(member: PeerMember, peer: string): void {
    if (this.members.get(member.space) !== member) return
    for (const s of this.links.values()) if (s.link.peer === peer && !s.spaces.has(member.space)) this.exchange(s, member, true)
  }

  /** Starts exchanging a space on a link: this side's `have`, asking for the peer's when `ask`. */
  private exchange(s: LinkState, member: PeerMember, ask: boolean): void {
    s.spaces.add(member.space)
    this.sync(s, member)
    this.sendLinks(s, member.space)
    this.sendHave(s, member, ask)
    const presence = member.ownPresence()
    if (presence) this.send(s, { kind: 'presence', space: member.space, presence })
    this.linksChanged()
  }

  leave(member: PeerMember): void {
    if (this.members.get(member.space) !== member) return
    this.members.delete(member.space)
    this.linksSaid.delete(member.space)
    // Reopened later, the space starts its exchanges over.
    for (const s of this.links.values()) {
      s.spaces.delete(member.space)
      s.answered.delete(member.space)
      s.served.delete(member.space)
      s.synced.delete(member.space)
      s.snapshotAt.delete(member.space)
      s.peerLinks.delete(member.space)
    }
  }

  /** Sends one of this client's own new envelopes to every peer of its space (once per peer, over one of its links). */
  publish(space: string, idHex: string, frame: Uint8Array): void {
    for (const s of this.links.values()) {
      if (!this.shares(s, space) || s.sent.has(idHex)) continue
      this.sentOn(s, idHex)
      this.sendFrames(s, space, [frame])
    }
  }

  /** Sends a presence (this client's, or one it heard first from peer `from`) to every peer of the space but `from`. */
  publishPresence(space: string, presence: SignedPresenceOf, from?: string): void {
    for (const s of this.links.values()) if (s.link.peer !== from && this.shares(s, space)) this.send(s, { kind: 'presence', space, presence })
  }

  /** Passes on news of an envelope this client got from peer `from` (see the module comment). */
  relay(space: string, idHex: string, from: string): void {
    let news = this.news.get(space)
    if (!news) this.news.set(space, (news = new Map()))
    news.set(idHex, from)
    this.newsTimer ??= this.clock.setTimer(NEWS_BATCH_MS, () => this.sendNews())
  }

  /** Whether this link exchanges `space` now: it started to, and the relays still vouch for the peer (a vouching relay may have turned out faulty since). */
  private shares(s: LinkState, space: string): boolean {
    return s.spaces.has(space) && this.members.get(space)?.mayShare(s.link.peer, s.link.key) === true
  }

  /** One link per peer that exchanges `space` now. */
  private peersOf(space: string): LinkState[] {
    return [...new Map([...this.links.values()].filter((s) => this.shares(s, space)).map((s) => [s.link.peer, s])).values()]
  }

  private sendNews(): void {
    this.newsTimer = undefined
    const all = this.news
    this.news = new Map()
    for (const [space, news] of all) {
      // Each peer is told by about NEWS_FANOUT of its peers: the news spreads as gossip without every peer
      // telling every other, and a peer with few links (or that has not said how many yet) is told by each.
      const told = this.peersOf(space).filter((s) => Math.random() * (s.peerLinks.get(space) ?? 0) < NEWS_FANOUT)
      for (const s of told) {
        const ids = [...news].filter(([, from]) => from !== s.link.peer).map(([id]) => fromHex(id))
        for (let at = 0; at < ids.length; at += MAX_PEER_IDS) this.send(s, { kind: 'news', space, ids: ids.slice(at, at + MAX_PEER_IDS) })
      }
    }
  }

  /**
   * Asks `peer` for envelopes by id (deps an envelope it sent names); those
   * still missing after WANT_AGAIN_MS are asked of a few other peers of the
   * space (a peer may pass on an envelope whose deps it no longer holds).
   */
  want(space: string, peer: string, ids: readonly string[]): void {
    const wanted = ids.slice(0, MAX_PEER_IDS)
    const others = (s: LinkState): boolean => s.link.peer !== peer
    // Its link is gone: the others are asked at once.
    if (this.wantFrom(space, wanted, (s) => s.link.peer === peer, 1) === 0) return void this.wantFrom(space, wanted, others, NEWS_FANOUT)
    if (this.stopped) return
    // One retry per space and peer, however many of its envelopes name missing deps.
    const key = `${space}\n${peer}`
    const pending = this.retries.get(key)
    if (pending) {
      for (const id of wanted) if (pending.ids.size < MAX_PEER_IDS) pending.ids.add(id)
      return
    }
    const retry = {
      ids: new Set(wanted),
      timer: this.clock.setTimer(WANT_AGAIN_MS, () => {
        this.retries.delete(key)
        const member = this.members.get(space)
        const missing = member ? [...retry.ids].filter((id) => !member.knows(id)) : []
        if (missing.length > 0 && !this.stopped) this.wantFrom(space, missing, others, NEWS_FANOUT)
      }),
    }
    retry.timer.unref?.()
    this.retries.set(key, retry)
  }

  /** Sends `want` for `ids` on up to `most` links (one per peer) that exchange the space and `pick` takes; how many were asked. */
  private wantFrom(space: string, ids: readonly string[], pick: (s: LinkState) => boolean, most: number): number {
    const asked = new Set<string>()
    for (const s of this.links.values()) {
      if (asked.size >= most) break
      if (asked.has(s.link.peer) || !pick(s) || !this.shares(s, space)) continue
      asked.add(s.link.peer)
      this.send(s, { kind: 'want', space, ids: ids.map(fromHex) })
    }
    return asked.size
  }

  private opened(link: PeerLink): void {
    if (this.stopped) return link.close('this client is closing')
    if (this.refused.has(link.peer)) return link.close('this peer was found faulty')
    if (this.links.size >= MAX_LINKS) return link.close(`this client holds ${MAX_LINKS} peer links already`)
    // Links to one peer (both sides may have dialled) share what was sent: one copy per peer.
    const twin = [...this.links.values()].find((o) => o.link.peer === link.peer)
    const s: LinkState = { link, spaces: new Set(), answered: new Set(), served: twin?.served ?? new Map(), sent: twin?.sent ?? new Set(), synced: new Set(), snapshotAt: new Map(), heardAhead: new Map(), peerLinks: twin?.peerLinks ?? new Map(), lastSent: this.clock.now(), closed: false }
    this.links.set(link, s)
    for (const m of this.members.values()) if (m.mayShare(link.peer, link.key)) this.exchange(s, m, false)
  }

  private message(link: PeerLink, bytes: Uint8Array): void {
    const s = this.links.get(link)
    if (!s || s.closed) return
    this.stats.bytesReceived += bytes.length
    let m: PeerMessage
    try {
      m = decodePeerMessage(bytes)
    } catch (err) {
      return this.fault(s, `sent a bad message: ${(err as Error).message}`)
    }
    const member = this.members.get(m.space)
    if (!member) {
      // A space about to open (its link came first): it asks the peer once it joins. A few per link.
      if (m.kind === 'sync' && (s.heardAhead.has(m.space) || s.heardAhead.size < MAX_HEARD_AHEAD)) s.heardAhead.set(m.space, m.lastRound)
      return
    }
    // What f+1 relays signed is believed from anyone; the peer's own word counts only where it may read the space.
    if (m.kind === 'commits' || m.kind === 'snapshot') return this.catchUp(s, member, m)
    // Only about a space the relays vouch this peer may read: anything else is not answered, nor shown, but
    // for asking a peer that is ahead for what it can prove (it named the space first: this tells it nothing new).
    if (!member.mayShare(link.peer, link.key)) {
      if (m.kind === 'sync' && m.lastRound > member.position().lastRound) this.sync(s, member)
      return
    }
    if (!s.spaces.has(m.space)) this.exchange(s, member, false)
    if (m.kind === 'sync') {
      this.answerSync(s, member, { stableIndex: m.stableIndex, lastRound: m.lastRound })
    } else if (m.kind === 'links') {
      s.peerLinks.set(m.space, m.links)
    } else if (m.kind === 'have') {
      if (m.ask && !s.answered.has(m.space)) {
        s.answered.add(m.space)
        this.sendHave(s, member, false)
      }
      // A peer's `have` says what it holds: it gets what it lacks, sent before or not (it may have dropped
      // that while it did not vouch for this client yet, or missed the news). At most once per half keepalive period.
      const now = this.clock.now()
      const served = s.served.get(m.space)
      if (served !== undefined && now - served < this.keepaliveMs / 2) return
      s.served.set(m.space, now)
      const theirs = new Set(m.ids.map(toHex))
      // A full list names only the peer's newest envelopes: what it does not name may be held all the same,
      // so only what was never sent it goes (else every keepalive would send it all again).
      this.sendHeld(s, member, member.held().filter((id) => !theirs.has(id)), m.ids.length < MAX_PEER_IDS)
    } else if (m.kind === 'want') {
      this.sendHeld(s, member, m.ids.map(toHex))
    } else if (m.kind === 'presence') {
      member.presenceFromPeer(m.presence, { peer: link.peer, key: link.key, markFaulty: (why) => this.fault(s, why) })
    } else if (m.kind === 'news') {
      const lacking = m.ids.map(toHex).filter((id) => !member.knows(id))
      if (lacking.length) this.send(s, { kind: 'want', space: m.space, ids: lacking.map(fromHex) })
    } else {
      this.stats.framesReceived += m.frames.length
      const source: PeerSource = { peer: link.peer, key: link.key, markFaulty: (why) => this.fault(s, why) }
      for (const frame of m.frames) {
        if (s.closed) return
        member.fromPeer(frame, source)
      }
    }
  }

  /** A peer said where it stands: it gets what it lacks of the chain (a state at most every SNAPSHOT_EVERY_MS), and is asked in turn if it is ahead. */
  private answerSync(s: LinkState, member: PeerMember, at: ChainPosition): void {
    const mine = member.position()
    if (at.lastRound > mine.lastRound) return this.sync(s, member)
    const space = member.space
    const lastSnapshot = s.snapshotAt.get(space)
    const now = this.clock.now()
    // A state costs this client its encoding: a link gets one at most every SNAPSHOT_EVERY_MS.
    const found = member.catchUpFor(at, CATCH_UP_BYTES, lastSnapshot === undefined || now - lastSnapshot >= SNAPSHOT_EVERY_MS)
    if (!found) return
    if ('commits' in found) return this.send(s, { kind: 'commits', space, commits: found.commits.slice(0, MAX_FRAMES_PER_MESSAGE) })
    s.snapshotAt.set(space, now)
    this.send(s, { kind: 'snapshot', space, snapshot: found.snapshot })
  }

  /** Commits or a state a peer sent: the space checks them on relay signatures; once applied, this side says where it now stands, for more. */
  private catchUp(s: LinkState, member: PeerMember, m: Extract<PeerMessage, { kind: 'commits' | 'snapshot' }>): void {
    // A state comes only in answer to this side's sync: unasked, it could make a space skip commits it would rather apply.
    if (m.kind === 'snapshot' && !s.synced.has(member.space)) return
    if (m.kind === 'commits') this.stats.commitsReceived += m.commits.length
    else this.stats.statesReceived++
    const before = member.position().lastRound
    const source: PeerSource = { peer: s.link.peer, key: s.link.key, markFaulty: (why) => this.fault(s, why) }
    const done = m.kind === 'commits' ? member.commitsFromPeer(m.commits, source) : member.snapshotFromPeer(m.snapshot, source)
    void done.then(
      () => {
        if (s.closed || this.members.get(member.space) !== member || member.position().lastRound === before) return
        this.recheck(member)
        this.sync(s, member)
      },
      () => undefined,
    )
  }

  private sendHave(s: LinkState, member: PeerMember, ask: boolean): void {
    this.send(s, { kind: 'have', space: member.space, ids: member.held().slice(-MAX_PEER_IDS).map(fromHex), ask })
  }

  /** Tells the peer how many peers this client exchanges the space with (see `news`). */
  private sendLinks(s: LinkState, space: string, links = this.peersOf(space).length): void {
    this.send(s, { kind: 'links', space, links })
  }

  /** The count of peers of each space changed: once it is a quarter more or less than it last went out, every peer of the space hears it. */
  private linksChanged(): void {
    for (const space of this.members.keys()) {
      const peers = this.peersOf(space)
      const said = this.linksSaid.get(space) ?? 0
      if (peers.length < said * LINKS_SAID_FACTOR && peers.length * LINKS_SAID_FACTOR > said) continue
      this.linksSaid.set(space, peers.length)
      for (const s of peers) this.sendLinks(s, space, peers.length)
    }
  }

  /** Sends the envelopes of `ids` this space holds, each at most once per link: asking again costs the peer, not this client. */
  private sendHeld(s: LinkState, member: PeerMember, ids: readonly string[], again = false): void {
    const frames: Uint8Array[] = []
    for (const id of ids) {
      if (s.sent.has(id) && !again) continue
      const frame = member.frame(id)
      if (!frame) continue
      frames.push(frame)
      this.sentOn(s, id)
    }
    this.sendFrames(s, member.space, frames)
  }

  private sentOn(s: LinkState, id: string): void {
    s.sent.add(id)
    if (s.sent.size > SENT_KEPT) s.sent.delete(s.sent.values().next().value as string)
  }

  /** Sends frames in messages within the per-message budgets. */
  private sendFrames(s: LinkState, space: string, frames: readonly Uint8Array[]): void {
    let batch: Uint8Array[] = []
    let bytes = 0
    const flush = (): void => {
      if (batch.length === 0) return
      this.stats.framesSent += batch.length
      this.send(s, { kind: 'env', space, frames: batch })
      batch = []
      bytes = 0
    }
    for (const frame of frames) {
      if (batch.length >= MAX_FRAMES_PER_MESSAGE || (batch.length > 0 && bytes + frame.length > MAX_FRAME_BYTES_PER_MESSAGE)) flush()
      batch.push(frame)
      bytes += frame.length
    }
    flush()
  }

  private send(s: LinkState, m: PeerMessage): void {
    if (s.closed) return
    const bytes = encodePeerMessage(m)
    s.lastSent = this.clock.now()
    if (s.link.send(bytes)) this.stats.bytesSent += bytes.length
    else this.stats.dropped++
  }

  /**
   * Every keepaliveMs each link says, for each space it exchanges, where
   * the space stands and what it holds undecided (a peer that is behind
   * catches up; one that missed an envelope's news gets it: anti-entropy
   * behind the gossip), which also keeps the connection up.
   */
  private keepAlive(): void {
    const counts = new Map([...this.members.keys()].map((space) => [space, this.peersOf(space).length]))
    for (const s of this.links.values()) {
      for (const member of this.members.values()) {
        if (!this.shares(s, member.space)) continue
        this.sync(s, member)
        this.sendLinks(s, member.space, counts.get(member.space))
        this.sendHave(s, member, false)
      }
    }
    for (const [space, count] of counts) this.linksSaid.set(space, count)
  }

  private fault(s: LinkState, why: string): void {
    if (s.closed) return
    this.refused.add(s.link.peer)
    // Every link to that peer: one refusal, one report.
    for (const other of [...this.links.values()]) {
      if (other.link.peer !== s.link.peer) continue
      other.closed = true
      this.links.delete(other.link)
      other.link.close(why)
    }
    this.linksChanged()
    this.onFault(s.link.peer, why)
  }
}
