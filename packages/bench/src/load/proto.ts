import {
  ReliableReplica,
  asSigned,
  authBytes,
  clockInit,
  compactOps,
  decode,
  decodeAttestation,
  CommitAssembler,
  decodeRelayMessage,
  encodeClientMessage,
  encodeEnvelope,
  fromHex,
  openEnvelopeSync,
  sealEnvelope,
  toHex,
  authorIdOf,
  type AnyOp,
  type Attestation,
  type ClientMessage,
  type Declaration,
  type Envelope,
  type ORSet,
  type RelayMessage,
  type SafeGroup,
} from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import WebSocket from 'ws'
import type { ClientFactoryOptions, LoadClient, Outcome, System } from './types.ts'

export const COUNTER: Declaration = { type: 'counter', bounds: { min: 0 } }
export const SET: Declaration = { type: 'set', bounds: {} }
const sha256 = (d: Uint8Array) => nodeCrypto.sha256(d)
const verifying = { sha256, verify: verifySync }

/** One authenticated session with a relay, over `ws`: hello answered, frames decoded (commits joined). */
export class Conn {
  readonly ws: WebSocket
  readonly relay: number
  readonly relayKey: Uint8Array
  private constructor(
    ws: WebSocket,
    relay: number,
    relayKey: Uint8Array,
  ) {
    this.ws = ws
    this.relay = relay
    this.relayKey = relayKey
  }

  static open(url: string, relay: number, relayKey: Uint8Array, identity: { secretKey: Uint8Array; publicKey: Uint8Array }, onMessage: (c: Conn, m: RelayMessage) => void): Promise<Conn> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url)
      ws.binaryType = 'nodebuffer'
      const conn = new Conn(ws, relay, relayKey)
      let ready = false
      const commits = new CommitAssembler()
      const timer = setTimeout(() => reject(new Error(`no welcome from ${url}`)), 15_000)
      ws.on('message', (data: Buffer) => {
        const m = decodeRelayMessage(new Uint8Array(data.buffer, data.byteOffset, data.byteLength))
        if (m.type === 'commit' || m.type === 'commit-more') {
          const whole = commits.push(m)
          if (whole) onMessage(conn, whole)
          return
        }
        if (ready) return onMessage(conn, m)
        if (m.type === 'challenge') {
          conn.send({ type: 'hello', publicKey: identity.publicKey, sig: signSync(identity.secretKey, authBytes(m.nonce, m.relayKey)) })
        } else if (m.type === 'welcome') {
          ready = true
          clearTimeout(timer)
          resolve(conn)
        } else if (m.type === 'error') {
          clearTimeout(timer)
          reject(new Error(`${url}: ${m.reason} ${m.detail}`))
        }
      })
      ws.on('error', (err) => {
        clearTimeout(timer)
        reject(err)
      })
    })
  }

  send(m: ClientMessage): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(encodeClientMessage(m))
  }
}


interface Inflight {
  readonly env: Envelope
  readonly ops: number
  readonly safe: Array<{ unit: number; resolve: (o: Outcome) => void }>
  readonly regular: Array<(o: Outcome) => void>
  readonly frame: Uint8Array
}

/**
 * A protocol-level client replica built on @stead/core: what the SDK does,
 * reduced to what the benchmark needs. It batches ops into signed envelopes
 * (counter ops summed per object, sets kept per op), applies them to its
 * own ReliableReplica, submits them to one relay, applies the certified
 * feed prospectively, replays commits once f+1 relays sent the same
 * signed attestation and resolves their updates once 2f+1 did, as the SDK
 * does.
 *
 * Per system: `reliable` resolves regular updates at once and safe ones at
 * the attested commit; `consensus-first` applies nothing prospectively and
 * resolves every update at the attested commit, reading stable values;
 * `plain` has no commits: everything resolves at once and an envelope is
 * carried when its relay streams it back.
 */
interface AttestationEntry {
  bytes?: Uint8Array
  frames?: readonly Uint8Array[]
  readonly relays: Set<number>
  readonly sigs: Map<number, Uint8Array>
  /** The commit's decisions once applied (f+1 attestations); its updates resolve at 2f+1. */
  applied?: Attestation['decisions']
  done: boolean
}

