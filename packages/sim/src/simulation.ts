import {
  ReliableReplica,
  SteadError,
  asSigned,
  decode,
  encodeEnvelope,
  openEnvelopeSync,
  toHex,
  type Envelope,
} from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import {
  ByzantineBehaviour,
  SYNC_BATCH,
  ConsensusCore,
  type ByzantineStrategy as Strategy,
  decodeMessage,
  encodeMessage,
  type ArchiveQuery,
  type Block,
  type Certificate,
  type Committee,
  type Message,
  type Output,
  type PayloadInfo,
  type RecoveredState,
  type SyncCrypto,
  type TimerName,
} from '@stead/relay/consensus'
import { EventQueue } from './queue.ts'
import { Rng } from './rng.ts'
import { SPACE, type Workload } from './workload.ts'

export { BYZANTINE_STRATEGIES as STRATEGIES, type ByzantineStrategy as Strategy } from '@stead/relay/consensus'

export interface SimOptions {
  readonly seed: number
  readonly relays: number
  /** Byzantine relays (the last ones), at most f. */
  readonly byzantine: number
  readonly strategy: Strategy
  /** Correct relays that crash once and restart from their store. */
  readonly crash: number
  /** Events to process. */
  readonly steps: number
  /** Whether a partition isolates some relays for a while, then heals. */
  readonly partition: boolean
  /** Probability a message is lost once and retransmitted. */
  readonly loss: number
  /** Weakens the protocol (certificates from 2f votes) to prove the checks catch it. */
  readonly weakQuorum?: boolean
  /** Share signature verdicts between simulated relays (default); off for benchmarks. */
  readonly memoizeVerification?: boolean
  /**
   * Keep the simulated store (default). Off for benchmarks: the store is on
   * disk in a real relay, so it does not belong in a heap measurement; a run
   * without it cannot restart relays.
   */
  readonly persist?: boolean
  /** Stop once every correct relay reached this round. */
  readonly untilRound?: number
  /** Called each time relay 0 enters a new round (benchmarks sample memory here). */
  readonly onRound?: (round: number) => void
}

export interface SimResult {
  readonly seed: number
  readonly ok: boolean
  readonly violation?: { readonly step: number; readonly message: string }
  readonly steps: number
  readonly simulatedMs: number
  readonly rounds: readonly number[]
  readonly anchors: readonly number[]
  readonly committedEnvelopes: number
  readonly honestEnvelopes: number
  readonly rejectedMessages: number
  readonly rejectedReasons: Readonly<Record<string, number>>
  readonly maxCertificatesInMemory: number
  readonly signatures: { readonly signs: number; readonly verifies: number }
}

class Violation extends Error {}

const GC_DEPTH = 20

/**
 * SIM_TRACE=1 prints faults, commits, audits, rejections and, on a violation,
 * each relay's last rounds and the diverging stable states; SIM_TRACE_ROUND=r
 * also prints every block and vote of round r. Tracing never changes a run.
 */
const TRACE = Boolean(process.env.SIM_TRACE)
const TRACE_ROUND = Number(process.env.SIM_TRACE_ROUND ?? -1)
const trace: (line: string) => void = TRACE ? (line) => console.log(`  ${line}`) : () => {}

type Event =
  | { kind: 'deliver'; from: number; to: number; bytes: Uint8Array }
  | { kind: 'timer'; node: number; epoch: number; name: TimerName; round: number }
  | { kind: 'submit'; client: number; index: number; attempt: number }
  | { kind: 'twin'; index: number }

interface Disk {
  votes: Array<{ author: number; round: number; digestHex: string }>
  ownBlocks: Block[]
  certs: Certificate[]
  commits: Array<{ anchorRound: number; ordered: readonly string[]; payloadIds: readonly string[] }>
  /** Payload of each commit, for rebuilding the replica after a restart. */
  batches: Array<{ anchorRound: number; frames: Uint8Array[] }>
}

interface Host {
  readonly id: number
  readonly strategy: Strategy | null
  up: boolean
  epoch: number
  core: ConsensusCore
  replica: ReliableReplica
  readonly disk: Disk
  readonly timers: Set<string>
  /** Envelope ids in the order consensus committed them. */
  committedIds: string[]
  anchors: number
  /** Stable index → audit decisions digest, to compare across relays. */
  readonly auditLog: string[]
  readonly byzantine: ByzantineBehaviour | null
}

