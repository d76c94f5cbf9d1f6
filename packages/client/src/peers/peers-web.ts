import { circuitRelayTransport } from '@libp2p/circuit-relay-v2'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { identify } from '@libp2p/identify'
import { noise } from '@libp2p/noise'
import { webRTC } from '@libp2p/webrtc'
import { webSockets } from '@libp2p/websockets'
import { yamux } from '@libp2p/yamux'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'
import { libp2pNetwork, type Libp2pPeers, type Libp2pPeersOptions } from './peers-libp2p.ts'

/**
 * Peer-to-peer sync for browser clients over libp2p: browsers cannot
 * listen, so each reserves a slot at the relays' peer service (circuit relay
 * v2 over WebSocket, which a relay offers when its cluster file gives it a
 * `peers` address), announces its `/p2p-circuit/webrtc` address through the
 * relays, and other browsers dial it: the relayed connection carries the
 * WebRTC handshake, then the two talk directly, and keep doing so when the
 * relays stop. Pass it as the client's `peers` option.
 *
 * @example
 * ```ts
 * import { libp2pPeers } from '@stead/client/peers'
 * const client = await createClient({ relays, peers: libp2pPeers() })
 * ```
 */
export function libp2pPeers(options: Libp2pPeersOptions = {}): Libp2pPeers {
  return libp2pNetwork(options, {
    async create(identity, listen) {
      const node = await createLibp2p({
        start: false,
        privateKey: await generateKeyPairFromSeed('Ed25519', identity.secretKey),
        addresses: { listen: [...(listen ?? ['/p2p-circuit', '/webrtc'])] },
        // No STUN servers: peers on one network meet over host candidates, and nothing is sent elsewhere.
        transports: [webSockets(), webRTC({ rtcConfiguration: { iceServers: [] } }), circuitRelayTransport()],
        connectionEncrypters: [noise()],
        streamMuxers: [yamux()],
        // The relays' peer service is often on a private or loopback address: the default gater refuses those.
        connectionGater: { denyDialMultiaddr: () => false },
        connectionMonitor: { enabled: false },
        // Without identify no reservation is made, and the /webrtc address never appears.
        services: { identify: identify() },
      })
      return { node, multiaddr }
    },
    // A relay's peer service (WebSocket), or another browser behind one.
    dialable: (address) => /\/(ws|wss)\/p2p\/[^/]+$/.test(address) || /\/p2p-circuit\/webrtc\/p2p\//.test(address),
    reachable: (address) => /\/p2p-circuit\/webrtc\/p2p\//.test(address),
  })
}
