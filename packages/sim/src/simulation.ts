import {
  ReliableReplica,
  SteadError,
  asSigned,
  decode,
  encode,
  encodeEnvelope,
  openEnvelopeSync,
  toHex,
  type Envelope,
  type Signed,
} from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import {
  ByzantineBehaviour,
  SYNC_BATCH,
  ConsensusCore,
  ConsensusInvariantError,
  type ByzantineStrategy as Strategy,
  decodeMessage,
  encodeMessage,
  type ArchiveQuery,
  type Block,
  type Commit,
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
  /** Events to process at most. */
  readonly steps: number
  /**
   * Simulated milliseconds the scenario spans (default 20 s): clients submit
   * during the first 60%, crashes and the partition fall between 10% and
   * 50%, and from 70% on the cluster is owed progress and quiescence.
   */
  readonly durationMs?: number
  /** Whether a partition isolates some relays for a while, then heals. */
  readonly partition: boolean
  /** Probability a message is lost once and retransmitted. */
  readonly loss: number
  /** Weakens the protocol (the direct rule decides on 2f blamers or certificates) to prove the checks catch it. */
  readonly weakQuorum?: boolean
  /** Weakens the restart (the batches after the snapshot are not replayed) to prove the checks catch it. */
  readonly skipSuffixOnRestart?: boolean
  /** Share signature verdicts between simulated relays (default); off for benchmarks. */
  readonly memoizeVerification?: boolean
  /**
   * Keep the simulated store (default). Off for benchmarks: the store is on
   * disk in a real relay, so it does not belong in a heap measurement; a run
   * without it cannot restart relays.
   */
  readonly persist?: boolean
  /**
   * Rounds of blocks a relay keeps behind its last commit when it snapshots
   * (`--retain-rounds`; default 4 * gcDepth, the least a relay accepts). A relay
   * that falls further behind cannot catch up: relay state transfer is not built.
   */
  readonly retainRounds?: number
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
  readonly maxBlocksInMemory: number
  /** Snapshots the relays took, each pruning its simulated store, and restarts from snapshot plus suffix. */
  readonly snapshots: number
  readonly prunedBlocks: number
  readonly restartsFromSnapshot: number
  readonly signatures: { readonly signs: number; readonly verifies: number }
}

class Violation extends Error {}

const GC_DEPTH = 20
/**
 * Relays snapshot every few batches here (every 1,000 or 256 KiB in a relay) so
 * that runs restart from snapshot plus suffix and exercise pruning.
 */
const SNAPSHOT_EVERY_BATCHES = 8

/**
 * SIM_TRACE=1 prints faults, commits, audits, rejections and, on a violation,
 * each relay's last rounds and the diverging stable states; SIM_TRACE_ROUND=r
 * also prints every block of round r with its ancestors. Tracing never changes a run.
 */
const TRACE = Boolean(process.env.SIM_TRACE)
const TRACE_ROUND = Number(process.env.SIM_TRACE_ROUND ?? -1)
const trace: (line: string) => void = TRACE ? (line) => console.log(`  ${line}`) : () => {}

type Event =
  | { kind: 'deliver'; from: number; to: number; bytes: Uint8Array }
  | { kind: 'timer'; node: number; epoch: number; name: TimerName; round: number }
  | { kind: 'submit'; client: number; index: number; attempt: number }
  | { kind: 'twin'; index: number }
  | { kind: 'chaos'; action: () => void }

interface Disk {
  ownBlocks: Block[]
  blocks: Block[]
  commits: Array<{ anchorRound: number; ordered: readonly string[]; payloadIds: readonly string[] }>
  /** Payload of each commit since the snapshot, for rebuilding the replica after a restart. */
  batches: Array<{ anchorRound: number; frames: Uint8Array[] }>
  /** The replica's checkpoint after the last batch a snapshot covered, as a relay keeps it. */
  snapshot: unknown
  /** Blocks of rounds below this were pruned. */
  blocksFrom: number
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
  /** How many commits this relay made: its position in the canonical commit sequence. */
  commits: number
  anchors: number
  /** Stable index → audit decisions digest, to compare across relays. */
  readonly auditLog: string[]
  readonly byzantine: ByzantineBehaviour | null
}

