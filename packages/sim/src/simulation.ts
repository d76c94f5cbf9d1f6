import { FILLER_CONTENT, SteadError, decodeAttestation, encodeEnvelope, sealEnvelope, toHex, type Crypto, type Envelope } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { ClientFacingLiar, ClientSessions, DEFAULT_API_LIMITS, MemoryJournal, MemoryKv, RelayNode, STORE_TABLES, storeRecords, type ClientLie, type ClusterConfig, type HostClock, type HostTimer } from '@stead/relay'
import { ConsensusInvariantError, byzantineMesh, decodeMessage, type ByzantineStrategy as Strategy, type Committee, type SyncCrypto } from '@stead/relay/consensus'
import pino, { type Logger } from 'pino'
import { EventQueue } from './queue.ts'
import { Violation } from './violation.ts'
import { Checkers, observed } from './checkers.ts'
import { FaultSchedule } from './faults.ts'
import { SimNetwork, type NetEvent } from './network.ts'
import { CountingCrypto } from './sim-crypto.ts'
import { TRACE, trace } from './trace.ts'
import { SdkClients } from './sdk-clients.ts'
import type { Wire } from './wire.ts'
import { Rng } from './rng.ts'
import { SIM_ADMIN, SPACE, type Workload } from './workload.ts'

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
  /** Whether SDK client 0 reads at a freshness bound (paced deltas); default true. */
  readonly sdkPaced?: boolean
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
  /** Valid clock votes any relay sent, and envelopes whose votes made a validator certificate. */
  readonly clockVotes: { readonly votes: number; readonly certified: number }
  /** Policy changes the audit committed, and units it rejected as unauthorized (see PolicyOracle). */
  readonly policy: { readonly changes: number; readonly unauthorized: number; readonly redeemed: number; readonly revokedDevice: number; readonly deleted: number }
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
  /** Paced deltas (BENDY's live stream) that reached the paced SDK client. */
  readonly pacedDeltas: number
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

type Event =
  | NetEvent
  | { kind: 'timer'; node: number; epoch: number; timer: { fire: () => void; cancelled: boolean; background: boolean } }
  | { kind: 'disk'; node: number; epoch: number; done: () => void }
  | { kind: 'submit'; client: number; index: number; attempt: number }
  | { kind: 'twin'; index: number }
  | { kind: 'policy'; index: number }
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
  /** It lost its store in a crash (and with it the clock votes it had cast). */
  wiped?: boolean
  readonly secretKey: Uint8Array
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
  /** Frames for each peer sent while it was unreachable, oldest first: sent once a connection to it opens (see SimNetwork.transmit). */
  held: Map<number, { frames: Uint8Array[]; bytes: number }>
  /** The client API's sessions of the running process, and the SDK clients' connections into them. */
  sessions: ClientSessions | undefined
  readonly wires: Set<Wire>
}

