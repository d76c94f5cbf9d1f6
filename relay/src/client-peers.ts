import './mesh/polyfill.ts'

import { circuitRelayServer } from '@libp2p/circuit-relay-v2'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { identify } from '@libp2p/identify'
import { noise } from '@libp2p/noise'
import { webSockets } from '@libp2p/websockets'
import { yamux } from '@libp2p/yamux'
import { createLibp2p, type Libp2p } from 'libp2p'
import { concatBytes } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import type { Logger } from 'pino'

/** Options of {@link startClientPeers}. */
export interface ClientPeersOptions {
  /** The relay's Ed25519 seed: the libp2p key here is derived from it, so the peer id stays the same across restarts. */
  readonly secretKey: Uint8Array
  /** A WebSocket multiaddr to listen on, e.g. /ip4/0.0.0.0/tcp/7451/ws. */
  readonly listen: string
  readonly logger: Logger
  /** Most circuit reservations held at once (browsers that can be reached through this relay). Default 256. */
  readonly maxReservations?: number
}

/** A running {@link startClientPeers} service. */
export interface ClientPeers {
  /** Where clients reach it, each with `/p2p/<peer id>`: what the relay's `welcome` offers. */
  addresses(): string[]
  stop(): Promise<void>
}

/**
 * The relay's help for clients that sync peer to peer: a libp2p node on a
 * WebSocket port, separate from the mesh (which admits relays only), that
 * serves circuit relay v2. Browsers cannot listen for connections, so each
 * reserves a slot here and is reachable through it; two browsers meet over a
 * relayed connection and upgrade it to a direct WebRTC one, which outlives
 * the relay. Relayed connections are limited in time and bytes (libp2p's
 * defaults), so the relay carries signalling, not the clients' traffic.
 */
export async function startClientPeers(o: ClientPeersOptions): Promise<ClientPeers> {
  // Not the relay's committee key itself: a key used by one protocol only.
  const seed = nodeCrypto.sha256(concatBytes(new TextEncoder().encode('stead/client-peers/v1'), o.secretKey))
  const node: Libp2p = await createLibp2p({
    privateKey: await generateKeyPairFromSeed('Ed25519', seed),
    addresses: { listen: [o.listen] },
    transports: [webSockets()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    services: {
      identify: identify(),
      relay: circuitRelayServer({ reservations: { maxReservations: o.maxReservations ?? 256 } }),
    },
  })
  const addresses = (): string[] => node.getMultiaddrs().map((a) => a.toString())
  o.logger.info({ listen: o.listen, addresses: addresses() }, 'serving clients peer-to-peer: circuit relay and WebRTC signalling')
  return {
    addresses,
    async stop() {
      await node.stop()
    },
  }
}
