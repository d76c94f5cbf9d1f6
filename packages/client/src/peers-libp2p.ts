import { FrameDecoder, SteadError, encodeFrames } from '@stead/core'
import { installPromiseWithResolvers } from '@stead/core/node'
import type { Connection, Libp2p, Stream, StreamMessageEvent } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { PeerEvents, PeerLink, PeerNetwork } from './peers.ts'

/** The libp2p protocol Stead clients sync spaces over. */
export const PEER_PROTOCOL = '/stead/peer/1.0.0'

/** Options of {@link libp2pPeers}. */
export interface Libp2pPeersOptions {
  /** Multiaddrs to listen on. Default `['/ip4/127.0.0.1/tcp/0']` (loopback, any free port). */
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

/** A {@link PeerNetwork} over libp2p, with what an app needs to connect its peers. */
export interface Libp2pPeers extends PeerNetwork {
  /** Where this client listens, each with its `/p2p/<peer id>`: what another client dials. Empty until started. */
  addresses(): string[]
  /** This client's libp2p peer id (from its Ed25519 key). Undefined until started. */
  readonly peerId: string | undefined
  /** Dials a peer and keeps it connected (redialled with backoff) until the client closes. */
  dial(address: string): void
}

/**
 * Peer-to-peer sync for Node clients over libp2p: TCP, noise, yamux, one
 * protocol ({@link PEER_PROTOCOL}). The client's Ed25519 key is its libp2p
 * identity, so every peer is authenticated by noise. Pass it as the
 * client's `peers` option; `libp2p`, `@libp2p/tcp`, `@libp2p/noise`,
 * `@libp2p/yamux`, `@libp2p/crypto` and `@multiformats/multiaddr` are
 * optional peer dependencies of `@stead/client`, loaded only here.
 *
 * @example
 * ```ts
 * const peers = libp2pPeers({ listen: ['/ip4/0.0.0.0/tcp/7600'], dial: ['/ip4/10.0.0.2/tcp/7600/p2p/12D3Koo...'] })
 * const client = await createClient({ relays, peers })
 * console.log(peers.addresses())
 * ```
 */
export function libp2pPeers(options: Libp2pPeersOptions = {}): Libp2pPeers {
  const maxMessageBytes = options.maxMessageBytes ?? 4 * 1024 * 1024
  const maxQueueBytes = options.maxQueueBytes ?? 16 * 1024 * 1024
  const backoff = options.backoff ?? { initialMs: 250, maxMs: 10_000 }
  const wanted = new Map<string, { attempts: number; timer: ReturnType<typeof setTimeout> | undefined; connection: Connection | undefined }>()
  let node: Libp2p | undefined
  let events: PeerEvents | undefined
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
        const data = evt.data
        if (data instanceof Uint8Array) decoder.push(data, deliver)
        else for (const chunk of data) decoder.push(chunk, deliver)
      } catch (err) {
        link.close(`bad framing: ${(err as Error).message}`)
      }
    })
    stream.addEventListener(
      'close',
      () => {
        closed = true
        queue.length = 0
        on.closed(link)
      },
      { once: true },
    )
    on.opened(link)
  }

  function redial(address: string): void {
    const w = wanted.get(address)
    if (!w || stopped || w.timer || w.connection?.status === 'open') return
    const ceiling = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(w.attempts, 30))
    w.attempts++
    w.timer = setTimeout(() => {
      w.timer = undefined
      void connect(address)
    }, ceiling / 2 + Math.random() * (ceiling / 2))
  }

  async function connect(address: string): Promise<void> {
    const w = wanted.get(address)
    if (!w || !node || stopped || !toMultiaddr) return
    try {
      const connection = await node.dial(toMultiaddr(address))
      w.connection = connection
      w.attempts = 0
    } catch {
      redial(address)
    }
  }

  const network: Libp2pPeers = {
    get peerId() {
      return node?.peerId.toString()
    },
    addresses() {
      return node ? node.getMultiaddrs().map((a) => a.toString()) : []
    },
    dial(address) {
      if (stopped || wanted.has(address)) return
      wanted.set(address, { attempts: 0, timer: undefined, connection: undefined })
      void connect(address)
    },
    async start(on, identity) {
      if (node || stopped) throw new SteadError('unsupported', 'a libp2pPeers network serves one client: make another for another client')
      events = on
      installPromiseWithResolvers()
      const [{ createLibp2p }, { tcp }, { noise }, { yamux }, { generateKeyPairFromSeed }, { multiaddr }] = await Promise.all([
        import('libp2p'),
        import('@libp2p/tcp'),
        import('@libp2p/noise'),
        import('@libp2p/yamux'),
        import('@libp2p/crypto/keys'),
        import('@multiformats/multiaddr'),
      ]).catch((cause: unknown) => {
        throw new SteadError('unsupported', 'peer sync needs the optional peer dependencies libp2p, @libp2p/tcp, @libp2p/noise, @libp2p/yamux, @libp2p/crypto and @multiformats/multiaddr: npm install them', { cause })
      })
      toMultiaddr = multiaddr
      const created = await createLibp2p({
        privateKey: await generateKeyPairFromSeed('Ed25519', identity.secretKey),
        addresses: { listen: [...(options.listen ?? ['/ip4/127.0.0.1/tcp/0'])] },
        transports: [tcp()],
        connectionEncrypters: [noise()],
        streamMuxers: [yamux()],
        // Clients find each other by address; libp2p's own pings would only add traffic.
        connectionMonitor: { enabled: false },
      })
      node = created
      await created.handle(PEER_PROTOCOL, (stream, connection) => attach(stream, connection), { maxInboundStreams: 2, maxOutboundStreams: 2 })
      // The side that dialled a connection opens its one stream; the other side gets it above.
      created.addEventListener('connection:open', (evt) => {
        const connection = evt.detail
        if (connection.direction !== 'outbound') return
        connection.newStream(PEER_PROTOCOL).then(
          (stream) => attach(stream, connection),
          () => connection.close().catch(() => undefined),
        )
      })
      created.addEventListener('connection:close', () => {
        for (const address of wanted.keys()) redial(address)
      })
      for (const address of options.dial ?? []) network.dial(address)
      if (stopped) await created.stop()
    },
    async stop() {
      stopped = true
      for (const w of wanted.values()) if (w.timer) clearTimeout(w.timer)
      await node?.stop()
    },
  }
  return network
}
