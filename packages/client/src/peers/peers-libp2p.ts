import { FrameDecoder, SteadError, encodeFrames } from '@stead/core'
import type { Connection, Libp2p, Stream, StreamMessageEvent } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { PeerEvents, PeerLink, PeerNetwork } from './peers.ts'

/** The libp2p protocol Stead clients sync spaces over. */
export const PEER_PROTOCOL = '/stead/peer/3.0.0'

/** Options of `libp2pPeers`. */
export interface Libp2pPeersOptions {
  /**
   * Multiaddrs to listen on. Default in Node
   * `['/ip4/127.0.0.1/tcp/0', '/ip4/127.0.0.1/tcp/0/ws']` (loopback, any
   * free port, TCP for Node clients and WebSockets for browsers: give LAN
   * addresses to be reached from other machines); in browsers `['/p2p-circuit', '/webrtc']` (reached through a
   * relay's peer service, then directly over WebRTC).
   */
  readonly listen?: readonly string[]
  /** Multiaddrs of peers to dial (with their `/p2p/<peer id>`), kept connected: redialled with backoff. */
  readonly dial?: readonly string[]
  /** Largest message accepted from or sent to a peer. Default 4 MiB. */
  readonly maxMessageBytes?: number
  /** Bytes queued for one peer before further messages to it are dropped (peer sync repairs on reconnect). Default 16 MiB. */
  readonly maxQueueBytes?: number
  /** Redial backoff: first delay and ceiling. Default 250 ms to 10 s. */
  readonly backoff?: {
    /** Delay before the first redial. */
    readonly initialMs: number
    /** Longest delay between redials. */
    readonly maxMs: number
  }
}

/** A {@link PeerNetwork} over libp2p (`libp2pPeers`), with what an app needs to connect its peers by hand. */
export interface Libp2pPeers extends PeerNetwork {
  /** Where this client listens, each with its `/p2p/<peer id>`: what another client dials. Empty until started. */
  addresses(): string[]
  /** This client's libp2p peer id (from its Ed25519 key). Undefined until started. */
  readonly peerId: string | undefined
  /** Dials a peer and keeps it connected (redialled with backoff) until the client closes. */
  dial(address: string): void
}

/** A platform's libp2p setup: the modules it loads when peer sync starts, and what it can dial. */
export interface Libp2pStack {
  /** Loads the modules and creates (does not start) the node for this identity. */
  create(identity: { readonly secretKey: Uint8Array }, listen: readonly string[] | undefined): Promise<{ node: Libp2p; multiaddr: (address: string) => Multiaddr }>
  /** Whether this platform's transports can dial `address`. */
  dialable(address: string): boolean
  /** Whether another client can reach this one at `address` (what is announced). */
  reachable(address: string): boolean
}

/** How many times an address a relay passed on is dialled before it is given up (addresses in `dial` are kept for good); a relay naming it again starts over. */
const DISCOVERED_ATTEMPTS = 6
/** Most addresses kept to dial. */
const MAX_WANTED = 1024

/**
 * A {@link PeerNetwork} over libp2p: one protocol ({@link PEER_PROTOCOL}),
 * one stream per connection (opened by the side that dialled), messages
 * length-prefixed, a bounded queue per peer while its stream drains. The
 * client's Ed25519 key is its libp2p identity, so noise authenticates every
 * peer. Each platform entry gives its own {@link Libp2pStack}
 * (`libp2pPeers` in `@stead/client` and `@stead/client/node`).
 */
