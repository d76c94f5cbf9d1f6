import {
  ReliableReplica,
  SteadError,
  asSigned,
  decode,
  attestedDecision,
  decodeAttestation,
  encode,
  encodeEnvelope,
  openEnvelopeSync,
  toHex,
  type AttestedDecision,
  type Crypto,
  type Envelope,
} from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import { ClientFacingLiar, ClientSessions, DEFAULT_API_LIMITS, MemoryJournal, MemoryKv, RelayNode, STORE_TABLES, storeRecords, type ClientLie, type ClusterConfig, type HostClock, type Kv, type KvKey, type KvTable, type HostTimer } from '@stead/relay'
import { ConsensusInvariantError, byzantineMesh, decodeMessage, type ByzantineStrategy as Strategy, type Committee, type SyncCrypto } from '@stead/relay/consensus'
import pino, { type Logger } from 'pino'
import { EventQueue } from './queue.ts'
import { Violation } from './violation.ts'
import { AttestedOrder } from './attested-order.ts'
import { SdkClients } from './sdk-clients.ts'
import type { Wire } from './wire.ts'
import { Rng } from './rng.ts'
import { SPACE, type Workload } from './workload.ts'

export { BYZANTINE_STRATEGIES as STRATEGIES, type ByzantineStrategy as Strategy } from '@stead/relay/consensus'

export interface SimOptions {
  readonly seed: number
  readonly relays: number
  /** Byzantine relays (the last ones), at most f. */
  readonly byzantine: number
  readonly strategy: Strategy
  /** Correct relays that crash once (losing the writes their disk had not finished) and restart from their store. */
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
  /** A storage fault: a crashed relay's disk loses the committed batches after its snapshot, to prove the checks catch it. */
  readonly loseBatchesOnRestart?: boolean
  /** Restart a crashed relay this long after its crash (a supervisor's restart delay) instead of later in the run. */
  readonly restartDelayMs?: number
  /**
   * The first crashed relay stays down from 5% of the run until every
   * correct peer pruned the rounds it needs (or 55%), and its peers hold
   * few frames for it (HELD_FRAMES_LONG_OUTAGE): it must start over from a
   * checkpoint. Runs last 40 s instead of 20 s unless durationMs says.
   */
  readonly longOutage?: boolean
  /** A storage fault: a crashed relay's journal comes back empty, to prove the checks catch a relay that speaks before its block is durable. */
  readonly loseJournalOnCrash?: boolean
  /** An operator's fault: a crashed relay restarts with an empty store and journal (a lost disk, a wiped data dir). */
  readonly loseStoreOnCrash?: boolean
  /** Weakens the protocol: a relay proposes at start without asking its peers for its latest block (to prove the checks catch it). */
  readonly skipOwnLastAsk?: boolean
  /** Share signature verdicts between simulated relays (default); off for benchmarks. */
  readonly memoizeVerification?: boolean
  /**
   * Rounds of blocks a relay keeps behind its last commit when it snapshots
   * (`--retain-rounds`; default 4 * gcDepth, the least a relay accepts).
   */
  readonly retainRounds?: number
  /**
   * Real SDK clients (createClient over simulated WebSockets into each
   * relay's real client sessions), with their checkers (see sdk-clients.ts).
   * Default 0 here; the CLI runs 2.
   */
  readonly sdkClients?: number
  /** Updates each SDK client makes (default 12). */
  readonly sdkUpdates?: number
  /** Whether one SDK client crashes and restarts on its storage (default: when there are SDK clients). */
  readonly sdkClientCrash?: boolean
  /** Weakens the SDK clients (told f = 0: one attestation is a quorum), to prove the client checkers catch it. */
  readonly weakClients?: boolean
  /** What the Byzantine relays tell SDK clients (relay/src/faults/client-lies.ts); default: picked by the seed. */
  readonly clientLie?: ClientLie | null
  /** Stop once every correct relay reached this round. */
  readonly untilRound?: number
  /**
   * Each live relay's ConsensusCore.checkInvariants after every event: 'full'
   * (default) walks its DAG too, 'cheap' is what production is meant to run
   * after each drain, 'off' for benchmarks.
   */
  readonly consensusChecks?: 'full' | 'cheap' | 'off'
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
  /** Consensus commits each relay made (and stored). */
  readonly anchors: readonly number[]
  /** The stable index every correct relay attested. */
  readonly committedEnvelopes: number
  readonly honestEnvelopes: number
  /** Envelopes the checker's audit committed, by whether it verified their clock. */
  readonly clocks: { readonly verified: number; readonly unverified: number }
  readonly rejectedMessages: number
  readonly rejectedReasons: Readonly<Record<string, number>>
  /** Snapshots the relays wrote; restarts that loaded one; the highest round below which a relay pruned its blocks. */
  readonly snapshots: number
  readonly restartsFromSnapshot: number
  /** Relays that fell behind their peers' retention and started over from a checkpoint. */
  readonly checkpointInstalls: number
  /** Frames held for a peer that was down or cut off and sent once it was back; frames such queues dropped when full. */
  readonly replayedFrames: number
  readonly droppedHeldFrames: number
  /** Writes crashes lost: issued, not yet on disk. */
  readonly lostWrites: number
  /** Whether the run ended with the cluster idle (not on the step limit): the end-of-run checks all ran. */
  readonly endedIdle: boolean
  /** On the step limit: what was still going on (relays busy, messages in flight, clients not settled). */
  readonly busyAtEnd?: string
  readonly prunedBelowRound: number
  readonly signatures: { readonly signs: number; readonly verifies: number }
  /** The lie Byzantine relays told SDK clients, if any ran. */
  readonly clientLie: ClientLie | null
  /** Safe updates of the SDK clients, by outcome. */
  readonly safeUpdates: { readonly committed: number; readonly rejected: number }
  /** Times an SDK client caught a (Byzantine) relay lying to it: each client and relay counted once. */
  readonly clientBlames: number
}


const GC_DEPTH = 20
/**
 * Relays snapshot every few batches here (every 1,000 or 256 KiB in a relay),
 * and take checkpoints every few rounds, so runs restart from snapshot plus
 * suffix and exercise pruning.
 */
/** Short, so that replicas leave memory and come back many times in a run. */
const SPACE_IDLE_MS = 300
const SNAPSHOT_EVERY_BATCHES = 8

/**
 * SIM_TRACE=1 prints faults and every relay's log (at debug level). Tracing
 * never changes a run.
 */
const TRACE = Boolean(process.env.SIM_TRACE)
const trace: (line: string) => void = TRACE ? (line) => console.log(`  ${line}`) : () => {}

