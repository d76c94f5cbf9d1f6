import { DEFAULT_LIMITS, MAX_PEER_ADDRS, MAX_PRESENCE_BODY_BYTES, SteadError, decode, encode, fromHex, systemClock, toHex, type HostClock, type HostTimer, type Signed } from '@stead/core'

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
 *   answered or shown.
 * - `env` carries envelope frames. A client sends its own new envelopes to
 *   every peer of the space at once.
 * - `news` lists the ids of envelopes a client first got from a peer: it
 *   passes them on, batched, to a few peers (at most {@link NEWS_FANOUT},
 *   picked at random), which ask for those they lack. In a full mesh every
 *   peer already has an envelope from its author, so passing it on costs an
 *   id, not a copy; in a sparser one the news spreads as gossip.
 * - `want` asks for envelopes by id: the deps a received envelope names that
 *   the client does not have.
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
   * Whether `peer` may exchange this space's envelopes: f+1 relays named it
   * for the space (so at least one correct relay let its key read the space).
   */
  mayShare(peer: string): boolean
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
  /** Bytes of the messages sent to peers (transport framing and encryption not counted). */
  readonly bytesSent: number
  /** Bytes of the messages received from peers. */
  readonly bytesReceived: number
  /** Messages a full or closed link dropped. */
  readonly dropped: number
  /** Peers found faulty (each is refused from then on). */
  readonly faulty: number
}

const TAG = 'stead/peer/v1'
/** Most ids in one `have` or `want`: a space's undecided envelopes beyond it are exchanged as they arrive. */
export const MAX_PEER_IDS = 4096
/** Most frames, and bytes of frames, in one `env` message. */
const MAX_FRAMES_PER_MESSAGE = 256
/** How many peers hear `news` of an envelope a client got from a peer. */
export const NEWS_FANOUT = 6
/** How long news waits to travel with more news (ms). */
const NEWS_BATCH_MS = 20
const MAX_FRAME_BYTES_PER_MESSAGE = 1 << 20

type PeerMessage =
  | { kind: 'have'; space: string; ids: Uint8Array[]; ask: boolean }
  | { kind: 'want'; space: string; ids: Uint8Array[] }
  | { kind: 'news'; space: string; ids: Uint8Array[] }
  | { kind: 'env'; space: string; frames: Uint8Array[] }
  | { kind: 'presence'; space: string; presence: SignedPresenceOf }

/** A client's presence as its author signed it (see presence.ts in @stead/core), passed between peers as relays pass it. */
export interface SignedPresenceOf {
  /** The author's Ed25519 public key. */
  readonly author: Uint8Array
  readonly signed: Signed
}

function encodeMessage(m: PeerMessage): Uint8Array {
  if (m.kind === 'have') return encode([TAG, m.kind, m.space, m.ids, m.ask])
  if (m.kind === 'presence') return encode([TAG, m.kind, m.space, [m.presence.author, m.presence.signed.bytes, m.presence.signed.sig]])
  return encode([TAG, m.kind, m.space, m.kind === 'env' ? m.frames : m.ids])
}

/**
 * Reads one peer message, refusing anything but the exact shapes above
 * within their budgets.
 *
 * @throws SteadError `malformed` or `too-large`, with the reason.
 */
export function decodePeerMessage(bytes: Uint8Array): PeerMessage {
  const v = decode(bytes, DEFAULT_LIMITS.maxFrameBytes)
  if (!Array.isArray(v) || v[0] !== TAG) throw new SteadError('malformed', `not a ${TAG} message`)
  const [, kind, space, list, ask] = v as unknown[]
  if (typeof space !== 'string' || space.length === 0 || space.length > 128) throw new SteadError('malformed', 'a peer message names a space of 1 to 128 characters')
  if (!Array.isArray(list) || !list.every((x) => x instanceof Uint8Array)) throw new SteadError('malformed', `a ${String(kind)} message carries a list of byte strings`)
  const items = list as Uint8Array[]
  if (kind === 'have' || kind === 'want' || kind === 'news') {
    if (v.length !== (kind === 'have' ? 5 : 4)) throw new SteadError('malformed', `a ${kind} message has ${kind === 'have' ? 5 : 4} fields`)
    if (items.length > MAX_PEER_IDS) throw new SteadError('too-large', `${items.length} ids in one ${kind} message; at most ${MAX_PEER_IDS}`)
    if (!items.every((id) => id.length === 32)) throw new SteadError('malformed', 'an envelope id is 32 bytes')
    if (kind === 'have') return typeof ask === 'boolean' ? { kind, space, ids: items, ask } : malformed('a have message says whether to answer')
    return kind === 'want' ? { kind, space, ids: items } : { kind, space, ids: items }
  }
  if (kind === 'presence') {
    const [author, bytes, sig] = items
    if (v.length !== 4 || items.length !== 3 || author?.length !== 32 || sig?.length !== 64 || !bytes) throw new SteadError('malformed', 'a presence message carries [author key, body, signature]')
    if (bytes.length > MAX_PRESENCE_BODY_BYTES) throw new SteadError('too-large', `a presence body of ${bytes.length} bytes; at most ${MAX_PRESENCE_BODY_BYTES}`)
    return { kind, space, presence: { author, signed: { bytes, sig } } }
  }
  if (kind === 'env') {
    if (v.length !== 4) throw new SteadError('malformed', 'an env message has 4 fields')
    if (items.length > MAX_FRAMES_PER_MESSAGE) throw new SteadError('too-large', `${items.length} frames in one env message; at most ${MAX_FRAMES_PER_MESSAGE}`)
    return { kind, space, frames: items }
  }
  throw new SteadError('malformed', `unknown peer message ${JSON.stringify(kind)}`)
}

