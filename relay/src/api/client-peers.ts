import '../mesh/polyfill.ts'

import { circuitRelayServer } from '@libp2p/circuit-relay-v2'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { identify } from '@libp2p/identify'
import { noise } from '@libp2p/noise'
import { webSockets } from '@libp2p/websockets'
import { yamux } from '@libp2p/yamux'
import { createLibp2p, type Libp2p } from 'libp2p'
import type { PeerId } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { Server, Socket } from 'node:net'
import { concatBytes } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import type { Logger } from 'pino'
import { addressKey } from './address.ts'

/** Options of {@link startClientPeers}. */
export interface ClientPeersOptions {
  /** The relay's Ed25519 seed: the libp2p key here is derived from it, so the peer id stays the same across restarts. */
  readonly secretKey: Uint8Array
  /** A WebSocket multiaddr to listen on, e.g. /ip4/0.0.0.0/tcp/7451/ws. */
  readonly listen: string
  readonly logger: Logger
  /** Most circuit reservations held at once (browsers that can be reached through this relay). Default 256. */
  readonly maxReservations?: number
  /** Of those, how many peers connected from one address may hold (an IPv6 one by its /64). Default 16. */
  readonly maxReservationsPerAddress?: number
  /** How long a reservation lasts unless its peer renews it (libp2p's clients renew 5 minutes before the end). Default 10 minutes. */
  readonly reservationTtlMs?: number
  /** Connections (TCP) at once, in all and per remote address (an IPv6 one by its /64). Defaults 1,024 and 64. */
  readonly maxConnections?: number
  readonly maxConnectionsPerAddress?: number
}

/**
 * Largest WebSocket message the port takes: libp2p sends noise frames (at
 * most 64 KiB each) one per message, so this is four of them. ws refuses a
 * longer one at its header (its default would buffer 100 MiB).
 */
export const PEER_FRAME_BYTES = 256 * 1024
/** A connection that is not a WebSocket yet and sends nothing for this long is closed (ws clears it once it is one). */
export const PEER_HANDSHAKE_IDLE_MS = 10_000
/** Default of {@link ClientPeersOptions.reservationTtlMs} (libp2p's is 2 hours: a flood held every slot that long). */
export const RESERVATION_TTL_MS = 10 * 60_000
/** Default of {@link ClientPeersOptions.maxReservationsPerAddress}. */
export const RESERVATIONS_PER_ADDRESS = 16

/** From the WebSocket upgrade to a noise-authenticated, multiplexed connection (libp2p's inbound upgrade timeout). */
const PEER_UPGRADE_MS = 10_000