type Event =
  | { kind: 'deliver'; from: number; to: number; epoch: number; frame: Uint8Array }
  | { kind: 'timer'; node: number; epoch: number; timer: { fire: () => void; cancelled: boolean; background: boolean } }
  | { kind: 'disk'; node: number; epoch: number; done: () => void }
  | { kind: 'connect'; node: number; epoch: number; peer: number }
  | { kind: 'submit'; client: number; index: number; attempt: number }
  | { kind: 'twin'; index: number }
  | { kind: 'junk'; index: number }
  | { kind: 'chaos'; action: () => void | Promise<void> }
  /** Something of the SDK clients' world: a frame on a wire (`toward`: the relay it goes to), a client's timer, an update. */
  | { kind: 'client'; toward: number | null; action: () => void | Promise<void> }

/**
 * One simulated relay machine: a real RelayNode over a simulated disk
 * (MemoryKv), network and clock. The disk outlives crashes; the node and
 * everything it held in memory do not.
 */
interface Host {
  readonly id: number
  readonly strategy: Strategy | null
  up: boolean
  /** Bumped at each crash: timers, disk completions and messages of the node before it are void. */
  epoch: number
  node: RelayNode
  kv: MemoryKv
  /** The journal the running process appends to (a restart opens a new one over what it kept). */
  journal: MemoryJournal
  receive: ((from: number, frame: Uint8Array) => void) | undefined
  connected: ((peer: number) => void) | undefined
  /** The latest consensus commit (anchor round) the checkers saw this relay store. */
  checkedCommit: number
  /** Stable index of this relay's latest attestation. */
  stableIndex: number
  /** Envelopes this relay attested a decision for (what its disk kept of them, after a crash). */
  readonly decided: Set<string>
  /** A crash waits for this relay's next write, to lose it. */
  crashAtNextWrite: boolean
  /** Round → digest of each block this relay sent a peer, across its restarts: a correct relay never sends two for a round. */
  readonly spoken: Map<number, { readonly digestHex: string; seenByCorrect: boolean }>
  /** Envelopes clients handed this relay since its last restart, with when: it owes a decision on each. */
  accepted: Map<string, number>
  /** Frames for each peer sent while it was unreachable, oldest first: sent once a connection to it opens (see transmit). */
  held: Map<number, { frames: Uint8Array[]; bytes: number }>
  /** The client API's sessions of the running process, and the SDK clients' connections into them. */
  sessions: ClientSessions | undefined
  readonly wires: Set<Wire>
}

/** A relay's outbound queue per unreachable peer, as relay/src/mesh/libp2p.ts keeps (smaller here: runs are short). */
const HELD_FRAMES = 4096
const HELD_BYTES = 16 * 1024 * 1024
/** The lies of relay/src/faults/client-lies.ts a session tells (the others concern HTTP reads, which SDK clients here do not make). */
const SESSION_LIES: readonly ClientLie[] = ['lie-attest', 'withhold-commits', 'withhold-envelopes', 'forge-envelope', 'junk', 'slow']
/** What peers hold for a relay on a long outage: a real relay's queue overflows over hours; here over seconds. */
const HELD_FRAMES_LONG_OUTAGE = 64

/**
 * Verification memo shared by the simulated relays: the verdict is a pure
 * function of (key, message, signature), and without it every relay
 * re-verifying the same blocks dominates the run time.
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

/** What one write put and removed, by table. */
interface Written {
  readonly puts: Map<string, Array<{ key: KvKey; value: Uint8Array }>>
  readonly removes: Map<string, KvKey[]>
}

/** A relay's disk as the checkers watch it: every write's puts and removes, by table, reported inside the write as the relay issues it. */
function observed(kv: MemoryKv, onWrite: (written: Written) => void): Kv {
  let current: Written | undefined
  const log = <T>(into: Map<string, T[]> | undefined, name: string, item: T): void => {
    if (!into) return
    let list = into.get(name)
    if (!list) into.set(name, (list = []))
    list.push(item)
  }
  return {
    table<K extends KvKey>(name: string): KvTable<K> {
      const t = kv.table<K>(name)
      return {
        get: (key) => t.get(key),
        getRange: (range) => t.getRange(range),
        getKeys: (range) => t.getKeys(range),
        put(key, value) {
          t.put(key, value)
          log(current?.puts, name, { key, value })
        },
        remove(key) {
          t.remove(key)
          log(current?.removes, name, key)
        },
      }
    },
    write(fn) {
      const mine: Written = { puts: new Map(), removes: new Map() }
      // Checked inside the write, where reads see it (outside, only what is durable): a write that
      // fails is not checked, and a violation aborts it.
      return kv.write(() => {
        current = mine
        try {
          fn()
        } finally {
          current = undefined
        }
        onWrite(mine)
      })
    },
    read: (fn) => kv.read(fn),
    close: () => kv.close(),
  }
}

/** The SDK clients' crypto: node:crypto behind the run's verification memo (the clients verify what the relays already did). */
function clientCrypto(sync: SyncCrypto): Crypto {
  return {
    ...nodeCrypto,
    name: 'sim',
    verify: async (pk, msg, sig) => sync.verify(pk, msg, sig),
  }
}

/**
 * The consensus core a RelayNode runs (none before it started). RelayNode
 * keeps it in a private field; this is the one place the simulator reaches
 * past that, until RelayNode has a public hook for its invariant checks.
 */
/** Lets every promise the relays chained run to its end: only simulated events remain, so the order is the seed's. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

export function runSimulation(options: SimOptions, workload: Workload): Promise<SimResult> {
  return new Simulation(options, workload).run()
}

/**
 * Runs RelayNode, the relay's production shell (event loop, consensus,
 * audit, store, attestations, snapshots, checkpoints), N times over a
 * seeded network with delays, loss and a partition, a disk that finishes
 * writes when the seed says (and loses the unfinished ones at a crash),
 * and simulated time. Byzantine relays are correct RelayNodes behind a
 * misbehaving mesh, as `stead-relay --byzantine` runs them. The checkers
 * read what each relay stored and attested, as its peers and clients would.
 */
class Simulation {
  private readonly rng: Rng
  private readonly net: Rng
  private readonly disk: Rng
  private readonly cryptoCounts = { signs: 0, verifies: 0 }
  private readonly crypto: SyncCrypto
  private readonly queue = new EventQueue<Event>()
  private readonly cluster: ClusterConfig
  private readonly committee: Committee
  private readonly secrets: Uint8Array[]
  private readonly hosts: Host[] = []
  /** Every RelayNode the run made (restarts make new ones): their metrics add up. */
  private readonly nodes: RelayNode[] = []
  private readonly f: number
  private readonly log: Logger
  private now = 0
  private step = 0
  /** A relay's event loop failed (a broken invariant, a failed write): the run's violation. */
  private fatal: Violation | undefined

