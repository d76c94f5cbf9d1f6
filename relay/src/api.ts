import websocket from '@fastify/websocket'
import {
  SteadError,
  authBytes,
  decodeClientMessage,
  encodeRelayMessage,
  type ClientMessage,
  type RelayMessage,
} from '@stead/core'
import { verifySync } from '@stead/core/node'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import type { WebSocket } from 'ws'
import { challengeNonce, type RelayNode, type Subscriber } from './node.ts'

export interface ApiOptions {
  readonly host: string
  readonly port: number
  readonly logger: Logger
  readonly tls?: { readonly key: string | Buffer; readonly cert: string | Buffer }
  /** Largest WebSocket frame accepted from a client. */
  readonly maxFrameBytes?: number
  /** Messages per second per connection (token bucket), and the burst allowed. */
  readonly rateLimit?: { readonly perSecond: number; readonly burst: number }
  /** Bytes queued to a slow client before its session is closed (it can resume from its stable index). */
  readonly maxBufferedBytes?: number
  /** Envelopes one session may have submitted and not yet seen decided. */
  readonly maxPendingPerClient?: number
  /** Open WebSocket sessions at once; more are refused. */
  readonly maxConnections?: number
  /** How long a new session may take to answer the challenge. */
  readonly authTimeoutMs?: number
}

/**
 * The client-facing API of a relay, HTTP and WebSocket on one port:
 * GET /health, /metrics (Prometheus), /v1/status, /v1/cluster, /v1/spaces/:space/stable,
 * and the /v1/ws session protocol (see @stead/core protocol.ts).
 */
export async function createApi(node: RelayNode, options: ApiOptions): Promise<FastifyInstance> {
  const maxFrameBytes = options.maxFrameBytes ?? 2 * 1024 * 1024
  const app = Fastify({ loggerInstance: options.logger, ...(options.tls ? { https: { key: options.tls.key, cert: options.tls.cert } } : {}) }) as unknown as FastifyInstance
  // ws's own limit only closes the socket; ours, below it, answers with a typed error first.
  await app.register(websocket, { options: { maxPayload: maxFrameBytes * 4 } })

  // Everything served over HTTP is public and signed or checkable, so browser apps on any origin may read it.
  app.addHook('onSend', async (_req, reply) => {
    reply.header('access-control-allow-origin', '*')
  })
  app.get('/v1/cluster', async () => node.clusterDescriptor())
  // The signed head of a space without its state: what a quorum read compares.
  app.get<{ Params: { space: string } }>('/v1/spaces/:space/head', async (req) => ({ space: req.params.space, ...node.stableHead(req.params.space) }))
  app.get('/health', async () => ({ ok: true, relay: node.me }))
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', node.metrics.registry.contentType)
    return node.metrics.registry.metrics()
  })
  app.get('/v1/status', async () => node.status())
  app.get<{ Params: { space: string } }>('/v1/spaces/:space/stable', async (req, reply) => {
    const snap = node.stableSnapshot(req.params.space)
    if (!snap) return reply.code(404).send({ error: 'unknown-space', detail: `no committed state for space ${req.params.space}` })
    return { space: req.params.space, relay: node.me, ...snap }
  })
  let open = 0
  app.get('/v1/ws', { websocket: true }, (socket) => {
    if (open >= (options.maxConnections ?? 10_000)) {
      socket.send(encodeRelayMessage({ type: 'error', id: null, reason: 'rate-limited', detail: 'this relay has too many open sessions; try another relay or later' }))
      socket.close(1013, 'too many sessions')
      return
    }
    open++
    socket.once('close', () => open--)
    new Session(node, socket, options).start()
  })
  await app.listen({ host: options.host, port: options.port })
  return app
}

/** One client connection: authenticate, then subscribe and submit. */
class Session implements Subscriber {
  private readonly nonce = challengeNonce()
  private authenticated = false
  private readonly unsubscribers = new Map<string, () => void>()
  /** Envelopes this session submitted that the audit has not decided yet. */
  private readonly pending = new Set<string>()
  private stopListening: (() => void) | null = null
  private tokens: number
  private lastRefill = Date.now()
  private readonly log: Logger

  constructor(
    private readonly node: RelayNode,
    private readonly socket: WebSocket,
    private readonly options: ApiOptions,
  ) {
    this.tokens = options.rateLimit?.burst ?? 2000
    this.log = options.logger.child({ session: Buffer.from(this.nonce.subarray(0, 4)).toString('hex') })
  }

