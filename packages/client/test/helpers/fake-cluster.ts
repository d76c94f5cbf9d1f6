import {
  welcomeBytes,
  ENVELOPE_REF_BYTES,
  ChangeLog,
  ReliableReplica,
  SteadError,
  createCrdt,
  decodeDeclaration,
  encodeStateDelta,
  asSigned,
  attestedDecision,
  authorIdOf,
  authBytes,
  batchDigest,
  encodeAuditState,
  encodeObjectProof,
  toBase64Url,
  decode,
  decodeClientMessage,
  encodeAttestation,
  encodeRelayMessage,
  openEnvelopeSync,
  stableReadBytes,
  freshHeadBytes,
  fromHex,
  toHex,
  type Envelope,
  type RelayMessage,
  type Signed,
} from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import { memoryStorage } from '../../src/storage/memory.ts'
import { forgeObject, forgeSnapshot } from './forge.ts'
import type { SocketLike } from '../../src/transport.ts'
import type { ClientOptions } from '../../src/types.ts'

/**
 * An in-memory relay cluster speaking the real client protocol over fake
 * sockets. One shared audit stands in for consensus (every correct relay
 * would attest the same result); each relay signs with its own key, so the
 * client's quorum, chain and signature checks all run for real. Tests
 * decide when commits happen, who is offline, who censors, who lies.
 */
export class FakeCluster {
  readonly f: number
  readonly keys: Array<{ secretKey: Uint8Array; publicKey: Uint8Array }>
  readonly relays: FakeRelay[]
  private readonly audit: ReliableReplica
  /** What each commit changed, for catch-up deltas; every commit is hot enough to weigh (BENDY's top-k holds them all here). */
  private readonly changes = new ChangeLog({ hotObjects: 1024 })
  private queue: Array<{ frame: Uint8Array; env: Envelope }> = []
  private queued = new Set<string>()
  private round = 0
  private lastAttested = 0
  /** Every attestation made, per relay, in order (what a subscription replays). */
  readonly log: Array<{ round: number; fromIndex: number; frames: Uint8Array[]; bytes: Uint8Array }> = []
  private timer: ReturnType<typeof setInterval> | undefined
  /** Submitted frames, for tests that count them. */
  readonly submitted: string[] = []
  /** The last envelope a relay was given. */
  lastTaken: Envelope | undefined
  /** A policy every relay applies at submit, like a closed space's writers list: a reason refuses the envelope. */
  refuse: (env: Envelope) => 'unauthorized' | undefined = () => undefined

  readonly space: string
  constructor(
    space: string,
    n = 4,
  ) {
    this.space = space
    this.f = Math.floor((n - 1) / 3)
    this.keys = Array.from({ length: n }, () => {
      const secretKey = nodeCrypto.generateSecretKey()
      return { secretKey, publicKey: publicKeyOfSync(secretKey) }
    })
    this.relays = this.keys.map((k, i) => new FakeRelay(this, i, k))
    this.audit = new ReliableReplica({ space })
  }

  get urls(): string[] {
    return this.relays.map((_, i) => `ws://relay${i}.test:7400`)
  }

  /** createClient options for a fast client of this cluster: pinned, in memory, short timers. */
  clientOptions(): ClientOptions {
    return {
      relays: this.urls,
      cluster: this.descriptor,
      storage: memoryStorage(),
      connect: this.connect,
      fetch: this.fetch,
      crypto: nodeCrypto,
      batchIntervalMs: 1,
      resubmitAfterMs: 200,
      backoff: { initialMs: 5, maxMs: 50 },
    }
  }

  get descriptor(): { f: number; relays: Array<{ id: string; publicKey: string; api: string }> } {
    return { f: this.f, relays: this.keys.map((k, i) => ({ id: `r${i + 1}`, publicKey: toHex(k.publicKey), api: `relay${i}.test:7400` })) }
  }

  /** The SocketFactory to hand to createClient. */
  readonly connect = (url: string): SocketLike => {
    const i = Number(/relay(\d+)\.test/.exec(url)?.[1] ?? -1)
    const socket = new FakeSocket()
    const relay = this.relays[i]
    setTimeout(() => {
      // Closed by the client while connecting: a real server never sees that connection open.
      if (socket.readyState === 3) return
      if (!relay || !relay.online) return socket.fail()
      relay.accept(socket)
    }, 0)
    return socket
  }

