import websocket from '@fastify/websocket'
import {
  DEFAULT_LIMITS as PROTOCOL_LIMITS,
  MAX_PEER_ADDRS,
  SteadError,
  asSigned,
  authBytes,
  decode,
  decodeClientMessage,
  encode,
  encodeRelayMessage,
  fromHex,
  HEAD_NONCE_BYTES,
  readAuthBytes,
  toBase64Url,
  toHex,
  type ClientMessage,
  type ErrorReason,
  type RelayMessage,
} from '@stead/core'
import { nodeCrypto, verifySync } from '@stead/core/node'
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import type { Socket as NetSocket } from 'node:net'
import type { WebSocket } from 'ws'
import { Bucket, type Rate } from './bucket.ts'
import type { ClientFacingLiar } from './client-lies.ts'
import type { CommitFeed } from './feed.ts'
import { readiness } from './health.ts'
import { guardConnections, type ConnectionLimits } from './connections.ts'
import { DEFAULT_PEER_DIRECTORY_LIMITS, PeerDirectory, type PeerDirectoryLimits } from './peer-directory.ts'
import { publicKeyFromRaw } from '@libp2p/crypto/keys'
import { peerIdFromPublicKey } from '@libp2p/peer-id'
import { challengeNonce, type RelayNode, type Subscriber } from './node.ts'
import { addressKey } from './address.ts'
import { DEFAULT_READ_LIMITS, Reads, jsonWithBytes, type ReadLimits } from './reads.ts'
import { Shares } from './shares.ts'
import { CHUNK_BYTES } from './store.ts'

export { addressKey } from './address.ts'

/** Limits of the client API; every one has a default (see DEFAULT_LIMITS and relay/README.md, "Security model"). */
export interface ApiLimits extends ReadLimits, ConnectionLimits {
  /** Largest WebSocket frame accepted from a client: a longer one is refused at its header, before it is buffered (close 1009). */
  readonly maxFrameBytes: number
  /** Per connection: messages and bytes per second (token buckets), and the bursts allowed. */
  readonly rateLimit: Rate
  /** All connections together: what one relay takes in per second before it slows every sender down. */
  readonly globalRateLimit: Rate
  /** Bytes one session may have queued towards its client before it is closed with `slow-consumer`. */
  readonly maxBufferedBytes: number
  /** A session whose client read nothing of what was queued for this long is closed with `slow-consumer`. */
  readonly slowConsumerMs: number
  /** Envelopes one session may have submitted and not yet seen decided. */
  readonly maxPendingPerClient: number
  /** Open WebSocket sessions at once, in all, per proven client key and per remote address. */
  readonly maxConnections: number
  readonly maxSessionsPerKey: number
  readonly maxSessionsPerAddress: number
  /** Spaces one session may subscribe to. */
  readonly maxSubscriptions: number
  /** How long a new session may take to answer the challenge. */
  readonly authTimeoutMs: number
  /** A session that sends nothing (not even a ping) for this long is closed. */
  readonly idleTimeoutMs: number
  /** Shares of each space's peer directory, and what a session is told about peers (see PeerDirectory). */
  readonly peerAnnouncements: PeerDirectoryLimits
}

export const DEFAULT_LIMITS: ApiLimits = {
  maxFrameBytes: 2 * 1024 * 1024,
  rateLimit: { perSecond: 500, burst: 100, bytesPerSecond: 8 * 1024 * 1024, burstBytes: 8 * 1024 * 1024 },
  // About half a core of signature checks (a submit costs ~0.15 ms), in bursts of under 10 ms.
  globalRateLimit: { perSecond: 3000, burst: 50, bytesPerSecond: 64 * 1024 * 1024, burstBytes: 16 * 1024 * 1024 },
  maxBufferedBytes: 8 * 1024 * 1024,
  slowConsumerMs: 30_000,
  maxPendingPerClient: 10_000,
  maxConnections: 10_000,
  maxSessionsPerKey: 32,
  maxSessionsPerAddress: 256,
  maxSubscriptions: 1024,
  authTimeoutMs: 10_000,
  idleTimeoutMs: 120_000,
  // Sessions (maxConnections) and HTTP requests share these: above the session caps.
  maxHttpConnections: 16_000,
  maxHttpConnectionsPerAddress: 512,
  firstRequestMs: 10_000,
  peerAnnouncements: DEFAULT_PEER_DIRECTORY_LIMITS,
  ...DEFAULT_READ_LIMITS,
}

export interface ApiOptions extends Partial<ApiLimits> {
  readonly host: string
  readonly port: number
  readonly logger: Logger
  readonly tls?: { readonly key: string | Buffer; readonly cert: string | Buffer }
  /** Lies told to clients on purpose (`--byzantine`), for tests and demos: see client-lies.ts. */
  readonly liar?: ClientFacingLiar
  /** Where this relay helps clients sync peer to peer (client-peers.ts): offered in `welcome`. */
  readonly peerAddresses?: () => string[]
}

/**
 * Envelopes a session remembers having sent early (see Session.sentEarly),
 * in number and bytes. A client keeps more of what each relay sent it on
 * the socket, the same way (EarlyFrames in the client), so every envelope
 * a commit names by id is still there.
 */
const SENT_EARLY_MAX = 256
const SENT_EARLY_BYTES = 1024 * 1024

/** Bytes of an envelope frame's end (its signature's) that tell it apart in Session.sentEarly. */
const EARLY_KEY_BYTES = 16

/** A session stops reading its commit feed while this much is queued towards its client. */
const LOW_WATER_BYTES = 1024 * 1024
/** Bytes a throttled session may hold received and not yet handled (what its socket delivered before it paused). */
const MAX_BACKLOG_BYTES = 8 * 1024 * 1024
/** How far a reader's signed HTTP request time may be from the relay's clock. */
const READ_AUTH_SKEW_MS = 5 * 60_000

/**
 * The client-facing API of a relay, HTTP and WebSocket on one port:
 * GET /health, /ready, /metrics (Prometheus), /v1/status, /v1/cluster, /v1/spaces,
 * /v1/spaces/:space/{head,stable}, and the /v1/ws session protocol (see
 * @stead/core protocol.ts).
 */