export function libp2pNetwork(options: Libp2pPeersOptions, stack: Libp2pStack): Libp2pPeers {
  const maxMessageBytes = options.maxMessageBytes ?? 4 * 1024 * 1024
  const maxQueueBytes = options.maxQueueBytes ?? 16 * 1024 * 1024
  const backoff = options.backoff ?? { initialMs: 250, maxMs: 10_000 }
  const wanted = new Map<string, { attempts: number; keep: boolean; dialling: boolean; timer: ReturnType<typeof setTimeout> | undefined; connection: Connection | undefined }>()
  let node: Libp2p | undefined
  let events: PeerEvents | undefined
  /** Open links per peer id. */
  const linked = new Map<string, number>()
  let stopped = false
  let toMultiaddr: ((address: string) => Multiaddr) | undefined

  /** One stream to a peer: length-prefixed messages, a bounded queue while it waits to drain. */
  function attach(stream: Stream, connection: Connection): void {
    if (!events || stopped) return stream.abort(new Error('peer sync stopped'))
    const on = events
    const queue: Uint8Array[] = []
    let queued = 0
    let closed = false
    const link: PeerLink = {
      peer: connection.remotePeer.toString(),
      key: connection.remotePeer.publicKey?.raw,
      send(message) {
        if (closed || message.length > maxMessageBytes || queued + message.length > maxQueueBytes) return false
        if (queue.length === 0 && !stream.writableNeedsDrain) {
          try {
            stream.send(encodeFrames([message], message.length))
          } catch {
            return false
          }
          return true
        }
        queue.push(message)
        queued += message.length
        return true
      },
      close(reason) {
        if (closed) return
        closed = true
        stream.abort(new Error(reason))
        // The whole connection: a refused peer keeps nothing open here.
        connection.close().catch(() => undefined)
      },
    }
    const flush = (): void => {
      while (queue.length > 0 && !stream.writableNeedsDrain && !closed) {
        const batch = queue.splice(0, 64)
        let bytes = 0
        for (const m of batch) bytes += m.length
        queued -= bytes
        try {
          stream.send(encodeFrames(batch, bytes))
        } catch {
          return
        }
      }
    }
    const decoder = new FrameDecoder(maxMessageBytes)
    const deliver = (message: Uint8Array): void => on.message(link, message)
    stream.addEventListener('drain', flush)
    stream.addEventListener('message', (evt: StreamMessageEvent) => {
      if (closed) return
      try {
        decoder.push(evt.data, deliver)
      } catch (err) {
        link.close(`bad framing: ${(err as Error).message}`)
      }
    })
    stream.addEventListener(
      'close',
      () => {
        closed = true
        queue.length = 0
        const n = (linked.get(link.peer) ?? 1) - 1
        if (n > 0) linked.set(link.peer, n)
        else linked.delete(link.peer)
        on.closed(link)
      },
      { once: true },
    )
    linked.set(link.peer, (linked.get(link.peer) ?? 0) + 1)
    on.opened(link)
  }

  function redial(address: string): void {
    const w = wanted.get(address)
    if (!w || stopped || w.timer || w.dialling || w.connection?.status === 'open') return
    if (!w.keep && w.attempts >= DISCOVERED_ATTEMPTS) {
      wanted.delete(address)
      return
    }
    const ceiling = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(w.attempts, 30))
    w.attempts++
    w.timer = setTimeout(() => {
      w.timer = undefined
      void connect(address)
    }, ceiling / 2 + Math.random() * (ceiling / 2))
  }

  async function connect(address: string): Promise<void> {
    const w = wanted.get(address)
    // Before the node runs, the address waits: start() dials it.
    if (!w || !node || stopped || !toMultiaddr || w.dialling) return
    w.dialling = true
    try {
      const connection = await node.dial(toMultiaddr(address))
      w.connection = connection
      w.attempts = 0
    } catch {
      w.dialling = false
      redial(address)
    } finally {
      w.dialling = false
    }
  }

  function dialAddress(address: string, keep: boolean): void {
    if (stopped || wanted.has(address) || !stack.dialable(address)) return
    // Not itself: a relay passes every announcer's addresses on, this client's included.
    if (node && address.endsWith(`/p2p/${node.peerId.toString()}`)) return
    // Bounded: the oldest address a relay passed on makes room (addresses the app gave stay).
    if (wanted.size >= MAX_WANTED) {
      const oldest = [...wanted].find(([, w]) => !w.keep)
      if (!oldest) return
      if (oldest[1].timer) clearTimeout(oldest[1].timer)
      wanted.delete(oldest[0])
    }
    wanted.set(address, { attempts: 0, keep, dialling: false, timer: undefined, connection: undefined })
    void connect(address)
  }

  const network: Libp2pPeers = {
    get peerId() {
      return node?.peerId.toString()
    },
    addresses() {
      return node ? node.getMultiaddrs().map((a) => a.toString()).filter((a) => stack.reachable(a)) : []
    },
    dial(address) {
      dialAddress(address, false)
    },
    async start(on, identity) {
      if (node || stopped) throw new SteadError('unsupported', 'a libp2pPeers network serves one client: make another for another client')
      events = on
      const created = await stack.create(identity, options.listen)
      toMultiaddr = created.multiaddr
      node = created.node
      await node.handle(PEER_PROTOCOL, (stream, connection) => attach(stream, connection), { maxInboundStreams: 2, maxOutboundStreams: 2 })
      // The side that dialled a connection opens its one stream; the other side gets it above. A
      // relay's peer service speaks no Stead protocol (and relayed connections, limited, run none):
      // the stream is refused there and the connection stays.
      node.addEventListener('connection:open', (evt) => {
        const connection = evt.detail
        if (connection.direction !== 'outbound' || connection.limits) return
        // One stream per peer is enough: both sides may have dialled, and the other's stream may be up already.
        if (linked.has(connection.remotePeer.toString())) return
        connection.newStream(PEER_PROTOCOL).then(
          (stream) => attach(stream, connection),
          () => undefined,
        )
      })
      node.addEventListener('connection:close', () => {
        for (const address of wanted.keys()) redial(address)
      })
      node.addEventListener('self:peer:update', () => on.addressesChanged())
      await node.start()
      for (const address of options.dial ?? []) dialAddress(address, true)
      for (const address of wanted.keys()) void connect(address)
      if (stopped) await node.stop()
    },
    async stop() {
      stopped = true
      for (const w of wanted.values()) if (w.timer) clearTimeout(w.timer)
      await node?.stop()
    },
  }
  return network
}
