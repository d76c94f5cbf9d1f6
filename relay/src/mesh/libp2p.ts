/**
 * The relay mesh over libp2p 3: TCP + noise + yamux, one custom protocol.
 *
 * Each relay's libp2p identity is its committee Ed25519 key, so noise
 * authenticates every connection against the committee: the gater refuses
 * any other peer id, and inbound frames are attributed to the committee index
 * of the connection's authenticated remote peer, never to anything the remote
 * says. Each relay keeps one long-lived outbound stream per peer and only
 * writes on it; it only reads its inbound streams (through 'message' events,
 * decoding synchronously). Frames are a 4-byte big-endian length plus payload
 * (see frame.ts); frames queued in the same tick go out in one `send`, and the
 * writer waits for the stream's 'drain' event when it is full.
 *
 * Frames queued for a peer that is down wait in its bounded queue (oldest
 * dropped first) and go out once a redial succeeds. Callers must not mutate a
 * frame after passing it to send/broadcast (it is queued without a copy).
 */
import './polyfill.ts'

import { setMaxListeners } from 'node:events'
import { generateKeyPairFromSeed, publicKeyFromRaw } from '@libp2p/crypto/keys'
import { noise } from '@libp2p/noise'
import { peerIdFromPublicKey } from '@libp2p/peer-id'
import { tcp } from '@libp2p/tcp'
import { yamux } from '@libp2p/yamux'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'
import type { Connection, Libp2p, PeerId, Stream, StreamMessageEvent } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import { encodeFrames, FRAME_HEADER_BYTES, FrameDecoder } from '@stead/core'
import type { Mesh, PeerAddress } from './types.ts'
import { halfWindowUpdates } from './yamux-window.ts'

export const MESH_PROTOCOL = '/stead/mesh/1.0.0'

export interface MeshLogger {
  debug?(obj: object, msg?: string): void
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
}

/** How long a peer may stay unreachable before it is a warning (a relay starting, restarting or being redeployed is not). */
export const DEFAULT_UNREACHABLE_WARN_MS = 20_000

export interface Libp2pMeshOptions {
  /** My committee index. */
  me: number
  /** My 32-byte Ed25519 seed (private key); must match `peers[me].publicKey`. */
  secretKey: Uint8Array
  /** Every committee member, me included. */
  peers: readonly PeerAddress[]
  /** Multiaddr to listen on, e.g. /ip4/0.0.0.0/tcp/7501 */
  listen: string
  logger?: MeshLogger
  /** Largest frame accepted or sent (bytes). Default 64 MiB. */
  maxFrameBytes?: number
  /** Per-peer outbound queue bound in bytes; beyond it the oldest frames are dropped. Default 64 MiB. */
  maxQueueBytes?: number
  /** Per-peer outbound queue bound in frames. Default 100,000. */
  maxQueueFrames?: number
  /** First redial delay (ms); doubles per failure. Default 100. */
  minBackoffMs?: number
  /** Redial delay ceiling (ms). Default 5,000. */
  maxBackoffMs?: number
  /**
   * A peer not reachable yet (at start) or lost is logged at info once; it
   * is a warning only once it has been unreachable this long (ms). Default
   * {@link DEFAULT_UNREACHABLE_WARN_MS}.
   */
  unreachableWarnMs?: number
}

export interface MeshStats {
  /** Frames handed to a stream (not necessarily delivered). */
  framesSent: number
  bytesSent: number
  /** Frames delivered to the onFrame handler. */
  framesReceived: number
  bytesReceived: number
  /** Dropped from a full outbound queue (oldest first). */
  framesDropped: number
  /** Refused by send(): unknown or own index, over maxFrameBytes, or mesh stopped. */
  framesRejected: number
  /** Connections from or to peer ids outside the committee, refused by the gater. */
  connectionsRefused: number
  /** Inbound protocol streams from a non-committee peer, aborted. */
  streamsRefused: number
  /** Inbound streams closed for an oversized length prefix. */
  badStreams: number
  /** Times a writer waited for a full stream to drain (backpressure). */
  drainWaits: number
  /** Writers waiting for a full stream to drain right now: a peer that stops reading parks its writer here. */
  writersWaiting: number
  /** Dials of a peer that failed (each is retried with backoff). */
  dialsFailed: number
  /** Currently queued outbound, summed over peers. */
  queuedFrames: number
  queuedBytes: number
}