  /** The fetch to hand to createClient: /v1/cluster and /v1/spaces/:space/head. */
  readonly fetch = async (url: string): Promise<{ ok: boolean; status: number; json(): Promise<unknown> }> => {
    const u = new URL(url)
    const i = Number(/relay(\d+)\.test/.exec(u.host)?.[1] ?? -1)
    const relay = this.relays[i]
    if (!relay || !relay.online) throw new TypeError('fetch failed')
    const body = relay.http(u.pathname, u.searchParams)
    return { ok: body !== undefined, status: body === undefined ? 404 : 200, json: async () => body }
  }

  /** Accepts a submitted envelope into the next commit, unless it is already queued or decided. */
  take(frame: Uint8Array): 'queued' | 'duplicate' {
    const env = openEnvelopeSync({ sha256: (b) => nodeCrypto.sha256(b), verify: verifySync }, decode(frame))
    if (env.space !== this.space) throw new SteadError('unauthorized', `unknown space ${env.space}`)
    const refused = this.refuse(env)
    if (refused) throw new SteadError(refused, `author ${env.authorId} may not write to ${this.space}`)
    this.submitted.push(env.idHex)
    this.lastTaken = env
    if (this.queued.has(env.idHex) || this.audit.decided(env)) return 'duplicate'
    this.queued.add(env.idHex)
    this.queue.push({ frame, env })
    for (const r of this.relays) r.broadcastEnvelope(frame)
    return 'queued'
  }

  get queuedCount(): number {
    return this.queue.length
  }

  /** Orders everything queued (optionally just the envelopes `pick` keeps), audits it and has every relay attest it. */
  commit(pick: (env: Envelope) => boolean = () => true): void {
    const batch = this.queue.filter((q) => pick(q.env))
    this.queue = this.queue.filter((q) => !pick(q.env))
    for (const q of batch) this.queued.delete(q.env.idHex)
    this.round += 2
    const fromIndex = this.audit.stableIndex
    const result = this.audit.commit(
      batch.map((q) => q.env),
      this.round,
    )
    this.changes.record(fromIndex, result)
    const decisions = result.decisions.filter((d) => d.kind !== 'superseded').map((d) => attestedDecision(d as Exclude<typeof d, { kind: 'superseded' }>))
    if (decisions.length === 0 && batch.length === 0) return
    const attestation = {
      space: this.space,
      round: this.round,
      prevRound: this.lastAttested,
      fromIndex,
      toIndex: result.stableIndex,
      decisions,
      stateHash: this.audit.stableHash((b) => nodeCrypto.sha256(b)),
      batch: batchDigest((b) => nodeCrypto.sha256(b), batch.map((q) => q.env.id)),
    }
    this.lastAttested = this.round
    const bytes = encodeAttestation(attestation)
    const entry = { round: this.round, fromIndex, frames: batch.map((q) => q.frame), bytes }
    this.log.push(entry)
    for (const r of this.relays) r.publish(entry)
  }