  /** The consensus commits (ordered block digests, envelope ids) by anchor round, and their order, as the first correct relay stored them. */
  private readonly canonicalCommits = new Map<number, string>()
  private readonly commitOrder: number[] = []
  private readonly commitIndex = new Map<number, number>()
  /** slot (round:author) → the block correct relays ordered for it: never two. */
  private readonly orderedSlots = new Map<string, string>()
  /** Attestation bytes by round, as the first correct relay signed them: the others must sign the same. */
  private readonly canonicalAttestations = new Map<number, string>()
  /** A client's replica replaying the attested commits: its state must hash to what was attested, and keep every invariant. */
  private readonly checker = new ReliableReplica({ space: SPACE })
  private checkerRound = 0
  private readonly committedByChecker = new Set<string>()
  private readonly decidedByChecker = new Set<string>()
  private readonly envelopes = new Map<string, Envelope | SteadError>()
  private restartsFromSnapshot = 0
  /** Frames relays held for an unreachable peer and sent once it was back; and those their bounded queues dropped. */
  private replayed = 0
  private heldDropped = 0
  private installs = 0
  private lostWrites = 0
  private partitioned: Set<number> | null = null
  /** The relay of a long outage (SimOptions.longOutage) and the round it had reached when it went down. */
  private longOutage: { victim: number; lastRound: number } | undefined
  private readonly honestIds: string[]
  private readonly honestSet: ReadonlySet<string>
  /** Committed envelopes by whether the audit verified their clock. */
  private readonly clocks = { verified: 0, unverified: 0 }
  private readonly workloadEnvelopes: Map<string, Envelope>
  private readonly twinIds: Array<[string, string]>
  /** When a correct relay first accepted each honest envelope. */
  private readonly firstAccepted = new Map<string, number>()
  /** The SDK clients, if the run has any, and what Byzantine relays tell them. */
  private readonly clients: SdkClients | undefined
  /** What the attested commits lead to, for the client checkers. */
  private readonly attested = new AttestedOrder()

  private readonly options: SimOptions
  private readonly workload: Workload
  constructor(options: SimOptions, workload: Workload) {
    this.options = options
    this.workload = workload
    this.rng = new Rng(options.seed)
    this.crypto = simCrypto(options.memoizeVerification ?? true, this.cryptoCounts)
    this.net = this.rng.fork()
    this.disk = this.rng.fork()
    this.f = Math.floor((options.relays - 1) / 3)
    if (options.byzantine > this.f) throw new Error(`${options.byzantine} Byzantine relays exceed f = ${this.f} for N = ${options.relays}`)
    this.secrets = Array.from({ length: options.relays }, (_, i) => nodeCrypto.sha256(new TextEncoder().encode(`sim-relay-${i}`)))
    const keys = this.secrets.map((s) => publicKeyOfSync(s))
    this.committee = options.weakQuorum ? { f: this.f, keys, directQuorum: 2 * this.f } : { f: this.f, keys }
    this.cluster = {
      f: this.f,
      relays: keys.map((publicKey, i) => ({ id: `r${i}`, publicKey, mesh: '/memory/sim', api: 'sim:0' })),
      spaces: new Map([[SPACE, {}]]),
      openSpaces: false,
      newSpacesPerKeyPerHour: 100,
      // Checkpoints every few GC depths, so relays take them (and a relay left far behind can install one).
      checkpointRounds: this.gcDepth,
    }
    this.log = TRACE ? pino({ level: 'debug' }, pino.destination({ sync: true })) : pino({ level: 'silent' })
    this.honestIds = workload.honest.flat().map((e) => e.idHex)
    this.honestSet = new Set(this.honestIds)
    this.workloadEnvelopes = new Map([...workload.honest.flat(), ...workload.twins.flat(), ...workload.junk].map((e) => [e.idHex, e]))
    this.twinIds = workload.twins.map(([a, b]) => [a.idHex, b.idHex])
    for (let i = 0; i < options.relays; i++) {
      const host: Host = {
        id: i,
        strategy: i >= options.relays - options.byzantine ? options.strategy : null,
        up: true,
        epoch: 0,
        node: undefined as unknown as RelayNode,
        kv: new MemoryKv((done) => this.diskWrite(i, done)),
        journal: new MemoryJournal(),
        receive: undefined,
        connected: undefined,
        checkedCommit: 0,
        stableIndex: 0,
        decided: new Set(),
        crashAtNextWrite: false,
        spoken: new Map(),
        accepted: new Map(),
        held: new Map(),
        sessions: undefined,
        wires: new Set(),
      }
      this.hosts.push(host)
    }
    const sdkClients = options.sdkClients ?? 0
    // Forked only with clients, so runs without them keep their schedules.
    const clientRng = sdkClients > 0 ? this.rng.fork() : undefined
    if (clientRng) {
      const wireNet = clientRng.fork()
      this.clients = new SdkClients(
        {
          f: this.f,
          relays: options.relays,
          now: () => this.now,
          delay: () => 1 + wireNet.exp(8),
          schedule: (at, toward, action) => this.queue.push(at, { kind: 'client', toward, action }),
          accept: (relay, wire, address) => {
            const host = this.hosts[relay] as Host
            if (!host.up || !host.sessions) return false
            host.wires.add(wire)
            host.sessions.open(wire.relay, address)
            return true
          },
          isByzantine: (relay) => Boolean(this.hosts[relay]?.strategy),
          attestedState: (round) => this.attested.after(round),
          committedAuthor: (index) => this.attested.committedAuthor(index),
          refusedAny: (authorId) => this.attested.refusedAny(authorId),
          attestedUpTo: (index) => {
            const reached = this.hosts.filter((h) => h.stableIndex >= index)
            return { all: reached.length, correct: reached.filter((h) => !h.strategy).length }
          },
          latestIndex: () => this.checker.stableIndex,
          latestHash: () => toHex(this.checker.stableHash((b) => nodeCrypto.sha256(b))),
        },
        clientRng,
        {
          count: sdkClients,
          updates: options.sdkUpdates ?? 12,
          durationMs: this.duration,
          crash: options.sdkClientCrash ?? true,
          ...(options.weakClients ? { weak: true } : {}),
          crypto: clientCrypto(this.crypto),
        },
        keys,
      )
    }
  }