export interface Libp2pMesh extends Mesh {
  /** Counters for monitoring and tests. */
  stats(): MeshStats
}

const MIB = 1024 * 1024
/** Small frames are joined into sends of up to this many bytes. */
const BATCH_BYTES = 256 * 1024
/** Frames this large are sent as header + frame without copying. */
const LARGE_FRAME_BYTES = 64 * 1024

interface PeerState {
  readonly index: number
  /** The peer's name in logs. */
  readonly name: string
  readonly peerId: PeerId
  readonly addr: Multiaddr
  /** Outbound FIFO: frames[head..] are pending. */
  frames: Uint8Array[]
  head: number
  queuedBytes: number
  stream: Stream | undefined
  dialing: boolean
  writing: boolean
  flushScheduled: boolean
  attempts: number
  timer: ReturnType<typeof setTimeout> | undefined
  /** Whether a loss of connectivity (or, at start, the peer not being up yet) has already been logged. */
  downLogged: boolean
  /** Since when (ms epoch) the peer has been unreachable: since start or since the connection was lost; undefined while connected. */
  downSince: number | undefined
  /** Whether the peer's staying unreachable past unreachableWarnMs has been warned about. */
  downWarned: boolean
  /** Whether the peer has been connected since the mesh started. */
  everConnected: boolean
  /** Whether queue overflow has been logged since the queue was last empty. */
  dropLogged: boolean
}

const silentLogger: MeshLogger = { debug() {}, info() {}, warn() {} }

