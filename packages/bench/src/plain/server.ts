import websocket from '@fastify/websocket'
import {
  SteadError,
  asSigned,
  authBytes,
  createCrdt,
  decode,
  decodeClientMessage,
  encode,
  encodeRelayMessage,
  envelopeUnits,
  openEnvelopeSync,
  toHex,
  welcomeBytes,
  type AnyCrdt,
  type AnyOp,
  type ClientMessage,
  type Crdt,
  type Envelope,
  type RelayMessage,
} from '@stead/core'
import { nodeCrypto, signSync, verifySync } from '@stead/core/node'
import Fastify, { type FastifyInstance } from 'fastify'
import { randomBytes } from 'node:crypto'
import WebSocket from 'ws'

/**
 * The `plain` baseline: a relay that only forwards and merges. It speaks the
 * same client protocol as a Stead relay (challenge / hello / welcome,
 * subscribe, submit, envelope), verifies each client envelope once
 * (openEnvelopeSync, the relay's own check), merges its operations into
 * in-memory CRDTs, forwards the frame to every other plain relay over one
 * loopback WebSocket per peer and streams it to subscribed clients at once.
 * No consensus, no audit, no commits, no persistence, no replay: the
 * eventual-consistency ceiling the reliable relays are compared with.
 */
export interface PlainRelayOptions {
  readonly me: number
  readonly secretKey: Uint8Array
  readonly relays: ReadonlyArray<{ readonly id: string; readonly publicKey: Uint8Array; readonly api: string }>
  readonly f: number
}

const MAX_SEEN = 1_000_000
const trustPeers = { sha256: (d: Uint8Array) => nodeCrypto.sha256(d), verify: () => true }
const verifyClients = { sha256: (d: Uint8Array) => nodeCrypto.sha256(d), verify: verifySync }

export class PlainRelay {
  private readonly seen = new Set<string>()
  private readonly objects = new Map<string, AnyCrdt>()
  private readonly subscribers = new Map<string, Set<PlainSession>>()
  private readonly peers: PeerLink[] = []
  readonly counters = { envelopes: 0, forwarded: 0, peerBytesOut: 0, peerBytesIn: 0 }
  app!: FastifyInstance

  readonly options: PlainRelayOptions
  constructor(options: PlainRelayOptions) {
    this.options = options
  }

  get publicKey(): Uint8Array {
    return (this.options.relays[this.options.me] as { publicKey: Uint8Array }).publicKey
  }

  async start(): Promise<void> {
    const entry = this.options.relays[this.options.me] as { api: string }
    const [host, port] = entry.api.split(':') as [string, string]
    const app = Fastify({ logger: false })
    await app.register(websocket, { options: { maxPayload: 16 * 1024 * 1024 } })
    app.get('/health', async () => ({ ok: true, relay: this.options.me, plain: true }))
    app.get('/v1/cluster', async () => ({ f: this.options.f, relays: this.options.relays.map((r) => ({ id: r.id, publicKey: toHex(r.publicKey), api: r.api })) }))
    app.get('/v1/status', async () => ({ relay: this.options.me, plain: true, ...this.counters, objects: this.objects.size, peers: this.peers.filter((p) => p.open).length }))
    app.get('/v1/ws', { websocket: true }, (socket) => new PlainSession(this, socket).start())
    app.get('/v1/peer', { websocket: true }, (socket) => {
      socket.on('message', (data: Buffer) => this.onPeerBatch(data))
    })
    await app.listen({ host, port: Number(port) })
    this.app = app
    this.options.relays.forEach((r, i) => {
      if (i !== this.options.me) this.peers.push(new PeerLink(`ws://${r.api}/v1/peer`, this.counters))
    })
  }

  async stop(): Promise<void> {
    for (const p of this.peers) p.close()
    await this.app.close()
  }

  subscribe(space: string, s: PlainSession): () => void {
    let set = this.subscribers.get(space)
    if (!set) this.subscribers.set(space, (set = new Set()))
    set.add(s)
    return () => set.delete(s)
  }

  /** A client's envelope: verify, dedupe, merge, forward, stream. */
  submit(frame: Uint8Array): 'queued' | 'duplicate' {
    const env = openEnvelopeSync(verifyClients, asSigned(decode(frame)))
    if (!this.accept(env)) return 'duplicate'
    for (const p of this.peers) p.push(frame)
    this.publish(env, frame)
    return 'queued'
  }

  private onPeerBatch(data: Buffer): void {
    this.counters.peerBytesIn += data.byteLength
    let frames: unknown
    try {
      frames = decode(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), 64 * 1024 * 1024)
    } catch {
      return
    }
    if (!Array.isArray(frames)) return
    for (const frame of frames) {
      if (!(frame instanceof Uint8Array)) continue
      let env: Envelope
      try {
        // Peers are trusted in this baseline: the relay that took the envelope from its author verified it.
        env = openEnvelopeSync(trustPeers, asSigned(decode(frame)))
      } catch {
        continue
      }
      if (this.accept(env)) this.publish(env, frame)
    }
  }

  private accept(env: Envelope): boolean {
    if (this.seen.has(env.idHex)) return false
    this.seen.add(env.idHex)
    if (this.seen.size > MAX_SEEN) this.seen.delete(this.seen.values().next().value as string)
    this.counters.envelopes++
    // Merge: every op (regular or safe: there is no audit here) goes into the object's CRDT.
    for (const unit of envelopeUnits(env)) {
      const items = unit.kind === 'op' ? [unit] : unit.items
      for (const item of items) {
        const id = `${env.space}\u0000${item.key}`
        let crdt = this.objects.get(id)
        if (!crdt) this.objects.set(id, (crdt = createCrdt(item.decl)))
        try {
          ;(crdt as unknown as Crdt<AnyOp, unknown>).apply(item.op, { replica: env.authorId, tag: item.tag })
        } catch {
          // A type clash between declarations: the plain baseline has no audit to reject it; skip the op.
        }
      }
    }
    return true
  }

  private publish(env: Envelope, frame: Uint8Array): void {
    const subs = this.subscribers.get(env.space)
    if (!subs?.size) return
    const bytes = encodeRelayMessage({ type: 'envelope', space: env.space, envelope: frame })
    for (const s of subs) s.sendRaw(bytes)
    this.counters.forwarded += subs.size
  }
}