/**
 * Verification memo shared by the simulated relays: the verdict is a pure
 * function of (key, message, signature), and without it four relays
 * re-verifying the same certificates dominate the run time.
 */
function simCrypto(memoize: boolean, counts: { signs: number; verifies: number }): SyncCrypto {
  const memo = new Map<string, boolean>()
  return {
    sign(secretKey, message) {
      counts.signs++
      return signSync(secretKey, message)
    },
    sha256: (d) => nodeCrypto.sha256(d),
    verify(pk, msg, sig) {
      counts.verifies++
      if (!memoize) return verifySync(pk, msg, sig)
      if (pk.length !== 32 || sig.length !== 64) return false
      const key = toHex(pk) + toHex(sig) + toHex(nodeCrypto.sha256(msg))
      let v = memo.get(key)
      if (v === undefined) {
        v = verifySync(pk, msg, sig)
        if (memo.size > 200_000) memo.clear()
        memo.set(key, v)
      }
      return v
    },
  }
}

export function runSimulation(options: SimOptions, workload: Workload): SimResult {
  return new Simulation(options, workload).run()
}

class Simulation {
  private readonly rng: Rng
  private readonly net: Rng
  private readonly cryptoCounts = { signs: 0, verifies: 0 }
  private readonly crypto: SyncCrypto
  private readonly queue = new EventQueue<Event>()
  private readonly committee: Committee
  private readonly secrets: Uint8Array[]
  private readonly hosts: Host[] = []
  private readonly f: number
  private now = 0
  private step = 0
  private rejected = 0
  private readonly rejectedReasons = new Map<string, number>()
  private maxCerts = 0

  /** Envelope verdicts by id: the same for every relay. */
  private readonly envelopes = new Map<string, Envelope | SteadError>()
  /** Global views the invariant checks compare against. */
  private readonly canonicalOrder: string[] = []
  /** round → author → digest of the certificate correct relays accepted. */
  private readonly certOwners = new Map<number, Map<number, string>>()
  private readonly auditCanon: string[] = []
  private readonly stableHashes = new Map<number, string>()
  /** Step at which a correct relay first saw each envelope certified. */
  private readonly firstSeen = new Map<string, number>()
  private readonly snapshots = new Map<number, string>()
  private partitioned: Set<number> | null = null
  private committedByAny = new Set<string>()
  private readonly honestIds: string[]
  private readonly twinIds: Array<[string, string]>

  private readonly options: SimOptions
  private readonly workload: Workload
  constructor(
    options: SimOptions,
    workload: Workload,
  ) {
    this.options = options
    this.workload = workload
    this.rng = new Rng(options.seed)
    this.crypto = simCrypto(options.memoizeVerification ?? true, this.cryptoCounts)
    this.net = this.rng.fork()
    this.f = Math.floor((options.relays - 1) / 3)
    if (options.byzantine > this.f) throw new Error(`${options.byzantine} Byzantine relays exceed f = ${this.f} for N = ${options.relays}`)
    this.secrets = Array.from({ length: options.relays }, (_, i) => nodeCrypto.sha256(new TextEncoder().encode(`sim-relay-${i}`)))
    const keys = this.secrets.map((s) => publicKeyOfSync(s))
    this.committee = options.weakQuorum ? { f: this.f, keys, certificateQuorum: 2 * this.f } : { f: this.f, keys }
    this.honestIds = workload.honest.flat().map((e) => e.idHex)
    this.twinIds = workload.twins.map(([a, b]) => [a.idHex, b.idHex])
    for (let i = 0; i < options.relays; i++) {
      const strategy = i >= options.relays - options.byzantine ? options.strategy : null
      const disk: Disk = { votes: [], ownBlocks: [], certs: [], commits: [], batches: [] }
      this.hosts.push({
        id: i,
        strategy,
        up: true,
        epoch: 0,
        core: this.newCore(i),
        replica: new ReliableReplica({ space: SPACE }),
        disk,
        timers: new Set(),
        committedIds: [],
        anchors: 0,
        auditLog: [],
        byzantine: strategy
          ? new ByzantineBehaviour(strategy, {
              me: i,
              committee: this.committee,
              secretKey: this.secrets[i] as Uint8Array,
              crypto: this.crypto,
              samplePayload: () => (workload.honest[0]?.[0] ? encodeEnvelope(workload.honest[0][0]) : undefined),
              conflictingPayload: (round) => {
                const pair = workload.twins[round % Math.max(1, workload.twins.length)]
                return pair ? encodeEnvelope(pair[round % 2] as Envelope) : undefined
              },
            })
          : null,
      })
    }
  }