export class ProtoClient implements LoadClient {
  private readonly replica: ReliableReplica
  private conns: Conn[] = []
  private readonly identity: { secretKey: Uint8Array; publicKey: Uint8Array }
  private readonly authorId: string
  private seq = 0
  private lastId: Uint8Array | null = null
  private regular = new Map<string, { decl: Declaration; ops: AnyOp[] }>()
  private safe: Array<{ group: SafeGroup; resolve: (o: Outcome) => void }> = []
  private regularWaiters: Array<(o: Outcome) => void> = []
  private queuedOps = 0
  private timer: NodeJS.Timeout | null = null
  private flushing: Promise<void> = Promise.resolve()
  private readonly inflight = new Map<string, Inflight>()
  private readonly bySubmit = new Map<number, string>()
  private nextSubmit = 1
  private readonly known = new Map<string, Envelope>()
  /** round → the source's attestation, the relays whose signatures over it checked, and signatures that came before it. */
  private readonly attestations = new Map<number, AttestationEntry>()
  private readyWaiters: Array<() => void> = []
  private drainWaiters: Array<() => void> = []
  private carried = 0
  private readonly errorCounts: Record<string, number> = {}
  private readonly system: System

  private readonly o: ClientFactoryOptions
  private constructor(o: ClientFactoryOptions) {
    this.o = o
    this.system = o.system
    this.replica = new ReliableReplica({ space: o.space })
    const secretKey = sha256(new TextEncoder().encode(`stead-bench-client-${o.space}-${o.index}`))
    this.identity = { secretKey, publicKey: publicKeyOfSync(secretKey) }
    this.authorId = authorIdOf(nodeCrypto, this.identity.publicKey)
  }

  get index(): number {
    return this.o.index
  }

  static async connect(o: ClientFactoryOptions): Promise<ProtoClient> {
    const c = new ProtoClient(o)
    // Frames (envelopes and commit batches) from the first relay, attestations only from the
    // others; commits applied once f+1 relays attest the same bytes, resolved once 2f+1 do.
    const sources = o.system === 'plain' ? o.relays.slice(0, 1) : o.relays.slice(0, 2 * o.f + 1)
    c.conns = await Promise.all(sources.map((r) => Conn.open(r.url, r.index, fromHex(r.publicKey), c.identity, (conn, m) => c.onMessage(conn, m))))
    for (const conn of c.conns) conn.send({ type: 'subscribe', space: o.space, fromIndex: 0, frames: conn === c.conns[0] })
    return c
  }

  // ---- reads ----

  readCounter(key: string): number {
    const v = this.system === 'consensus-first' ? this.replica.stableValue(key) : this.replica.value(key)
    return typeof v === 'number' ? v : 0
  }

  readSet(key: string): readonly unknown[] {
    const v = this.system === 'consensus-first' ? this.replica.stableValue(key) : this.replica.value(key)
    return Array.isArray(v) ? v : []
  }

  readBounded(): number {
    throw new Error('the protocol-level driver has no Bounded Counter (escrow rights need the SDK): run bounded points with --driver sdk')
  }

  boundedAdd(): Promise<Outcome> {
    return Promise.reject(new Error('the protocol-level driver has no Bounded Counter: run bounded points with --driver sdk'))
  }

  // ---- updates ----

  counterAdd(key: string, amount: number, safe: boolean): Promise<Outcome> {
    return safe ? this.pushSafe({ atomic: false, updates: [{ key, decl: COUNTER, op: amount }] }) : this.pushRegular(key, COUNTER, amount)
  }

  setAdd(key: string, element: string, safe: boolean): Promise<Outcome> {
    return safe ? this.pushSafe({ atomic: false, updates: [{ key, decl: SET, op: ['a', element] }] }) : this.pushRegular(key, SET, ['a', element])
  }

  setRemove(key: string, element: string, safe: boolean): Promise<Outcome> {
    const crdt = (this.system === 'consensus-first' ? this.replica.stable(key) : this.replica.prospective(key)) as ORSet | undefined
    const tags = crdt?.tagsOf?.(element) ?? []
    if (tags.length === 0) return this.setAdd(key, element, safe)
    const op: AnyOp = ['r', element, tags]
    return safe ? this.pushSafe({ atomic: false, updates: [{ key, decl: SET, op }] }) : this.pushRegular(key, SET, op)
  }

  transfer(from: string, to: string, amount: number): Promise<Outcome> {
    return this.pushSafe({ atomic: true, updates: [{ key: from, decl: COUNTER, op: -amount }, { key: to, decl: COUNTER, op: amount }] })
  }

  private pushRegular(key: string, decl: Declaration, op: AnyOp): Promise<Outcome> {
    let entry = this.regular.get(key)
    if (!entry) this.regular.set(key, (entry = { decl, ops: [] }))
    entry.ops.push(op)
    const p = this.system === 'consensus-first' ? new Promise<Outcome>((r) => this.regularWaiters.push(r)) : Promise.resolve<Outcome>('ok')
    this.queued()
    return p
  }

