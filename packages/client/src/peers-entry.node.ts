/**
 * The Node build of `@stead/client/peers`: the same API, over TCP.
 */
export { libp2pPeers } from './peers/peers-node.ts'
export { PEER_PROTOCOL, type Libp2pPeers, type Libp2pPeersOptions } from './peers/peers-libp2p.ts'