export async function createApi(node: RelayNode, options: ApiOptions): Promise<FastifyInstance> {
  const limits: ApiLimits = { ...DEFAULT_LIMITS, ...Object.fromEntries(Object.entries(options).filter(([k, v]) => k in DEFAULT_LIMITS && v !== undefined)) }
  const leastBuffer = LOW_WATER_BYTES + 2 * CHUNK_BYTES + limits.maxFrameBytes
  if (limits.maxBufferedBytes < leastBuffer) throw new RangeError(`maxBufferedBytes must be at least ${leastBuffer} (a send window, a commit chunk and a reply), got ${limits.maxBufferedBytes}`)
  // Route parameters are object keys and space names, percent-encoded: up to 3 UTF-8 bytes per UTF-16
  // unit, 3 characters per byte. Fastify's default (100) would turn longer valid keys away with a 414.
  const maxParamLength = PROTOCOL_LIMITS.maxKeyChars * 9
  // connectionTimeout: an HTTP connection with no traffic either way for HTTP_IDLE_MS is closed (one that never sends
  // a request, or never reads its answer); ws clears it on sockets that became sessions (they have idleTimeoutMs).
  const app = Fastify({ loggerInstance: options.logger, logController: new RequestLog(), routerOptions: { maxParamLength }, connectionTimeout: HTTP_IDLE_MS, ...(options.tls ? { https: { key: options.tls.key, cert: options.tls.cert } } : {}) }) as unknown as FastifyInstance
  // ws refuses a longer frame at its header (close 1009), before buffering any of it; until hello,
  // frames are held to PRE_AUTH_FRAME_BYTES (see Session). What unfinished frames hold is counted.
  await app.register(websocket, {
    options: { maxPayload: limits.maxFrameBytes },
    // A client's protocol error (a frame over the limit, a bad opcode) is the client's mistake, not the
    // relay's: counted, one line at debug, no stack (the plugin's default logs it as an error with one).
    errorHandler: (err, socket) => {
      const code = (err as { code?: string }).code
      if (code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') node.metrics.rejected.inc({ reason: 'too-large', source: 'client' })
      options.logger.debug({ err: err.message, code }, 'client socket error')
      socket.terminate()
    },
  })
  const sessions = new Sessions(node, limits, options.logger, options.liar, options.peerAddresses)
  const liar = options.liar
  const reads = new Reads(node.budget, limits, (reason) => node.metrics.rejected.inc({ reason, source: 'http' }))
  /** Serialized answers of the same commit are shared (no liar: its answers vary). Too large ones are remembered as such. */
  const tooLarge = new Set<string>()
  const shared = (key: string, status: number, body: () => unknown, bytesOf: () => Buffer = () => Buffer.from(JSON.stringify(body()))): { status: number; bytes: Buffer } | { status: number; body: unknown } => {
    if (liar) return { status, body: body() }
    const hit = reads.cached(key)
    if (hit) return { status, bytes: hit }
    if (tooLarge.has(key)) return { status: 413, body: { error: 'too-large', detail: `the answer is over this relay's ${limits.maxReadBytes} bytes` } }
    const bytes = bytesOf()
    if (bytes.length > limits.maxReadBytes) {
      if (tooLarge.size >= 1000) tooLarge.clear()
      tooLarge.add(key)
    } else reads.remember(key, bytes)
    return { status, bytes }
  }
  /** What a read answers once the liar (if any) had its say: answers sent as bytes skip the preSerialization hook. */
  const told = (req: FastifyRequest) => (body: unknown): unknown => (liar ? liar.answer(req.routeOptions.url, req.params as Record<string, string>, req.query as Record<string, string | undefined>, body) : body)
  const addressOf = (req: FastifyRequest): string => addressKey(req.socket.remoteAddress)
  if (liar) {
    app.addHook('onRequest', async (req) => {
      const ms = liar.delayOf(req.routeOptions.url)
      if (ms > 0) await new Promise((ok) => setTimeout(ok, ms))
    })
    app.addHook('preSerialization', async (req, _reply, payload) =>
      liar.answer(req.routeOptions.url, req.params as Record<string, string>, req.query as Record<string, string | undefined>, payload),
    )
  }

  // Everything served over HTTP is public and signed or checkable, so browser apps on any origin may read it.
  app.addHook('onSend', async (_req, reply) => {
    reply.header('access-control-allow-origin', '*')
  })
  // HTTP reads cost a signature each (heads, snapshots): metered per address like sessions.
  const httpBuckets = new Map<string, Bucket>()
  app.addHook('onRequest', async (req, reply) => {
    // Probes and sessions are exempt: a load balancer polling /ready must never be told 429.
    if (req.url === '/health' || req.url === '/ready' || req.url.startsWith('/v1/ws')) return
    const who = addressKey(req.socket.remoteAddress)
    let bucket = httpBuckets.get(who)
    if (!bucket) {
      if (httpBuckets.size >= 100_000) httpBuckets.delete(httpBuckets.keys().next().value as string)
      httpBuckets.set(who, (bucket = new Bucket({ perSecond: 100, burst: 200, bytesPerSecond: Number.MAX_SAFE_INTEGER, burstBytes: Number.MAX_SAFE_INTEGER }) /* requests only, not bytes */))
    }
    const wait = bucket.wait(0)
    if (wait > 0) {
      node.metrics.rejected.inc({ reason: 'rate-limited', source: 'http' })
      return reply.code(429).header('retry-after', String(Math.ceil(wait / 1000))).send({ error: 'rate-limited', detail: `too many requests from ${who}; retry in ${wait} ms` })
    }
    bucket.take(0)
  })
  // Browsers ask before sending the reader header across origins (CORS preflight), for every
  // read under a space: one segment deep (head, snapshot, delta) or two (attestations/:round,
  // objects/:key, history/:key; a preflight those did not match was a 404, and the read failed).
  app.options('/v1/spaces/*', async (_req, reply) =>
    reply.code(204).header('access-control-allow-methods', 'GET').header('access-control-allow-headers', 'x-stead-reader').header('access-control-max-age', '600').send(),
  )
  app.get('/v1/cluster', async () => node.clusterDescriptor())
  // Liveness: the process serves. Whether it is worth sending clients to is /ready.
  app.get('/health', async () => ({ ok: true, relay: node.name }))
  app.get('/ready', async (_req, reply) => {
    const h = node.health()
    const r = readiness(h)
    return reply.code(r.ready ? 200 : 503).send({
      ready: r.ready,
      relay: node.name,
      reasons: r.reasons,
      peers: { connected: node.connectedPeerNames(), needed: r.peersNeeded, total: h.peers },
      round: h.round,
      clusterRound: h.clusterRound,
      roundsBehind: r.roundsBehind,
      pendingEnvelopes: h.pendingEnvelopes,
      lastCommitAt: h.lastCommitAt === null ? null : new Date(h.lastCommitAt).toISOString(),
    })
  })
  node.metrics.includeProcess()
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', node.metrics.registry.contentType)
    return node.metrics.registry.metrics()
  })
  app.get('/v1/status', async () => {
    const { rss, heapUsed, arrayBuffers } = process.memoryUsage()
    return { ...node.status(), process: { rss, heapUsed, arrayBuffers } }
  })
  app.get<{ Querystring: { after?: string; limit?: string } }>('/v1/spaces', async (req, reply) => {
    const limit = pageLimit(req.query.limit)
    if (limit === undefined) return reply.code(400).send({ error: 'malformed', detail: PAGE_LIMIT_RULE })
    const spaces = node.listSpaces(req.query.after ?? '', limit)
    return { spaces, next: spaces.length === limit ? (spaces[spaces.length - 1]?.space ?? null) : null }
  })
  // The signed head of a space without its state. Without a nonce: this relay's current stable
  // index and state hash, its word alone (progress checks). With ?nonce= (HEAD_NONCE_BYTES as hex):
  // what a quorum read takes, the latest attested head with f+1 relays' signatures (`proof`),
  // signed over the client's nonce so it is fresh, not replayed.
  app.get<{ Params: { space: string }; Querystring: { nonce?: string } }>('/v1/spaces/:space/head', async (req, reply) => {
    const denied = readDenied(node, req, req.params.space)
    if (denied) return reply.code(403).send({ error: 'unauthorized', detail: denied })
    const nonce = req.query.nonce === undefined ? undefined : hexBytes(req.query.nonce, HEAD_NONCE_BYTES)
    if (nonce === null) return reply.code(400).send({ error: 'malformed', detail: `nonce must be ${HEAD_NONCE_BYTES} bytes as hex` })
    if (!nonce) return { space: req.params.space, ...node.stableHead(req.params.space) }
    return reads.serve(req, reply, addressOf(req), 'wait', 0, async () => {
      const head = await node.provenHead(req.params.space, nonce, HEAD_PROOF_WAIT_MS)
      if (!head) return { status: 503, body: { error: 'unavailable', detail: `fewer than f+1 relays signed this relay's head of ${req.params.space} within ${HEAD_PROOF_WAIT_MS} ms (peers down or behind); ask another relay` } }
      return { body: { space: req.params.space, ...head } }
    }, told(req))
  })
  // A page of an object's whole stable history, newest first; the SDK believes a page f+1 relays signed alike.
  app.get<{ Params: { space: string; key: string }; Querystring: { before?: string; limit?: string } }>('/v1/spaces/:space/history/:key', async (req, reply) => {
    const denied = readDenied(node, req, req.params.space)
    if (denied) return reply.code(403).send({ error: 'unauthorized', detail: denied })
    const before = req.query.before === undefined ? Number.MAX_SAFE_INTEGER : Number(req.query.before)
    const limit = pageLimit(req.query.limit)
    if (!Number.isSafeInteger(before) || before < 0) return reply.code(400).send({ error: 'malformed', detail: 'before must be a stable index' })
    if (limit === undefined) return reply.code(400).send({ error: 'malformed', detail: PAGE_LIMIT_RULE })
    // At most historyPageBytes of values (always one entry): `next` is the `before` of the next page, null at the start.
    return reads.serve(req, reply, addressOf(req), 'heavy', 3 * limits.historyPageBytes, () => {
      const page = node.historyPage(req.params.space, req.params.key, before, limit, limits.historyPageBytes)
      const fields = { space: req.params.space, key: req.params.key, before, relay: page.relay, sig: toHex(page.sig), next: page.next }
      return liar ? { body: { ...fields, entries: toBase64Url(page.entries) } } : { bytes: jsonWithBytes(fields, 'entries', page.entries) }
    }, told(req))
  })
  // What a new client starts from: the audit state at the latest attested commit, with this relay's
  // attestation of it. The client believes it once f+1 relays signed that attestation (next route).
  app.get<{ Params: { space: string } }>('/v1/spaces/:space/snapshot', async (req, reply) => {
    const denied = readDenied(node, req, req.params.space)
    if (denied) return reply.code(403).send({ error: 'unauthorized', detail: denied })
    return reads.serve(req, reply, addressOf(req), 'heavy', 0, () => {
      const snap = node.bootstrapSnapshot(req.params.space)
      // Not an error (a browser would log one): a new space has nothing committed yet, and the client starts from empty.
      if (!snap) return { body: { space: req.params.space, relay: node.me, attestation: null, detail: `no attested commit of space ${req.params.space} here yet` } }
      // Checked before the state is turned into text: a state past the limit costs no copy of it.
      if (Math.ceil(snap.state.length / 3) * 4 > limits.maxReadBytes) return { status: 413, body: { error: 'too-large', detail: `the state of ${req.params.space} is ${snap.state.length} bytes, over this relay's ${limits.maxReadBytes}; follow the commits instead` } }
      const fields = { space: req.params.space, relay: node.me, attestation: toBase64Url(snap.attestation.bytes), sig: toHex(snap.attestation.sig) }
      return shared(`snapshot/${req.params.space}/${toHex(snap.attestation.sig)}`, 200, () => ({ ...fields, state: toBase64Url(snap.state) }), () => jsonWithBytes(fields, 'state', snap.state))
    }, told(req))
  })
  // One object's stable state at the latest attested commit, with the Merkle path that proves it (or its
  // absence) against the state hash of this relay's attestation: what a quorum read of one object takes
  // instead of the whole space. The client believes it once f+1 relays signed that attestation.
  app.get<{ Params: { space: string; key: string } }>('/v1/spaces/:space/objects/:key', async (req, reply) => {
    const denied = readDenied(node, req, req.params.space)
    if (denied) return reply.code(403).send({ error: 'unauthorized', detail: denied })
    if (req.params.key.length > PROTOCOL_LIMITS.maxKeyChars) return reply.code(400).send({ error: 'too-large', detail: `keys are at most ${PROTOCOL_LIMITS.maxKeyChars} characters` })
    return reads.serve(req, reply, addressOf(req), 'heavy', 0, () => {
      const found = node.objectProof(req.params.space, req.params.key)
      if (!found) return { body: { space: req.params.space, relay: node.me, attestation: null, detail: `no attested commit of space ${req.params.space} here yet` } }
      if (Math.ceil(found.proof.length / 3) * 4 > limits.maxReadBytes) return { status: 413, body: { error: 'too-large', detail: `the proof of ${req.params.key} is ${found.proof.length} bytes, over this relay's ${limits.maxReadBytes}` } }
      return { body: { space: req.params.space, relay: node.me, attestation: toBase64Url(found.attestation.bytes), sig: toHex(found.attestation.sig), proof: toBase64Url(found.proof) } }
    }, told(req))
  })
  // What changed since stable index ?from= up to the latest attested commit, each object as its ops or its state
  // (?mode=adaptive, the default, picks per object by BENDY's rule; ops and state force one), with this relay's
  // attestation of that commit: a client that is behind catches up from it instead of replaying every commit.
  app.get<{ Params: { space: string }; Querystring: { from?: string; mode?: string } }>('/v1/spaces/:space/delta', async (req, reply) => {
    const denied = readDenied(node, req, req.params.space)
    if (denied) return reply.code(403).send({ error: 'unauthorized', detail: denied })
    const from = Number(req.query.from)
    if (req.query.from === undefined || !Number.isSafeInteger(from) || from < 0) return reply.code(400).send({ error: 'malformed', detail: '?from= must be a stable index' })
    const mode = req.query.mode ?? 'adaptive'
    if (mode !== 'adaptive' && mode !== 'ops' && mode !== 'state') return reply.code(400).send({ error: 'malformed', detail: '?mode= is adaptive, ops or state' })
    return reads.serve(req, reply, addressOf(req), 'heavy', 0, () => {
      const found = node.stateDelta(req.params.space, from, mode)
      // Not an error (a browser would log one): the client just follows the commits instead. Nor is a delta
      // past the read limit: following the commits costs the client more round trips, not the relay memory.
      if (!found || Math.ceil(found.delta.length / 3) * 4 > limits.maxReadBytes) return { body: { space: req.params.space, relay: node.me, delta: null, detail: `no delta of ${req.params.space} from stable index ${from} here: the recent commits kept do not reach back that far, they weigh less than a delta, or the delta is over this relay's read limit` } }
      const fields = { space: req.params.space, relay: node.me, attestation: toBase64Url(found.attestation.bytes), sig: toHex(found.attestation.sig) }
      return shared(`delta/${req.params.space}/${from}/${mode}/${toHex(found.attestation.sig)}`, 200, () => ({ ...fields, delta: toBase64Url(found.delta) }), () => jsonWithBytes(fields, 'delta', found.delta))
    }, told(req))
  })
  // This relay's attestation of one commit (?from=<stable index it started at>), waiting a moment for a relay slightly behind.
  app.get<{ Params: { space: string; round: string }; Querystring: { from?: string } }>('/v1/spaces/:space/attestations/:round', async (req, reply) => {
    const denied = readDenied(node, req, req.params.space)
    if (denied) return reply.code(403).send({ error: 'unauthorized', detail: denied })
    const round = Number(req.params.round)
    const from = Number(req.query.from)
    if (!Number.isSafeInteger(round) || round < 1 || !Number.isSafeInteger(from) || from < 0) return reply.code(400).send({ error: 'malformed', detail: 'the round must be a positive whole number and ?from= a stable index' })
    return reads.serve(req, reply, addressOf(req), 'wait', 0, async () => {
      const signed = await node.attestationAt(req.params.space, from, round, ATTESTATION_WAIT_MS)
      if (!signed) return { status: 404, body: { error: 'not-found', detail: `no attested commit of ${req.params.space} at round ${round} from index ${from} here` } }
      return { body: { space: req.params.space, relay: node.me, attestation: toBase64Url(signed.bytes), sig: toHex(signed.sig) } }
    }, told(req))
  })
  app.get<{ Params: { space: string } }>('/v1/spaces/:space/stable', async (req, reply) => {
    const denied = readDenied(node, req, req.params.space)
    if (denied) return reply.code(403).send({ error: 'unauthorized', detail: denied })
    return reads.serve(req, reply, addressOf(req), 'heavy', 0, () => {
      // Keyed by the signed head: every reader of one stable state gets the same bytes, serialized once.
      const head = node.stableHead(req.params.space)
      return shared(`stable/${req.params.space}/${head.index}/${head.stateHash}`, 200, () => ({ space: req.params.space, relay: node.me, ...node.stableSnapshot(req.params.space) }))
    }, told(req))
  })
  app.get('/v1/ws', { websocket: true }, (socket, req) => sessions.open(socket, addressKey(req.socket.remoteAddress), req.socket))
  app.addHook('onClose', async () => sessions.close())
  // Raw connections, before any request: capped per address and in all, and a silent one is closed soon.
  guardConnections(app.server, limits, () => node.metrics.rejected.inc({ reason: 'rate-limited', source: 'http' }))
  await app.listen({ host: options.host, port: options.port })
  return app
}