  private pushSafe(group: SafeGroup): Promise<Outcome> {
    if (this.system === 'plain') {
      // No safe updates without an order: the plain baseline sends them like any other update.
      this.safe.push({ group, resolve: () => undefined })
      this.queued()
      return Promise.resolve('ok')
    }
    const p = new Promise<Outcome>((resolve) => this.safe.push({ group, resolve }))
    this.queued()
    return p
  }

  private queued(): void {
    this.queuedOps++
    if (this.queuedOps >= this.o.maxBatchOps) {
      if (this.timer) clearTimeout(this.timer)
      this.timer = null
      this.flush()
    } else if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = null
        this.flush()
      }, this.o.batchIntervalMs)
    }
  }

  private flush(): void {
    if (this.queuedOps === 0) return
    const regular = this.regular
    const safe = this.safe
    const regularWaiters = this.regularWaiters
    const ops = this.queuedOps
    this.regular = new Map()
    this.safe = []
    this.regularWaiters = []
    this.queuedOps = 0
    const updates = [...regular].map(([key, u]) => ({ key, decl: u.decl, ops: compactOps(u.decl, u.ops) })).filter((u) => u.ops.length > 0)
    if (updates.length === 0 && safe.length === 0) {
      for (const w of regularWaiters) w('ok')
      return
    }
    this.seq++
    // Each load client depends on its own previous envelope only, which its seq orders: its clock lists nobody.
    const draft = { space: this.o.space, seq: this.seq, clock: clockInit(), deps: this.lastId ? [this.lastId] : [], updates, safe: safe.map((s) => s.group) }
    this.flushing = this.flushing.then(async () => {
      const env = await sealEnvelope(nodeCrypto, this.identity, draft)
      this.lastId = env.id
      // Units: each regular op (after compaction), then each safe group (one unit each here).
      const regularUnits = updates.reduce((n, u) => n + u.ops.length, 0)
      const frame = encodeEnvelope(env)
      this.inflight.set(env.idHex, { env, ops, frame, regular: regularWaiters, safe: safe.map((s, i) => ({ unit: regularUnits + i, resolve: s.resolve })) })
      if (this.system !== 'consensus-first') this.replica.receive(env)
      this.submit(env.idHex, frame)
    })
  }

  private submit(idHex: string, frame: Uint8Array): void {
    const id = this.nextSubmit++
    this.bySubmit.set(id, idHex)
    this.conns[0]?.send({ type: 'submit', id, envelope: frame })
  }

  // ---- from the relays ----

  private onMessage(conn: Conn, m: RelayMessage): void {
    switch (m.type) {
      case 'accepted':
        this.bySubmit.delete(m.id)
        return
      case 'error': {
        this.errorCounts[m.reason] = (this.errorCounts[m.reason] ?? 0) + 1
        const idHex = m.id === null ? undefined : this.bySubmit.get(m.id)
        if (m.id !== null) this.bySubmit.delete(m.id)
        const f = idHex ? this.inflight.get(idHex) : undefined
        if (!f || !idHex) return
        if (m.reason === 'rate-limited') {
          setTimeout(() => this.submit(idHex, f.frame), 50)
          return
        }
        this.finish(idHex, f, 'rejected', [])
        return
      }
      case 'envelope':
        if (conn !== this.conns[0]) return
        return this.onEnvelope(m.envelope)
      case 'commit':
        if (this.system === 'plain') return
        return this.onCommit(conn, m.attestation, m.envelopes)
      case 'attest':
        if (this.system === 'plain') return
        return this.onAttest(conn, m.round, m.sig)
      default:
        return
    }
  }

  private onEnvelope(frame: Uint8Array): void {
    let signed
    try {
      signed = asSigned(decode(frame))
    } catch {
      this.errorCounts['bad-envelope'] = (this.errorCounts['bad-envelope'] ?? 0) + 1
      return
    }
    const idHex = toHex(sha256(signed.bytes))
    const own = this.inflight.get(idHex)
    if (own) {
      if (this.system === 'plain') this.finish(idHex, own, 'ok', [])
      return
    }
    if (this.system === 'consensus-first' || this.known.has(idHex)) return
    try {
      const env = openEnvelopeSync(verifying, signed)
      this.known.set(idHex, env)
      if (this.system === 'reliable') this.replica.receive(env)
    } catch {
      this.errorCounts['bad-envelope'] = (this.errorCounts['bad-envelope'] ?? 0) + 1
    }
  }

  /** The attestation of a round in full, from the frame source (the first relay). */
  private onCommit(conn: Conn, attestation: { bytes: Uint8Array; sig: Uint8Array }, frames: readonly Uint8Array[]): void {
    if (conn !== this.conns[0]) return
    const a = decodeAttestation(attestation.bytes)
    const entry = this.entryFor(a.round)
    if (entry.done || entry.bytes) return
    if (!verifySync(conn.relayKey, attestation.bytes, attestation.sig)) {
      this.errorCounts['bad-attestation'] = (this.errorCounts['bad-attestation'] ?? 0) + 1
      return
    }
    entry.bytes = attestation.bytes
    entry.frames = frames
    entry.relays.add(conn.relay)
    for (const [relay, sig] of entry.sigs) this.onAttest(this.conns.find((c) => c.relay === relay) as Conn, a.round, sig)
    this.tryApply(a.round, entry)
  }

  /** Another relay's signature over the round's attestation (it sends no frames): counted once the source's bytes are in. */
  private onAttest(conn: Conn, round: number, sig: Uint8Array): void {
    const entry = this.entryFor(round)
    if (entry.done || entry.relays.has(conn.relay)) return
    if (!entry.bytes) {
      entry.sigs.set(conn.relay, sig)
      return
    }
    if (!verifySync(conn.relayKey, entry.bytes, sig)) {
      this.errorCounts['bad-attestation'] = (this.errorCounts['bad-attestation'] ?? 0) + 1
      return
    }
    entry.relays.add(conn.relay)
    this.tryApply(round, entry)
  }

  private entryFor(round: number): AttestationEntry {
    let entry = this.attestations.get(round)
    if (!entry) {
      this.attestations.set(round, (entry = { relays: new Set(), sigs: new Map(), done: false }))
      if (this.attestations.size > 20_000) this.attestations.delete(this.attestations.keys().next().value as number)
    }
    return entry
  }

  private tryApply(round: number, entry: AttestationEntry): void {
    if (entry.done || !entry.bytes || !entry.frames) return
    if (!entry.applied && entry.relays.size >= this.o.f + 1) entry.applied = this.applyCommit(decodeAttestation(entry.bytes), entry.frames)
    if (!entry.applied || entry.relays.size < 2 * this.o.f + 1) return
    entry.done = true
    entry.sigs.clear()
    this.settle(entry.applied)
  }

  /** Applies a commit f+1 relays attested alike, and returns its decisions. */
  private applyCommit(a: Attestation, frames: readonly Uint8Array[]): Attestation['decisions'] {
    const envs: Envelope[] = []
    for (const frame of frames) {
      try {
        const signed = asSigned(decode(frame))
        const idHex = toHex(sha256(signed.bytes))
        const env = this.inflight.get(idHex)?.env ?? this.known.get(idHex) ?? openEnvelopeSync(verifying, signed)
        this.known.delete(idHex)
        envs.push(env)
      } catch {
        this.errorCounts['bad-envelope'] = (this.errorCounts['bad-envelope'] ?? 0) + 1
      }
    }
    this.replica.commit(envs, a.round)
    return a.decisions
  }

  /** Resolves the updates of a commit 2f+1 relays attested alike. */
  private settle(decisions: Attestation['decisions']): void {
    for (const d of decisions) {
      const idHex = toHex(d[0])
      const f = this.inflight.get(idHex)
      if (!f) continue
      if (d[1] === 'committed') this.finish(idHex, f, 'ok', d[3].map((r) => r[0]))
      else this.finish(idHex, f, 'rejected', [])
    }
  }

  private finish(idHex: string, f: Inflight, outcome: Outcome, rejectedUnits: readonly number[]): void {
    this.inflight.delete(idHex)
    this.carried += f.ops
    for (const w of f.regular) w(outcome)
    for (const s of f.safe) s.resolve(outcome === 'ok' && !rejectedUnits.includes(s.unit) ? 'ok' : 'rejected')
    if (this.inflight.size < this.o.maxBacklog) for (const w of this.readyWaiters.splice(0)) w()
    if (this.inflight.size === 0 && this.queuedOps === 0) for (const w of this.drainWaiters.splice(0)) w()
  }

  // ---- flow control ----

  backlog(): number {
    return this.inflight.size
  }

  ready(): Promise<void> {
    if (this.inflight.size < this.o.maxBacklog) return Promise.resolve()
    return new Promise((r) => this.readyWaiters.push(r))
  }

  carriedOps(): number {
    return this.carried
  }

  async drain(timeoutMs: number): Promise<boolean> {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    this.flush()
    await this.flushing
    if (this.inflight.size === 0) return true
    return new Promise((resolve) => {
      const t = setTimeout(() => resolve(false), timeoutMs)
      this.drainWaiters.push(() => {
        clearTimeout(t)
        resolve(true)
      })
    })
  }

  errors(): Record<string, number> {
    return { ...this.errorCounts }
  }

  async close(): Promise<void> {
    if (this.timer) clearTimeout(this.timer)
    for (const c of this.conns) c.ws.close()
    for (const w of this.readyWaiters.splice(0)) w()
  }
}
