/**
 * `@stead/client/peers`: peer-to-peer sync over libp2p, for the client's
 * `peers` option. In browsers, WebRTC between clients, set up through the
 * relays' peer service; in Node, TCP. libp2p is needed only by apps that
 * import this entry (see the client README, "Peer to peer").
 *
 * @module @stead/client/peers
 */
export { libp2pPeers } from './peers/peers-web.ts'
export { PEER_PROTOCOL, type Libp2pPeers, type Libp2pPeersOptions } from './peers/peers-libp2p.ts'