/** An HTTP connection with no traffic either way for this long is closed (see createApi). */
const HTTP_IDLE_MS = 80_000

/** Largest frame a session takes before hello (a hello is a few hundred bytes): ws refuses a longer one at its header. */
const PRE_AUTH_FRAME_BYTES = 64 * 1024

/** What ws's receiver of a session holds of frames not yet complete (private fields of ws 8, read defensively). */
interface WsReceiver {
  _maxPayload?: number
  _bufferedBytes?: number
  _messageLength?: number
}
function receiverOf(socket: WebSocket): WsReceiver | undefined {
  return (socket as unknown as { _receiver?: WsReceiver })._receiver ?? undefined
}
/** Bytes of frames a session's socket delivered that do not make a whole message yet. */
function unfinishedBytes(socket: WebSocket): number {
  const r = receiverOf(socket)
  return (r?._bufferedBytes ?? 0) + (r?._messageLength ?? 0)
}
/** The largest frame ws takes on this socket from now on (refused at its header past it). */
function setFrameLimit(socket: WebSocket, bytes: number): void {
  const r = receiverOf(socket)
  if (r && typeof r._maxPayload === 'number') r._maxPayload = bytes
}

/** How long a proven head waits for f other relays' signatures (they may be a round or two behind). */
const HEAD_PROOF_WAIT_MS = 3000

