import { SteadError } from '@stead/core'
import { installPromiseWithResolvers } from '@stead/core/node'
import { libp2pNetwork, type Libp2pPeers, type Libp2pPeersOptions } from './peers-libp2p.ts'

/**
 * Peer-to-peer sync for Node clients over libp2p: TCP and WebSockets, noise,
 * yamux. Pass it as the client's `peers` option; clients of a space find
 * each other through the relays (each announces where it listens), and may
 * also be given addresses to `dial`. `libp2p`, `@libp2p/tcp`,
 * `@libp2p/websockets`, `@libp2p/noise`, `@libp2p/yamux`, `@libp2p/crypto`
 * and `@multiformats/multiaddr` are optional peer dependencies of
 * `@stead/client`, loaded only when peer sync starts.
 *
 * Node clients dial each other over TCP. They also listen on a WebSocket
 * port, which browsers dial (a browser cannot listen): so a browser and a
 * Node client sync directly, and keep doing so when the relays stop, and a
 * Node client passes on what it gets between browsers and Node clients.
 *
 * @example
 * ```ts
 * const peers = libp2pPeers({ listen: ['/ip4/0.0.0.0/tcp/7600'] })
 * const client = await createClient({ relays, peers })
 * ```
 */
export function libp2pPeers(options: Libp2pPeersOptions = {}): Libp2pPeers {
  return libp2pNetwork(options, {
    async create(identity, listen) {
      installPromiseWithResolvers()
      const [{ createLibp2p }, { tcp }, { webSockets }, { noise }, { yamux }, { generateKeyPairFromSeed }, { multiaddr }] = await Promise.all([
        import('libp2p'),
        import('@libp2p/tcp'),
        import('@libp2p/websockets'),
        import('@libp2p/noise'),
        import('@libp2p/yamux'),
        import('@libp2p/crypto/keys'),
        import('@multiformats/multiaddr'),
      ]).catch((cause: unknown) => {
        throw new SteadError('unsupported', 'peer sync in Node needs the optional peer dependencies libp2p, @libp2p/tcp, @libp2p/websockets, @libp2p/noise, @libp2p/yamux, @libp2p/crypto and @multiformats/multiaddr: npm install them', { cause })
      })
      const node = await createLibp2p({
        start: false,
        privateKey: await generateKeyPairFromSeed('Ed25519', identity.secretKey),
        addresses: { listen: [...(listen ?? ['/ip4/127.0.0.1/tcp/0', '/ip4/127.0.0.1/tcp/0/ws'])] },
        // WebSockets to be dialled by browsers; Node clients dial each other over TCP (dialling WebSockets from Node would need a global WebSocket).
        transports: [tcp(), webSockets()],
        connectionEncrypters: [noise()],
        streamMuxers: [yamux()],
        // Clients find each other through the relays; libp2p's own pings would only add traffic.
        connectionMonitor: { enabled: false },
      })
      return { node, multiaddr }
    },
    // Plain TCP: not a relay's WebSocket peer service, nor a browser behind a circuit.
    dialable: (address) => /\/tcp\/\d+\/p2p\//.test(address) && !/\/(ws|wss|webrtc|p2p-circuit)(\/|$)/.test(address),
    // TCP for Node clients, WebSockets for browsers.
    reachable: (address) => /\/tcp\/\d+(\/ws)?\/p2p\/[^/]+$/.test(address),
  })
}