  run(): SimResult {
    const { steps } = this.options
    for (const h of this.hosts) this.handle(h, h.core.start())
    this.scheduleClients()
    const chaos = this.planChaos()
    let progressMark: number[] | null = null
    let violation: SimResult['violation']
    try {
      let lastRound = 0
      for (this.step = 0; this.step < steps; this.step++) {
        const round = (this.hosts[0] as Host).core.currentRound
        if (round !== lastRound) {
          lastRound = round
          this.options.onRound?.(round)
          if (this.options.untilRound !== undefined && this.hosts.every((h) => h.strategy || h.core.currentRound >= (this.options.untilRound as number))) break
        }
        chaos(this.step)
        if (this.step === Math.floor(steps * 0.7)) progressMark = this.hosts.map((h) => h.anchors)
        const ev = this.queue.pop()
        if (!ev) break
        this.now = ev.at
        this.dispatch(ev.item)
      }
      this.finalChecks(progressMark)
    } catch (err) {
      if (!(err instanceof Violation)) throw err
      violation = { step: this.step, message: err.message }
      for (const h of this.hosts) trace(`${h.up ? '' : '(down) '}${h.strategy ?? ''} ${h.core.describe()}`)
    }
    const correct = this.hosts.filter((h) => !h.strategy)
    return {
      seed: this.options.seed,
      ok: violation === undefined,
      ...(violation ? { violation } : {}),
      steps: this.step,
      simulatedMs: Math.round(this.now),
      rounds: this.hosts.map((h) => h.core.currentRound),
      anchors: this.hosts.map((h) => h.anchors),
      committedEnvelopes: Math.min(...correct.map((h) => h.replica.stableIndex)),
      honestEnvelopes: this.honestIds.length,
      rejectedMessages: this.rejected,
      rejectedReasons: Object.fromEntries([...this.rejectedReasons].sort()),
      maxCertificatesInMemory: this.maxCerts,
      signatures: { ...this.cryptoCounts },
    }
  }

  // ---- set-up ----

  private newCore(id: number, recovered?: RecoveredState): ConsensusCore {
    return new ConsensusCore(
      {
        committee: this.committee,
        me: id,
        secretKey: this.secrets[id] as Uint8Array,
        crypto: this.crypto,
        inspect: (frame) => this.inspect(frame),
        leaderTimeoutMs: 400,
        idleBlockDelayMs: 50,
        resendIntervalMs: 500,
        gcDepth: GC_DEPTH,
        maxRoundsAhead: 50,
      },
      recovered,
    )
  }

  /** Crashes, restarts and partitions happen at fixed fractions of the run, chosen by the seed. */
  private planChaos(): (step: number) => void {
    const { steps, crash, partition, relays, byzantine } = this.options
    const plan = new Map<number, () => void>()
    const correct = Array.from({ length: relays - byzantine }, (_, i) => i)
    // At most f relays are faulty at once: crashes are staggered when Byzantine relays already use the budget.
    const budget = Math.max(1, this.f - byzantine)
    for (let i = 0; i < crash; i++) {
      const victim = correct[(this.rng.int(0, correct.length - 1) + i) % correct.length] as number
      const slot = Math.floor(i / budget)
      const span = 0.4 / Math.ceil(crash / budget)
      const down = Math.floor(steps * (0.1 + slot * span + this.rng.next() * span * 0.3))
      const up = Math.floor(steps * (0.1 + slot * span + span * 0.8))
      plan.set(down, () => this.crash(victim))
      plan.set(up, () => this.restart(victim))
    }
    if (partition) {
      const size = this.rng.int(1, Math.max(1, Math.floor(relays / 2)))
      const group = new Set<number>()
      while (group.size < size) group.add(this.rng.int(0, relays - 1))
      plan.set(Math.floor(steps * 0.2), () => {
        trace(`t=${this.now.toFixed(0)} partition ${[...group].join(',')}`)
        this.partitioned = group
      })
      plan.set(Math.floor(steps * 0.45), () => {
        trace(`t=${this.now.toFixed(0)} heal`)
        this.heal()
      })
    }
    return (step) => plan.get(step)?.()
  }