  async run(): Promise<SimResult> {
    const { steps } = this.options
    let violation: SimResult['violation']
    let endedIdle = false
    try {
      for (const h of this.hosts) await this.boot(h)
      await this.clients?.start()
      this.scheduleClients()
      this.planChaos()
      /** Per relay: its commits when the run turned quiet, if it had work then (null: nothing owed). */
      let progressMark: Array<number | null> | null = null
      this.queue.push(this.duration * 0.7, {
        kind: 'chaos',
        // Progress is owed after the mark only by relays with work left: an idle cluster makes no rounds.
        action: () => {
          progressMark = this.hosts.map((h) => (h.up && h.node.busy ? this.commitsOf(h) : null))
        },
      })
      let lastRound = 0
      const watchRounds = this.options.onRound !== undefined || this.options.untilRound !== undefined
      for (this.step = 0; this.step < steps; this.step++) {
        const round = watchRounds ? ((this.hosts[0] as Host).node.status().round as number) : 0
        if (round !== lastRound) {
          lastRound = round
          this.options.onRound?.(round)
          if (this.options.untilRound !== undefined && this.hosts.every((h) => h.strategy || (h.node.status().round as number) >= (this.options.untilRound as number))) break
        }
        // Past the scenario, with every correct relay idle and nothing on its way to one, only Byzantine relays' timers are left.
        if (this.now > this.duration && this.hosts.every((h) => h.strategy || !h.up || !h.node.busy) && !this.inFlightToCorrect() && (this.clients?.settled() ?? true)) {
          endedIdle = true
          break
        }
        const ev = this.queue.pop()
        if (!ev) {
          endedIdle = true
          break
        }
        this.now = ev.at
        await this.dispatch(ev.item)
        await settle()
        if (this.fatal) throw this.fatal
        this.checkConsensus()
        this.clients?.check((b) => nodeCrypto.sha256(b))
      }
      this.finalChecks(progressMark, endedIdle)
    } catch (err) {
      if (!(err instanceof Violation)) throw err
      violation = { step: this.step, message: err.message }
    }
    const correct = this.hosts.filter((h) => !h.strategy)
    const rejected = new Map<string, number>()
    let snapshots = 0
    for (const node of this.nodes) {
      for (const v of (await node.metrics.rejected.get()).values) rejected.set(String(v.labels['reason']), (rejected.get(String(v.labels['reason'])) ?? 0) + v.value)
      for (const v of (await node.metrics.snapshots.get()).values) snapshots += v.value
    }
    return {
      seed: this.options.seed,
      ok: violation === undefined,
      ...(violation ? { violation } : {}),
      steps: this.step,
      simulatedMs: Math.round(this.now),
      rounds: this.hosts.map((h) => h.node.status().round as number),
      anchors: this.hosts.map((h) => this.commitsOf(h)),
      committedEnvelopes: Math.min(...correct.map((h) => h.stableIndex)),
      honestEnvelopes: this.honestIds.length,
      clocks: { ...this.clocks },
      rejectedMessages: [...rejected.values()].reduce((a, b) => a + b, 0),
      rejectedReasons: Object.fromEntries([...rejected].sort()),
      snapshots,
      restartsFromSnapshot: this.restartsFromSnapshot,
      checkpointInstalls: this.installs,
      replayedFrames: this.replayed,
      droppedHeldFrames: this.heldDropped,
      lostWrites: this.lostWrites,
      endedIdle,
      ...(endedIdle ? {} : { busyAtEnd: this.busyNow() }),
      prunedBelowRound: Math.max(...this.hosts.map((h) => h.node.status().blocksKeptFrom as number)),
      signatures: { ...this.cryptoCounts },
      clientLie: this.clientLie,
      safeUpdates: { ...(this.clients?.safeOutcomes ?? { committed: 0, rejected: 0 }) },
      clientBlames: this.clients?.blamed ?? 0,
    }
  }

  /** What keeps the run from being idle, for a run that ended on the step limit. */
  private busyNow(): string {
    const busy = this.hosts.filter((h) => !h.strategy && h.up && h.node.busy).map((h) => `relay ${h.id} busy`)
    const inFlight = this.inFlightToCorrect() ? ['work in flight to a correct relay'] : []
    const clients = this.clients?.unsettled() ?? []
    return [...busy, ...inFlight, ...clients].join('; ') || 'nothing (the scenario had not ended)'
  }

  /** Whether a message, a connection, a disk write or a timer is still on its way to a correct relay (it may give it work). */
  private inFlightToCorrect(): boolean {
    const correct = (i: number): boolean => !this.hosts[i]?.strategy
    return this.queue.some((ev) => {
      if (ev.kind === 'deliver') return correct(ev.to)
      if (ev.kind === 'timer') return correct(ev.node) && !ev.timer.cancelled && !ev.timer.background && this.hosts[ev.node]?.epoch === ev.epoch
      if (ev.kind === 'client') return ev.toward !== null && correct(ev.toward)
      return (ev.kind === 'disk' || ev.kind === 'connect') && correct(ev.node)
    })
  }

  /** What the Byzantine relays tell SDK clients: the option, else one session lie per seed (none without clients or Byzantine relays). */
  private get clientLie(): ClientLie | null {
    const o = this.options
    if (o.clientLie !== undefined) return o.clientLie
    return (o.sdkClients ?? 0) > 0 && o.byzantine > 0 ? (SESSION_LIES[o.seed % SESSION_LIES.length] as ClientLie) : null
  }

  /** A long outage runs with a shallower DAG (and so a shorter least retention), so that peers prune within a run. */
  private get gcDepth(): number {
    return this.options.longOutage ? GC_DEPTH / 2 : GC_DEPTH
  }

  private get duration(): number {
    // A long outage needs the others to make rounds enough to prune what the relay that is down needs.
    return this.options.durationMs ?? (this.options.longOutage ? 40_000 : 20_000)
  }

  // ---- the machines ----