  /** Commits every `ms` until stopped. */
  autoCommit(ms = 20): () => void {
    this.timer = setInterval(() => this.commit(), ms)
    return () => clearInterval(this.timer)
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer)
    for (const r of this.relays) r.disconnectAll()
  }

  stableValue(key: string): unknown {
    return this.audit.stableValue(key)
  }

  /** Has every online relay (or those of `relays`) name `addr` to its sessions as a client of the space (as if that client had announced it). */
  namePeer(addr: string, relays: readonly number[] = this.relays.map((_, i) => i)): void {
    for (const i of relays) {
      const r = this.relays[i]
      if (r?.online) for (const s of r.sessions) s.send({ type: 'peers', space: this.space, addrs: [addr] })
    }
  }

  /** The audit state after the latest attested commit, and that commit's attestation bytes (undefined before the first). */
  latestSnapshot(): { bytes: Uint8Array; fromIndex: number; round: number; state: ReturnType<ReliableReplica['auditState']> } | undefined {
    const last = this.log[this.log.length - 1]
    return last && { bytes: last.bytes, fromIndex: last.fromIndex, round: last.round, state: this.audit.auditState() }
  }

  /** The stable index subscriptions may start from: older commits were pruned (see pruneBelow). */
  feedStart = 0

  /** Forgets the commits that start below stable index `index`, as relays past their retention window do. */
  pruneBelow(index: number): void {
    this.feedStart = index
    this.log.splice(0, this.log.length, ...this.log.filter((e) => e.fromIndex >= index))
  }

  /** Snapshot and attestation requests the relays answered, in order (path and relay). */
  readonly snapshotRequests: Array<{ relay: number; path: string }> = []

  /** What changed from stable index `from` to the latest attested commit (see ChangeLog.delta), and that commit's attestation bytes. */
  delta(from: number, mode?: 'ops' | 'state' | 'adaptive'): { bytes: Uint8Array; delta: NonNullable<ReturnType<ChangeLog['delta']>> } | undefined {
    const last = this.log[this.log.length - 1]
    const delta = last && this.changes.delta(this.audit, from, mode)
    return last && delta && { bytes: last.bytes, delta }
  }

  /** `key`'s state with its proof against the latest attested commit (see latestSnapshot), and that commit's attestation bytes. */
  objectProof(key: string): { bytes: Uint8Array; proof: ReturnType<ReliableReplica['objectProof']> } | undefined {
    const last = this.log[this.log.length - 1]
    return last && { bytes: last.bytes, proof: this.audit.objectProof((b) => nodeCrypto.sha256(b), key) }
  }

  stableHead(): { index: number; hash: Uint8Array } {
    return { index: this.audit.stableIndex, hash: this.audit.stableHash((b) => nodeCrypto.sha256(b)) }
  }
}

export type Misbehaviour = 'none' | 'impostor' | 'lie' | 'silent' | 'censor' | 'forge-frames' | 'pad-frames' | 'name-unsent' | 'replay-head' | 'inflate-head' | 'forge-snapshot' | 'mismatched-snapshot' | 'wrong-object' | 'wrong-delta' | 'rechallenge'

export class FakeRelay {
  online = true
  /**
   * 'lie' attests a wrong state hash; 'silent' sends no commits; 'censor' accepts submits and drops them;
   * 'forge-frames' sends no batch beside true attestations; 'pad-frames' sends the batch twice over;
   * 'name-unsent' sends no envelopes early and names every envelope of a commit by id;
   * 'replay-head' answers every head request with the first head it signed (for another request's nonce);
   * 'inflate-head' answers head requests with an index 5 past the true one, proven by its own signature only;
   * 'forge-snapshot' serves a state with one counter raised, under an attestation of that state it signs itself;
   * 'mismatched-snapshot' serves that state under the true attestation;
   * 'wrong-object' serves an object's state with one counter unit more, its bucket entry changed to match;
   * 'rechallenge' challenges again after its welcome, as the next relay (whose public key it names).
   */
  misbehaviour: Misbehaviour = 'none'
  readonly sessions = new Set<FakeSession>()
  private firstHead: unknown
  /** Envelope frames sent to clients (alone, or inside commits). */
  framesSent = 0
  /** Full attestations (commits) and compact ones (signatures alone) sent to clients. */
  commitsSent = 0
  attestsSent = 0

  private readonly cluster: FakeCluster
  readonly index: number
  readonly key: { secretKey: Uint8Array; publicKey: Uint8Array }
  constructor(
    cluster: FakeCluster,
    index: number,
    key: { secretKey: Uint8Array; publicKey: Uint8Array },
  ) {
    this.cluster = cluster
    this.index = index
    this.key = key
  }

  accept(socket: FakeSocket): void {
    const session = new FakeSession(this, this.cluster, socket, this.key)
    this.sessions.add(session)
    socket.connect(session)
  }

