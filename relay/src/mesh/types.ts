/**
 * The relay mesh as the relay sees it: numbered peers and opaque frames.
 * Implementations own connections, reconnects and batching; the relay owns
 * what the bytes mean. Frames to a peer arrive in the order they were sent
 * while a connection lasts; across reconnects they may be lost (the
 * consensus core resends what matters).
 */
export interface Mesh {
  /** Starts listening and dialing peers; resolves once listening. */
  start(): Promise<void>
  /** Queues a frame for one peer; never throws, never blocks. Dropped if the peer is unreachable. */
  send(to: number, frame: Uint8Array): void
  /** Queues a frame for every other peer. */
  broadcast(frame: Uint8Array): void
  /** Registers the receiver of every frame from an authenticated peer. */
  onFrame(handler: (from: number, frame: Uint8Array) => void): void
  /**
   * Registers who hears that the connection to a peer opened or opened
   * again: frames sent from now on reach it, and some sent before may not
   * have (a partition, a restart on either side).
   */
  onPeerConnected(handler: (peer: number) => void): void
  /** Peers with an open connection right now. */
  connectedPeers(): number[]
  /** Bytes queued towards peers and not yet handed to a connection. */
  queuedBytes(): number
  stop(): Promise<void>
}

export interface PeerAddress {
  /** Position in the committee; also the index of the peer's key. */
  readonly index: number
  /** The peer's Ed25519 public key (32 bytes); its libp2p identity. */
  readonly publicKey: Uint8Array
  /** Where it listens for the mesh, e.g. /ip4/127.0.0.1/tcp/7501 */
  readonly multiaddr: string
  /** What logs call it: its name in the cluster file, e.g. "r2" (default: its index). */
  readonly name?: string
}