/** One outgoing loopback connection to a peer; frames queued in a tick leave as one message. */
class PeerLink {
  private ws: WebSocket | null = null
  private queue: Uint8Array[] = []
  private scheduled = false
  private closed = false
  open = false

  private readonly url: string
  private readonly counters: PlainRelay['counters']
  constructor(
    url: string,
    counters: PlainRelay['counters'],
  ) {
    this.url = url
    this.counters = counters
    this.connect()
  }

  private connect(): void {
    if (this.closed) return
    const ws = new WebSocket(this.url)
    this.ws = ws
    ws.on('open', () => {
      this.open = true
      this.flush()
    })
    ws.on('error', () => undefined)
    ws.on('close', () => {
      this.open = false
      if (!this.closed) setTimeout(() => this.connect(), 200)
    })
  }

  push(frame: Uint8Array): void {
    // A peer that is down misses what is sent meanwhile: plain relays keep no log to replay.
    if (!this.open) return
    this.queue.push(frame)
    if (!this.scheduled) {
      this.scheduled = true
      setImmediate(() => this.flush())
    }
  }

  private flush(): void {
    this.scheduled = false
    if (!this.open || !this.ws || this.queue.length === 0) return
    const batch = encode(this.queue.splice(0))
    this.counters.peerBytesOut += batch.byteLength
    this.ws.send(batch)
  }

  close(): void {
    this.closed = true
    this.ws?.close()
  }
}

class PlainSession {
  private readonly nonce = new Uint8Array(randomBytes(32))
  private authenticated = false
  private readonly unsubscribers = new Map<string, () => void>()

  private readonly relay: PlainRelay
  private readonly socket: WebSocket
  constructor(
    relay: PlainRelay,
    socket: WebSocket,
  ) {
    this.relay = relay
    this.socket = socket
  }

  start(): void {
    this.socket.on('message', (data: Buffer, isBinary: boolean) => this.onMessage(data, isBinary))
    this.socket.on('close', () => {
      for (const u of this.unsubscribers.values()) u()
    })
    this.socket.on('error', () => undefined)
    this.send({ type: 'challenge', nonce: this.nonce, relay: this.relay.options.me, relayKey: this.relay.publicKey })
  }

  sendRaw(bytes: Uint8Array): void {
    if (this.socket.readyState === this.socket.OPEN) this.socket.send(bytes)
  }

  private send(m: RelayMessage): void {
    this.sendRaw(encodeRelayMessage(m))
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    let m: ClientMessage
    try {
      if (!isBinary) throw new SteadError('malformed', 'frames must be binary msgpack')
      m = decodeClientMessage(new Uint8Array(data.buffer, data.byteOffset, data.byteLength))
    } catch (err) {
      return this.fail(null, err)
    }
    if (!this.authenticated && m.type !== 'hello') return this.fail(null, new SteadError('unauthenticated', 'answer the challenge with hello first'))
    switch (m.type) {
      case 'hello':
        if (!verifySync(m.publicKey, authBytes(this.nonce, this.relay.publicKey), m.sig)) {
          this.fail(null, new SteadError('bad-signature', 'hello signature does not match the challenge'))
          this.socket.close(4001, 'bad-signature')
          return
        }
        this.authenticated = true
        // Signed over the client's nonce as a Stead relay signs it: the SDK refuses a welcome that proves no key.
        this.send({
          type: 'welcome',
          relay: this.relay.options.me,
          n: this.relay.options.relays.length,
          f: this.relay.options.f,
          ...(m.nonce ? { sig: signSync(this.relay.options.secretKey, welcomeBytes(m.nonce, m.publicKey, this.relay.options.me)) } : {}),
        })
        return
      case 'subscribe':
        this.unsubscribers.get(m.space)?.()
        this.unsubscribers.set(m.space, this.relay.subscribe(m.space, this))
        return
      case 'unsubscribe':
        this.unsubscribers.get(m.space)?.()
        this.unsubscribers.delete(m.space)
        return
      case 'submit':
        try {
          this.send({ type: 'accepted', id: m.id, status: this.relay.submit(m.envelope) })
        } catch (err) {
          this.fail(m.id, err)
        }
        return
      case 'ping':
        this.send({ type: 'pong', n: m.n })
        return
    }
  }

  private fail(id: number | null, err: unknown): void {
    const e = err instanceof SteadError ? err : new SteadError('malformed', (err as Error)?.message ?? String(err))
    this.send({ type: 'error', id, reason: e.reason, detail: e.message })
  }
}