/** How long an attestation request waits for this relay to reach the commit: other relays may be a few rounds ahead. */
const ATTESTATION_WAIT_MS = 3000

const PAGE_LIMIT_RULE = 'limit must be a whole number from 1 to 1000'

/**
 * Fastify logs two lines per request at info. A relay answers probes,
 * scrapes and reads all day: one line per request, at debug, and client
 * errors (404s from scanners) at debug too; server errors stay errors.
 */
class RequestLog extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const line = { method: request.method, url: request.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10, from: request.socket?.remoteAddress }
    if (error) reply.log.error({ ...line, err: error }, 'http request failed')
    else reply.log.debug(line, 'http request')
  }

  override routeNotFound(request: FastifyRequest): void {
    request.log.debug({ method: request.method, url: request.url }, 'http: no such route')
  }

  override defaultErrorLog(error: Error, request: FastifyRequest, reply: FastifyReply): void {
    if (reply.statusCode >= 500) reply.log.error({ method: request.method, url: request.url, status: reply.statusCode, err: error }, 'http request failed')
    else reply.log.debug({ method: request.method, url: request.url, status: reply.statusCode, err: error.message }, 'http request refused')
  }
}

/** A paged endpoint's `limit` query parameter (default 100), or undefined when it breaks PAGE_LIMIT_RULE. */
function pageLimit(raw: string | undefined): number | undefined {
  const limit = raw === undefined ? 100 : Number(raw)
  return Number.isInteger(limit) && limit >= 1 && limit <= 1000 ? limit : undefined
}

