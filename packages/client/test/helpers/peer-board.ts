import { publicKeyFromRaw } from '@libp2p/crypto/keys'
import { peerIdFromPublicKey } from '@libp2p/peer-id'
import type { PeerEvents, PeerLink, PeerNetwork } from '../../src/peers/peers.ts'

/** The libp2p peer id of an Ed25519 key: what a relay lets a session announce (`/p2p/<id>`), and what board links are named by. */
export function peerIdOf(publicKey: Uint8Array): string {
  return peerIdFromPublicKey(publicKeyFromRaw(publicKey)).toString()
}

/** The address of the board peer holding `publicKey`. */
export function boardAddress(publicKey: Uint8Array): string {
  return `/memory/p2p/${peerIdOf(publicKey)}`
}

/**
 * An in-memory network of peers for tests: every network started on the
 * board is linked to every other (messages arrive on a later task, in
 * order), and a test can link a scripted peer of its own with `attach`.
 */
export class PeerBoard {
  private readonly members: MemoryPeers[] = []
  /** Messages delivered, for tests that count traffic. */
  messages = 0
  /** Drops a message between two board networks (by peer id) when it says so: a lossy link (a full queue drops messages too). */
  drop: (from: string, to: string, message: Uint8Array) => boolean = () => false
  /** Which networks get linked, by the order they started in (default: all of them). */
  private readonly linked: (a: number, b: number) => boolean
  /** Runs a delivery on a later task: the next macrotask, or a simulated cluster's clock (SimCluster.later). */
  private readonly defer: (deliver: () => void) => void

  constructor(linked: (a: number, b: number) => boolean = () => true, defer: (deliver: () => void) => void = (deliver) => setTimeout(deliver, 0)) {
    this.linked = linked
    this.defer = defer
  }

  network(): MemoryPeers {
    return new MemoryPeers(this)
  }

  /** @internal */
  joined(m: MemoryPeers): void {
    for (const [i, other] of this.members.entries()) if (this.linked(i, this.members.length)) this.link(m, other)
    this.members.push(m)
  }

  /** @internal */
  left(m: MemoryPeers): void {
    this.members.splice(this.members.indexOf(m), 1)
  }

  /**
   * Links a scripted peer to every started network: `receive` hears what
   * they send it; the returned senders speak for it, one per network. With
   * `key`, the link is named by its peer id (see boardAddress), else `name`.
   */
  attach(name: string, receive: (to: string, message: Uint8Array) => void, key?: Uint8Array): Array<{ to: string; send(message: Uint8Array): void; open(): boolean }> {
    const peer = key ? peerIdOf(key) : name
    return this.members.map((m) => {
      const to = m.id as string
      let closed = false
      const link: PeerLink = {
        peer,
        key,
        send: (message) => !closed && this.later((c) => !closed && receive(to, c), message),
        close: () => {
          if (closed) return
          closed = true
          m.gone(link)
        },
      }
      m.open(link)
      return { to, send: (message) => void this.later((c) => !closed && m.deliver(link, c), message), open: () => !closed }
    })
  }

  private link(a: MemoryPeers, b: MemoryPeers): void {
    let closed = false
    const close = (): void => {
      if (closed) return
      closed = true
      a.gone(toB)
      b.gone(toA)
    }
    // a's link to b sends into b, where it arrives on b's link to a.
    const toB: PeerLink = { peer: b.id as string, key: b.key, send: (m) => !closed && (this.drop(a.id as string, b.id as string, m) || this.later((c) => !closed && this.count() && b.deliver(toA, c), m)), close }
    const toA: PeerLink = { peer: a.id as string, key: a.key, send: (m) => !closed && (this.drop(b.id as string, a.id as string, m) || this.later((c) => !closed && this.count() && a.deliver(toB, c), m)), close }
    a.open(toB)
    b.open(toA)
  }

  private count(): true {
    this.messages++
    return true
  }

  /** Runs `arrive` on a later task with a copy of `message` (a sender may reuse its buffer). */
  private later(arrive: (message: Uint8Array) => unknown, message: Uint8Array): true {
    const copy = message.slice()
    this.defer(() => arrive(copy))
    return true
  }
}

export class MemoryPeers implements PeerNetwork {
  id: string | undefined
  key: Uint8Array | undefined
  private events: PeerEvents | undefined
  private readonly links = new Set<PeerLink>()
  private readonly board: PeerBoard
  constructor(board: PeerBoard) {
    this.board = board
  }

  async start(events: PeerEvents, identity: { publicKey: Uint8Array }): Promise<void> {
    this.events = events
    this.id = peerIdOf(identity.publicKey)
    this.key = identity.publicKey
    this.board.joined(this)
  }

  /** Board peers are linked to each other as they start (nobody dials); the address names the peer for the relays to pass on. */
  addresses(): string[] {
    return this.id ? [`/memory/p2p/${this.id}`] : []
  }

  /** Addresses the client asked to dial, in order (board peers are linked already; tests check who was trusted with a dial). */
  readonly dialled: string[] = []

  dial(address: string): void {
    this.dialled.push(address)
  }

  async stop(): Promise<void> {
    this.board.left(this)
    for (const l of [...this.links]) l.close('stopped')
    this.events = undefined
  }

  /** @internal */
  open(link: PeerLink): void {
    this.links.add(link)
    this.events?.opened(link)
  }

  /** @internal */
  deliver(link: PeerLink, message: Uint8Array): void {
    if (this.links.has(link)) this.events?.message(link, message)
  }

  /** @internal */
  gone(link: PeerLink): void {
    if (this.links.delete(link)) this.events?.closed(link)
  }
}