  http(path: string, query: URLSearchParams): unknown {
    if (path === '/v1/cluster') return this.cluster.descriptor
    const snapshot = /^\/v1\/spaces\/([^/]+)\/(snapshot|attestations\/(\d+))$/.exec(path)
    if (snapshot) {
      this.cluster.snapshotRequests.push({ relay: this.index, path })
      return snapshot[2] === 'snapshot' ? this.snapshot() : this.attestationAt(Number(query.get('from')), Number(snapshot[3]))
    }
    const object = /^\/v1\/spaces\/([^/]+)\/objects\/([^/]+)$/.exec(path)
    if (object) {
      this.cluster.snapshotRequests.push({ relay: this.index, path })
      return this.objectProof(decodeURIComponent(object[2] as string))
    }
    if (/^\/v1\/spaces\/([^/]+)\/delta$/.test(path)) {
      this.cluster.snapshotRequests.push({ relay: this.index, path })
      return this.delta(Number(query.get('from')), (query.get('mode') ?? undefined) as 'ops' | 'state' | 'adaptive' | undefined)
    }
    const m = /^\/v1\/spaces\/([^/]+)\/head$/.exec(path)
    if (!m) return undefined
    const { hash } = this.cluster.stableHead()
    const index = this.cluster.stableHead().index + (this.misbehaviour === 'inflate-head' ? 5 : 0)
    const space = decodeURIComponent(m[1] as string)
    const nonce = query.get('nonce')
    const bytes = nonce ? freshHeadBytes(space, index, hash, fromHex(nonce)) : stableReadBytes(space, index, hash)
    // Every relay has applied the cluster's head here, so each signs it (an inflated one only its liar).
    const signers = this.misbehaviour === 'inflate-head' ? [this.key] : this.cluster.keys
    const proof = signers.map((k) => [this.cluster.keys.indexOf(k), toHex(signSync(k.secretKey, stableReadBytes(space, index, hash)))])
    const head = { space, relay: this.index, index, stateHash: toHex(hash), sig: toHex(signSync(this.key.secretKey, bytes)), proof }
    this.firstHead ??= head
    return this.misbehaviour === 'replay-head' ? this.firstHead : head
  }

  private snapshot(): unknown {
    const latest = this.cluster.latestSnapshot()
    if (!latest) return undefined
    let { bytes, state } = latest
    if (this.misbehaviour === 'forge-snapshot' || this.misbehaviour === 'mismatched-snapshot') {
      ;({ attestation: bytes, state } = forgeSnapshot(bytes, state, this.misbehaviour === 'forge-snapshot' ? 'forge' : 'mismatch'))
    }
    const signed = this.signAttestation(bytes)
    return { space: this.cluster.space, relay: this.index, attestation: toBase64Url(signed.bytes), sig: toHex(signed.sig), state: toBase64Url(encodeAuditState(state)) }
  }

  private objectProof(key: string): unknown {
    const found = this.cluster.objectProof(key)
    if (!found) return undefined
    let proof = found.proof
    if (this.misbehaviour === 'wrong-object' && proof.object) proof = forgeObject(proof)
    const signed = this.signAttestation(found.bytes)
    return { space: this.cluster.space, relay: this.index, attestation: toBase64Url(signed.bytes), sig: toHex(signed.sig), proof: toBase64Url(encodeObjectProof(proof)) }
  }

  private delta(from: number, mode: 'ops' | 'state' | 'adaptive' | undefined): unknown {
    const found = this.cluster.delta(from, mode)
    if (!found) return undefined
    let { delta } = found
    if (this.misbehaviour === 'wrong-delta') {
      // Well formed, but every state reset and every op list one short: it leads to another state hash.
      delta = { ...delta, objects: delta.objects.map((o) => (o.mode === 'state' ? { ...o, snapshot: createCrdt(decodeDeclaration(o.decl)).snapshot() } : { ...o, ops: o.ops.slice(0, -1) })) }
    }
    const signed = this.signAttestation(found.bytes)
    return { space: this.cluster.space, relay: this.index, attestation: toBase64Url(signed.bytes), sig: toHex(signed.sig), delta: toBase64Url(encodeStateDelta(delta)) }
  }

  private attestationAt(fromIndex: number, round: number): unknown {
    const entry = this.cluster.log.find((e) => e.round === round && e.fromIndex === fromIndex)
    if (!entry) return undefined
    const signed = this.signAttestation(entry.bytes)
    return { space: this.cluster.space, relay: this.index, attestation: toBase64Url(signed.bytes), sig: toHex(signed.sig) }
  }

  /** Where each session's client said it can be reached (peer discovery), passed on as a relay does. */
  readonly announced = new Map<FakeSession, readonly string[]>()