/** `hex` as exactly `length` bytes, or null when it is not that. */
function hexBytes(hex: string | undefined, length: number): Uint8Array | null {
  try {
    const bytes = fromHex(hex ?? '')
    return bytes.length === length ? bytes : null
  } catch {
    return null
  }
}

/**
 * Why an HTTP read of a space with `readers` is refused, or undefined when
 * it is allowed. The reader proves its key with the `x-stead-reader`
 * header: `<public key hex>.<time ms>.<signature hex>` over readAuthBytes.
 */
function readDenied(node: RelayNode, req: FastifyRequest, space: string): string | undefined {
  if (node.canRead(space, undefined)) return undefined
  const header = req.headers['x-stead-reader']
  if (typeof header !== 'string') return `space ${space} has readers: sign the request (x-stead-reader header)`
  const [keyHex, time, sigHex] = header.split('.')
  const t = Number(time)
  const key = hexBytes(keyHex, 32)
  const sig = hexBytes(sigHex, 64)
  if (!key || !sig || !Number.isSafeInteger(t)) return 'x-stead-reader must be <public key hex>.<time ms>.<signature hex>'
  if (Math.abs(Date.now() - t) > READ_AUTH_SKEW_MS) return 'x-stead-reader is too old or from the future: check the clock'
  if (!verifySync(key, readAuthBytes(space, t), sig)) return 'x-stead-reader signature does not verify'
  if (!node.canRead(space, key)) return `key ${toHex(key)} may not read space ${space}`
  return undefined
}

/** Every open session: the caps per key and per address, the shared inbound budget, and the timeouts. */
class Sessions {
  private readonly all = new Set<Session>()
  /** Open sessions by address: past maxConnections, the address holding the most gives way. */
  private readonly perAddress = new Shares<Session>()
  private readonly perKey = new Map<string, number>()
  readonly inbound: Bucket
  /** Bytes handed to sockets and not yet written out, over all sessions. */
  sending = 0
  /** Bytes received and not yet handled (throttled sessions' backlogs), over all sessions. */
  backlogged = 0
  /** Bytes of frames received and not finished yet (ws buffers them), over all sessions; past `unfinishedCap` the largest are cut. */
  unfinished = 0
  readonly unfinishedCap: number
  private readonly sweeper: NodeJS.Timeout

  readonly node: RelayNode
  readonly limits: ApiLimits
  readonly log: Logger
  readonly liar: ClientFacingLiar | undefined
  /** Where the clients of each space can be reached peer to peer, as they announced. */
  readonly directory: PeerDirectory<Session>
  readonly peerAddresses: (() => string[]) | undefined
  constructor(node: RelayNode, limits: ApiLimits, log: Logger, liar?: ClientFacingLiar, peerAddresses?: () => string[]) {
    this.node = node
    this.limits = limits
    this.log = log
    this.liar = liar
    this.peerAddresses = peerAddresses
    this.directory = new PeerDirectory<Session>(limits.peerAnnouncements, (to, space, addrs) => to.peersOf(space, addrs))
    this.inbound = new Bucket(limits.globalRateLimit)
    node.trackSessions(() => this.count)
    node.budget.track('send-buffers', () => this.sending)
    node.budget.track('receive-backlogs', () => this.backlogged)
    node.budget.track('unfinished-frames', () => this.unfinished)
    this.unfinishedCap = Math.floor(node.budget.totalBytes / 4)
    this.sweeper = setInterval(() => {
      const now = Date.now()
      for (const s of this.all) s.sweep(now)
    }, 1000)
    this.sweeper.unref()
  }

  get count(): { open: number; addresses: number; keys: number } {
    return { open: this.all.size, addresses: this.perAddress.holders, keys: this.perKey.size }
  }

  /** Unfinished frames past their cap: the sessions holding the most are cut until they fit (an honest frame finishes quickly). */
  shedUnfinished(): void {
    const holders = [...this.all].filter((s) => s.heldUnfinished > 0).sort((a, b) => b.heldUnfinished - a.heldUnfinished)
    for (const s of holders) {
      if (this.unfinished <= this.unfinishedCap) return
      s.cut(`${this.unfinished} bytes of unfinished frames are held for clients of this relay, more than ${this.unfinishedCap}; send whole frames`)
    }
  }

  open(socket: WebSocket, address: string, raw?: NetSocket): void {
    const refuse = (detail: string): void => {
      this.node.metrics.rejected.inc({ reason: 'too-many-sessions', source: 'client' })
      socket.send(encodeRelayMessage({ type: 'error', id: null, reason: 'too-many-sessions', detail }))
      socket.close(1013, 'too many sessions')
    }
    const fromAddress = this.perAddress.count(address)
    if (fromAddress >= this.limits.maxSessionsPerAddress) return refuse(`${fromAddress} sessions are open from ${address}, the most one address may hold`)
    if (this.all.size >= this.limits.maxConnections) {
      // Full: an address holding fewer sessions than the heaviest one takes the newest of that
      // one's, so a few addresses cannot hold every session and lock the others out.
      const heaviest = this.perAddress.heaviest()
      if (!heaviest || heaviest.count <= fromAddress + 1) return refuse('this relay has too many open sessions; try another relay or later')
      const newest = [...this.perAddress.itemsOf(heaviest.who)].pop() as Session
      this.node.metrics.rejected.inc({ reason: 'too-many-sessions', source: 'client' })
      newest.giveWay(`this relay is full and ${heaviest.who} holds the most sessions (${heaviest.count}): closed to make room for a client of another address`)
      // Gone now, not at its socket's close event: the next newcomer must not count it.
      this.all.delete(newest)
      this.perAddress.delete(heaviest.who, newest)
    }
    const session = new Session(this, socket, address)
    this.perAddress.add(address, session)
    this.all.add(session)
    // ws reads the socket first: after its listener, its buffer holds what this chunk left unfinished.
    raw?.on('data', () => session.trackUnfinished())
    socket.once('close', () => {
      this.all.delete(session)
      this.perAddress.delete(address, session)
      if (session.key) decrement(this.perKey, session.key)
    })
    session.start()
  }

  /** Counts a session under its proven key; false when the key already holds the most sessions allowed. */
  claimKey(keyHex: string): boolean {
    const n = this.perKey.get(keyHex) ?? 0
    if (n >= this.limits.maxSessionsPerKey) return false
    this.perKey.set(keyHex, n + 1)
    return true
  }