/** What the WebSocket listener of libp2p keeps (private in @libp2p/websockets 10; read defensively). */
interface WsListenerInternals {
  server?: Server
  wsServer?: { options?: { maxPayload?: number } }
  /** Called with each new WebSocket (looked up at each upgrade, so it can be wrapped). */
  onWsServerConnection?: (ws: { on(event: 'error', listener: () => void): void }, req: unknown) => void
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
  const perAddress = o.maxReservationsPerAddress ?? RESERVATIONS_PER_ADDRESS
  // Set once the node exists: the gater below is only asked after that.
  const gate: { reservations?: ReservationsOf } = {}
  const node: Libp2p = await createLibp2p({
    privateKey: await generateKeyPairFromSeed('Ed25519', seed),
    addresses: { listen: [o.listen] },
    transports: [webSockets()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    // Frames are small, so connections still in their handshake cost little: more may wait, for less long.
    connectionManager: { inboundUpgradeTimeout: PEER_UPGRADE_MS, maxIncomingPendingConnections: 64 },
    // A peer's address may hold only its share of the slots (a new reservation; a renewal is not asked about).
    connectionGater: { denyInboundRelayReservation: (peer) => (gate.reservations ? gate.reservations.held(peer) >= perAddress : false) },
    services: {
      identify: identify(),
      relay: circuitRelayServer({ reservations: { maxReservations: o.maxReservations ?? 256, reservationTtl: o.reservationTtlMs ?? RESERVATION_TTL_MS } }),
    },
  })
  gate.reservations = reservationsOf(node)
  guardListeners(node, o.maxConnections ?? 1024, o.maxConnectionsPerAddress ?? 64)
  const addresses = (): string[] => node.getMultiaddrs().map((a) => a.toString())
  o.logger.info({ listen: o.listen, addresses: addresses() }, 'serving clients peer-to-peer: circuit relay and WebRTC signalling')
  return {
    addresses,
    async stop() {
      await node.stop()
    },
  }
}

/** The circuit relay server's reservations, by the address of the peer that holds each. */
interface ReservationsOf {
  /** How many reservations are held by peers connected from the address `peer` is connected from. */
  held(peer: PeerId): number
}

/** What the circuit relay server keeps (in @libp2p/circuit-relay-v2 4; read defensively). */
interface RelayServerInternals {
  reservationStore?: {
    reservations?: { has(peer: PeerId): boolean; entries(): Iterable<[unknown, { addr: Multiaddr }]> }
    removeReservation?(peer: PeerId): void
  }
}

/** The remote IP of a multiaddr (/ip4/… or /ip6/…), as addressKey counts it. */
function addressOfMultiaddr(addr: Multiaddr): string {
  const [first] = addr.getComponents()
  return addressKey(first && (first.name === 'ip4' || first.name === 'ip6') ? first.value : undefined)
}

/**
 * Per-address shares of the circuit relay's slots, and slots let go when
 * their peer disconnects (a reservation without a connection relays
 * nothing; libp2p keeps it until it expires). Throws if the server's
 * internals are not where this expects them.
 */
function reservationsOf(node: Libp2p): ReservationsOf {
  const store = (node.services as { relay?: RelayServerInternals }).relay?.reservationStore
  const map = store?.reservations
  const remove = store?.removeReservation
  if (!map || typeof map.entries !== 'function' || typeof map.has !== 'function' || typeof remove !== 'function') throw new Error('client-peers: the circuit relay server of @libp2p/circuit-relay-v2 changed; its per-address limits cannot be set')
  node.addEventListener('peer:disconnect', (e) => remove.call(store, e.detail))
  return {
    held(peer) {
      // A renewal keeps its slot.
      if (map.has(peer)) return 0
      const conn = node.getConnections(peer)[0]
      if (!conn) return 0
      const who = addressOfMultiaddr(conn.remoteAddr)
      let n = 0
      for (const [, r] of map.entries()) if (addressOfMultiaddr(r.addr) === who) n++
      return n
    },
  }
}

/**
 * The limits libp2p's WebSocket listener has no option for: the largest
 * message (refused at its header), a deadline for a connection to become a
 * WebSocket, and connections per address and in all. Throws if the
 * listener's internals are not where this expects them (a libp2p upgrade
 * must not drop these limits unnoticed).
 */
function guardListeners(node: Libp2p, max: number, perAddressMax: number): void {
  const listeners = (node as unknown as { components: { transportManager: { getListeners(): unknown[] } } }).components.transportManager.getListeners() as WsListenerInternals[]
  for (const l of listeners) {
    if (!l.server || !l.wsServer?.options) throw new Error('client-peers: the WebSocket listener of @libp2p/websockets changed; its limits cannot be set')
    l.wsServer.options.maxPayload = PEER_FRAME_BYTES
    // A frame refused at its header is an 'error' on the WebSocket, which libp2p does not listen for: it
    // would end the process (with ws's default limit too, for a frame over 100 MiB). ws closes the socket itself.
    const connected = l.onWsServerConnection
    if (typeof connected !== 'function') throw new Error('client-peers: the WebSocket listener of @libp2p/websockets changed; its limits cannot be set')
    l.onWsServerConnection = function (this: unknown, ws, req) {
      ws.on('error', () => undefined)
      connected.call(this, ws, req)
    }
    const perAddress = new Map<string, number>()
    let open = 0
    l.server.on('connection', (socket: Socket) => {
      const who = addressKey(socket.remoteAddress)
      const n = perAddress.get(who) ?? 0
      // With an error: the listener's own handler waits for the first byte and lets go of the socket on one.
      socket.on('error', () => undefined)
      if (open >= max || n >= perAddressMax) return void socket.destroy(new Error('too many connections'))
      open++
      perAddress.set(who, n + 1)
      socket.once('close', () => {
        open--
        const left = (perAddress.get(who) ?? 1) - 1
        if (left <= 0) perAddress.delete(who)
        else perAddress.set(who, left)
      })
      // Until ws takes the socket over (it sets no timeout), silence for this long ends it.
      socket.setTimeout(PEER_HANDSHAKE_IDLE_MS)
      socket.once('timeout', () => socket.destroy(new Error('no WebSocket handshake in time')))
    })
  }
}