  announce(session: FakeSession, space: string, addrs: readonly string[]): void {
    if (!this.online) return
    this.announced.set(session, addrs)
    const others = [...this.announced].filter(([s]) => s !== session && this.sessions.has(s))
    for (const [s] of others) s.send({ type: 'peers', space, addrs: [...addrs] })
    if (others.length) session.send({ type: 'peers', space, addrs: others.flatMap(([, a]) => a) })
  }

  publish(entry: FakeCluster['log'][number]): void {
    if (!this.online) return
    for (const s of this.sessions) s.sendCommit(entry)
  }

  broadcastEnvelope(frame: Uint8Array): void {
    if (!this.online) return
    for (const s of this.sessions) if (s.subscribed && s.frames) s.sendEarly(frame)
  }

  /** Takes the relay down: sessions close, new connections fail, commits are missed (and replayed on resubscribe). */
  setOnline(online: boolean): void {
    this.online = online
    if (!online) this.disconnectAll()
  }

  disconnectAll(): void {
    for (const s of [...this.sessions]) s.close()
  }

  signAttestation(bytes: Uint8Array): Signed {
    return { bytes, sig: signSync(this.key.secretKey, bytes) }
  }
}

class FakeSession {
  subscribed = false
  /** The author id of the client that proved its key here. */
  authorId: string | undefined
  /** Whether the client asked for envelope frames here (else attestations only), as a real relay honours it. */
  frames = true
  /** Whether commits may name envelopes sent early by id (the subscription's refs), and the ids of those sent and not named yet. */
  refs = false
  private readonly sentEarly = new Set<string>()
  private authenticated = false
  private readonly nonce = nodeCrypto.generateSecretKey()

  private readonly relay: FakeRelay
  private readonly cluster: FakeCluster
  private readonly socket: FakeSocket
  private readonly key: { publicKey: Uint8Array }
  constructor(
    relay: FakeRelay,
    cluster: FakeCluster,
    socket: FakeSocket,
    key: { publicKey: Uint8Array },
  ) {
    this.relay = relay
    this.cluster = cluster
    this.socket = socket
    this.key = key
  }

  opened(): void {
    this.send({ type: 'challenge', nonce: this.nonce, relay: this.relay.index, relayKey: this.key.publicKey })
  }

  receive(frame: Uint8Array): void {
    const m = decodeClientMessage(frame)
    if (m.type === 'hello') {
      if (!verifySync(m.publicKey, authBytes(this.nonce, this.key.publicKey), m.sig)) return this.close()
      this.authenticated = true
      this.authorId = authorIdOf({ sha256: (b) => nodeCrypto.sha256(b) }, m.publicKey)
      // An impostor names the relay's key but signs with another.
      const signer = this.relay.misbehaviour === 'impostor' ? nodeCrypto.generateSecretKey() : this.relay.key.secretKey
      const sig = m.nonce ? signSync(signer, welcomeBytes(m.nonce, m.publicKey, this.relay.index)) : undefined
      this.send({ type: 'welcome', relay: this.relay.index, n: this.cluster.relays.length, f: this.cluster.f, ...(sig ? { sig } : {}) })
      if (this.relay.misbehaviour === 'rechallenge') {
        const other = (this.relay.index + 1) % this.cluster.relays.length
        this.send({ type: 'challenge', nonce: this.nonce, relay: other, relayKey: (this.cluster.keys[other] as { publicKey: Uint8Array }).publicKey })
      }
      return
    }
    if (!this.authenticated) return
    if (m.type === 'subscribe') {
      if (m.fromIndex < this.cluster.feedStart) return this.send({ type: 'pruned', space: m.space, from: this.cluster.feedStart })
      this.subscribed = true
      this.frames = m.frames !== false
      this.refs = m.refs === true
      for (const entry of this.cluster.log) if (entry.fromIndex >= m.fromIndex) this.sendCommit(entry)
      return
    }
    if (m.type === 'ping') return this.send({ type: 'pong', n: m.n })
    if (m.type === 'announce') return this.relay.announce(this, m.space, m.addrs)
    if (m.type === 'submit') {
      if (this.relay.misbehaviour === 'censor') return this.send({ type: 'accepted', id: m.id, status: 'queued' })
      try {
        this.send({ type: 'accepted', id: m.id, status: this.cluster.take(m.envelope) })
      } catch (err) {
        const e = err instanceof SteadError ? err : new SteadError('malformed', String(err))
        this.send({ type: 'error', id: m.id, reason: e.reason, detail: e.message })
      }
    }
  }

