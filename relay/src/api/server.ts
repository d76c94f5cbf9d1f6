import websocket from '@fastify/websocket'
import {
  DEFAULT_LIMITS as PROTOCOL_LIMITS,
  fromHex,
  HEAD_NONCE_BYTES,
  readAuthBytes,
  toBase64Url,
  epochChainToJson,
  toHex,
} from '@stead/core'
import { verifySync } from '@stead/core/node'
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { Bucket, type Rate } from '../runtime/bucket.ts'
import type { ClientFacingLiar } from '../faults/client-lies.ts'
import { readiness } from '../runtime/health.ts'
import { guardConnections, type ConnectionLimits } from './connections.ts'
import { DEFAULT_PEER_DIRECTORY_LIMITS, type PeerDirectoryLimits } from './peer-directory.ts'
import { DEFAULT_PRESENCE_LIMITS, type PresenceLimits } from './presence.ts'
import type { RelayNode } from '../runtime/node.ts'
import { ClientSessions, LOW_WATER_BYTES } from './sessions.ts'
import { wsSessionSocket } from './ws-socket.ts'
import { readerOf, type Reader } from '../runtime/space-access.ts'
import { addressKey } from './address.ts'
import { DEFAULT_READ_LIMITS, Reads, jsonWithBytes, type ReadLimits } from './reads.ts'
import { CHUNK_BYTES } from '../store/store.ts'

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
  /** Presence: what one session may publish and is sent, and what a space and the relay keep (see PresenceRoom). */
  readonly presence: PresenceLimits
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
  presence: DEFAULT_PRESENCE_LIMITS,
  ...DEFAULT_READ_LIMITS,
}

export interface ApiOptions extends Partial<ApiLimits> {
  readonly host: string
  readonly port: number
  readonly logger: Logger
  readonly tls?: { readonly key: string | Buffer; readonly cert: string | Buffer }
  /** Lies told to clients on purpose (`--byzantine`), for tests and demos: see faults/client-lies.ts. */
  readonly liar?: ClientFacingLiar
  /** Where this relay helps clients sync peer to peer (client-peers.ts): offered in `welcome`. */
  readonly peerAddresses?: () => string[]
}

/** How far a reader's signed HTTP request time may be from the relay's clock. */
const READ_AUTH_SKEW_MS = 5 * 60_000

/**
 * The client-facing API of a relay, HTTP and WebSocket on one port:
 * GET /health, /ready, /metrics (Prometheus), /v1/status, /v1/cluster, /v1/spaces,
 * /v1/spaces/:space/{head,stable}, and the /v1/ws session protocol (see
 * @stead/core protocol.ts).
 */
export async function createApi(node: RelayNode, options: ApiOptions): Promise<FastifyInstance> {
  const { app } = await buildApi(node, options)
  await app.listen({ host: options.host, port: options.port })
  return app
}

/**
 * The API of createApi, not listening: its HTTP routes answer `app.inject`
 * and `sessions` takes client sockets of any kind (the simulator's). The
 * caller listens or closes.
 */