  private scheduleClients(): void {
    let t = 0
    const total = this.workload.honest.reduce((n, l) => n + l.length, 0)
    // Spread submissions over the first part of the run; each client keeps its order.
    const gap = 40
    const next = this.workload.honest.map(() => 0)
    for (let k = 0; k < total; k++) {
      let c = this.rng.int(0, next.length - 1)
      while ((next[c] as number) >= (this.workload.honest[c] as Envelope[]).length) c = (c + 1) % next.length
      t += this.rng.exp(gap)
      this.queue.push(t, { kind: 'submit', client: c, index: next[c] as number, attempt: 0 })
      next[c] = (next[c] as number) + 1
    }
    this.workload.twins.forEach((_, i) => this.queue.push(this.rng.exp(gap) * (i + 1) * 3, { kind: 'twin', index: i }))
  }

  // ---- events ----

  private dispatch(ev: Event): void {
    switch (ev.kind) {
      case 'deliver': {
        const host = this.hosts[ev.to] as Host
        if (!host.up) return
        let message: Message
        try {
          message = decodeMessage(this.crypto, this.committee, ev.bytes)
        } catch (err) {
          if (!(err instanceof SteadError)) throw err
          this.rejected++
          return
        }
        if (message.kind === 'block' || message.kind === 'vote') {
          const round = message.kind === 'block' ? message.block.header.round : message.round
          if (round === TRACE_ROUND) {
            trace(`t=${this.now.toFixed(0)} ${ev.from}->${ev.to} ${message.kind} ${message.kind === 'block' ? `of ${message.block.header.author} ${message.block.digestHex.slice(0, 6)}` : `for ${message.author} by ${message.voter}`}`)
          }
        }
        for (const extra of host.byzantine?.incoming(message) ?? []) {
          // Sent as is: the behaviour already made these what it wants them to be.
          const targets = extra.to === 'all' ? this.hosts.map((h) => h.id).filter((id) => id !== host.id) : [extra.to]
          for (const to of targets) this.transmit(host.id, to, extra.message)
        }
        this.handle(host, host.core.onMessage(ev.from, message))
        return
      }
      case 'timer': {
        const host = this.hosts[ev.node] as Host
        if (!host.up || host.epoch !== ev.epoch) return
        host.timers.delete(`${ev.name}:${ev.round}`)
        this.handle(host, host.core.onTimer(ev.name, ev.round))
        return
      }
      case 'submit':
        this.submit(ev.client, ev.index, ev.attempt)
        return
      case 'twin': {
        // The Byzantine client sends each twin to a different relay.
        const [a, b] = this.workload.twins[ev.index] as [Envelope, Envelope]
        this.deliverEnvelope(this.rng.int(0, this.options.relays - 1), a)
        this.deliverEnvelope(this.rng.int(0, this.options.relays - 1), b)
        return
      }
    }
  }

  private submit(client: number, index: number, attempt: number): void {
    const env = (this.workload.honest[client] as Envelope[])[index] as Envelope
    if (this.committedByAll(env.idHex)) return
    // A correct client resubmits to another relay until it sees its update committed (G7).
    const relay = (client + index + attempt) % this.options.relays
    this.deliverEnvelope(relay, env)
    this.queue.push(this.now + 1500 + this.rng.exp(500), { kind: 'submit', client, index, attempt: attempt + 1 })
  }

  private deliverEnvelope(relay: number, env: Envelope): void {
    const host = this.hosts[relay] as Host
    if (!host.up) return
    const frame = encodeEnvelope(env)
    const info = this.inspect(frame)
    if (info instanceof SteadError) return
    try {
      this.handle(host, host.core.submit(frame, info).outputs)
    } catch (err) {
      if (!(err instanceof SteadError)) throw err
    }
  }