  start(): void {
    this.node.metrics.clients.inc()
    this.stopListening = this.node.onDecided((id) => this.pending.delete(id))
    this.socket.on('message', (data, isBinary) => this.onMessage(data as Buffer, isBinary))
    this.socket.on('close', () => this.close())
    const authTimer = setTimeout(() => {
      if (this.authenticated) return
      this.fail(null, new SteadError('unauthenticated', 'no answer to the challenge in time'))
      this.socket.close(4003, 'unauthenticated')
    }, this.options.authTimeoutMs ?? 10_000)
    this.socket.once('close', () => clearTimeout(authTimer))
    this.socket.on('error', (err) => this.log.warn({ err: err.message }, 'client socket error'))
    this.send({ type: 'challenge', nonce: this.nonce, relay: this.node.me, relayKey: this.node.publicKey })
  }

  envelope(space: string, frame: Uint8Array): void {
    this.send({ type: 'envelope', space, envelope: frame })
  }

  commit(space: string, value: { attestation: { bytes: Uint8Array; sig: Uint8Array }; envelopes: readonly Uint8Array[] }): void {
    this.send({ type: 'commit', space, attestation: value.attestation, envelopes: value.envelopes })
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    if (!this.allow()) return this.fail(null, new SteadError('rate-limited', 'too many messages on this connection; slow down'))
    let message: ClientMessage
    try {
      if (!isBinary) throw new SteadError('malformed', 'frames must be binary msgpack')
      const limit = this.options.maxFrameBytes ?? 2 * 1024 * 1024
      if (data.byteLength > limit) throw new SteadError('too-large', `frame of ${data.byteLength} bytes exceeds ${limit}`)
      message = decodeClientMessage(new Uint8Array(data.buffer, data.byteOffset, data.byteLength))
    } catch (err) {
      return this.fail(null, err)
    }
    if (!this.authenticated && message.type !== 'hello') return this.fail(null, new SteadError('unauthenticated', 'answer the challenge with hello first'))
    switch (message.type) {
      case 'hello': {
        if (!verifySync(message.publicKey, authBytes(this.nonce, this.node.publicKey), message.sig)) {
          this.fail(null, new SteadError('bad-signature', 'hello signature does not match the challenge'))
          this.socket.close(4001, 'bad-signature')
          return
        }
        this.authenticated = true
        this.send({ type: 'welcome', relay: this.node.me, n: this.node.committee.keys.length, f: this.node.committee.f })
        return
      }
      case 'subscribe':
        this.unsubscribers.get(message.space)?.()
        this.unsubscribers.set(message.space, this.node.subscribe(message.space, message.fromIndex, this))
        return
      case 'unsubscribe':
        this.unsubscribers.get(message.space)?.()
        this.unsubscribers.delete(message.space)
        return
      case 'submit':
        try {
          const limit = this.options.maxPendingPerClient ?? 10_000
          if (this.pending.size >= limit) throw new SteadError('rate-limited', `${this.pending.size} envelopes of this session are still undecided; wait for commits`)
          const { status, idHex } = this.node.submit(message.envelope)
          if (status === 'queued') this.pending.add(idHex)
          this.send({ type: 'accepted', id: message.id, status })
        } catch (err) {
          this.fail(message.id, err)
        }
        return
      case 'ping':
        this.send({ type: 'pong', n: message.n })
        return
    }
  }

  private fail(id: number | null, err: unknown): void {
    const e = err instanceof SteadError ? err : new SteadError('malformed', (err as Error)?.message ?? String(err))
    this.node.metrics.rejected.inc({ reason: e.reason, source: 'client' })
    this.send({ type: 'error', id, reason: e.reason, detail: e.message })
  }

  private send(m: RelayMessage): void {
    if (this.socket.readyState !== this.socket.OPEN) return
    if (this.socket.bufferedAmount > (this.options.maxBufferedBytes ?? 64 * 1024 * 1024)) {
      this.log.warn({ buffered: this.socket.bufferedAmount }, 'client too slow; closing its session')
      this.socket.close(4008, 'too slow; resubscribe from your stable index')
      return
    }
    this.socket.send(encodeRelayMessage(m))
  }

  private allow(): boolean {
    const { perSecond, burst } = this.options.rateLimit ?? { perSecond: 1000, burst: 2000 }
    const now = Date.now()
    this.tokens = Math.min(burst, this.tokens + ((now - this.lastRefill) / 1000) * perSecond)
    this.lastRefill = now
    if (this.tokens < 1) return false
    this.tokens -= 1
    return true
  }

  private close(): void {
    this.node.metrics.clients.dec()
    this.stopListening?.()
    for (const unsub of this.unsubscribers.values()) unsub()
    this.unsubscribers.clear()
  }
}