export function createLibp2pMesh(options: Libp2pMeshOptions): Libp2pMesh {
  const { me, listen } = options
  const log = options.logger ?? silentLogger
  const maxFrameBytes = options.maxFrameBytes ?? 64 * MIB
  const maxQueueBytes = options.maxQueueBytes ?? 64 * MIB
  const maxQueueFrames = options.maxQueueFrames ?? 100_000
  const minBackoff = options.minBackoffMs ?? 100
  const maxBackoff = options.maxBackoffMs ?? 5_000
  const unreachableWarnMs = options.unreachableWarnMs ?? DEFAULT_UNREACHABLE_WARN_MS

  const stats: Omit<MeshStats, 'queuedFrames' | 'queuedBytes'> = {
    framesSent: 0,
    bytesSent: 0,
    framesReceived: 0,
    bytesReceived: 0,
    framesDropped: 0,
    framesRejected: 0,
    connectionsRefused: 0,
    streamsRefused: 0,
    badStreams: 0,
    drainWaits: 0,
    writersWaiting: 0,
    dialsFailed: 0,
  }

  /** Remote peers by committee index (never contains `me`). */
  const peers = new Map<number, PeerState>()
  /** Committee peer id string → index (contains `me`). */
  const committee = new Map<string, number>()
  let node: Libp2p | undefined
  let handler: ((from: number, frame: Uint8Array) => void) | undefined
  let connectedHandler: ((peer: number) => void) | undefined
  let starting: Promise<void> | undefined
  let stopping: Promise<void> | undefined
  let stopped = false
  const abort = new AbortController()
  // Every dial and drain wait listens on this signal.
  setMaxListeners(Infinity, abort.signal)

  // ---- outbound ---------------------------------------------------------

  function send(to: number, frame: Uint8Array): void {
    const p = peers.get(to)
    if (p === undefined || stopped || frame.byteLength > maxFrameBytes) {
      stats.framesRejected++
      return
    }
    enqueue(p, frame)
  }

  function enqueue(p: PeerState, frame: Uint8Array): void {
    p.frames.push(frame)
    p.queuedBytes += frame.byteLength
    let dropped = 0
    while (p.frames.length - p.head > maxQueueFrames || p.queuedBytes > maxQueueBytes) {
      const old = p.frames[p.head]!
      p.frames[p.head] = EMPTY
      p.head++
      p.queuedBytes -= old.byteLength
      dropped++
    }
    if (dropped > 0) {
      if (!p.dropLogged) {
        log.warn({ peer: p.name, maxQueueBytes, maxQueueFrames }, 'mesh: outbound queue full, dropping oldest frames')
        p.dropLogged = true
      }
      stats.framesDropped += dropped
      compact(p)
    }
    scheduleFlush(p)
  }

  function scheduleFlush(p: PeerState): void {
    if (p.flushScheduled || p.writing || p.stream === undefined) return
    p.flushScheduled = true
    queueMicrotask(() => {
      p.flushScheduled = false
      void pump(p)
    })
  }

  /** Takes up to BATCH_BYTES of queued frames (at least one). */
  function takeBatch(p: PeerState): Uint8Array[] {
    const batch: Uint8Array[] = []
    let bytes = 0
    while (p.head < p.frames.length) {
      const f = p.frames[p.head]!
      if (batch.length > 0 && bytes + f.byteLength + FRAME_HEADER_BYTES > BATCH_BYTES) break
      batch.push(f)
      bytes += f.byteLength + FRAME_HEADER_BYTES
      p.frames[p.head] = EMPTY
      p.head++
      p.queuedBytes -= f.byteLength
      if (f.byteLength >= LARGE_FRAME_BYTES) break
    }
    compact(p)
    return batch
  }

  /** Writes the queue into the peer's stream until it is empty, waiting on backpressure. */
  async function pump(p: PeerState): Promise<void> {
    if (p.writing) return
    const s = p.stream
    if (s === undefined) return
    p.writing = true
    try {
      while (p.stream === s && p.head < p.frames.length && !stopped) {
        const batch = takeBatch(p)
        let ok: boolean
        const first = batch[0]!
        if (batch.length === 1 && first.byteLength >= LARGE_FRAME_BYTES) {
          const header = new Uint8Array(FRAME_HEADER_BYTES)
          new DataView(header.buffer).setUint32(0, first.byteLength)
          s.send(header)
          ok = s.send(first)
        } else {
          let payload = 0
          for (const f of batch) payload += f.byteLength
          ok = s.send(encodeFrames(batch, payload))
        }
        stats.framesSent += batch.length
        for (const f of batch) stats.bytesSent += f.byteLength
        if (!ok) {
          stats.drainWaits++
          stats.writersWaiting++
          try {
            await drained(s, abort.signal)
          } finally {
            stats.writersWaiting--
          }
        }
      }
    } catch (err) {
      // The stream closed under us (send throws, onDrain rejects): frames in
      // that batch are lost, which the Mesh contract allows across reconnects.
      if (!stopped) streamEnded(p, s, err)
    } finally {
      p.writing = false
    }
    // Frames may have been queued while we awaited the last drain.
    if (p.stream === s && p.head < p.frames.length && !stopped) scheduleFlush(p)
  }

  // ---- connections --------------------------------------------------------

  /**
   * Resolves at the stream's next 'drain' event, rejects when it closes or we stop.
   * Not `stream.onDrain()`: in @libp2p/utils 7.4 it keeps its first promise once
   * resolved, so every later wait returned at once and a peer slower than us let
   * yamux's write buffer grow without bound (relays reached 12 GB).
   */
  function drained(s: Stream, signal: AbortSignal): Promise<void> {
    if (!s.writableNeedsDrain) return Promise.resolve()
    return new Promise((resolve, reject) => {
      const done = (err?: Error): void => {
        s.removeEventListener('drain', onDrain)
        s.removeEventListener('close', onClose)
        signal.removeEventListener('abort', onAbort)
        if (err) reject(err)
        else resolve()
      }
      const onDrain = (): void => done()
      const onClose = (): void => done(new Error('stream closed while waiting to drain'))
      const onAbort = (): void => done(new Error('mesh stopped'))
      s.addEventListener('drain', onDrain)
      s.addEventListener('close', onClose)
      signal.addEventListener('abort', onAbort)
    })
  }

  async function connect(p: PeerState): Promise<void> {
    if (stopped || node === undefined || p.stream !== undefined || p.dialing) return
    p.dialing = true
    if (p.timer !== undefined) {
      clearTimeout(p.timer)
      p.timer = undefined
    }
    try {
      const s = await node.dialProtocol(p.addr, MESH_PROTOCOL, { signal: abort.signal })
      if (stopped) {
        s.abort(new Error('mesh stopped'))
        return
      }
      p.stream = s
      p.attempts = 0
      const downMs = p.downSince === undefined ? undefined : Date.now() - p.downSince
      if (p.downLogged) log.info({ peer: p.name, ...(downMs === undefined ? {} : { downMs }) }, 'mesh: peer reconnected')
      else log.info({ peer: p.name }, 'mesh: peer connected')
      p.everConnected = true
      p.downLogged = false
      p.downSince = undefined
      p.downWarned = false
      s.addEventListener('close', (evt) => streamEnded(p, s, evt.error), { once: true })
      // We never expect data on our outbound stream; drop anything a peer sends.
      s.addEventListener('message', () => {})
      scheduleFlush(p)
      connectedHandler?.(p.index)
    } catch (err) {
      p.dialing = false // before scheduleRedial, which skips peers being dialed
      if (!stopped) {
        stats.dialsFailed++
        // A peer not up yet is what a cluster starting looks like: info once, a warning only if it stays down.
        p.downSince ??= Date.now()
        const downMs = Date.now() - p.downSince
        if (!p.downLogged) {
          log.info({ peer: p.name, err: errorText(err), warnAfterMs: unreachableWarnMs }, p.everConnected ? 'mesh: dial failed, will retry' : 'mesh: dial failed (peer not up yet?), will retry')
          p.downLogged = true
        } else {
          log.debug?.({ peer: p.name, err: errorText(err), downMs }, 'mesh: dial failed again, will retry')
        }
        if (!p.downWarned && downMs >= unreachableWarnMs) {
          p.downWarned = true
          log.warn({ peer: p.name, err: errorText(err), downMs }, `mesh: peer unreachable for ${Math.round(downMs / 1000)} s, still redialling`)
        }
        scheduleRedial(p)
      }
    } finally {
      p.dialing = false
    }
  }

  function streamEnded(p: PeerState, s: Stream, err: unknown): void {
    if (p.stream !== s) return
    p.stream = undefined
    if (s.status === 'open') s.abort(err instanceof Error ? err : new Error('mesh stream failed'))
    if (stopped) return
    p.downSince ??= Date.now()
    if (!p.downLogged) {
      // A peer restarting is expected; one that stays away is warned about by the redials.
      log.info({ peer: p.name, err: err === undefined ? undefined : errorText(err), warnAfterMs: unreachableWarnMs }, 'mesh: connection to peer lost, redialling')
      p.downLogged = true
    }
    scheduleRedial(p)
  }

  function scheduleRedial(p: PeerState): void {
    if (stopped || p.timer !== undefined || p.stream !== undefined || p.dialing) return
    const ceiling = Math.min(maxBackoff, minBackoff * 2 ** Math.min(p.attempts, 30))
    p.attempts++
    // Jitter: uniform in [ceiling/2, ceiling).
    const delay = ceiling / 2 + Math.random() * (ceiling / 2)
    p.timer = setTimeout(() => {
      p.timer = undefined
      void connect(p)
    }, delay)
  }

  // ---- inbound -----------------------------------------------------------

  let warnedWindowUpdates = false
  function onInboundStream(stream: Stream, connection: Connection): void {
    const from = committee.get(connection.remotePeer.toString())
    if (from === undefined || from === me) {
      // The gater should have refused the connection already; belt and braces.
      stats.streamsRefused++
      log.warn({ remote: connection.remotePeer.toString() }, 'mesh: stream from a peer outside the committee refused')
      stream.abort(new Error('not a committee member'))
      return
    }
    const decoder = new FrameDecoder(maxFrameBytes)
    const deliver = (frame: Uint8Array): void => {
      stats.framesReceived++
      stats.bytesReceived += frame.byteLength
      if (handler === undefined) return
      try {
        handler(from, frame)
      } catch (err) {
        log.warn({ peer: peers.get(from)?.name ?? from, err: errorText(err) }, 'mesh: frame handler threw')
      }
    }
    const onMessage = (evt: StreamMessageEvent): void => {
      if (stopped) return
      try {
        decoder.push(evt.data, deliver)
      } catch (err) {
        stats.badStreams++
        log.warn({ peer: peers.get(from)?.name ?? from, err: errorText(err) }, 'mesh: bad frame from peer, closing its stream')
        stream.removeEventListener('message', onMessage)
        stream.abort(err instanceof Error ? err : new Error(String(err)))
      }
    }
    if (!halfWindowUpdates(stream) && !warnedWindowUpdates) {
      warnedWindowUpdates = true
      log.warn({ stream: stream.constructor.name }, 'mesh: inbound streams are not yamux streams of the expected shape; window updates stay as the muxer sends them')
    }
    stream.addEventListener('message', onMessage)
    stream.addEventListener(
      'close',
      () => {
        stream.removeEventListener('message', onMessage)
      },
      { once: true },
    )
    // We never write on inbound streams: close our half now.
    stream.close().catch(() => {})
  }

  // ---- lifecycle -----------------------------------------------------------

  async function doStart(): Promise<void> {
    const self = options.peers.find((p) => p.index === me)
    if (self === undefined) throw new Error(`mesh: peer ${me} is not in the committee`)
    if (options.secretKey.byteLength !== 32) throw new Error('mesh: secretKey must be a 32-byte Ed25519 seed')
    const privateKey = await generateKeyPairFromSeed('Ed25519', options.secretKey)
    if (!bytesEqual(privateKey.publicKey.raw, self.publicKey)) {
      throw new Error(`mesh: secretKey does not match the public key of committee member ${me}`)
    }
    const allow = new Set<string>()
    const seen = new Set<number>()
    for (const pa of options.peers) {
      if (pa.publicKey.byteLength !== 32) throw new Error(`mesh: peer ${pa.index} has no 32-byte Ed25519 key`)
      if (seen.has(pa.index)) throw new Error(`mesh: duplicate committee index ${pa.index}`)
      seen.add(pa.index)
      const peerId = peerIdFromPublicKey(publicKeyFromRaw(pa.publicKey))
      const id = peerId.toString()
      if (committee.has(id)) throw new Error(`mesh: peers ${committee.get(id)} and ${pa.index} share a key`)
      committee.set(id, pa.index)
      const ma = multiaddr(pa.multiaddr)
      const host = ma.getComponents()[0]
      if (host !== undefined && (host.name === 'ip4' || host.name === 'ip6') && host.value !== undefined) {
        allow.add(`/${host.name}/${host.value}`)
      }
      if (pa.index === me) continue
      peers.set(pa.index, {
        index: pa.index,
        name: pa.name ?? String(pa.index),
        peerId,
        addr: withPeerId(ma, id),
        frames: [],
        head: 0,
        queuedBytes: 0,
        stream: undefined,
        dialing: false,
        writing: false,
        flushScheduled: false,
        attempts: 0,
        timer: undefined,
        downLogged: false,
        downSince: undefined,
        downWarned: false,
        everConnected: false,
        dropLogged: false,
      })
    }
    const isOutsider = (peerId: PeerId): boolean => {
      const idx = committee.get(peerId.toString())
      return idx === undefined || idx === me
    }
    const refuse = (peerId: PeerId, direction: string): boolean => {
      if (!isOutsider(peerId)) return false
      stats.connectionsRefused++
      log.warn({ remote: peerId.toString(), direction }, 'mesh: refused a connection from outside the committee')
      return true
    }
    const created = await createLibp2p({
      start: false,
      privateKey,
      addresses: { listen: [listen] },
      transports: [tcp()],
      connectionEncrypters: [noise()],
      streamMuxers: [yamux()],
      connectionGater: {
        denyDialPeer: (peerId) => isOutsider(peerId),
        denyInboundEncryptedConnection: (peerId) => refuse(peerId, 'inbound'),
        denyOutboundEncryptedConnection: (peerId) => refuse(peerId, 'outbound'),
      },
      connectionManager: {
        // Committee hosts skip the per-host inbound rate limit (5/s by default),
        // which reconnect storms on one machine would otherwise hit.
        allow: [...allow],
      },
      connectionMonitor: {
        // The monitor pings each connection and aborts it on a timeout; a busy
        // mesh link can delay a ping, so be lenient. Every ping opens a yamux
        // stream and negotiates a protocol (we handle none, so it fails as
        // unsupported, which still proves the peer alive): about 7 MB/min of
        // garbage per relay at libp2p's 10 s default over a 4-relay mesh, whose
        // survivors grow an idle relay's old space and RSS until a major GC.
        // Once a minute still finds a dead link within two minutes.
        pingInterval: 60_000,
        pingTimeout: { minTimeout: 20_000, maxTimeout: 60_000 },
      },
    })
    node = created
    await created.handle(MESH_PROTOCOL, onInboundStream, {
      // A correct peer keeps one stream per connection; a few more cover a
      // reconnect overlap. Each can buffer at most one maxFrameBytes frame.
      maxInboundStreams: 4,
      maxOutboundStreams: 2,
    })
    created.addEventListener('connection:open', (evt) => {
      // A peer that dialed us is up: stop waiting for the backoff timer.
      const idx = committee.get(evt.detail.remotePeer.toString())
      const p = idx === undefined ? undefined : peers.get(idx)
      if (p !== undefined && p.stream === undefined && !p.dialing) void connect(p)
    })
    if (stopped) return
    try {
      await created.start()
    } catch (err) {
      // e.g. the port is taken: leave nothing running behind the rejection.
      await Promise.resolve(created.stop()).catch(() => {})
      throw err
    }
    if (stopped) return
    log.info({ me, listen, peerId: created.peerId.toString() }, 'mesh: listening')
    for (const p of peers.values()) void connect(p)
  }

  async function doStop(): Promise<void> {
    stopped = true
    abort.abort()
    for (const p of peers.values()) {
      if (p.timer !== undefined) clearTimeout(p.timer)
      p.timer = undefined
      p.frames = []
      p.head = 0
      p.queuedBytes = 0
    }
    await starting?.catch(() => {})
    for (const p of peers.values()) {
      const s = p.stream
      p.stream = undefined
      s?.abort(new Error('mesh stopped'))
    }
    if (node !== undefined) await node.stop()
  }

  return {
    start() {
      if (stopped) return Promise.reject(new Error('mesh: stopped; create a new mesh to restart'))
      starting ??= doStart()
      return starting
    },
    send,
    broadcast(frame) {
      if (stopped || frame.byteLength > maxFrameBytes) {
        stats.framesRejected++
        return
      }
      for (const p of peers.values()) enqueue(p, frame)
    },
    onFrame(h) {
      handler = h
    },
    onPeerConnected(h) {
      connectedHandler = h
    },
    connectedPeers() {
      const out: number[] = []
      for (const p of peers.values()) if (p.stream !== undefined && p.stream.writeStatus === 'writable') out.push(p.index)
      return out.sort((a, b) => a - b)
    },
    queuedBytes() {
      let bytes = 0
      for (const p of peers.values()) bytes += p.queuedBytes
      return bytes
    },
    stop() {
      stopping ??= doStop()
      return stopping
    },
    stats() {
      let queuedFrames = 0
      let queuedBytes = 0
      for (const p of peers.values()) {
        queuedFrames += p.frames.length - p.head
        queuedBytes += p.queuedBytes
      }
      return { ...stats, queuedFrames, queuedBytes }
    },
  }
}

const EMPTY = new Uint8Array(0)

/** Drops consumed slots once they are the larger part of the array. */
function compact(p: PeerState): void {
  if (p.head === p.frames.length) {
    p.frames = []
    p.head = 0
    p.dropLogged = false
  } else if (p.head > 1024 && p.head * 2 > p.frames.length) {
    p.frames = p.frames.slice(p.head)
    p.head = 0
  }
}

function withPeerId(ma: Multiaddr, id: string): Multiaddr {
  const p2p = ma.getComponents().find((c) => c.name === 'p2p')
  if (p2p === undefined) return ma.encapsulate(`/p2p/${id}`)
  if (p2p.value !== id) throw new Error(`mesh: multiaddr ${ma.toString()} names peer ${p2p.value}, expected ${id}`)
  return ma
}

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false
  return true
}

function errorText(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err)
}