  private committedByAll(idHex: string): boolean {
    return this.hosts.every((h) => h.strategy || !h.up || h.replica.isPending(idHex) === false) && this.committedByAny.has(idHex)
  }

  // ---- a relay's outputs ----

  private handle(host: Host, outputs: Output[]): void {
    for (const o of outputs) {
      switch (o.type) {
        case 'persist':
          this.persist(host, o.record)
          break
        case 'send':
          this.send(host, o.to, o.message)
          break
        case 'broadcast':
          for (let to = 0; to < this.options.relays; to++) if (to !== host.id) this.send(host, to, o.message)
          break
        case 'timer': {
          const key = `${o.name}:${o.round}`
          if (host.timers.has(key)) break
          host.timers.add(key)
          this.queue.push(this.now + o.afterMs, { kind: 'timer', node: host.id, epoch: host.epoch, name: o.name, round: o.round })
          break
        }
        case 'certified':
          this.onCertified(host, o.cert)
          break
        case 'commit':
          trace(`commit relay ${host.id} anchor ${o.commit.anchorRound} ids ${o.commit.payloadIds.map((i) => i.slice(0, 6)).join(',')}`)
          this.onCommit(host, o.commit.anchorRound, o.commit.payload, o.commit.payloadIds)
          break
        case 'archive-request':
          this.serveArchive(host, o.to, o.query)
          break
        case 'rejected':
          this.rejected++
          this.rejectedReasons.set(o.reason, (this.rejectedReasons.get(o.reason) ?? 0) + 1)
          trace(`relay ${host.id} rejected from ${o.from}: ${o.reason} ${o.detail}`)
          break
      }
    }
    const mem = host.core.memory.certificates
    if (mem > this.maxCerts) this.maxCerts = mem
  }

  /** The simulated disk is durable the moment a record is written. */
  private persist(host: Host, record: Extract<Output, { type: 'persist' }>['record']): void {
    if (this.options.persist === false) return
    switch (record.kind) {
      case 'vote':
        host.disk.votes.push({ author: record.author, round: record.round, digestHex: record.digestHex })
        break
      case 'own-block':
        host.disk.ownBlocks.push(record.block)
        break
      case 'cert':
        host.disk.certs.push(record.cert)
        break
      case 'commit':
        host.disk.commits.push({ anchorRound: record.anchorRound, ordered: record.ordered, payloadIds: record.payloadIds })
        break
    }
  }

  private send(host: Host, to: number, message: Message): void {
    for (const m of host.byzantine ? host.byzantine.outgoing(to, message) : [message]) this.transmit(host.id, to, m)
  }

  private transmit(from: number, to: number, message: Message): void {
    // A partition breaks connections: what crosses it is lost, and the
    // protocol's resends and catch-up have to repair the gap after it heals.
    if (this.partitioned && this.partitioned.has(from) !== this.partitioned.has(to)) return
    this.queue.push(this.now + this.delay(), { kind: 'deliver', from, to, bytes: encodeMessage(message) })
  }

  private delay(): number {
    let d = 1 + this.net.exp(8)
    // A lost message is retransmitted by the link after a timeout, perhaps more than once.
    while (this.net.chance(this.options.loss)) d += 100 + this.net.exp(50)
    return d
  }

  private heal(): void {
    this.partitioned = null
  }

  private onCertified(host: Host, cert: Certificate): void {
    const { round, author } = cert.block.header
    if (!host.strategy) {
      let owners = this.certOwners.get(round)
      if (!owners) this.certOwners.set(round, (owners = new Map()))
      const owner = owners.get(author)
      if (owner !== undefined && owner !== cert.block.digestHex) throw new Violation(`two certificates for relay ${author} round ${round}`)
      owners.set(author, cert.block.digestHex)
      this.pruneCertOwners()
    }
    // Certified payload reaches the prospective state at once (G1).
    for (const frame of cert.block.header.payload) {
      const env = this.envelopeOf(frame)
      if (!env) continue
      host.replica.receive(env)
      if (!this.firstSeen.has(env.idHex)) this.firstSeen.set(env.idHex, this.step)
    }
  }