/** The lies of relay/src/faults/client-lies.ts a session tells (the others concern HTTP reads, which SDK clients here do not make). */
const SESSION_LIES: readonly ClientLie[] = ['lie-attest', 'withhold-commits', 'withhold-envelopes', 'forge-envelope', 'junk', 'slow', 'wrong-delta']
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
  private readonly disk: Rng
  private readonly crypto: CountingCrypto
  private readonly queue = new EventQueue<Event>()
  private readonly cluster: ClusterConfig
  private readonly committee: Committee
  private readonly hosts: Host[] = []
  /** Every RelayNode the run made (restarts make new ones): their metrics add up. */
  private readonly nodes: RelayNode[] = []
  private readonly log: Logger
  private now = 0
  private step = 0
  /** A relay's event loop failed (a broken invariant, a failed write): the run's violation. */
  private fatal: Violation | undefined
  /** What each relay stored and attested, checked against what the others did and a client's replay. */
  private readonly checks: Checkers
  private readonly network: SimNetwork
  private readonly faults: FaultSchedule
  /** The SDK clients, if the run has any, and what Byzantine relays tell them. */
  private readonly clients: SdkClients | undefined

  private readonly options: SimOptions
  private readonly workload: Workload
  /** Honest envelopes correct relays refused as unauthorized, and which relays did. */
  private readonly refusals = new Map<string, Set<number>>()
  constructor(options: SimOptions, workload: Workload) {
    this.options = options
    this.workload = workload
    this.rng = new Rng(options.seed)
    this.crypto = new CountingCrypto(options.memoizeVerification ?? true)
    const net = this.rng.fork()
    this.disk = this.rng.fork()
    const f = Math.floor((options.relays - 1) / 3)
    if (options.byzantine > f) throw new Error(`${options.byzantine} Byzantine relays exceed f = ${f} for N = ${options.relays}`)
    const secrets = Array.from({ length: options.relays }, (_, i) => nodeCrypto.sha256(new TextEncoder().encode(`sim-relay-${i}`)))
    const keys = secrets.map((s) => publicKeyOfSync(s))
    this.committee = options.weakQuorum ? { f, keys, directQuorum: 2 * f } : { f, keys }
    this.cluster = {
      f,
      relays: keys.map((publicKey, i) => ({ id: `r${i}`, publicKey, mesh: '/memory/sim', api: 'sim:0' })),
      // The workload's admin may hand the space over to a policy of its own (Workload.policy).
      spaces: new Map([[SPACE, { admins: [publicKeyOfSync(nodeCrypto.sha256(new TextEncoder().encode(SIM_ADMIN)))] }]]),
      openSpaces: false,
      newSpacesPerKeyPerHour: 100,
      spaceCreators: [],
      // Checkpoints every few GC depths, so relays take them (and a relay left far behind can install one).
      checkpointRounds: this.gcDepth,
    }
    this.log = TRACE ? pino({ level: 'debug' }, pino.destination({ sync: true })) : pino({ level: 'silent' })
    // A relay's clock votes are held to the rules while it is correct and keeps the store it voted from.
    this.checks = new Checkers(workload, this.crypto, () => this.now, this.committee, (relay) => !this.hosts[relay]?.strategy && !this.hosts[relay]?.wiped)
    this.faults = new FaultSchedule(options, f, this.duration, this.gcDepth, {
      now: () => this.now,
      at: (time, action) => this.queue.push(time, { kind: 'chaos', action }),
      crash: (relay, midWrite) => this.crash(relay, midWrite),
      restart: (relay) => this.restart(relay),
      round: (relay) => (this.hosts[relay] as Host).node.status().round as number,
      prunedThrough: (relay, round) => {
        const peers = this.hosts.filter((h) => h.id !== relay && !h.strategy && h.up)
        return peers.length > 0 && peers.every((h) => (h.node.status().blocksKeptFrom as number) > round)
      },
      partition: (group) => this.network.partition(group),
      heal: (group) => {
        this.network.partition(null)
        for (const a of this.hosts) for (const b of this.hosts) if (group.has(a.id) && !group.has(b.id) && a.up && b.up) this.network.connect(a, b)
      },
    })
    this.network = new SimNetwork(net, options.loss, this.hosts, () => this.now, (at, ev) => this.queue.push(at, ev), (relay) => this.faults.isLongOutageVictim(relay))
    for (let i = 0; i < options.relays; i++) {
      const host: Host = {
        id: i,
        strategy: i >= options.relays - options.byzantine ? options.strategy : null,
        secretKey: secrets[i] as Uint8Array,
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
          f,
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
          attestedState: (round) => this.checks.attested.after(round),
          committedAuthor: (index) => this.checks.attested.committedAuthor(index),
          refusedAny: (authorId) => this.checks.attested.refusedAny(authorId),
          attestedUpTo: (index) => {
            const reached = this.hosts.filter((h) => h.stableIndex >= index)
            return { all: reached.length, correct: reached.filter((h) => !h.strategy).length }
          },
          latestIndex: () => this.checks.latestIndex(),
          latestHash: () => this.checks.latestHash(),
        },
        clientRng,
        {
          count: sdkClients,
          updates: options.sdkUpdates ?? 12,
          durationMs: this.duration,
          crash: options.sdkClientCrash ?? true,
          paced: options.sdkPaced ?? true,
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
      this.faults.plan(this.rng)
      /** Per relay: its commits when the run turned quiet, if it had work then (null: nothing owed). */
      let progressMark: Array<number | null> | null = null
      this.queue.push(this.duration * 0.7, {
        kind: 'chaos',
        // Progress is owed after the mark only by relays with work left: an idle cluster makes no rounds.
        action: () => {
          progressMark = this.hosts.map((h) => (h.up && h.node.busy ? this.checks.commitsOf(h) : null))
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
        if (this.now > this.duration && this.hosts.every((h) => h.strategy || !h.up || !h.node.busy) && !this.inFlightToCorrect() && (this.clients?.settled((b) => nodeCrypto.sha256(b)) ?? true)) {
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
      anchors: this.hosts.map((h) => this.checks.commitsOf(h)),
      committedEnvelopes: Math.min(...correct.map((h) => h.stableIndex)),
      honestEnvelopes: this.checks.honestIds.length,
      clocks: { ...this.checks.counts.clocks },
      clockVotes: { ...this.checks.clockVotes.counts },
      policy: { ...this.checks.policy.seen },
      rejectedMessages: [...rejected.values()].reduce((a, b) => a + b, 0),
      rejectedReasons: Object.fromEntries([...rejected].sort()),
      snapshots,
      restartsFromSnapshot: this.faults.restartsFromSnapshot,
      checkpointInstalls: this.checks.counts.installs,
      replayedFrames: this.network.replayed,
      droppedHeldFrames: this.network.droppedHeld,
      lostWrites: this.faults.lostWrites,
      endedIdle,
      ...(endedIdle ? {} : { busyAtEnd: this.busyNow() }),
      prunedBelowRound: Math.max(...this.hosts.map((h) => h.node.status().blocksKeptFrom as number)),
      signatures: { ...this.crypto.counts },
      clientLie: this.clientLie,
      safeUpdates: { ...(this.clients?.safeOutcomes ?? { committed: 0, rejected: 0 }) },
      clientBlames: this.clients?.blamed ?? 0,
      pacedDeltas: this.clients?.pacedDeltas ?? 0,
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
        this.checkVotes(host, frame)
        if (this.network.transmit(host.id, to, frame)) this.checkSpoken(host, frame, [to])
      },
      broadcast: (frame: Uint8Array) => {
        if (host.epoch !== epoch) return
        this.checkVotes(host, frame)
        const to: number[] = []
        for (let peer = 0; peer < this.options.relays; peer++) if (peer !== host.id && this.network.transmit(host.id, peer, frame)) to.push(peer)
        if (to.length) this.checkSpoken(host, frame, to)
      },
      onFrame: (handler: (from: number, frame: Uint8Array) => void) => {
        host.receive = handler
      },
      onPeerConnected: (handler: (peer: number) => void) => {
        host.connected = handler
      },
      connectedPeers: () => this.hosts.filter((h) => h !== host && h.up && !this.network.cut(host.id, h.id)).map((h) => h.id),
      queuedBytes: () => 0,
    }
    const secretKey = host.secretKey
    const conflictingPayload = (round: number): Uint8Array | undefined => {
      const pair = this.workload.twins[round % Math.max(1, this.workload.twins.length)]
      return pair ? encodeEnvelope(pair[round % 2] as Envelope) : undefined
    }
    const twinPair = (round: number): Uint8Array[] => (this.workload.twins[round % Math.max(1, this.workload.twins.length)] ?? []).map((e) => encodeEnvelope(e))
    host.node = new RelayNode({
      cluster: this.cluster,
      committee: this.committee,
      me: host.id,
      secretKey,
      storage: { kv: observed(host.kv, (written) => this.checks.checkWrite(host, written)), journal: host.journal },
      clock,
      crypto: this.crypto,
      mesh: host.strategy ? byzantineMesh(mesh, host.strategy, { me: host.id, committee: this.committee, secretKey, crypto: this.crypto, conflictingPayload, twinPair }) : mesh,
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
    for (const peer of this.hosts) if (peer !== host && peer.up) this.network.connect(host, peer)
    if (this.clients) {
      const lie = host.strategy ? this.clientLie : null
      host.sessions = new ClientSessions(host.node, DEFAULT_API_LIMITS, this.log.child({ relay: host.id, epoch, api: true }), lie ? new ClientFacingLiar([lie], { secretKey, setTimeout: (fn, ms) => clock.setTimer(ms, fn) }) : undefined)
    }
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
    this.faults.crashed(host.kv.unwritten)
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
    if (this.options.loseStoreOnCrash) {
      host.kv = new MemoryKv((done) => this.diskWrite(id, done))
      // It forgot the clock votes it cast: from now on it may vote against them, as a faulty relay may.
      host.wiped = true
    }
    if (this.options.restartDelayMs !== undefined) this.queue.push(this.now + this.options.restartDelayMs, { kind: 'chaos', action: () => this.restart(id) })
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
    this.faults.restarted(Boolean(host.kv.table<string>(STORE_TABLES.snapshotHead).get('head')))
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
    // The admin's policy changes, spread over the same 60%, in order: the first before most updates.
    const changes = this.workload.policy.length
    this.workload.policy.forEach((_, i) => this.queue.push(this.duration * 0.6 * ((i + 0.1) / changes), { kind: 'policy', index: i }))
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
        this.network.sendHeld(host, ev.peer)
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
        await this.submit(ev.client, ev.index, ev.attempt)
        return
      case 'chaos':
      case 'client':
        await ev.action()
        return
      case 'junk':
        this.deliverEnvelope(ev.index % this.options.relays, this.workload.junk[ev.index] as Envelope)
        return
      case 'policy': {
        // Each to two relays (one may be down, and a lost change would leave the rest waiting on its gap),
        // the envelopes of one group to different ones.
        for (const [k, env] of (this.workload.policy[ev.index] as readonly Envelope[]).entries()) {
          this.deliverEnvelope((ev.index + 2 * k) % this.options.relays, env)
          this.deliverEnvelope((ev.index + 2 * k + 1) % this.options.relays, env)
        }
        return
      }
      case 'twin': {
        // The Byzantine client sends each twin to a different relay.
        const [a, b] = this.workload.twins[ev.index] as [Envelope, Envelope]
        this.deliverEnvelope(this.rng.int(0, this.options.relays - 1), a)
        this.deliverEnvelope(this.rng.int(0, this.options.relays - 1), b)
        return
      }
    }
  }

  private async submit(client: number, index: number, attempt: number): Promise<void> {
    const list = this.workload.honest[client] as Envelope[]
    let env = list[index] as Envelope
    if (this.committedByAll(env.idHex)) return
    // Refused for good by f+1 correct relays (the space's policy no longer lets its author write): the
    // client takes its sequence number with a filler, as the SDK does, or its later envelopes wait for ever.
    if ((this.refusals.get(env.idHex)?.size ?? 0) > this.committee.f) {
      const filler = await fillerFor(env, client)
      list[index] = filler
      this.checks.replaced(env.idHex, filler)
      env = filler
    }
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
      this.checks.noteAccepted(host, env.idHex, this.now)
    } catch (err) {
      if (!(err instanceof SteadError)) throw err
      if (err.reason !== 'unauthorized' || host.strategy) return
      let by = this.refusals.get(env.idHex)
      if (!by) this.refusals.set(env.idHex, (by = new Set()))
      by.add(relay)
    }
  }

  private committedByAll(idHex: string): boolean {
    return this.checks.isCommitted(idHex) && this.hosts.every((h) => h.strategy || !h.up || h.decided.has(idHex))
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
  /** Clock votes any relay sends (a Byzantine one's too: they go through here under its decorator) go to the checker. */
  private checkVotes(host: Host, frame: Uint8Array): void {
    if (!isClockVotes(frame)) return
    const message = decodeMessage(this.crypto, this.committee, frame, undefined, () => false)
    if (message.kind === 'clock-votes') this.fatal ??= this.checks.clockVotes.record(host.id, message.votes)
  }

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

  // ---- end of run ----

  private finalChecks(progressMark: Array<number | null> | null, endedIdle: boolean): void {
    if (endedIdle) this.clients?.finalChecks((b) => nodeCrypto.sha256(b))
    this.checks.finalChecks(
      this.hosts.filter((h) => !h.strategy && h.up),
      progressMark,
      endedIdle,
      this.duration * 0.7,
    )
  }
}

/** The envelope that takes a refused one's sequence number (FILLER_CONTENT), signed by workload client `client`. */
async function fillerFor(refused: Envelope, client: number): Promise<Envelope> {
  const secretKey = nodeCrypto.sha256(new TextEncoder().encode(`sim-client-${client}`))
  return sealEnvelope(nodeCrypto, { secretKey, publicKey: publicKeyOfSync(secretKey) }, { space: refused.space, seq: refused.seq, base: refused.base, clock: refused.clock, deps: refused.deps, ...FILLER_CONTENT })
}

/** The first bytes of an encoded clock-votes mesh message: a 2-element array whose first element is the 11-character string. */
const CLOCK_VOTES_HEAD = new Uint8Array([0x92, 0xab, ...new TextEncoder().encode('clock-votes')])

/** Whether a mesh frame is a clock-votes message, from its first bytes. */
function isClockVotes(frame: Uint8Array): boolean {
  return frame.length > CLOCK_VOTES_HEAD.length && CLOCK_VOTES_HEAD.every((b, i) => frame[i] === b)
}