function malformed(why: string): never {
  throw new SteadError('malformed', why)
}

interface LinkState {
  readonly link: PeerLink
  /** Spaces exchanged with this peer (the relays vouch that it may read them): what it is sent and heard on. */
  readonly spaces: Set<string>
  /** Spaces whose `have` this link asked to be answered with ours already: it is not sent twice. */
  readonly answered: Set<string>
  /** Spaces whose `have` this link got what it lacks for already: once per link. */
  readonly served: Set<string>
  /** Envelopes already sent to this peer, on any of its links (the latest SENT_KEPT): not sent again, whatever it asks. */
  readonly sent: Set<string>
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
  private stats = { framesSent: 0, framesReceived: 0, bytesSent: 0, bytesReceived: 0, dropped: 0 }
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
        closed: (link) => this.links.delete(link),
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
    for (const s of this.links.values()) if (member.mayShare(s.link.peer)) this.exchange(s, member, true)
  }

  /** The relays now vouch for `peer` in `member`'s space: exchange it on the links to that peer. */
  authorized(member: PeerMember, peer: string): void {
    if (this.members.get(member.space) !== member) return
    for (const s of this.links.values()) if (s.link.peer === peer && !s.spaces.has(member.space)) this.exchange(s, member, true)
  }

  /** Starts exchanging a space on a link: this side's `have`, asking for the peer's when `ask`. */
  private exchange(s: LinkState, member: PeerMember, ask: boolean): void {
    s.spaces.add(member.space)
    this.sendHave(s, member, ask)
    const presence = member.ownPresence()
    if (presence) this.send(s, { kind: 'presence', space: member.space, presence })
  }

  leave(member: PeerMember): void {
    if (this.members.get(member.space) !== member) return
    this.members.delete(member.space)
    // Reopened later, the space starts its exchanges over.
    for (const s of this.links.values()) {
      s.spaces.delete(member.space)
      s.answered.delete(member.space)
      s.served.delete(member.space)
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
    return s.spaces.has(space) && this.members.get(space)?.mayShare(s.link.peer) === true
  }

  private sendNews(): void {
    this.newsTimer = undefined
    const all = this.news
    this.news = new Map()
    for (const [space, news] of all) {
      // One link per peer.
      const links = [...new Map([...this.links.values()].filter((s) => this.shares(s, space)).map((s) => [s.link.peer, s])).values()]
      // A random few: the news spreads as gossip without every peer telling every other.
      for (let i = links.length - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1))
        ;[links[i], links[j]] = [links[j] as LinkState, links[i] as LinkState]
      }
      for (const s of links.slice(0, NEWS_FANOUT)) {
        const ids = [...news].filter(([, from]) => from !== s.link.peer).map(([id]) => fromHex(id))
        for (let at = 0; at < ids.length; at += MAX_PEER_IDS) this.send(s, { kind: 'news', space, ids: ids.slice(at, at + MAX_PEER_IDS) })
      }
    }
  }

  /** Asks `peer` for envelopes by id (deps an envelope it sent names). */
  want(space: string, peer: string, ids: readonly string[]): void {
    for (const s of this.links.values()) {
      if (s.link.peer !== peer || !this.shares(s, space)) continue
      this.send(s, { kind: 'want', space, ids: ids.slice(0, MAX_PEER_IDS).map(fromHex) })
      return
    }
  }

  private opened(link: PeerLink): void {
    if (this.stopped) return link.close('this client is closing')
    if (this.refused.has(link.peer)) return link.close('this peer was found faulty')
    if (this.links.size >= MAX_LINKS) return link.close(`this client holds ${MAX_LINKS} peer links already`)
    // Links to one peer (both sides may have dialled) share what was sent: one copy per peer.
    const twin = [...this.links.values()].find((o) => o.link.peer === link.peer)
    const s: LinkState = { link, spaces: new Set(), answered: new Set(), served: new Set(), sent: twin?.sent ?? new Set(), lastSent: this.clock.now(), closed: false }
    this.links.set(link, s)
    for (const m of this.members.values()) if (m.mayShare(link.peer)) this.exchange(s, m, false)
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
    // Only about a space the relays vouch this peer may read: anything else is not answered, nor shown.
    if (!member || !member.mayShare(link.peer)) return
    if (!s.spaces.has(m.space)) this.exchange(s, member, false)
    if (m.kind === 'have') {
      if (m.ask && !s.answered.has(m.space)) {
        s.answered.add(m.space)
        this.sendHave(s, member, false)
      }
      // A peer's `have` says what it holds: it gets what it lacks, sent before or not (it may have dropped
      // that while it did not vouch for this client yet). Once per link and space: asking again costs a new link.
      if (s.served.has(m.space)) return
      s.served.add(m.space)
      const theirs = new Set(m.ids.map(toHex))
      this.sendHeld(s, member, member.held().filter((id) => !theirs.has(id)), true)
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

  private sendHave(s: LinkState, member: PeerMember, ask: boolean): void {
    this.send(s, { kind: 'have', space: member.space, ids: member.held().slice(-MAX_PEER_IDS).map(fromHex), ask })
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
    const bytes = encodeMessage(m)
    s.lastSent = this.clock.now()
    if (s.link.send(bytes)) this.stats.bytesSent += bytes.length
    else this.stats.dropped++
  }

  /** Links that exchange a space and sent nothing for a while say so, emptily: their connection stays up. */
  private keepAlive(): void {
    const quietSince = this.clock.now() - this.keepaliveMs
    for (const s of this.links.values()) {
      const space = s.spaces.values().next().value
      if (space !== undefined && s.lastSent <= quietSince) this.send(s, { kind: 'news', space, ids: [] })
    }
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
    this.onFault(s.link.peer, why)
  }
}