  /**
   * Rounds every correct relay has garbage-collected can never get another
   * certificate accepted, so their entries can go: the checker's memory stays
   * bounded on long soaks.
   */
  private pruneCertOwners(): void {
    if (this.certOwners.size < 512) return
    const horizon = Math.min(...this.hosts.filter((h) => !h.strategy).map((h) => h.core.committedRound)) - 2 * GC_DEPTH
    for (const round of this.certOwners.keys()) if (round < horizon) this.certOwners.delete(round)
  }

  private onCommit(host: Host, anchorRound: number, payload: readonly Uint8Array[], ids: readonly string[]): void {
    host.anchors++
    if (this.options.persist !== false) host.disk.batches.push({ anchorRound, frames: [...payload] })
    const batch: Envelope[] = []
    for (const frame of payload) {
      const env = this.envelopeOf(frame)
      if (!env) throw new Violation(`relay ${host.id} committed an invalid envelope`)
      batch.push(env)
    }
    this.audit(host, batch, anchorRound)
    if (host.strategy) return
    for (const id of ids) {
      const i = host.committedIds.length
      host.committedIds.push(id)
      if (i < this.canonicalOrder.length) {
        if (this.canonicalOrder[i] !== id) throw new Violation(`relay ${host.id} committed ${id.slice(0, 8)} at position ${i}, others ${this.canonicalOrder[i]?.slice(0, 8)}`)
      } else this.canonicalOrder.push(id)
    }
  }

  private audit(host: Host, batch: Envelope[], anchorRound: number): void {
    const result = host.replica.commit(batch, anchorRound)
    trace(`audit relay ${host.id} batch ${batch.map((e) => e.authorId.slice(0, 4) + ':' + e.seq).join(',')} -> index ${host.replica.stableIndex} ${result.decisions.map((d) => d.kind + ':' + d.env.authorId.slice(0, 4) + ':' + d.env.seq).join(',')}`)
    if (host.strategy) return
    for (const d of result.decisions) {
      if (d.kind === 'superseded') continue
      const line = d.kind === 'committed' ? `${d.index}:${d.env.idHex}:${JSON.stringify(d.units)}` : `drop:${d.env.idHex}:${d.reason}`
      const i = host.auditLog.length
      host.auditLog.push(line)
      if (i < this.auditCanon.length) {
        if (this.auditCanon[i] !== line) throw new Violation(`relay ${host.id} audit decision ${i} differs: ${line.slice(0, 60)} vs ${this.auditCanon[i]?.slice(0, 60)}`)
      } else this.auditCanon.push(line)
      if (d.kind === 'committed') this.committedByAny.add(d.env.idHex)
    }
    for (const key of host.replica.keys()) {
      if (host.replica.stable(key)?.invariantsHold() === false) throw new Violation(`relay ${host.id}: stable ${key} breaks its invariant`)
    }
    const hash = toHex(host.replica.stableHash((b) => nodeCrypto.sha256(b)))
    const seen = this.stableHashes.get(host.replica.stableIndex)
    if (seen !== undefined && seen !== hash) {
      trace(`mine:   ${JSON.stringify(host.replica.stableSnapshot())}\nearlier: ${this.snapshots.get(host.replica.stableIndex)}`)
      throw new Violation(`relay ${host.id}: stable state at index ${host.replica.stableIndex} differs from another relay's`)
    }
    if (TRACE) this.snapshots.set(host.replica.stableIndex, JSON.stringify(host.replica.stableSnapshot()))
    this.stableHashes.set(host.replica.stableIndex, hash)
  }

  private serveArchive(host: Host, to: number, query: ArchiveQuery): void {
    const wanted = 'digests' in query ? new Set(query.digests) : null
    const certs = host.disk.certs
      .filter((c) => (wanted ? wanted.has(c.block.digestHex) : c.block.header.round >= (query as { fromRound: number }).fromRound && c.block.header.round <= (query as { toRound: number }).toRound))
      .sort((a, b) => a.block.header.round - b.block.header.round)
      .slice(0, SYNC_BATCH)
    if (certs.length) this.send(host, to, { kind: 'certs', certs })
  }