/**
 * Verification memo shared by the simulated relays: the verdict is a pure
 * function of (key, message, signature), and without it four relays
 * re-verifying the same blocks dominate the run time.
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
  private maxBlocks = 0

  /** Envelope verdicts by id: the same for every relay. */
  private readonly envelopes = new Map<string, Envelope | SteadError>()
  /** Global views the invariant checks compare against. */
  private readonly canonicalOrder: string[] = []
  /** Each commit (leader round and ordered blocks), in order, as the first correct relay made it. */
  private readonly canonicalCommits: string[] = []
  /** slot (round:author) → the block correct relays ordered for it: never two. */
  private readonly orderedSlots = new Map<string, string>()
  private readonly auditCanon: string[] = []
  private readonly stableHashes = new Map<number, string>()
  /** When a correct relay first received each envelope (from a client or in a block). */
  private readonly firstSeen = new Map<string, number>()
  private readonly snapshots = new Map<number, string>()
  private readonly retainRounds: number
  private snapshotsTaken = 0
  private prunedBlocks = 0
  private restartsFromSnapshot = 0
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
    this.retainRounds = Math.max(4 * GC_DEPTH, options.retainRounds ?? 0)
    this.rng = new Rng(options.seed)
    this.crypto = simCrypto(options.memoizeVerification ?? true, this.cryptoCounts)
    this.net = this.rng.fork()
    this.f = Math.floor((options.relays - 1) / 3)
    if (options.byzantine > this.f) throw new Error(`${options.byzantine} Byzantine relays exceed f = ${this.f} for N = ${options.relays}`)
    this.secrets = Array.from({ length: options.relays }, (_, i) => nodeCrypto.sha256(new TextEncoder().encode(`sim-relay-${i}`)))
    const keys = this.secrets.map((s) => publicKeyOfSync(s))
    this.committee = options.weakQuorum ? { f: this.f, keys, directQuorum: 2 * this.f } : { f: this.f, keys }
    this.honestIds = workload.honest.flat().map((e) => e.idHex)
    this.twinIds = workload.twins.map(([a, b]) => [a.idHex, b.idHex])
    for (let i = 0; i < options.relays; i++) {
      const strategy = i >= options.relays - options.byzantine ? options.strategy : null
      const disk: Disk = { ownBlocks: [], blocks: [], commits: [], batches: [], snapshot: undefined, blocksFrom: 0 }
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
        commits: 0,
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
    for (const h of this.hosts) this.handle(h, () => h.core.start())
    this.scheduleClients()
    this.planChaos()
    /** Per relay: its commits when the run turned quiet, if it had work then (null: nothing owed). */
    let progressMark: Array<number | null> | null = null
    this.queue.push(this.duration * 0.7, {
      kind: 'chaos',
      // Progress is owed after the mark only by relays with work left: an idle cluster makes no rounds.
      action: () => {
        progressMark = this.hosts.map((h) => (h.core.busy || this.honestIds.some((id) => h.replica.isPending(id)) ? h.anchors : null))
      },
    })
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
        // Past the scenario, with every correct relay idle, only Byzantine relays' timers are left.
        if (this.now > this.duration && this.hosts.every((h) => h.strategy || !h.up || (!h.core.busy && h.replica.pendingCount === 0))) break
        const ev = this.queue.pop()
        if (!ev) break
        this.now = ev.at
        this.dispatch(ev.item)
      }
      this.finalChecks(progressMark)
    } catch (err) {
      if (!(err instanceof Violation)) throw err
      violation = { step: this.step, message: err.message }
    }
    for (const h of this.hosts) trace(`${h.up ? '' : '(down) '}${h.strategy ?? ''} ${h.core.describe()}`)
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
      maxBlocksInMemory: this.maxBlocks,
      snapshots: this.snapshotsTaken,
      prunedBlocks: this.prunedBlocks,
      restartsFromSnapshot: this.restartsFromSnapshot,
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
        leaderTimeoutMs: 300,
        syncIntervalMs: 500,
        gcDepth: GC_DEPTH,
        maxRoundsAhead: 50,
      },
      recovered,
    )
  }

  private get duration(): number {
    return this.options.durationMs ?? 20_000
  }

  /** Crashes, restarts and partitions happen at times chosen by the seed, while clients are still submitting. */
  private planChaos(): void {
    const { crash, partition, relays, byzantine } = this.options
    const at = (fraction: number, action: () => void) => this.queue.push(this.duration * fraction, { kind: 'chaos', action })
    const correct = Array.from({ length: relays - byzantine }, (_, i) => i)
    // At most f relays are faulty at once: crashes are staggered when Byzantine relays already use the budget.
    const budget = Math.max(1, this.f - byzantine)
    for (let i = 0; i < crash; i++) {
      const victim = correct[(this.rng.int(0, correct.length - 1) + i) % correct.length] as number
      const slot = Math.floor(i / budget)
      const span = 0.4 / Math.ceil(crash / budget)
      at(0.1 + slot * span + this.rng.next() * span * 0.3, () => this.crash(victim))
      at(0.1 + slot * span + span * 0.8, () => this.restart(victim))
    }
    if (partition) {
      const size = this.rng.int(1, Math.max(1, Math.floor(relays / 2)))
      const group = new Set<number>()
      while (group.size < size) group.add(this.rng.int(0, relays - 1))
      at(0.2, () => {
        trace(`t=${this.now.toFixed(0)} partition ${[...group].join(',')}`)
        this.partitioned = group
      })
      at(0.45, () => {
        trace(`t=${this.now.toFixed(0)} heal`)
        this.heal()
      })
    }
  }

  private scheduleClients(): void {
    let t = 0
    const total = this.workload.honest.reduce((n, l) => n + l.length, 0)
    // Spread submissions over the first 60% of the run, across the faults; each client keeps its order.
    const gap = (this.duration * 0.6) / Math.max(1, total)
    const next = this.workload.honest.map(() => 0)
    for (let k = 0; k < total; k++) {
      let c = this.rng.int(0, next.length - 1)
      while ((next[c] as number) >= (this.workload.honest[c] as Envelope[]).length) c = (c + 1) % next.length
      t += this.rng.exp(gap)
      this.queue.push(t, { kind: 'submit', client: c, index: next[c] as number, attempt: 0 })
      next[c] = (next[c] as number) + 1
    }
    this.workload.twins.forEach((_, i) => this.queue.push(Math.min(this.duration * 0.6, this.rng.exp(gap) * (i + 1) * 3), { kind: 'twin', index: i }))
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
        if (message.kind === 'block' && message.block.header.round === TRACE_ROUND) {
          const { author, ancestors } = message.block.header
          trace(`t=${this.now.toFixed(0)} ${ev.from}->${ev.to} block of ${author} ${message.block.digestHex.slice(0, 6)} <- ${ancestors.map((a) => `${a.author}@${a.round}`).join(',')}`)
        }
        this.handle(host, () => host.core.onMessage(ev.from, message))
        return
      }
      case 'timer': {
        const host = this.hosts[ev.node] as Host
        if (!host.up || host.epoch !== ev.epoch) return
        host.timers.delete(`${ev.name}:${ev.round}`)
        this.handle(host, () => host.core.onTimer(ev.name, ev.round))
        return
      }
      case 'submit':
        this.submit(ev.client, ev.index, ev.attempt)
        return
      case 'chaos':
        ev.action()
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
    // The relay forwards what it accepts to its subscribers at once: prospective state needs no order (G1).
    let queued = false
    this.handle(host, () => {
      try {
        const { status, outputs } = host.core.submit(frame, info)
        queued = status === 'queued'
        return outputs
      } catch (err) {
        if (!(err instanceof SteadError)) throw err
        return []
      }
    })
    if (queued) this.receiveProspective(host, env)
  }

  private committedByAll(idHex: string): boolean {
    return this.hosts.every((h) => h.strategy || !h.up || h.replica.isPending(idHex) === false) && this.committedByAny.has(idHex)
  }

  // ---- a relay's outputs ----

  /** Runs one core event; a broken core invariant is a violation of the run, with its step. */
  private handle(host: Host, event: () => Output[]): void {
    let outputs: Output[]
    try {
      outputs = event()
    } catch (err) {
      if (err instanceof ConsensusInvariantError) throw new Violation(`relay ${host.id}${host.strategy ? ` (${host.strategy})` : ''}: ${err.message}`)
      throw err
    }
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
        case 'accepted':
          for (const frame of o.block.header.payload) {
            const env = this.envelopeOf(frame)
            if (env) this.receiveProspective(host, env)
          }
          break
        case 'expired':
          for (const id of o.payloadIds) host.replica.discard(id)
          break
        case 'commit':
          trace(`commit relay ${host.id} leader ${o.commit.leader}@${o.commit.anchorRound} ids ${o.commit.payloadIds.map((i) => i.slice(0, 6)).join(',')}`)
          this.onCommit(host, o.commit)
          break
        case 'archive-request':
          this.serveArchive(host, o.to, o.query)
          break
        case 'history-pruned':
          // The liveness check then names this relay; the trace says why.
          trace(`relay ${host.id} needs round ${o.needed}, peers keep blocks from ${o.keptFrom}`)
          break
        case 'rejected':
          this.rejected++
          this.rejectedReasons.set(o.reason, (this.rejectedReasons.get(o.reason) ?? 0) + 1)
          trace(`relay ${host.id} rejected from ${o.from}: ${o.reason} ${o.detail}`)
          break
      }
    }
    const mem = host.core.memory.blocks
    if (mem > this.maxBlocks) this.maxBlocks = mem
  }

  /** The simulated disk is durable the moment a record is written. */
  private persist(host: Host, record: Extract<Output, { type: 'persist' }>['record']): void {
    if (this.options.persist === false) return
    switch (record.kind) {
      case 'own-block':
        host.disk.ownBlocks.push(record.block)
        break
      case 'block':
        host.disk.blocks.push(record.block)
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

  /** An envelope reaches a relay's prospective state as soon as the relay has it (G1). */
  private receiveProspective(host: Host, env: Envelope): void {
    host.replica.receive(env)
    if (!this.firstSeen.has(env.idHex)) this.firstSeen.set(env.idHex, this.now)
  }

  private onCommit(host: Host, commit: Commit): void {
    const { anchorRound, payload, payloadIds: ids } = commit
    host.anchors++
    if (this.options.persist !== false) host.disk.batches.push({ anchorRound, frames: [...payload] })
    if (!host.strategy) this.checkCommit(host, commit)
    const batch: Envelope[] = []
    for (const frame of payload) {
      const env = this.envelopeOf(frame)
      if (!env) throw new Violation(`relay ${host.id} committed an invalid envelope`)
      batch.push(env)
    }
    this.audit(host, batch, anchorRound)
    if (this.options.persist !== false && host.disk.batches.length >= SNAPSHOT_EVERY_BATCHES) this.snapshot(host)
    if (host.strategy) return
    for (const id of ids) {
      const i = host.committedIds.length
      host.committedIds.push(id)
      if (i < this.canonicalOrder.length) {
        if (this.canonicalOrder[i] !== id) throw new Violation(`relay ${host.id} committed ${id.slice(0, 8)} at position ${i}, others ${this.canonicalOrder[i]?.slice(0, 8)}`)
      } else this.canonicalOrder.push(id)
    }
  }

  /**
   * Correct relays make the same sequence of commits (same leader, same
   * blocks in the same order) and never order two blocks of one slot.
   */
  private checkCommit(host: Host, commit: Commit): void {
    const line = `${commit.leader}@${commit.anchorRound}:${commit.blocks.map((b) => b.digestHex.slice(0, 12)).join(',')}`
    const i = host.commits++
    if (i < this.canonicalCommits.length) {
      if (this.canonicalCommits[i] !== line) throw new Violation(`relay ${host.id} commit ${i} is ${line.slice(0, 80)}, another relay's ${this.canonicalCommits[i]?.slice(0, 80)}`)
    } else this.canonicalCommits.push(line)
    for (const b of commit.blocks) {
      const slot = `${b.round}:${b.author}`
      const owner = this.orderedSlots.get(slot)
      if (owner !== undefined && owner !== b.digestHex) throw new Violation(`two blocks of relay ${b.author} round ${b.round} were ordered (${owner.slice(0, 8)} and ${b.digestHex.slice(0, 8)})`)
      this.orderedSlots.set(slot, b.digestHex)
    }
    // The checker's memory stays bounded on long soaks: slots far below every correct relay's commits can go.
    if (this.orderedSlots.size > 20_000) {
      const horizon = Math.min(...this.hosts.filter((h) => !h.strategy).map((h) => h.core.committedRound)) - 4 * GC_DEPTH
      for (const [slot] of this.orderedSlots) if (Number(slot.slice(0, slot.indexOf(':'))) < horizon) this.orderedSlots.delete(slot)
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
    // G2 is about the stable state (objects and sequence numbers): the audit state also holds
    // envelopes parked behind a gap, which a commit can change without moving the index.
    const hash = toHex(nodeCrypto.sha256(encode(host.replica.stableSnapshot())))
    const seen = this.stableHashes.get(host.replica.stableIndex)
    if (seen !== undefined && seen !== hash) {
      trace(`mine:   ${JSON.stringify(host.replica.stableSnapshot())}\nearlier: ${this.snapshots.get(host.replica.stableIndex)}`)
      throw new Violation(`relay ${host.id}: stable state at index ${host.replica.stableIndex} differs from another relay's`)
    }
    if (TRACE) this.snapshots.set(host.replica.stableIndex, JSON.stringify(host.replica.stableSnapshot()))
    this.stableHashes.set(host.replica.stableIndex, hash)
  }

  private serveArchive(host: Host, to: number, query: ArchiveQuery): void {
    if ('fromRound' in query && query.fromRound < host.disk.blocksFrom) this.send(host, to, { kind: 'pruned', keptFrom: host.disk.blocksFrom })
    const wanted = 'digests' in query ? new Set(query.digests) : null
    const blocks = [...host.disk.blocks, ...host.disk.ownBlocks]
      .filter((b) => (wanted ? wanted.has(b.digestHex) : b.header.round >= (query as { fromRound: number }).fromRound && b.header.round <= (query as { toRound: number }).toRound))
      .sort((a, b) => a.header.round - b.header.round)
      .slice(0, SYNC_BATCH)
    if (blocks.length) this.send(host, to, { kind: 'blocks', blocks })
  }


  // ---- crashes ----

  private crash(id: number): void {
    const host = this.hosts[id] as Host
    trace(`t=${this.now.toFixed(0)} crash ${id}`)
    host.up = false
    host.epoch++
    host.timers.clear()
  }

  /**
   * What a relay's store does with each snapshot (RelayStore.writeSnapshot): the
   * replica's checkpoint replaces the batches before it, commit records more than
   * 2 * gcDepth rounds back go, and so do blocks older than the retention window.
   */
  private snapshot(host: Host): void {
    const disk = host.disk
    disk.snapshot = host.replica.checkpoint()
    disk.batches = []
    const committed = host.core.committedRound
    disk.commits = disk.commits.filter((c) => c.anchorRound >= committed - 2 * GC_DEPTH)
    const keepFrom = committed - this.retainRounds
    disk.blocksFrom = Math.max(disk.blocksFrom, keepFrom)
    const before = disk.blocks.length + disk.ownBlocks.length
    disk.blocks = disk.blocks.filter((b) => b.header.round >= keepFrom)
    // The own block of the latest round stays: a restarted relay must not sign that round again.
    const latestOwn = disk.ownBlocks.at(-1)
    disk.ownBlocks = disk.ownBlocks.filter((b) => b.header.round >= keepFrom || b === latestOwn)
    this.prunedBlocks += before - disk.blocks.length - disk.ownBlocks.length
    this.snapshotsTaken++
  }

  private restart(id: number): void {
    const host = this.hosts[id] as Host
    trace(`t=${this.now.toFixed(0)} restart ${id}`)
    const recovered: RecoveredState = { ownBlocks: host.disk.ownBlocks, blocks: host.disk.blocks, commits: host.disk.commits }
    host.core = this.newCore(id, recovered)
    // The stable state is the snapshot plus the batches committed after it, as in RelayNode.start.
    const open = (signed: Signed): Envelope => {
      const env = this.openSigned(signed)
      if (env instanceof SteadError) throw env
      return env
    }
    host.replica = host.disk.snapshot === undefined ? new ReliableReplica({ space: SPACE }) : ReliableReplica.restore({ space: SPACE }, host.disk.snapshot, open)
    if (host.disk.snapshot !== undefined) this.restartsFromSnapshot++
    if (!this.options.skipSuffixOnRestart) for (const b of host.disk.batches) host.replica.commit(b.frames.map((f) => this.envelopeOf(f) as Envelope), b.anchorRound)
    host.up = true
    this.handle(host, () => host.core.start())
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
    return this.openSigned(signed)
  }

  private openSigned(signed: Signed): Envelope | SteadError {
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

  private finalChecks(progressMark: Array<number | null> | null): void {
    const correct = this.hosts.filter((h) => !h.strategy && h.up)
    for (const h of correct) {
      const mark = progressMark?.[h.id]
      if (mark !== undefined && mark !== null && h.anchors <= mark) throw new Violation(`relay ${h.id} had work but made no progress after the network healed (${h.anchors} commits)`)
    }
    // G5: every accepted block is referenced by later blocks until a leader orders it, so by the end every
    // envelope a correct relay received is decided and its prospective state equals its stable state.
    const quietFrom = this.duration * 0.7
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