  /** Starts a relay on what its disk holds (nothing at first): RelayNode.start, as a relay process does. */
  private async boot(host: Host): Promise<void> {
    const epoch = host.epoch
    host.journal = new MemoryJournal(host.journal.survivors())
    const clock: HostClock = {
      now: () => this.now,
      setTimer: (ms, fire): HostTimer => {
        const timer = { fire, cancelled: false, background: false }
        this.queue.push(this.now + ms, { kind: 'timer', node: host.id, epoch, timer })
        // A background timer (a session sweep) is no work left: the run may end while it waits.
        return { cancel: () => void (timer.cancelled = true), unref: () => void (timer.background = true) }
      },
    }
    const mesh = {
      start: async () => undefined,
      stop: async () => undefined,
      send: (to: number, frame: Uint8Array) => {
        if (host.epoch !== epoch) return
        if (this.transmit(host.id, to, frame)) this.checkSpoken(host, frame, [to])
      },
      broadcast: (frame: Uint8Array) => {
        if (host.epoch !== epoch) return
        const to: number[] = []
        for (let peer = 0; peer < this.options.relays; peer++) if (peer !== host.id && this.transmit(host.id, peer, frame)) to.push(peer)
        if (to.length) this.checkSpoken(host, frame, to)
      },
      onFrame: (handler: (from: number, frame: Uint8Array) => void) => {
        host.receive = handler
      },
      onPeerConnected: (handler: (peer: number) => void) => {
        host.connected = handler
      },
      connectedPeers: () => this.hosts.filter((h) => h !== host && h.up && !this.cut(host.id, h.id)).map((h) => h.id),
      queuedBytes: () => 0,
    }
    const secretKey = this.secrets[host.id] as Uint8Array
    const conflictingPayload = (round: number): Uint8Array | undefined => {
      const pair = this.workload.twins[round % Math.max(1, this.workload.twins.length)]
      return pair ? encodeEnvelope(pair[round % 2] as Envelope) : undefined
    }
    host.node = new RelayNode({
      cluster: this.cluster,
      committee: this.committee,
      me: host.id,
      secretKey,
      storage: { kv: observed(host.kv, (written) => this.checkWrite(host, written)), journal: host.journal },
      clock,
      crypto: this.crypto,
      mesh: host.strategy ? byzantineMesh(mesh, host.strategy, { me: host.id, committee: this.committee, secretKey, crypto: this.crypto, conflictingPayload }) : mesh,
      logger: this.log.child({ relay: host.id, epoch }),
      leaderTimeoutMs: 300,
      syncIntervalMs: 500,
      // Every space's state hash recomputed from scratch after each commit (the audit's own check).
      verifyStateHashes: true,
      ...(this.options.skipOwnLastAsk ? { ownLastTimeoutMs: 0 } : {}),
      gcDepth: this.gcDepth,
      snapshotEveryBatches: SNAPSHOT_EVERY_BATCHES,
      // Replicas leave memory and come back from snapshot records often, at different times on
      // different relays: their audits must agree all the same.
      spaceIdleMs: SPACE_IDLE_MS,
      // (A long outage keeps the least a relay accepts, whatever retainRounds says.)
      retention: { blockRounds: this.options.longOutage ? 4 * this.gcDepth : Math.max(4 * this.gcDepth, this.options.retainRounds ?? 0) },
      onFatal: (err) => {
        const relay = `relay ${host.id}${host.strategy ? ` (${host.strategy})` : ''}`
        // The relay's own check after its drain may see a broken core before checkConsensus does: said alike.
        const what = err instanceof ConsensusInvariantError ? ' broke a consensus invariant:' : ':'
        this.fatal ??= err instanceof Violation ? err : new Violation(`${relay}${what} ${err instanceof Error ? err.message : String(err)}`)
      },
    })
    this.nodes.push(host.node)
    host.up = true
    host.accepted = new Map()
    try {
      await host.node.start()
    } catch (err) {
      throw new Violation(`relay ${host.id} could not start from its store: ${err instanceof Error ? err.message : String(err)}`)
    }
    for (const peer of this.hosts) if (peer !== host && peer.up) this.connect(host, peer)
    if (this.clients) {
      const lie = host.strategy ? this.clientLie : null
      host.sessions = new ClientSessions(host.node, DEFAULT_API_LIMITS, this.log.child({ relay: host.id, epoch, api: true }), lie ? new ClientFacingLiar([lie], { secretKey, setTimeout: (fn, ms) => clock.setTimer(ms, fn) }) : undefined)
    }
  }

  /** Two relays' connections (one each way) open after a network delay; each tells its relay. */
  private connect(a: Host, b: Host): void {
    if (this.cut(a.id, b.id)) return
    this.queue.push(this.now + this.delay(), { kind: 'connect', node: a.id, epoch: a.epoch, peer: b.id })
    this.queue.push(this.now + this.delay(), { kind: 'connect', node: b.id, epoch: b.epoch, peer: a.id })
  }

  /** The disk finishes each write after a short while, in order (MemoryKv resolves them in the order issued). */
  private diskWrite(node: number, done: () => void): void {
    const host = this.hosts[node] as Host
    // Usually fast, sometimes a sync stalls (and every write after it waits): crashes then lose writes.
    const latency = 0.05 + this.disk.exp(0.5) + (this.disk.chance(0.05) ? 20 + this.disk.exp(30) : 0)
    this.queue.push(this.now + latency, { kind: 'disk', node, epoch: host.epoch, done })
    // Halfway through the write: its blocks are journaled and sent, its transaction not durable.
    if (host.crashAtNextWrite) this.queue.push(this.now + latency / 2, { kind: 'chaos', action: () => this.crash(node) })
  }