  close(): void {
    clearInterval(this.sweeper)
    for (const s of this.all) s.terminate()
  }
}

function decrement(map: Map<string, number>, key: string): void {
  const n = (map.get(key) ?? 1) - 1
  if (n <= 0) map.delete(key)
  else map.set(key, n)
}

/** A subscription: its feed of stored commits, and whether that feed had nothing more when last read. */
interface FeedEntry {
  readonly feed: CommitFeed
  readonly unsubscribe: () => void
  idle: boolean
  /** Whether commits may name envelopes this session sent early by id (the subscription's `refs`). */
  readonly refs: boolean
}

/** One client connection: authenticate, then subscribe and submit. */
class Session implements Subscriber {
  private readonly nonce = challengeNonce()
  /** The key proven at hello (hex), fixed for the session's life. */
  key: string | undefined
  private keyBytes: Uint8Array | undefined
  /** The libp2p peer id of the session's key (what its peer addresses must name), once it announced. */
  private peerId: string | undefined
  private readonly feeds = new Map<string, FeedEntry>()
  /**
   * Envelopes sent to this client early (prospective feed) on subscriptions
   * with `refs`, by the last bytes of their signature, oldest first: a
   * commit that carries one names it by id instead of sending it again.
   */
  private readonly sentEarly = new Map<string, { readonly idHex: string; readonly bytes: number }>()
  private sentEarlyBytes = 0
  /** Envelopes this session submitted that the audit has not decided yet. */
  /** This session's envelopes not decided yet, each with the function that stops watching it. */
  private readonly pending = new Map<string, () => void>()
  private readonly bucket: Bucket
  /**
   * Messages received over the rate, in order: the socket is paused (TCP
   * pushes back on the sender) and these are handled as the buckets refill.
   * Bounded by what the socket had already delivered when it was paused.
   */
  private readonly backlog: Array<{ data: Buffer; isBinary: boolean }> = []
  private backlogBytes = 0
  private drainTimer: NodeJS.Timeout | undefined
  private readonly log: Logger
  /** Bytes handed to the socket and not yet written out. */
  private inflight = 0
  /** When the client last took something we sent (or when we started waiting on it). */
  private lastDrain = Date.now()
  private lastHeard = Date.now()
  private readonly openedAt = Date.now()
  private pumping = false
  /** Set once the session is being closed: nothing more is queued, and overflow is not checked again. */
  private closing = false
  private retryTimer: NodeJS.Timeout | undefined
  private closed = false
  /** What this session's unfinished frame holds, as last counted in Sessions.unfinished. */
  heldUnfinished = 0
  private readonly node: RelayNode
  private readonly limits: ApiLimits

  private readonly sessions: Sessions
  private readonly socket: WebSocket
  private readonly address: string
  constructor(
    sessions: Sessions,
    socket: WebSocket,
    address: string,
  ) {
    this.sessions = sessions
    this.socket = socket
    this.address = address
    this.node = sessions.node
    this.limits = sessions.limits
    this.bucket = new Bucket(this.limits.rateLimit)
    this.log = sessions.log.child({ session: Buffer.from(this.nonce.subarray(0, 4)).toString('hex') })
  }

  start(): void {
    this.node.metrics.clients.inc()
    setFrameLimit(this.socket, Math.min(PRE_AUTH_FRAME_BYTES, this.limits.maxFrameBytes))
    this.socket.on('message', (data, isBinary) => this.receive(data as Buffer, isBinary))
    this.socket.on('close', () => this.onClose())
    // Logged once, at debug, by the websocket plugin's errorHandler (createApi).
    this.socket.on('error', () => undefined)
    this.send({ type: 'challenge', nonce: this.nonce, relay: this.node.me, relayKey: this.node.publicKey })
  }

  /** Called every second: auth and idle timeouts, and clients that stopped reading. */
  sweep(now: number): void {
    if (this.closed) return
    if (!this.key && now - this.openedAt > this.limits.authTimeoutMs) return this.end('unauthenticated', 'no answer to the challenge in time', 4003)
    if (now - this.lastHeard > this.limits.idleTimeoutMs) return this.end('closed', `nothing received for ${Math.round(this.limits.idleTimeoutMs / 1000)} s; ping to keep a session open`, 4000)
    if (this.inflight > 0 && now - this.lastDrain > this.limits.slowConsumerMs) {
      return this.end('slow-consumer', `read nothing of ${this.inflight} queued bytes for ${Math.round(this.limits.slowConsumerMs / 1000)} s; reconnect and resume from your stable index`, 4008)
    }
  }

  // ---- Subscriber ----

  envelope(space: string, frame: Uint8Array, idHex: string): void {
    const entry = this.feeds.get(space)
    // Attestations only: this client takes its frames from another relay.
    if (entry?.feed.frames === false) return
    // The prospective feed is an early view of what the commit feed delivers anyway: a
    // client that is behind skips it rather than grow its buffer.
    if (this.inflight >= LOW_WATER_BYTES || !this.node.budget.admits(frame.length)) {
      this.node.metrics.prospectiveSkipped.inc()
      return
    }
    this.send({ type: 'envelope', space, envelope: frame })
    if (!entry?.refs) return
    const key = earlyKey(frame)
    this.forgetEarly(key)
    this.sentEarly.set(key, { idHex, bytes: frame.length })
    this.sentEarlyBytes += frame.length
    for (const old of this.sentEarly.keys()) {
      if (this.sentEarly.size <= SENT_EARLY_MAX && this.sentEarlyBytes <= SENT_EARLY_BYTES) break
      this.forgetEarly(old)
    }
  }

  /** Forgets the envelope of `key` as sent early (if it was). */
  private forgetEarly(key: string): void {
    const sent = this.sentEarly.get(key)
    if (sent === undefined) return
    this.sentEarly.delete(key)
    this.sentEarlyBytes -= sent.bytes
  }

  /** A stored chunk of a commit's envelope frames as this client gets it: those it was sent early, named by id. */
  private refer(chunk: Uint8Array): Uint8Array {
    if (this.sentEarly.size === 0) return chunk
    const frames = decode(chunk, chunk.length) as Uint8Array[]
    let named = 0
    const out = frames.map((frame) => {
      const key = earlyKey(frame)
      const sent = this.sentEarly.get(key)
      if (!sent) return frame
      this.forgetEarly(key)
      const id = nodeCrypto.sha256(asSigned(decode(frame, frame.length)).bytes)
      // Another envelope whose signature ends alike (2^62 work to make one): it goes whole.
      if (toHex(id) !== sent.idHex) return frame
      named++
      return id
    })
    return named ? encode(out) : chunk
  }

