import { MAX_PRESENCE_STATE_BYTES, authorIdOf, bytesEqual, decodePresence, encodePresence, toHex, type Crypto, type PresenceBody, type RelayMessage, type Signed } from '@stead/core'
import type { Presence } from '../space/presence.ts'
import type { RelayLink } from '../transport/transport.ts'
import type { PeerHub, PeerSource, SignedPresenceOf } from '../peers/peers.ts'

/** What a presence body holds beyond its state (domain, space, seq, ttl), at most: the decoding limit is the relays' own. */
const MAX_PRESENCE_FRAMING = 256

/** Most presence messages being verified at once: past it, more wait for their author's next renewal (a flood from a lying relay costs no more). */
const MAX_VERIFYING = 64

/**
 * A space's presence on the wire, in the tab that holds the relay
 * sessions: signs this client's presence bodies (with the leave signed
 * ahead, which relays send for a client whose session closes) and sends
 * them to every ready relay; checks what relays pass on of others (the
 * author's signature, the space, news by seq) before the space's Presence
 * hears it. Every relay gets this client's presence, so f relays cannot
 * hide it; each passes on others', so the first copy counts and the rest
 * are dropped unverified by their seq. With peers, presence also goes to
 * and comes from the space's peers (see peers.ts).
 */
export class PresenceWire {
  /** The latest state published, sent again to relays whose session comes up; its seq. */
  private last: { signed: Signed; leave: Signed } | undefined
  private lastSeq = -1
  /** The signing under way: bodies are signed and sent in the order they were published. */
  private signing: Promise<void> = Promise.resolve()
  private readonly verifying = new Set<string>()
  private readonly ready = new Set<RelayLink>()

  private readonly o: {
    space: string
    presence: Presence
    crypto: Crypto
    identity: { secretKey: Uint8Array; publicKey: Uint8Array }
    links: () => readonly RelayLink[]
    /** The client's peers, when it syncs peer to peer: presence goes to them too. */
    peers: Pick<PeerHub, 'publishPresence'> | undefined
  }
  constructor(o: PresenceWire['o']) {
    this.o = o
  }

  /** Signs `body` (and, for a state, its leave) and sends it to every ready relay. */
  publish(body: PresenceBody): void {
    // One after another: a state must never go out after the leave that follows it.
    const signing = this.signing.then(() => this.sign(body))
    this.signing = signing.then(
      () => undefined,
      () => undefined,
    )
    void signing
      .then((signed) => {
        for (const link of this.o.links()) if (link.ready) this.sendTo(link, signed)
        this.o.peers?.publishPresence(this.o.space, { author: this.o.identity.publicKey, signed: signed.signed })
      })
      .catch(() => undefined)
  }

  /** A relay session is ready: it gets this client's presence (a relay forgets it on restart). */
  linkReady(link: RelayLink): void {
    this.ready.add(link)
    if (this.last) this.sendTo(link, this.last)
  }

  /**
   * Sessions came up or went down. A relay whose session with this client
   * closed sends the leave signed ahead to its other clients: presence is
   * published again under a new seq, through the relays still there.
   */
  linksChanged(): void {
    let lost = false
    for (const link of this.ready) {
      if (link.ready) continue
      this.ready.delete(link)
      lost = true
    }
    if (lost) this.o.presence.republish()
  }

  /** Another client's presence, as a relay passed it on (a bad one is dropped: a relay may pass on what a client made up). */
  heard(m: Extract<RelayMessage, { type: 'presence' }>, link: RelayLink): void {
    if (m.space === this.o.space) this.check({ author: m.author, signed: m.signed }, link.url, () => undefined)
  }

  /** This client's latest presence, signed (for a peer the exchange starts with). */
  own(): SignedPresenceOf | undefined {
    return this.last && { author: this.o.identity.publicKey, signed: this.last.signed }
  }

  /**
   * A presence a peer sent. An honest peer passes on only what it checked,
   * so one that does not check out makes the peer faulty; news is passed
   * on to the other peers once.
   */
  fromPeer(presence: SignedPresenceOf, source: PeerSource): void {
    // A peer is no relay: what it brings counts for no relay's copy (a leave signed ahead never comes from one).
    this.check(presence, '', (why) => source.markFaulty(why), () => this.o.peers?.publishPresence(this.o.space, presence, source.peer))
  }

  /**
   * Shows `p`, which `source` (a relay's URL, or '' for a peer) brought, if
   * its author signed it for this space and it changes anything; `bad`
   * hears why not otherwise, `news` when it showed a newer state.
   */
  private check(p: SignedPresenceOf, source: string, bad: (why: string) => void, news?: () => void): void {
    if (bytesEqual(p.author, this.o.identity.publicKey)) return
    let body: PresenceBody
    try {
      body = decodePresence(p.signed.bytes, MAX_PRESENCE_STATE_BYTES + MAX_PRESENCE_FRAMING)
    } catch (err) {
      return bad(`sent a malformed presence: ${(err as Error).message}`)
    }
    if (body.space !== this.o.space) return bad(`sent a presence of space ${body.space} for ${this.o.space}`)
    if (body.ahead && source === '') return bad('passed on a leave signed ahead, which only relays send')
    const author = authorIdOf(this.o.crypto, p.author)
    const sig = toHex(p.signed.sig)
    const news0 = this.o.presence.isNews(author, body, sig)
    if (news0 === false) return
    // A copy of the state held (the same signed bytes) and a leave signed ahead (it takes out only the relay that sends it) need no check.
    if (news0 === 'as-is') return this.o.presence.heardFrom(author, body, source, sig)
    // Per signature too: a forgery sent first must not hide the true copy of that seq.
    const key = `${author}/${body.seq}/${sig.slice(0, 16)}`
    if (this.verifying.has(key) || this.verifying.size >= MAX_VERIFYING) return
    this.verifying.add(key)
    void this.o.crypto
      .verify(p.author, p.signed.bytes, p.signed.sig)
      .then((valid) => {
        if (!valid) return bad('sent a presence its author did not sign')
        if (this.o.presence.isNews(author, body, sig) === false) return
        this.o.presence.heardFrom(author, body, source, sig)
        news?.()
      })
      .catch(() => undefined)
      .finally(() => this.verifying.delete(key))
  }

  private async sign(body: PresenceBody): Promise<{ signed: Signed; leave: Signed | undefined }> {
    const { crypto, identity } = this.o
    const bytes = encodePresence(body)
    const signed = { bytes, sig: await crypto.sign(identity.secretKey, bytes) }
    let leave: Signed | undefined
    if (body.state !== null) {
      const leaveBytes = encodePresence({ ...body, seq: body.seq + 1, state: null, ahead: true })
      leave = { bytes: leaveBytes, sig: await crypto.sign(identity.secretKey, leaveBytes) }
    }
    // Signatures may finish out of order: only a newer body replaces what is sent to relays that come up.
    if (body.seq > this.lastSeq) {
      this.lastSeq = body.seq
      this.last = leave && { signed, leave }
    }
    return { signed, leave }
  }

  private sendTo(link: RelayLink, m: { signed: Signed; leave: Signed | undefined }): void {
    link.send({ type: 'presence', space: this.o.space, signed: m.signed, ...(m.leave ? { leave: m.leave } : {}) })
  }
}