  /** Crashes, restarts and partitions happen at times chosen by the seed, while clients are still submitting. */
  private planChaos(): void {
    const { crash, partition, relays, byzantine } = this.options
    const at = (fraction: number, action: () => void | Promise<void>) => this.queue.push(this.duration * fraction, { kind: 'chaos', action })
    const correct = Array.from({ length: relays - byzantine }, (_, i) => i)
    // At most f relays are faulty at once: crashes are staggered when Byzantine relays already use the budget.
    const budget = Math.max(1, this.f - byzantine)
    for (let i = 0; i < crash; i++) {
      const victim = correct[(this.rng.int(0, correct.length - 1) + i) % correct.length] as number
      if (i === 0 && this.options.longOutage) {
        this.longOutage = { victim, lastRound: 0 }
        at(0.05, () => {
          this.longOutage = { victim, lastRound: (this.hosts[victim] as Host).node.status().round as number }
          this.crash(victim)
          this.awaitPruned(victim)
        })
        continue
      }
      const slot = Math.floor(i / budget)
      const span = 0.4 / Math.ceil(crash / budget)
      // Half the crashes wait for a write in flight, so that they lose it.
      const midWrite = this.rng.chance(0.5)
      at(0.1 + slot * span + this.rng.next() * span * 0.3, () => this.crash(victim, midWrite))
      if (this.options.restartDelayMs === undefined) at(0.1 + slot * span + span * 0.8, () => this.restart(victim))
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
        this.partitioned = null
        for (const a of this.hosts) for (const b of this.hosts) if (group.has(a.id) && !group.has(b.id) && a.up && b.up) this.connect(a, b)
      })
    }
  }

  /** A process killed: its memory and the writes its disk had not finished are gone. */
  private crash(id: number, midWrite = false): void {
    const host = this.hosts[id] as Host
    if (!host.up) return
    if (midWrite && host.kv.unwritten === 0) {
      host.crashAtNextWrite = true
      return
    }
    host.crashAtNextWrite = false
    trace(`t=${this.now.toFixed(0)} crash ${id} (${host.kv.unwritten} writes lost)`)
    this.lostWrites += host.kv.unwritten
    host.up = false
    host.epoch++
    host.receive = undefined
    host.connected = undefined
    // Its clients' connections drop with it.
    host.sessions = undefined
    for (const w of host.wires) w.cut()
    host.wires.clear()
    // What it held for unreachable peers was in its memory.
    host.held.clear()
    host.kv.crash()
    if (this.options.loseJournalOnCrash || this.options.loseStoreOnCrash) host.journal = new MemoryJournal()
    if (this.options.loseStoreOnCrash) host.kv = new MemoryKv((done) => this.diskWrite(id, done))
    if (this.options.restartDelayMs !== undefined) this.queue.push(this.now + this.options.restartDelayMs, { kind: 'chaos', action: () => this.restart(id) })
  }

  /** Restarts a long-outage victim once every correct peer that is up pruned past the round it stopped at, or at 55% of the run (while there is work). */
  private awaitPruned(victim: number): void {
    const last = this.longOutage?.lastRound ?? 0
    const peers = this.hosts.filter((h) => h.id !== victim && !h.strategy && h.up)
    const pruned = peers.length > 0 && peers.every((h) => (h.node.status().blocksKeptFrom as number) > last + this.gcDepth)
    if (pruned || this.now >= this.duration * 0.55) {
      this.queue.push(this.now + 1, { kind: 'chaos', action: () => this.restart(victim) })
      return
    }
    this.queue.push(this.now + 250, { kind: 'chaos', action: () => this.awaitPruned(victim) })
  }

  private async restart(id: number): Promise<void> {
    const host = this.hosts[id] as Host
    // A crash still waiting for a write when its restart is due never happened.
    host.crashAtNextWrite = false
    if (host.up) return
    trace(`t=${this.now.toFixed(0)} restart ${id}`)
    // A new process: nothing sent to the one before reaches it.
    host.epoch++
    if (this.options.loseBatchesOnRestart) {
      const batches = host.kv.table<[number, number]>(STORE_TABLES.batches)
      void host.kv.write(() => {
        for (const key of [...batches.getKeys()]) batches.remove(key)
      })
      host.kv.flush()
    }
    if (host.kv.table<string>(STORE_TABLES.snapshotHead).get('head')) this.restartsFromSnapshot++
    // The checkers go on from what its disk kept: what it lost, it must redo alike.
    host.checkedCommit = 0
    for (const anchor of host.kv.table<number>(STORE_TABLES.commits).getKeys({ reverse: true, limit: 1 })) host.checkedCommit = anchor
    host.decided.clear()
    host.stableIndex = 0
    for (const { value } of host.kv.table<[string, number, number]>(STORE_TABLES.attestations).getRange({ start: [SPACE, 0, 0], end: [SPACE, Number.MAX_SAFE_INTEGER, 0] })) {
      const a = decodeAttestation(storeRecords.attestation(value).attestation.bytes)
      for (const d of a.decisions) host.decided.add(toHex(d[0]))
      host.stableIndex = a.toIndex
    }
    await this.boot(host)
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
    // Timed by their own generator: the rest of the run's schedule is the same with or without them.
    const junkRng = new Rng(this.options.seed ^ 0x6a6e6b)
    this.workload.junk.forEach((_, i) => this.queue.push(Math.min(this.duration * 0.6, junkRng.exp(gap) * (i + 1) * 5), { kind: 'junk', index: i }))
  }

  // ---- events ----

  private async dispatch(ev: Event): Promise<void> {
    switch (ev.kind) {
      case 'deliver': {
        const host = this.hosts[ev.to] as Host
        // A connection does not survive its end's crash: what was in flight to it is lost.
        if (host.up && host.epoch === ev.epoch) host.receive?.(ev.from, ev.frame)
        return
      }
      case 'timer': {
        const host = this.hosts[ev.node] as Host
        if (host.up && host.epoch === ev.epoch && !ev.timer.cancelled) ev.timer.fire()
        return
      }
      case 'connect': {
        const host = this.hosts[ev.node] as Host
        if (!host.up || host.epoch !== ev.epoch) return
        this.sendHeld(host, ev.peer)
        host.connected?.(ev.peer)
        return
      }
      case 'disk': {
        const host = this.hosts[ev.node] as Host
        if (host.epoch !== ev.epoch) return
        ev.done()
        return
      }
      case 'submit':
        this.submit(ev.client, ev.index, ev.attempt)
        return
      case 'chaos':
      case 'client':
        await ev.action()
        return
      case 'junk':
        this.deliverEnvelope(ev.index % this.options.relays, this.workload.junk[ev.index] as Envelope)
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
    try {
      const { status } = host.node.submit(encodeEnvelope(env), 'sim')
      if (status !== 'queued') return
      host.accepted.set(env.idHex, this.now)
      if (!host.strategy && !this.firstAccepted.has(env.idHex)) this.firstAccepted.set(env.idHex, this.now)
    } catch (err) {
      if (!(err instanceof SteadError)) throw err
    }
  }

  private committedByAll(idHex: string): boolean {
    return this.committedByChecker.has(idHex) && this.hosts.every((h) => h.strategy || !h.up || h.decided.has(idHex))
  }

  private cut(a: number, b: number): boolean {
    return this.partitioned !== null && this.partitioned.has(a) !== this.partitioned.has(b)
  }

  /**
   * A correct relay never lets two blocks of its own for one round reach
   * its peers, also across crashes: what it sent must be durable first (its
   * journal), and a restart must take it back (the weakened
   * `loseJournalOnCrash` with `skipOwnLastAsk` shows this check catches a
   * relay that does not). A block lost on the way to every peer (a
   * partition) was never seen: a relay that lost its store cannot know of
   * it, and signing that round again harms nobody. With `loseStoreOnCrash`,
   * neither is one that reached only Byzantine relays: asking its peers is
   * best effort, and those need not answer (README, "A store lost").
   */
  private checkSpoken(host: Host, frame: Uint8Array, to: readonly number[]): void {
    if (host.strategy) return
    const message = decodeMessage(this.crypto, this.committee, frame, undefined, () => false)
    const blocks = message.kind === 'block' ? [message.block] : message.kind === 'blocks' ? message.blocks : []
    const seenByCorrect = to.some((peer) => !(this.hosts[peer] as Host).strategy)
    for (const b of blocks) {
      if (b.header.author !== host.id) continue
      const before = host.spoken.get(b.header.round)
      if (before === undefined) host.spoken.set(b.header.round, { digestHex: b.digestHex, seenByCorrect })
      else if (before.digestHex === b.digestHex) before.seenByCorrect ||= seenByCorrect
      else if (before.seenByCorrect || !this.options.loseStoreOnCrash) {
        this.fatal ??= new Violation(`relay ${host.id} sent two blocks for round ${b.header.round} (${before.digestHex.slice(0, 8)}, then ${b.digestHex.slice(0, 8)})`)
      }
    }
  }

  /** Puts a frame on its way to a peer; false when it is lost at once (a partition, a peer down). */
  private transmit(from: number, to: number, frame: Uint8Array): boolean {
    const receiver = this.hosts[to] as Host
    // A peer cut off by a partition, or down: the frame waits in the sender's bounded queue for
    // that peer (oldest dropped first) and goes out once a connection to it opens, as the real
    // mesh does. What was already on its way to a relay that crashes is lost with the connection.
    if (this.cut(from, to) || !receiver.up) {
      this.hold(this.hosts[from] as Host, to, frame)
      return true
    }
    this.queue.push(this.now + this.delay(), { kind: 'deliver', from, to, epoch: receiver.epoch, frame })
    return true
  }

  private hold(sender: Host, to: number, frame: Uint8Array): void {
    let q = sender.held.get(to)
    if (!q) sender.held.set(to, (q = { frames: [], bytes: 0 }))
    q.frames.push(frame)
    q.bytes += frame.length
    const cap = to === this.longOutage?.victim ? HELD_FRAMES_LONG_OUTAGE : HELD_FRAMES
    while (q.frames.length > cap || q.bytes > HELD_BYTES) {
      q.bytes -= (q.frames.shift() as Uint8Array).length
      this.heldDropped++
    }
  }

  /** A connection to `peer` opened: what `host` held for it goes out, in order. */
  private sendHeld(host: Host, peer: number): void {
    const q = host.held.get(peer)
    if (!q || this.cut(host.id, peer) || !(this.hosts[peer] as Host).up) return
    host.held.delete(peer)
    for (const frame of q.frames) this.transmit(host.id, peer, frame)
    this.replayed += q.frames.length
  }

  private delay(): number {
    let d = 1 + this.net.exp(8)
    // A lost message is retransmitted by the link after a timeout, perhaps more than once.
    while (this.net.chance(this.options.loss)) d += 100 + this.net.exp(50)
    return d
  }

  // ---- checkers: what each relay stored and attested ----

  /**
   * Every live relay's consensus core keeps its invariants between events
   * (ConsensusCore.checkInvariants; relay/src/consensus/invariants.ts), the
   * Byzantine relays' too: an honest core runs under their misbehaving mesh.
   */
  private checkConsensus(): void {
    const level = this.options.consensusChecks ?? 'full'
    if (level === 'off') return
    for (const h of this.hosts) {
      if (!h.up) continue
      try {
        h.node.checkInvariants(level)
      } catch (err) {
        if (!(err instanceof ConsensusInvariantError)) throw err
        throw new Violation(`relay ${h.id}${h.strategy ? ` (${h.strategy})` : ''} broke a consensus invariant: ${err.message}`)
      }
    }
  }

  /** What one write of a relay stores, as the checkers see it when the relay issues it (its disk may lose it at a crash: then the relay must redo it alike). */
  private checkWrite(host: Host, { puts, removes }: Written): void {
    if (host.strategy) {
      // Not checked (it may store anything), but what it attests counts towards the quorums clients gather.
      for (const { key, value } of puts.get(STORE_TABLES.attestations) ?? []) {
        if ((key as unknown[])[0] === SPACE) host.stableIndex = Math.max(host.stableIndex, decodeAttestation(storeRecords.attestation(value).attestation.bytes).toIndex)
      }
      return
    }
    // Starting over from a checkpoint (RelayStore.install) replaces every space's snapshot: the
    // commit records it writes are the checkpoint's window, which correct relays made.
    const installing = (puts.get(STORE_TABLES.snapshotHead) ?? []).some((p) => p.key === 'installed')
    if (installing) {
      trace(`t=${this.now.toFixed(0)} relay ${host.id} started over from a checkpoint`)
      // What clients handed it before is in the checkpoint's state, or theirs to resubmit.
      host.accepted.clear()
      this.installs++
    }
    // A relay catching up far behind its peers may prune, in the write that commits a block, blocks that old.
    const pruned = new Set((removes.get(STORE_TABLES.blockDigests) ?? []).map(String))
    for (const { key, value } of puts.get(STORE_TABLES.commits) ?? []) this.checkCommit(host, key as number, value, !installing, pruned)
    const chunks = puts.get(STORE_TABLES.attestationChunks) ?? []
    // (A write's attestations follow its commits: see RelayStore.write.)
    for (const { key, value } of puts.get(STORE_TABLES.attestations) ?? []) {
      const [space, fromIndex, round] = key as [string, number, number]
      if (space !== SPACE) continue
      const frames = chunks.filter((c) => (c.key as unknown[])[1] === fromIndex && (c.key as unknown[])[2] === round).flatMap((c) => storeRecords.chunk(c.value))
      this.checkAttestation(host, value, frames)
    }
  }

  /**
   * Correct relays store the same sequence of commits (same blocks in the
   * same order, same envelopes) and never order two blocks of one slot.
   */
  private checkCommit(host: Host, anchor: number, value: Uint8Array, madeHere: boolean, pruned: ReadonlySet<string>): void {
    const { ordered, payloadIds } = storeRecords.commit(value)
    const line = `${ordered.join(',')}|${payloadIds.join(',')}`
    trace(`t=${this.now.toFixed(0)} relay ${host.id} stored commit ${anchor}: ${ordered.length} blocks, ${payloadIds.length} envelopes`)
    const seen = this.canonicalCommits.get(anchor)
    if (seen === undefined) {
      // The first relay to commit at a round: after every commit correct relays made, never between.
      const last = this.commitOrder.at(-1) ?? 0
      if (anchor < last) throw new Violation(`relay ${host.id} committed at round ${anchor}, where the others made no commit (their commits go on to ${last})`)
      this.canonicalCommits.set(anchor, line)
      this.commitIndex.set(anchor, this.commitOrder.length)
      this.commitOrder.push(anchor)
    } else if (seen !== line) {
      throw new Violation(`relay ${host.id} commit at round ${anchor} is ${line.slice(0, 80)}, another relay's ${seen.slice(0, 80)}`)
    }
    const slots = host.kv.table<string>(STORE_TABLES.blockDigests)
    // (A checkpoint's window orders blocks this relay never had: the relays that made it stored them.)
    for (const digest of madeHere ? ordered : []) {
      const where = slots.get(digest)
      if (!where && pruned.has(digest)) continue
      if (!where) throw new Violation(`relay ${host.id} committed block ${digest.slice(0, 8)} at round ${anchor} without storing it`)
      const { round, author } = storeRecords.blockSlot(where)
      const slot = `${round}:${author}`
      const owner = this.orderedSlots.get(slot)
      if (owner !== undefined && owner !== digest) throw new Violation(`two blocks of relay ${author} round ${round} were ordered (${owner.slice(0, 8)} and ${digest.slice(0, 8)})`)
      this.orderedSlots.set(slot, digest)
    }
    host.checkedCommit = Math.max(host.checkedCommit, anchor)
  }

  /** Commits a relay made, as its store shows them: its position in the sequence every correct relay makes. */
  private commitsOf(host: Host): number {
    return host.checkedCommit === 0 ? 0 : (this.commitIndex.get(host.checkedCommit) ?? -1) + 1
  }

  /**
   * Correct relays sign the same attestation for each commit of the space
   * (same decisions, same stable index and state hash, same chain), and a
   * client replaying the attested commits reaches that state, keeping every
   * invariant.
   */
  private checkAttestation(host: Host, value: Uint8Array, frames: readonly Uint8Array[]): void {
    const { bytes } = storeRecords.attestation(value).attestation
    const a = decodeAttestation(bytes)
    const hex = toHex(bytes)
    const seen = this.canonicalAttestations.get(a.round)
    if (seen === undefined) {
      if (a.prevRound !== this.checkerRound) throw new Violation(`relay ${host.id} attested round ${a.round} after round ${a.prevRound}, but the space's last attested commit was at round ${this.checkerRound}`)
      this.canonicalAttestations.set(a.round, hex)
      this.replay(host, a.round, frames, a.toIndex, toHex(a.stateHash), a.decisions)
    } else if (seen !== hex) {
      throw new Violation(`relay ${host.id} attested round ${a.round} (stable index ${a.fromIndex} -> ${a.toIndex}) differently from another relay`)
    }
    for (const d of a.decisions) host.decided.add(toHex(d[0]))
    host.stableIndex = a.toIndex
  }

  /** The checker replica applies one attested commit, as a client does, and must reach the attested state. */
  private replay(host: Host, round: number, frames: readonly Uint8Array[], toIndex: number, stateHash: string, decisions: readonly AttestedDecision[]): void {
    const batch = frames.map((frame) => {
      const env = this.envelopeOf(frame)
      if (env instanceof SteadError) throw new Violation(`relay ${host.id} attested a commit carrying an invalid envelope (${env.reason})`)
      return env
    })
    const fromIndex = this.checker.stableIndex
    const result = this.checker.commit(batch, round)
    this.checkerRound = round
    // G4 and the audit: what the relays attest is what the audit decides (at most one of two twins committed).
    const decided = toHex(encode(result.decisions.filter((d) => d.kind !== 'superseded').map((d) => attestedDecision(d as Exclude<typeof d, { kind: 'superseded' }>))))
    if (decided !== toHex(encode(decisions))) throw new Violation(`relay ${host.id} attested decisions at round ${round} that the audit does not make`)
    for (const d of result.decisions) {
      if (d.kind === 'committed') {
        this.committedByChecker.add(d.env.idHex)
        this.clocks[d.clockVerified ? 'verified' : 'unverified']++
      }
      if (d.kind !== 'superseded') this.decidedByChecker.add(d.env.idHex)
      // The clocks honest clients compose must never be judged bad, wherever their deps are.
      if (d.kind === 'dropped' && d.reason === 'bad-clock' && this.honestSet.has(d.env.idHex)) throw new Violation(`the audit refused honest envelope ${d.env.idHex.slice(0, 8)}'s clock: ${d.detail}`)
    }
    const hash = toHex(this.checker.stableHash((b) => nodeCrypto.sha256(b)))
    if (!this.attested.record(round, fromIndex, this.checker.stableIndex, hash, result.decisions)) throw new Violation(`the checker's stable index moved from ${fromIndex} to ${this.checker.stableIndex} at round ${round}, not by the envelopes it committed`)
    if (this.checker.stableIndex !== toIndex || hash !== stateHash) {
      throw new Violation(`relay ${host.id} attested stable index ${toIndex} with state ${stateHash.slice(0, 8)} at round ${round}; replaying the attested commits gives ${this.checker.stableIndex} with ${hash.slice(0, 8)}`)
    }
    for (const key of this.checker.keys()) {
      if (this.checker.stable(key)?.invariantsHold() === false) throw new Violation(`stable ${key} breaks its invariant after round ${round}`)
    }
  }

  private envelopeOf(frame: Uint8Array): Envelope | SteadError {
    const key = toHex(nodeCrypto.sha256(frame))
    let v = this.envelopes.get(key)
    if (v === undefined) {
      try {
        v = openEnvelopeSync({ sha256: (d) => nodeCrypto.sha256(d), verify: (pk, msg, sig) => this.crypto.verify(pk, msg, sig) }, asSigned(decode(frame)))
      } catch (err) {
        if (!(err instanceof SteadError)) throw err
        v = err
      }
      this.envelopes.set(key, v)
    }
    return v
  }

  // ---- end of run ----

  private finalChecks(progressMark: Array<number | null> | null, endedIdle: boolean): void {
    if (endedIdle) this.clients?.finalChecks((b) => nodeCrypto.sha256(b))
    const correct = this.hosts.filter((h) => !h.strategy && h.up)
    // An idle cluster sends nothing: a correct relay left behind when the work stopped must still catch up
    // with every commit that carried envelopes (one left without an empty last commit has nothing to lose:
    // it decides that slot once there is work, and idle relays do not propose for an empty one).
    const last = this.commitOrder.findLast((anchor) => !(this.canonicalCommits.get(anchor) as string).endsWith('|')) ?? 0
    for (const h of endedIdle ? correct : []) {
      if (h.checkedCommit < last) throw new Violation(`relay ${h.id} ended behind: its last commit is at round ${h.checkedCommit}, the others' last with envelopes at ${last}`)
    }
    for (const h of correct) {
      const mark = progressMark?.[h.id]
      if (mark !== undefined && mark !== null && this.commitsOf(h) <= mark) throw new Violation(`relay ${h.id} had work but made no progress after the network healed (${this.commitsOf(h)} commits)`)
    }
    // G7: what a correct relay accepted from a client before the quiet period is decided by the end, and every
    // honest update its client kept resubmitting is committed.
    const quietFrom = this.duration * 0.7
    // (Not the Byzantine client's twins: it sends each once, and a relay owes nothing for one whose slot
    // its twin took, or that went in a block that expired unordered. Its author would have to resubmit.)
    const honest = this.honestSet
    for (const h of correct) {
      // Nor is an envelope behind a gap in its author's sequence decided until the gap fills or its wait runs out.
      const owed = [...h.accepted].filter(([id, at]) => {
        const env = this.workloadEnvelopes.get(id) as Envelope
        return honest.has(id) && at < quietFrom && !h.decided.has(id) && env.seq <= this.checker.nextSeq(env.authorId)
      })
      if (owed.length) throw new Violation(`relay ${h.id} never decided ${owed.length} envelope(s) clients sent it before the quiet period, e.g. ${owed[0]?.[0].slice(0, 8)} (${this.decidedByChecker.has(owed[0]?.[0] ?? '') ? 'decided' : 'undecided'} in the stable order)`)
    }
    // G4 of the audit itself (the relays attest what it decides, checked at each commit): of two twins, at most one committed.
    for (const [a, b] of this.twinIds) {
      if (this.committedByChecker.has(a) && this.committedByChecker.has(b)) throw new Violation(`both conflicting envelopes ${a.slice(0, 8)} and ${b.slice(0, 8)} entered the stable history`)
    }
    const lost = this.honestIds.filter((id) => (this.firstAccepted.get(id) ?? Infinity) < quietFrom && !this.decidedByChecker.has(id))
    if (lost.length) throw new Violation(`${lost.length} honest envelope(s) accepted before the quiet period were never decided, e.g. ${lost[0]?.slice(0, 8)}`)
  }
}