  committed(space: string): void {
    const f = this.feeds.get(space)
    if (!f) return
    f.idle = false
    this.pump()
  }

  // ---- the commit feeds ----

  /**
   * Sends stored commits while the client keeps up: at most LOW_WATER_BYTES
   * plus one frame are queued towards it at any time, whatever the history.
   * The chunks of one commit go out in a row; spaces take turns otherwise.
   */
  private pump(): void {
    if (this.pumping || this.closed) return
    this.pumping = true
    try {
      while (this.inflight < LOW_WATER_BYTES) {
        const f = this.nextFeed()
        if (!f) return
        if (!this.node.budget.admits(2 * CHUNK_BYTES)) {
          // The relay is at its budget: try again shortly instead of growing.
          this.retryTimer ??= setTimeout(() => {
            this.retryTimer = undefined
            this.pump()
          }, 50)
          return
        }
        const frame = f.feed.next()
        if (!frame) {
          f.idle = true
          continue
        }
        // Round robin: the served space goes to the back unless its commit continues.
        if (!f.feed.midCommit) {
          this.feeds.delete(f.feed.space)
          this.feeds.set(f.feed.space, f)
        }
        this.sendFrame(frame)
      }
    } catch (err) {
      this.log.error({ err }, 'cannot read the commit feed from the store')
      this.end('malformed', 'this relay cannot read its store; try another relay', 1011)
    } finally {
      this.pumping = false
    }
  }

  private nextFeed(): FeedEntry | undefined {
    let first: FeedEntry | undefined
    for (const f of this.feeds.values()) {
      if (f.feed.midCommit) return f
      if (!f.idle) first ??= f
    }
    return first
  }

  // ---- inbound ----

  /**
   * Rate limits by messages and bytes, per session and for the relay as a
   * whole: over the rate, the session stops reading its socket and handles
   * what it already received as the buckets refill. Nothing is dropped
   * unless a client outruns even that (then `rate-limited`).
   */
  private receive(data: Buffer, isBinary: boolean): void {
    this.lastHeard = Date.now()
    this.trackUnfinished()
    if (this.closed) return
    // A client that does not read its replies is not read either: replies would pile up.
    if (this.backlog.length === 0 && this.inflight < LOW_WATER_BYTES && this.admit(data.byteLength) === 0) return this.onMessage(data, isBinary)
    if (this.backlogBytes + data.byteLength > MAX_BACKLOG_BYTES) {
      return this.fail(null, new SteadError('rate-limited', 'too many messages or bytes; slow down'))
    }
    this.backlog.push({ data, isBinary })
    this.backlogBytes += data.byteLength
    this.sessions.backlogged += data.byteLength
    this.socket.pause()
    this.drainTimer ??= setTimeout(() => this.drainBacklog(), 1)
  }

  /** 0 and the tokens taken when a message of `size` bytes may be handled now, else the ms to wait. */
  private admit(size: number): number {
    const wait = Math.max(this.bucket.wait(size), this.sessions.inbound.wait(size))
    if (wait > 0) return wait
    this.bucket.take(size)
    this.sessions.inbound.take(size)
    return 0
  }

  private drainBacklog(): void {
    this.drainTimer = undefined
    // A few at a time, so other sessions and HTTP requests get their turn in between.
    for (let n = 0; n < 32 && this.backlog.length > 0 && !this.closed; n++) {
      // Replies are not being read: wait for the socket to drain (its send callback resumes us).
      if (this.inflight >= LOW_WATER_BYTES) return
      const next = this.backlog[0] as { data: Buffer; isBinary: boolean }
      const wait = this.admit(next.data.byteLength)
      if (wait > 0) {
        this.drainTimer = setTimeout(() => this.drainBacklog(), wait)
        return
      }
      this.backlog.shift()
      this.backlogBytes -= next.data.byteLength
      this.sessions.backlogged -= next.data.byteLength
      this.onMessage(next.data, next.isBinary)
    }
    if (this.closed) return
    if (this.backlog.length > 0) this.drainTimer = setTimeout(() => this.drainBacklog(), 0)
    else this.socket.resume()
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    const size = data.byteLength
    let message: ClientMessage
    try {
      if (!isBinary) throw new SteadError('malformed', 'frames must be binary msgpack')
      if (size > this.limits.maxFrameBytes) throw new SteadError('too-large', `frame of ${size} bytes exceeds ${this.limits.maxFrameBytes}`)
      message = decodeClientMessage(new Uint8Array(data.buffer, data.byteOffset, size))
    } catch (err) {
      return this.fail(null, err)
    }
    if (!this.key && message.type !== 'hello') return this.fail(null, new SteadError('unauthenticated', 'answer the challenge with hello first'))
    switch (message.type) {
      case 'hello':
        return this.hello(message)
      case 'subscribe': {
        if (!this.node.canRead(message.space, this.keyBytes)) return this.fail(null, new SteadError('unauthorized', `key ${this.key} may not read space ${message.space}`))
        const had = this.feeds.get(message.space)
        if (!had && this.feeds.size >= this.limits.maxSubscriptions) return this.fail(null, new SteadError('too-large', `a session may subscribe to ${this.limits.maxSubscriptions} spaces`))
        had?.unsubscribe()
        this.feeds.delete(message.space)
        // Older than the commits kept here: the client starts again from a verified snapshot.
        const start = this.node.feedStart(message.space)
        if (start !== undefined && message.fromIndex < start) return this.send({ type: 'pruned', space: message.space, from: start })
        const refs = message.frames !== false && message.refs === true
        const { feed, unsubscribe } = this.node.subscribe(message.space, message.fromIndex, this, message.frames !== false, refs ? (chunk) => this.refer(chunk) : undefined)
        this.feeds.delete(message.space)
        this.feeds.set(message.space, { feed, unsubscribe, idle: false, refs })
        this.pump()
        return
      }
      case 'unsubscribe':
        // A commit half sent stays half sent: the client drops it with the subscription.
        this.feeds.get(message.space)?.unsubscribe()
        this.feeds.delete(message.space)
        this.sessions.directory.withdraw(message.space, this)
        return
      case 'announce': {
        // Only for a space it follows: what it may read, and a bound on what it can make the relay keep.
        if (!this.feeds.has(message.space)) return this.fail(null, new SteadError('malformed', `announce for space ${message.space}, which this session does not follow: subscribe first`))
        // Only its own addresses: other clients trust a peer id the relays name as one that may read the space.
        this.peerId ??= peerIdFromPublicKey(publicKeyFromRaw(this.keyBytes as Uint8Array)).toString()
        const foreign = message.addrs.find((a) => !a.endsWith(`/p2p/${this.peerId}`))
        if (foreign !== undefined) return this.fail(null, new SteadError('malformed', `announce ${foreign}: each address must end with /p2p/${this.peerId}, this session's key`))
        try {
          this.sessions.directory.announce(message.space, this, { key: this.key as string, address: this.address }, message.addrs)
        } catch (err) {
          this.fail(null, err)
        }
        return
      }
      case 'submit':
        try {
          if (this.pending.size >= this.limits.maxPendingPerClient) throw new SteadError('rate-limited', `${this.pending.size} envelopes of this session are still undecided; wait for commits`)
          let decided = false
          const { status, idHex, stopWatching } = this.node.submit(message.envelope, this.address, (id) => {
            decided = true
            this.pending.delete(id)
          })
          if (status === 'queued' && !decided && !this.pending.has(idHex)) this.pending.set(idHex, stopWatching)
          else stopWatching()
          this.send({ type: 'accepted', id: message.id, status })
        } catch (err) {
          this.fail(message.id, err)
        }
        return
      case 'ping':
        this.sessions.directory.renew(this)
        // With this relay's clock: clients measure their device clock's offset from it (register stamps).
        this.send({ type: 'pong', n: message.n, time: this.node.now() })
        return
    }
  }