  sendCommit(entry: FakeCluster['log'][number]): void {
    if (!this.subscribed || this.relay.misbehaviour === 'silent') return
    let bytes = entry.bytes
    let frames = entry.frames
    if (this.relay.misbehaviour === 'lie') {
      // Same commit, different claimed state: the signature is valid, the content is not.
      const v = decode(bytes) as unknown[]
      v[7] = new Uint8Array(32).fill(7)
      bytes = encodeAttestationRaw(v)
    }
    // Without frames, a compact attestation, as a real relay sends it.
    if (!this.frames) return this.send({ type: 'attest', space: this.cluster.space, round: entry.round, sig: this.relay.signAttestation(bytes).sig })
    if (this.relay.misbehaviour === 'forge-frames') frames = []
    if (this.relay.misbehaviour === 'pad-frames' && frames.length) frames = [...frames, ...frames]
    if (this.refs) frames = frames.map((f) => (this.sentEarly.delete(idOf(f)) || this.relay.misbehaviour === 'name-unsent' ? fromHex(idOf(f)) : f))
    this.send({ type: 'commit', space: this.cluster.space, attestation: this.relay.signAttestation(bytes), envelopes: frames })
  }

  /** An envelope as it arrives (the prospective feed), remembered when commits may name it. */
  sendEarly(frame: Uint8Array): void {
    if (this.relay.misbehaviour === 'name-unsent') return
    this.send({ type: 'envelope', space: this.cluster.space, envelope: frame })
    if (this.refs) this.sentEarly.add(idOf(frame))
  }

  send(m: RelayMessage): void {
    if (m.type === 'envelope') this.relay.framesSent++
    if (m.type === 'commit') this.relay.framesSent += m.envelopes.filter((e) => e.length !== ENVELOPE_REF_BYTES).length
    if (m.type === 'commit') this.relay.commitsSent++
    if (m.type === 'attest') this.relay.attestsSent++
    this.socket.deliver(encodeRelayMessage(m))
  }

  close(): void {
    this.relay.sessions.delete(this)
    this.socket.closeFromServer()
  }
}

function encodeAttestationRaw(v: unknown[]): Uint8Array {
  // Re-encode the tampered array with the codec the real attestation uses.
  return encodeAttestation({
    space: v[1] as string,
    round: v[2] as number,
    prevRound: v[3] as number,
    fromIndex: v[4] as number,
    toIndex: v[5] as number,
    decisions: v[6] as never,
    stateHash: v[7] as Uint8Array,
    batch: v[8] as Uint8Array,
  })
}

/** A WebSocket stand-in: messages are delivered on later ticks, like a real network. */
export class FakeSocket implements SocketLike {
  binaryType = 'arraybuffer'
  readyState = 0
  onopen: ((ev: unknown) => void) | null = null
  onmessage: ((ev: { data: unknown }) => void) | null = null
  onclose: ((ev: unknown) => void) | null = null
  onerror: ((ev: unknown) => void) | null = null
  private session: FakeSession | undefined

  connect(session: FakeSession): void {
    this.session = session
    this.readyState = 1
    this.onopen?.({})
    session.opened()
  }

  send(data: Uint8Array): void {
    if (this.readyState !== 1) throw new Error('socket not open')
    const copy = new Uint8Array(data)
    setTimeout(() => {
      if (this.readyState === 1) this.session?.receive(copy)
    }, 0)
  }

  deliver(frame: Uint8Array): void {
    setTimeout(() => {
      if (this.readyState === 1) this.onmessage?.({ data: frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.byteLength) })
    }, 0)
  }

  close(): void {
    if (this.readyState === 3) return
    this.readyState = 3
    this.session?.close()
  }

  closeFromServer(): void {
    if (this.readyState === 3) return
    this.readyState = 3
    setTimeout(() => this.onclose?.({}), 0)
  }

  fail(): void {
    this.readyState = 3
    this.onerror?.({})
    this.onclose?.({})
  }
}

function idOf(frame: Uint8Array): string {
  return toHex(nodeCrypto.sha256(asSigned(decode(frame)).bytes))
}