export async function buildApi(node: RelayNode, options: Omit<ApiOptions, 'host' | 'port'>): Promise<{ app: FastifyInstance; sessions: ClientSessions }> {
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
  const sessions = new ClientSessions(node, limits, options.logger, options.liar, options.peerAddresses)
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
  // The chain of epoch certificates from the cluster file's committee to this relay's (issue 49):
  // a client that pinned an earlier committee checks each one (followEpochs) before it trusts the next.
  app.get<{ Querystring: { from?: string } }>('/v1/epochs', async (req, reply) => {
    const from = req.query.from === undefined ? 0 : Number(req.query.from)
    if (!Number.isSafeInteger(from) || from < 0) return reply.code(400).send({ error: 'malformed', detail: 'from must be a non-negative whole number: the epoch the client is in' })
    return epochChainToJson(node.epochCertificates(), from)
  })
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
    return node.metrics.text()
  })
  app.get('/v1/status', async () => {
    const { rss, heapUsed, arrayBuffers } = process.memoryUsage()
    return { ...node.status(), process: { rss, heapUsed, arrayBuffers } }
  })
  app.get<{ Querystring: { after?: string; limit?: string } }>('/v1/spaces', async (req, reply) => {
    const limit = pageLimit(req.query.limit)
    if (limit === undefined) return reply.code(400).send({ error: 'malformed', detail: PAGE_LIMIT_RULE })
    const spaces = node.reads.listSpaces(req.query.after ?? '', limit)
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
    if (!nonce) return { space: req.params.space, ...node.reads.stableHead(req.params.space) }
    return reads.serve(req, reply, addressOf(req), 'wait', 0, async () => {
      const head = await node.reads.provenHead(req.params.space, nonce, HEAD_PROOF_WAIT_MS)
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
      const page = node.reads.historyPage(req.params.space, req.params.key, before, limit, limits.historyPageBytes)
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
      const snap = node.reads.bootstrapSnapshot(req.params.space)
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
      const found = node.reads.objectProof(req.params.space, req.params.key)
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
      const found = node.reads.stateDelta(req.params.space, from, mode)
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
      const signed = await node.reads.attestationAt(req.params.space, from, round, ATTESTATION_WAIT_MS)
      if (!signed) return { status: 404, body: { error: 'not-found', detail: `no attested commit of ${req.params.space} at round ${round} from index ${from} here` } }
      return { body: { space: req.params.space, relay: node.me, attestation: toBase64Url(signed.bytes), sig: toHex(signed.sig) } }
    }, told(req))
  })
  // What this relay holds to prove one update's clock (Chrono): the envelope, the clock votes gathered
  // here (a certificate once ceil((N+f+1)/2) relays' votes are put together, before any order), and its
  // attestation of the commit that decided it. A client unions several relays' answers; it trusts none.
  app.get<{ Params: { space: string; id: string } }>('/v1/spaces/:space/clock/:id', async (req, reply) => {
    const denied = readDenied(node, req, req.params.space)
    if (denied) return reply.code(403).send({ error: 'unauthorized', detail: denied })
    const idHex = req.params.id.toLowerCase()
    if (!/^[0-9a-f]{64}$/.test(idHex)) return reply.code(400).send({ error: 'malformed', detail: 'an update id is 32 bytes as hex (64 characters)' })
    return reads.serve(req, reply, addressOf(req), 'heavy', 0, () => {
      const found = node.clockEvidence(req.params.space, idHex)
      if (!found) return { status: 404, body: { error: 'not-found', detail: `relay ${node.name} holds no update ${idHex} of ${req.params.space}: not seen yet, or decided in a commit it no longer keeps` } }
      return {
        body: {
          space: req.params.space,
          relay: node.me,
          id: idHex,
          envelope: found.frame ? toBase64Url(found.frame) : null,
          votes: found.votes.map(([relay, weight, sig]) => [relay, weight, toHex(sig)]),
          attestation: found.attestation ? toBase64Url(found.attestation.bytes) : null,
          sig: found.attestation ? toHex(found.attestation.sig) : null,
        },
      }
    }, told(req))
  })
  app.get<{ Params: { space: string } }>('/v1/spaces/:space/stable', async (req, reply) => {
    const denied = readDenied(node, req, req.params.space)
    if (denied) return reply.code(403).send({ error: 'unauthorized', detail: denied })
    return reads.serve(req, reply, addressOf(req), 'heavy', 0, () => {
      // Keyed by the signed head: every reader of one stable state gets the same bytes, serialized once.
      const head = node.reads.stableHead(req.params.space)
      return shared(`stable/${req.params.space}/${head.index}/${head.stateHash}`, 200, () => ({ space: req.params.space, relay: node.me, ...node.reads.stableSnapshot(req.params.space) }))
    }, told(req))
  })
  app.get('/v1/ws', { websocket: true }, (socket, req) => sessions.open(wsSessionSocket(socket, req.socket), addressKey(req.socket.remoteAddress)))
  // Raw connections, before any request: capped per address and in all, and a silent one is closed soon.
  const connections = guardConnections(app.server, limits, () => node.metrics.rejected.inc({ reason: 'rate-limited', source: 'http' }))
  // A close waits for every connection to end: an answer a client reads slowly or never, an upgrade nobody
  // took. They get CLOSE_GRACE_MS, then are cut: no client can hold a relay that stops, or moves to its next
  // epoch, in its old one.
  let cutting: NodeJS.Timeout | undefined
  app.addHook('preClose', async () => {
    cutting = setTimeout(() => connections.destroyAll(), CLOSE_GRACE_MS)
    cutting.unref()
  })
  app.addHook('onClose', async () => {
    clearTimeout(cutting)
    sessions.close()
  })
  return { app, sessions }
}

/** An HTTP connection with no traffic either way for this long is closed (see createApi). */
const HTTP_IDLE_MS = 80_000

/** How long a closing API lets its connections finish before it cuts them. */
export const CLOSE_GRACE_MS = 2000

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
 * header: `<public key hex>.<time ms>.<signature hex>` over readAuthBytes,
 * and a device adds `.<its certificate: user key hex, signature hex>`.
 */
function readDenied(node: RelayNode, req: FastifyRequest, space: string): string | undefined {
  if (node.reads.canRead(space, undefined)) return undefined
  const header = req.headers['x-stead-reader']
  if (typeof header !== 'string') return `space ${space} has readers: sign the request (x-stead-reader header)`
  const [keyHex, time, sigHex, certHex, ...rest] = header.split('.')
  const t = Number(time)
  const key = hexBytes(keyHex, 32)
  const sig = hexBytes(sigHex, 64)
  const cert = certHex === undefined ? undefined : hexBytes(certHex, 96)
  if (!key || !sig || !Number.isSafeInteger(t) || cert === null || rest.length) return 'x-stead-reader must be <public key hex>.<time ms>.<signature hex>[.<device certificate hex>]'
  if (Math.abs(node.clock.now() - t) > READ_AUTH_SKEW_MS) return 'x-stead-reader is too old or from the future: check the clock'
  if (!verifySync(key, readAuthBytes(space, t), sig)) return 'x-stead-reader signature does not verify'
  let reader: Reader
  try {
    reader = readerOf(key, cert && { user: cert.subarray(0, 32), sig: cert.subarray(32) })
  } catch (err) {
    return (err as Error).message
  }
  if (!node.reads.canRead(space, reader)) return `key ${toHex(key)} may not read space ${space}`
  return undefined
}