  private hello(message: Extract<ClientMessage, { type: 'hello' }>): void {
    if (this.key) return this.fail(null, new SteadError('unauthorized', `this session is already authenticated as ${this.key}; open another session for another key`))
    if (!verifySync(message.publicKey, authBytes(this.nonce, this.node.publicKey), message.sig)) {
      return this.end('bad-signature', 'hello signature does not match the challenge', 4001)
    }
    const key = toHex(message.publicKey)
    if (!this.sessions.claimKey(key)) return this.end('too-many-sessions', `key ${key} already holds ${this.limits.maxSessionsPerKey} sessions on this relay`, 1013)
    this.key = key
    this.keyBytes = message.publicKey
    setFrameLimit(this.socket, this.limits.maxFrameBytes)
    const peers = this.sessions.peerAddresses?.().slice(0, MAX_PEER_ADDRS)
    const sig = message.nonce ? this.node.signWelcome(message.nonce, message.publicKey) : undefined
    this.send({ type: 'welcome', relay: this.node.me, n: this.node.committee.keys.length, f: this.node.committee.f, ...(peers?.length ? { peers } : {}), ...(sig ? { sig } : {}) })
  }

  /** Other clients of `space` can be reached at `addrs` (see PeerDirectory). */
  peersOf(space: string, addrs: string[]): void {
    this.send({ type: 'peers', space, addrs })
  }

  // ---- outbound ----

  private fail(id: number | null, err: unknown): void {
    const e = err instanceof SteadError ? err : new SteadError('malformed', (err as Error)?.message ?? String(err))
    this.node.metrics.rejected.inc({ reason: e.reason, source: 'client' })
    this.send({ type: 'error', id, reason: e.reason, detail: e.message })
  }

  /** Sends a typed error and closes the session; a client that does not read is cut off shortly after. */
  private end(reason: ErrorReason, detail: string, code: number): void {
    if (this.closed || this.closing) return
    // Closing first: the error below must not trip the overflow check that may have called us.
    this.closing = true
    this.fail(null, new SteadError(reason, detail))
    this.log.info({ reason, address: this.address, key: this.key }, 'closing client session')
    this.socket.close(code, reason)
    setTimeout(() => this.terminate(), 2000).unref()
    this.onClose()
  }

  terminate(): void {
    this.socket.terminate()
  }

  /** Counts what this session's unfinished frame holds; past the relays' cap, the largest holders are cut. */
  trackUnfinished(): void {
    if (this.closed) return
    const now = unfinishedBytes(this.socket)
    this.sessions.unfinished += now - this.heldUnfinished
    this.heldUnfinished = now
    if (this.sessions.unfinished > this.sessions.unfinishedCap) this.sessions.shedUnfinished()
  }

  /** Closes the session at once with `rate-limited`: its buffers go now, not after the close handshake. */
  cut(detail: string): void {
    this.end('rate-limited', detail, 1013)
    this.terminate()
  }

  /** Closes this session to make room for another address's (see Sessions.open). */
  giveWay(detail: string): void {
    this.end('too-many-sessions', detail, 1013)
  }

  private send(m: RelayMessage): void {
    if (this.closed || this.socket.readyState !== this.socket.OPEN) return
    this.sendFrame(encodeRelayMessage(m))
  }

  private sendFrame(bytes: Uint8Array): void {
    if (this.sessions.liar) this.sessions.liar.outgoing(bytes, (b) => this.write(b))
    else this.write(bytes)
  }

  private write(bytes: Uint8Array): void {
    if (this.closed || this.socket.readyState !== this.socket.OPEN) return
    const size = bytes.length
    if (this.inflight === 0) this.lastDrain = Date.now()
    this.inflight += size
    this.sessions.sending += size
    this.socket.send(bytes, () => {
      this.inflight -= size
      this.sessions.sending -= size
      this.lastDrain = Date.now()
      if (this.inflight >= LOW_WATER_BYTES) return
      this.pump()
      if (this.backlog.length > 0 && this.drainTimer === undefined) this.drainTimer = setTimeout(() => this.drainBacklog(), 0)
    })
    if (!this.closing && this.inflight > this.limits.maxBufferedBytes) {
      this.end('slow-consumer', `${this.inflight} bytes queued towards this client, more than ${this.limits.maxBufferedBytes}; reconnect and resume from your stable index`, 4008)
    }
  }

  private onClose(): void {
    if (this.closed) return
    this.closed = true
    this.node.metrics.clients.dec()
    for (const stopWatching of this.pending.values()) stopWatching()
    this.pending.clear()
    if (this.retryTimer) clearTimeout(this.retryTimer)
    if (this.drainTimer) clearTimeout(this.drainTimer)
    this.sessions.backlogged -= this.backlogBytes
    this.backlogBytes = 0
    this.sessions.unfinished -= this.heldUnfinished
    this.heldUnfinished = 0
    this.backlog.length = 0
    for (const [space, f] of this.feeds) {
      f.unsubscribe()
      this.sessions.directory.withdraw(space, this)
    }
    this.feeds.clear()
  }
}

/** What tells an envelope frame apart in Session.sentEarly: the end of its signature, which ends the frame. */
function earlyKey(frame: Uint8Array): string {
  return Buffer.from(frame.buffer, frame.byteOffset + frame.length - EARLY_KEY_BYTES, EARLY_KEY_BYTES).toString('latin1')
}