  // ---- crashes ----

  private crash(id: number): void {
    const host = this.hosts[id] as Host
    trace(`t=${this.now.toFixed(0)} crash ${id}`)
    host.up = false
    host.epoch++
    host.timers.clear()
  }

  private restart(id: number): void {
    const host = this.hosts[id] as Host
    trace(`t=${this.now.toFixed(0)} restart ${id}`)
    const recovered: RecoveredState = { votes: host.disk.votes, ownBlocks: host.disk.ownBlocks, certs: host.disk.certs, commits: host.disk.commits }
    host.core = this.newCore(id, recovered)
    // The stable state is rebuilt from the committed batches on disk.
    host.replica = new ReliableReplica({ space: SPACE })
    for (const b of host.disk.batches) host.replica.commit(b.frames.map((f) => this.envelopeOf(f) as Envelope), b.anchorRound)
    host.up = true
    this.handle(host, host.core.start())
  }

  // ---- envelopes ----

  private inspect(frame: Uint8Array): PayloadInfo | SteadError {
    const env = this.open(frame)
    if (env instanceof SteadError) return env
    return { idHex: env.idHex, slot: `${env.space}/${env.authorId}:${env.seq}` }
  }

  private envelopeOf(frame: Uint8Array): Envelope | undefined {
    const env = this.open(frame)
    return env instanceof SteadError ? undefined : env
  }

  private open(frame: Uint8Array): Envelope | SteadError {
    let signed
    try {
      signed = asSigned(decode(frame))
    } catch (err) {
      if (err instanceof SteadError) return err
      throw err
    }
    const id = toHex(nodeCrypto.sha256(signed.bytes)) + toHex(signed.sig)
    let v = this.envelopes.get(id)
    if (v === undefined) {
      try {
        v = openEnvelopeSync({ sha256: (d) => nodeCrypto.sha256(d), verify: verifySync }, signed)
        if (v.space !== SPACE) v = new SteadError('unauthorized', `envelope for space ${v.space}`)
      } catch (err) {
        if (!(err instanceof SteadError)) throw err
        v = err
      }
      this.envelopes.set(id, v)
    }
    return v
  }

  // ---- end of run ----

  private finalChecks(progressMark: number[] | null): void {
    const correct = this.hosts.filter((h) => !h.strategy && h.up)
    if (progressMark) {
      for (const h of correct) {
        if (h.anchors <= (progressMark[h.id] as number)) throw new Violation(`relay ${h.id} made no progress after the network healed (${h.anchors} anchors)`)
      }
    }
    // G5: with weak links every certified block is eventually ordered, so by the end every
    // envelope a correct relay received is decided and its prospective state equals its stable state.
    const quietFrom = Math.floor(this.options.steps * 0.7)
    for (const h of correct) {
      // Envelopes first seen in the last 30% may still be on their way to an anchor.
      // Those behind a sequence gap wait (at most gapWaitCommits rounds) by design.
      const stale = h.replica.pendingEnvelopes().filter((e) => (this.firstSeen.get(e.idHex) ?? 0) < quietFrom && e.seq <= h.replica.nextSeq(e.authorId))
      if (stale.length) throw new Violation(`relay ${h.id} never decided ${stale.length} envelope(s) it received before the quiet period, e.g. ${stale[0]?.authorId}:${stale[0]?.seq}`)
      if (h.replica.pendingCount > 0) continue
      for (const key of h.replica.keys()) {
        const norm = (v: unknown) => JSON.stringify(Array.isArray(v) ? [...v].map(String).sort() : v)
        if (norm(h.replica.value(key)) !== norm(h.replica.stableValue(key))) {
          throw new Violation(`relay ${h.id}: prospective ${key} = ${norm(h.replica.value(key))} but stable = ${norm(h.replica.stableValue(key))}`)
        }
      }
    }
    for (const [a, b] of this.twinIds) {
      if (this.committedByAny.has(a) && this.committedByAny.has(b)) throw new Violation(`both conflicting envelopes ${a.slice(0, 8)} and ${b.slice(0, 8)} entered the stable history`)
    }
  }
}

