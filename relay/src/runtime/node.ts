import { randomBytes } from 'node:crypto'
import { SteadError, authorIdOf, followEpochs, toHex, welcomeBytes, systemClock, StableAudit, type ApplicationValidator, type EpochCertificate, type EpochChange, type EpochCommittee, type Envelope, type RelayCommittee, type HostClock, type HostTimer, type Signed } from '@stead/core'
import { nodeCrypto, signSync, verifySync } from '@stead/core/node'
import { followedCertificates } from './epochs.ts'
import type { Logger } from 'pino'
import { Admission, MAX_CLOCK_AHEAD_MS, exact } from './admission.ts'
import { RelayCheckpoints, type FetchedRelayCheckpoint } from './checkpoints.ts'
import { ClientNews } from './client-news.ts'
import { ClientReads } from './client-reads.ts'
import { ClockVotes } from './clock-votes.ts'
import { committeeOf, relayCommitteeOf, type ClusterConfig } from '../process/config.ts'
import { EpochHandOver } from './hand-over.ts'
import { COMMITTEE_SPACE } from './committee-proposals.ts'
import { ConsensusCore, decodeMessage, encodeMessage, epochOf, genesisRoundOf, payloadInfoOf, signStatement, type Block, type ByzantineStrategy, type Committee, type Message, type Output, type SyncCrypto, type TimerName } from '../consensus/index.ts'
import type { Mesh } from '../mesh/types.ts'
import type { MeshLimits } from '../mesh/budget.ts'
import { MemoryBudget } from './budget.ts'
import { readiness, roundsBehind, type HealthNumbers } from './health.ts'
import { Ledger } from './ledger.ts'
import type { SpaceQuota } from './space-quota.ts'
import { Metrics, type MetricsSnapshot } from './metrics.ts'
import { MESH_BACKLOG_BYTES, PeerServing } from './peer-serving.ts'
import { RelayStore, encodeSpaceSnapshot, type StoreBacking, type CheckpointWrite, type HistoryRecord, type SnapshotWrite, type WriteBatch } from '../store/store.ts'

export { MAX_CLOCK_AHEAD_MS }
export const relayCrypto: SyncCrypto = { sign: signSync, verify: verifySync, sha256: (d) => nodeCrypto.sha256(d) }

export interface RelayNodeOptions {
  /** The cluster as it stands in this relay's epoch (clusterInEpoch: the file's settings, the epoch's committee). */
  readonly cluster: ClusterConfig
  /**
   * The epoch the committee rules, the round it started after and the
   * digest of the checkpoint it started from, as its certificate names them
   * (default: the cluster file's epoch 0, from round 0).
   */
  readonly epoch?: { readonly epoch: number; readonly startRound: number; readonly stateDigest?: Uint8Array }
  /**
   * The epoch ended (a committee change was decided, and 2f+1 of the
   * committee certified it): the certificate is durable in the store, and
   * this relay takes no more work. The host stops it and starts the next
   * epoch's relay on the same store (see storedEpoch). Without it the relay
   * stays at the epoch's end.
   */
  readonly onEpochEnd?: (change: EpochChange, cert: EpochCertificate) => void
  readonly me: number
  readonly secretKey: Uint8Array
  /** Where the LMDB store and its journal live; required unless `storage` is given. */
  readonly dataDir?: string
  readonly mesh: Mesh
  readonly logger: Logger
  /** The store's backing (default: LMDB and a journal file in `dataDir`); the simulator gives a MemoryKv and a MemoryJournal. */
  readonly storage?: StoreBacking
  /** Time and timers (default: the system clock); the simulator gives simulated time. */
  readonly clock?: HostClock
  /** Signatures and hashes (default: node:crypto); the simulator shares verdicts between its relays. */
  readonly crypto?: SyncCrypto
  /**
   * Only reported in the status: the misbehaviour itself is a decorator on
   * the mesh (`byzantineMesh`), which `runRelay` puts in place.
   */
  readonly byzantine?: ByzantineStrategy
  /** The committee the consensus core runs (default: the cluster file's); the simulator weakens its quorum to prove its checks catch that. */
  readonly committee?: Committee
  /** Consensus timings; defaults suit a LAN or loopback cluster. */
  readonly leaderTimeoutMs?: number
  readonly syncIntervalMs?: number
  readonly gcDepth?: number
  /** Least time between rounds that no safe update waits for (ConsensusCoreConfig.paceMs); 0 turns pacing off. */
  readonly paceMs?: number
  /**
   * At start: how long to wait for 2f peers' word on its own latest block
   * (its store may have lost some) before proposing anyway
   * (ConsensusConfig.ownLastTimeoutMs). Default 5 s, as Sui; 0 does not ask.
   */
  readonly ownLastTimeoutMs?: number
  /** Bytes this relay may hold for clients: queued envelopes, send buffers, verification cache. Default 512 MiB. */
  readonly memoryBudgetBytes?: number
  /** The per-peer mesh budget's numbers (DEFAULT_MESH_LIMITS in src/mesh/budget.ts; `--limit mesh.<name>=<value>`). */
  readonly meshLimits?: Partial<MeshLimits>
  /**
   * A snapshot of the spaces' audit state is written after this many
   * committed batches (default 1,000), or at the first commit a minute
   * after the last one: a restart loads it and replays only the batches
   * since.
   */
  readonly snapshotEveryBatches?: number
  /** A space's replica unused this long leaves memory once its state is in a snapshot (see SpaceTable). Default 60 s. */
  readonly spaceIdleMs?: number
  /** How much history the store keeps past what recovery needs (pruned with each snapshot). */
  readonly retention?: Retention
  /** Called when the event loop fails (a store write failed, an invariant broke); the default exits the process. */
  readonly onFatal?: (err: unknown) => void
  /** Recompute each space's state hash from scratch after every commit and stop if it differs from the one kept (slow: the simulator's). */
  readonly verifyStateHashes?: boolean
  /**
   * How far ahead of this relay's clock a register write may be stamped
   * before the envelope is refused at the door as `clock-ahead` (default
   * 5 minutes). Clients stamp with the relays' time once
   * they heard one; this covers relay clocks disagreeing a little and a
   * device whose clock runs fast writing before it reached any relay.
   */
  readonly maxClockAheadMs?: number
  /**
   * Chrono's application validator, per space: a pure rule an envelope's
   * clock must pass before this relay votes for it (beyond the space's
   * write permission, always checked). Every relay of the cluster must run
   * the same rule: certificates take ceil((N+f+1)/2) votes.
   */
  readonly clockValidator?: (space: string) => ApplicationValidator<Envelope> | undefined
}

/** Something that wants a space's commits and fresh envelopes: a client session. */
export type { Subscriber } from './client-news.ts'

const GC_DEPTH = 50
/** How long a relay that starts with no block of its own waits for its peers' word on its latest (Sui waits 5 s too). */
const OWN_LAST_TIMEOUT_MS = 5000

/** How long a space's replica stays in memory unused (see SpaceTable). */
const SPACE_IDLE_MS = 60_000

/**
 * What a relay keeps beyond its latest snapshot, so others can catch up by
 * range instead of from a snapshot.
 */
export interface Retention {
  /** Consensus rounds of blocks kept for peers that fell behind (default 20,000; at least 4 GC depths, and two checkpoint intervals plus two GC depths). */
  readonly blockRounds?: number
  /** Per space, how many stable indexes of attested commits are kept for clients resuming (default 1,000,000). */
  readonly updates?: number
}

export const DEFAULT_RETENTION = { blockRounds: 20_000, updates: 1_000_000 } as const

/** Writes issued and not yet on disk past which the event loop waits for the disk. */
const MAX_WRITES_IN_FLIGHT = 32

/** The event loop of a relay: events waiting to be drained, the drain running, and writes on their way to disk. */
interface DrainState {
  queue: Array<() => Output[]>
  draining: boolean
  /** The drain running now, or the last one: stop waits for it. */
  run: Promise<void>
  /** Resolves once every write issued so far is on disk. */
  onDisk: Promise<void>
  writesInFlight: number
  stopped: boolean
  /** A checkpoint fetched from peers, to start over from before the next events (see drain). */
  install: FetchedRelayCheckpoint | undefined
}

/** When things last happened, for status, readiness and logs. */
interface Activity {
  lastCommitAt: number
  commits: number
  /** Since when envelopes have waited in the queue for a block (null: the queue is empty). */
  pendingSince: number | null
}

/**
 * A relay: the consensus core, driven by the mesh and timers, made durable
 * by the LMDB store, with one reliable replica per space auditing the
 * committed order and signing an attestation per commit.
 *
 * Events run one drain at a time: every event queued meanwhile goes through
 * the core, the resulting commits are audited, and everything that must be
 * durable is written: its blocks to the journal, all of it in one store
 * transaction. Messages to peers go once the journal has the blocks, and
 * clients' commit feeds once the transaction is durable (persist, then
 * speak; see RelayStore.write); the next events do not wait for the disk.
 */
export class RelayNode {
  readonly committee: Committee
  readonly metrics: Metrics
  readonly budget: MemoryBudget
  /** What clients read besides the commits they follow: heads, history pages, snapshots, deltas, proofs, feeds. */
  readonly reads: ClientReads
  /** Time and timers: the system's in a relay process, simulated in the simulator (sessions run on it too). */
  readonly clock: HostClock
  private readonly options: RelayNodeOptions
  private readonly crypto: SyncCrypto
  private store!: RelayStore
  private core!: ConsensusCore
  /** The deterministic state machine: the spaces' replicas auditing the committed order, and their attestations. */
  private readonly ledger: Ledger
  /** Whether an envelope may come in: verdicts, the spaces' policies, the door's checks. */
  private readonly admission: Admission
  /** What each peer may cost and be served; how far the cluster has come by their blocks. */
  private readonly peers: PeerServing
  /** Subscribers, decision watchers and attestation waiters: who hears what, once it may be said. */
  private readonly news = new ClientNews()
  private readonly checkpoints: RelayCheckpoints
  /** Chrono's validators on envelopes before any order, and the certificates their votes make. */
  private readonly clockVotes: ClockVotes
  /** The end of this epoch: the change's signatures gathered into its certificate. */
  private readonly handOver: EpochHandOver
  /** The consensus core's timers, by name and round. */
  private readonly timers = new Map<string, HostTimer>()
  /** The event loop's state: events waiting, the drain running, writes on their way to disk (see DrainState). */
  private readonly loop: DrainState = { queue: [], draining: false, run: Promise.resolve(), onDisk: Promise.resolve(), writesInFlight: 0, stopped: false, install: undefined }
  /** When things last happened, for status, readiness and logs (see Activity). */
  private readonly activity: Activity = { lastCommitAt: 0, commits: 0, pendingSince: null }
  /** Open client sessions, as the API counts them (see trackSessions). */
  private sessionCount: () => { open: number; addresses: number; keys: number } = () => ({ open: 0, addresses: 0, keys: 0 })

  constructor(options: RelayNodeOptions) {
    if ((options.dataDir === undefined) === (options.storage === undefined)) throw new SteadError('malformed', 'a RelayNode keeps its state in a dataDir or in a given storage: exactly one of them')
    this.options = options
    this.clock = options.clock ?? systemClock
    this.crypto = options.crypto ?? relayCrypto
    this.committee = options.committee ?? committeeOf(options.cluster, options.epoch)
    this.metrics = new Metrics(this.name, () => this.clock.now())
    this.metrics.observe(() => this.metricsSnapshot())
    this.budget = new MemoryBudget(options.memoryBudgetBytes ?? 512 * 1024 * 1024)
    this.budget.track('queue', () => this.core?.queuedBytes ?? 0)
    this.budget.track('store-held', () => this.store?.heldBlockBytes ?? 0)
    const store = (): RelayStore => this.store
    this.admission = new Admission({
      cluster: options.cluster,
      crypto: this.crypto,
      clock: this.clock,
      budget: this.budget,
      maxClockAheadMs: options.maxClockAheadMs ?? MAX_CLOCK_AHEAD_MS,
      replicaOf: (space) => this.ledger.spaces.read(space),
      policyOf: (space) => this.ledger.spaces.policyOf(space),
      spacesHeld: (user) => this.ledger.quota?.held(user) ?? 0,
    })
    this.ledger = new Ledger({
      crypto: this.crypto,
      secretKey: options.secretKey,
      clock: this.clock,
      admission: this.admission,
      store,
      spaceIdleMs: options.spaceIdleMs ?? SPACE_IDLE_MS,
      snapshotEveryBatches: options.snapshotEveryBatches ?? 1000,
      spacesPerUser: options.cluster.spacesPerUser,
      verifyStateHashes: options.verifyStateHashes ?? false,
      decided: (d) => {
        if (d.kind === 'committed') this.metrics.clocks.committed.inc({ verified: String(d.clockVerified) })
        this.clockVotes.decided(d.env.space, d.env.idHex, d.env.authorId, d.env.seq)
        const waited = this.news.decided(d.env.idHex, this.clock.now())
        if (waited !== undefined) this.metrics.commitLatency.observe(waited / 1000)
      },
      snapshotTaken: () => this.metrics.snapshots.inc(),
      committee: this.epochCommittee,
    })
    this.budget.track('spaces', () => this.ledger.spaces.residentBytes, (bytes) => this.ledger.spaces.reclaim(bytes))
    this.peers = new PeerServing({
      committee: this.committee,
      crypto: this.crypto,
      clock: this.clock,
      mesh: options.mesh,
      metrics: this.metrics,
      log: this.log,
      admission: this.admission,
      store,
      nameOf: (i) => this.nameOf(i),
      limits: options.meshLimits,
    })
    this.budget.track('mesh-backlog', () => this.peers.budget.backlogBytes())
    this.reads = new ClientReads({
      committee: this.committee,
      me: this.me,
      secretKey: options.secretKey,
      crypto: this.crypto,
      clock: this.clock,
      ledger: this.ledger,
      admission: this.admission,
      news: this.news,
      store,
      send: (to, message) => this.options.mesh.send(to, encodeMessage(message)),
    })
    this.clockVotes = new ClockVotes({
      committee: this.committee,
      me: this.me,
      secretKey: options.secretKey,
      crypto: this.crypto,
      clock: this.clock,
      replica: (space) => this.ledger.replicaOrEmpty(space),
      application: (env) => this.admission.application(env, options.clockValidator),
      persist: (votes) => this.store.writeClockVotes(votes),
      broadcast: (message) => this.options.mesh.broadcast(encodeMessage(message)),
      cast: (space, votes) => this.news.votes(space, votes),
      certified: () => this.metrics.clocks.votes.inc({ result: 'certified' }),
      judged: (result, env, detail) => {
        this.metrics.clocks.votes.inc({ result })
        if (result !== 'voted') this.log.debug({ space: env.space, id: env.idHex, author: env.authorId, seq: env.seq, result, detail }, 'no clock vote')
      },
    })
    this.budget.track('clock-votes', () => this.clockVotes.bytes)
    this.handOver = new EpochHandOver({
      committee: this.committee,
      me: this.me,
      secretKey: options.secretKey,
      crypto: this.crypto,
      clock: this.clock,
      send: (to, message) => this.options.mesh.send(to, encodeMessage(message)),
      broadcast: (message) => this.options.mesh.broadcast(encodeMessage(message)),
      certified: (cert, change) => this.certified(cert, change),
    })
    const { spaces } = this.ledger
    this.checkpoints = new RelayCheckpoints({
      committee: this.committee,
      me: this.me,
      secretKey: options.secretKey,
      crypto: this.crypto,
      every: options.cluster.checkpointRounds,
      gcDepth: this.gcDepth,
      log: this.log,
      clock: this.clock,
      host: {
        spaces: () =>
          spaces.names().map((space) => {
            const starter = this.ledger.quota?.starterOf(space)
            return { space, stateHash: this.ledger.currentHead(space).stateHash, lastAttested: spaces.lastAttested(space), ...(starter === undefined ? {} : { starter }) }
          }),
        auditState: (space) => (spaces.read(space) as StableAudit).auditState(),
        send: (to, message) => this.options.mesh.send(to, encodeMessage(message)),
        broadcast: (message) => this.options.mesh.broadcast(encodeMessage(message)),
        openEnvelope: (signed) => this.admission.openOrThrow(signed),
        install: (checkpoint) => {
          this.loop.install = checkpoint
          if (!this.loop.draining) this.loop.run = this.drain()
        },
      },
    })
  }

  /** This relay's index in its epoch's committee. */
  get me(): number {
    return this.options.me
  }

  get publicKey(): Uint8Array {
    return this.committee.keys[this.me] as Uint8Array
  }

  /** This relay's name in the cluster file, e.g. "r1": what logs, metrics, status and errors call it. */
  get name(): string {
    return this.nameOf(this.me)
  }

  /** The live spaces each user holds, as the cluster counts them (see SpaceQuota; undefined in a cluster without spacesPerUser): for reading only. */
  get spaceQuota(): Pick<SpaceQuota, 'perUser' | 'held' | 'starterOf'> | undefined {
    return this.ledger.quota
  }

  private get log(): Logger {
    return this.options.logger
  }

  private get gcDepth(): number {
    return this.options.gcDepth ?? GC_DEPTH
  }

  async start(): Promise<void> {
    const { storage, dataDir } = this.options
    this.store = storage ? new RelayStore(storage) : RelayStore.open(dataDir as string)
    try {
      const journaled = this.store.absorbJournal(this.crypto, this.committee)
      if (journaled) this.log.info({ blocks: journaled }, 'took back the blocks the journal kept from before the last stop')
      this.load()
      this.clockVotes.load(this.store.clockVotesCast())
    } catch (err) {
      await this.store.close()
      if (err instanceof SteadError && err.reason === 'malformed') {
        throw new SteadError('malformed', `${dataDir ? `the data dir ${dataDir}` : 'the given storage'} holds records this relay cannot read (written by another version of stead-relay, or for another cluster); start with an empty data dir (stead-relay dev: --fresh). Cause: ${err.message}`, { cause: err })
      }
      throw err
    }
    this.options.mesh.onFrame((from, frame) => this.onFrame(from, frame))
    this.options.mesh.onPeerConnected((peer) => this.enqueue(() => this.core.onPeerConnected(peer)))
    await this.options.mesh.start()
    this.enqueue(() => this.core.start())
  }

  /**
   * Builds the consensus core and the spaces' replicas from the store: its
   * blocks and commit records, the latest snapshot, and the batches
   * committed after it. At start, and after installing a checkpoint.
   */
  private load(): void {
    const startedAt = this.clock.now()
    const recovered = this.store.recover(this.crypto, this.committee, this.gcDepth)
    const snapshotAfter = this.store.snapshotAfter()
    this.ledger.restore(this.store.snapshotSpaceRecords())
    // The recovered blocks' signatures were checked just now (RelayStore.recover) and cover their
    // payload, whose envelopes this relay checked before it accepted them: not again.
    this.core = this.admission.trustingSignatures(() => new ConsensusCore(
      {
        committee: this.committee,
        me: this.me,
        secretKey: this.options.secretKey,
        crypto: this.crypto,
        inspect: (frame) => this.admission.inspect(frame),
        gcDepth: this.gcDepth,
        leaderTimeoutMs: this.options.leaderTimeoutMs ?? 250,
        syncIntervalMs: this.options.syncIntervalMs ?? 500,
        ...(this.options.paceMs === undefined ? {} : { paceMs: this.options.paceMs }),
        ownLastTimeoutMs: this.options.ownLastTimeoutMs ?? OWN_LAST_TIMEOUT_MS,
      },
      recovered,
    ))
    this.checkpoints.load(this.store, this.core.committedRound, recovered.commits)
    // The stable state is the snapshot plus every batch committed after it: same order, same result.
    // (Batches carry no signature of their own: their envelopes are checked again.)
    let batches = 0
    for (const b of this.store.committedBatches(snapshotAfter ?? 0)) {
      this.ledger.replay(b.anchorRound, b.frames)
      batches++
    }
    this.log.info(
      { epoch: epochOf(this.committee), round: this.core.currentRound, clockRound: this.core.clockRound, committedRound: this.core.committedRound, snapshotBatch: snapshotAfter ?? null, batches, spaces: this.ledger.spaces.size, resident: this.ledger.spaces.residentCount, ms: this.clock.now() - startedAt },
      'recovered from store',
    )
    // Stopped at the epoch's end, before its certificate was complete: gather it again.
    if (this.ledger.epochEnd) this.endEpoch()
    if (this.joining) this.checkpoints.joining(genesisRoundOf(this.committee), this.options.epoch?.stateDigest)
  }

  /**
   * Whether this relay is in an epoch whose starting state it does not
   * hold (it joined the committee, or was behind when the epoch before
   * ended): it fetches the checkpoint the epoch started from, and audits
   * nothing and takes no work until it installed it.
   */
  private get joining(): boolean {
    const genesis = genesisRoundOf(this.committee)
    return genesis > 0 && this.checkpoints.heldRound < genesis
  }

  /**
   * The epoch's last commit is durable (or was, before a restart): sign the
   * change it decided, naming the checkpoint taken at that commit, and
   * gather the committee's signatures (see EpochHandOver).
   */
  private endEpoch(): void {
    const end = this.ledger.epochEnd
    const checkpoint = this.store.checkpoint()
    if (!end || this.handOver.change) return
    if (checkpoint?.anchorRound !== end.round) {
      // It installed a later checkpoint (peers of the next epoch vouched for it) while behind: it cannot
      // sign the change, whose checkpoint it never held; the certificate comes from its peers (see runRelay).
      this.log.warn({ epoch: epochOf(this.committee), round: end.round, checkpoint: checkpoint?.anchorRound ?? null }, "this epoch ended, but this relay holds a later checkpoint than the epoch's last commit: waiting for its peers' certificate")
      return
    }
    const change: EpochChange = { epoch: end.epoch, startRound: end.round, stateDigest: this.crypto.sha256(checkpoint.manifest), next: end.next }
    this.log.info({ epoch: epochOf(this.committee), round: end.round, next: end.epoch, proposal: end.id, relays: end.next.members.map((m) => m.id), f: end.next.f }, 'the committee decided a change: this epoch ends here; gathering its certificate')
    this.handOver.begin(change)
  }

  /** 2f+1 of the committee signed the change: keep the certificate, then hand over to the next epoch's relay. */
  private certified(cert: EpochCertificate, change: EpochChange): void {
    this.store.keepEpochCertificates(new Map([[change.epoch, cert]])).then(
      () => {
        if (this.loop.stopped) return
        this.log.info({ epoch: change.epoch, startRound: change.startRound, signers: cert.signatures.map((s) => this.nameOf(s.relay)) }, 'epoch certificate complete: moving to the next epoch')
        this.options.onEpochEnd?.(change, cert)
      },
      (err: unknown) => this.fail(err),
    )
  }

  /**
   * Starts over from a checkpoint peers vouch for (this relay fell behind
   * past their retention): the store takes it in one transaction, then the
   * core and replicas are built from the store as at a restart. Runs
   * between two drains, once every write issued before is on disk.
   */
  private async install(c: FetchedRelayCheckpoint): Promise<void> {
    await this.loop.onDisk
    const round = c.manifest.anchorRound
    // A peer that had not pruned yet may have brought it this far meanwhile: never go back. (A relay
    // joining an epoch is at its genesis round with none of its state: the epoch's first checkpoint is ahead of it.)
    if (round <= this.core.committedRound && !(this.joining && round >= genesisRoundOf(this.committee))) {
      this.log.info({ checkpoint: round, committedRound: this.core.committedRound }, 'caught up past the fetched checkpoint by range; not installing it')
      return
    }
    const spaces = c.spaces.map((s) => {
      const replica = StableAudit.fromAuditState(this.ledger.replicaOptions(s.space), s.state.state, round)
      return encodeSpaceSnapshot({ space: s.space, checkpoint: replica.checkpoint(), lastAttested: s.lastAttested, ...(s.starter === undefined ? {} : { starter: s.starter }) })
    })
    // It checked the checkpoint against f+1 statements (or the epoch certificate): it vouches for it in turn, and serves it.
    const statement = signStatement(this.crypto, this.options.secretKey, this.me, round, c.digest)
    const checkpoint: CheckpointWrite = { anchorRound: round, statement: statement.signed, manifest: c.manifestBytes, states: c.spaces.map((s) => ({ space: s.space, bytes: s.state.bytes })) }
    const before = this.core.committedRound
    await this.store.install({ checkpoint, spaces, commits: c.manifest.commits, blocksFrom: Math.max(0, round - this.gcDepth + 1) })
    for (const t of this.timers.values()) t.cancel()
    this.timers.clear()
    this.ledger.clear()
    this.metrics.steps.clear()
    this.admission.access.clear()
    this.activity.pendingSince = null
    this.load()
    this.log.info({ from: before, to: round, spaces: spaces.length }, 'started over from the checkpoint it fetched')
    this.loop.queue.push(() => this.core.start())
    // The blocks after the checkpoint went with the DAG it replaced; an idle cluster sends no new ones: ask for them.
    this.loop.queue.push(() => this.options.mesh.connectedPeers().map((to): Output => ({ type: 'send', to, message: { kind: 'sync', fromRound: round + 1 } })))
  }

  async stop(): Promise<void> {
    this.loop.stopped = true
    this.handOver.stop()
    this.checkpoints.stop()
    this.clockVotes.stop()
    this.news.stopped()
    for (const t of this.timers.values()) t.cancel()
    this.timers.clear()
    this.ledger.spaces.stop()
    // Each step logged at debug: a stop that stalls says where (CI saw one end with nothing left to wait on).
    this.log.debug('stop: closing the mesh')
    await this.options.mesh.stop()
    // Let a drain in flight finish, and its writes reach the disk, before the store closes.
    this.log.debug('stop: mesh closed; finishing the drain in flight')
    await this.loop.run
    this.log.debug('stop: waiting for writes to reach the disk')
    await this.loop.onDisk.catch(() => undefined)
    // Undefined when stopped without a start (or a start that failed before it opened the store).
    this.log.debug('stop: closing the store')
    await this.store?.close()
  }

  // ---- inputs ----

  /**
   * Validates a client's envelope, queues it for the next block and forwards
   * it to the space's subscribers. `onDecided` is called once, when the audit
   * decides it (committed or dropped), which may happen before this returns
   * (a one-relay cluster commits at once); `stopWatching` forgets it. `ask`
   * reaches the client that submitted it, for envelopes it cites that this
   * relay needs to vote for its clock (ClockVotes). A
   * decision calls its own watchers only, however many sessions are open.
   *
   * Throws SteadError: 'rate-limited', 'too-large', 'malformed',
   * 'bad-signature', 'unauthorized', 'conflict'; returns 'duplicate' for one
   * already decided or queued.
   */
  submit(frame: Uint8Array, origin = 'local', onDecided?: (idHex: string) => void, ask?: (space: string, ids: readonly string[]) => void): { status: 'queued' | 'duplicate'; idHex: string; stopWatching: () => void } {
    if (this.loop.stopped) throw new SteadError('closed', 'this relay is stopping')
    if (this.joining) throw new SteadError('rate-limited', `this relay is fetching the state epoch ${epochOf(this.committee)} started from; submit again in a moment, or to another relay`)
    // Worth another try (clients resubmit what is rate-limited): the next epoch's relays take it.
    if (this.ledger.epochEnd) throw new SteadError('rate-limited', `epoch ${epochOf(this.committee)} ended at round ${this.ledger.epochEnd.round}: the relays are moving to epoch ${this.ledger.epochEnd.epoch}; submit again in a moment`)
    // Queued and forwarded as an exact copy, not a view into the socket read it came in (see exact).
    const bytes = exact(frame)
    const { env, decided, charge } = this.admission.door(bytes, origin)
    if (decided === 'conflict') throw new SteadError('conflict', `${env.authorId}:${env.seq} was already decided for another envelope`)
    if (decided === 'duplicate') return { status: 'duplicate', idHex: env.idHex, stopWatching: () => undefined }
    const info = payloadInfoOf(env)
    // Watching starts before the core sees it: the decision may come before submit returns.
    const stopWatching = onDecided ? this.news.watchDecision(env.idHex, onDecided) : () => undefined
    const status = this.stopsOnInvariant(() => this.core.submit(bytes, info))
    if (status === 'conflict') {
      stopWatching()
      throw new SteadError('conflict', `another envelope holds ${env.authorId}:${env.seq}`)
    }
    if (charge && status === 'queued') charge()
    // Signed by its author, so it can go to the space's subscribers at once: prospective state needs no order.
    if (status === 'queued') this.news.envelope(env.space, bytes, env.idHex)
    if (status === 'queued') this.clockVotes.see(env, bytes, ask && ((ids) => ask(env.space, ids)))
    if (status === 'queued') this.activity.pendingSince ??= this.clock.now()
    this.news.submitted(env.idHex, this.clock.now())
    if (status === 'queued') this.metrics.steps.submitted(env.idHex, info.urgent)
    // Proposing is consensus work: an event of the drain, where a failed invariant stops the relay.
    if (status === 'queued') this.enqueue(() => this.core.onSubmitted())
    this.metrics.envelopesAccepted.inc()
    return { status, idHex: env.idHex, stopWatching }
  }

  /**
   * What this relay holds to prove the clock of envelope `idHex` of
   * `space`: its frame, the clock votes gathered here (this relay's and its
   * peers', checked), and, once a kept commit decided it, this relay's
   * attestation of that commit. A client unions several relays' answers
   * into a certificate. Undefined when this relay knows nothing of it.
   */
  clockEvidence(space: string, idHex: string): { frame: Uint8Array | undefined; votes: ReadonlyArray<readonly [number, number, Uint8Array]>; attestation: Signed | undefined } | undefined {
    const held = this.clockVotes.certificate(space, idHex)
    const decided = this.reads.decidedEnvelope(space, idHex)
    if (!held && !decided) return undefined
    return { frame: held?.frame ?? decided?.frame, votes: held?.votes ?? [], attestation: decided?.attestation }
  }

  /**
   * Runs core code outside the drain: a typed refusal (SteadError) goes to
   * the caller, anything else is a broken invariant, which stops the relay
   * (as in the drain) instead of answering a client and going on.
   */
  private stopsOnInvariant<T>(run: () => T): T {
    try {
      return run()
    } catch (err) {
      if (err instanceof SteadError) throw err
      this.fail(err)
      throw new SteadError('closed', 'this relay is stopping: an internal check failed (see its log)')
    }
  }

  /** A relay's name in the cluster file, by its committee index. */
  nameOf(index: number): string {
    return this.options.cluster.relays[index]?.id ?? `#${index}`
  }

  /** Lets the client API report its sessions (for /v1/status, /metrics and the shutdown log). */
  trackSessions(count: () => { open: number; addresses: number; keys: number }): void {
    this.sessionCount = count
  }

  /** The peers connected now, by name. */
  connectedPeerNames(): string[] {
    return this.options.mesh.connectedPeers().map((i) => this.nameOf(i))
  }

  get sessions(): { open: number; addresses: number; keys: number } {
    return this.sessionCount()
  }

  status(): Record<string, unknown> {
    const health = this.health()
    return {
      relay: this.name,
      publicKey: toHex(this.publicKey),
      epoch: epochOf(this.committee),
      epochStartRound: genesisRoundOf(this.committee),
      committeeChange: this.committeeChange(),
      round: this.core.currentRound,
      clockRound: this.core.clockRound,
      clusterRound: health.clusterRound,
      committedRound: this.core.committedRound,
      /** Blocks of rounds below this were pruned from the store (retention). */
      blocksKeptFrom: this.store.blocksKeptFrom,
      commits: this.activity.commits,
      lastCommitAt: this.activity.lastCommitAt ? new Date(this.activity.lastCommitAt).toISOString() : null,
      queuedEnvelopes: this.core.queuedEnvelopes,
      spaces: this.ledger.spaces.size,
      residentSpaces: this.ledger.spaces.residentCount,
      memory: { budget: this.budget.totalBytes, used: this.budget.usage() },
      peers: { connected: this.connectedPeerNames(), total: this.committee.keys.length - 1 },
      sessions: this.sessions,
      ready: readiness(health).ready,
      byzantine: this.options.byzantine ?? null,
    }
  }

  /**
   * Committee changes, as the stable order stands: the proposals for the
   * next epoch with their backers, the change decided (this epoch then ends
   * at its commit) with how many of the committee signed it so far, and
   * the committee's relays with the sequence number each one's next
   * request in $committee takes.
   */
  committeeChange(): CommitteeChangeStatus {
    const end = this.ledger.epochEnd
    const replica = this.ledger.spaces.read(COMMITTEE_SPACE)
    const sha256 = (b: Uint8Array): Uint8Array => this.crypto.sha256(b)
    return {
      proposals: end ? [] : this.ledger.openProposals().map((p) => ({ id: p.id, next: committeeJson(p.next), backers: p.backers })),
      decided: end ? { id: end.id, epoch: end.epoch, round: end.round, next: committeeJson(end.next), signers: this.handOver.signers, needed: 2 * this.committee.f + 1 } : null,
      members: this.options.cluster.relays.map((r) => ({ id: r.id, publicKey: toHex(r.publicKey), nextSeq: replica?.nextSeq(authorIdOf({ sha256 }, r.publicKey)) ?? 1 })),
    }
  }

  /** Whether consensus has work: envelopes to order, or blocks or leader slots not decided yet. An idle relay makes no rounds. */
  get busy(): boolean {
    return this.core?.busy ?? false
  }

  /** The numbers readiness is judged on (see health.ts), now. */
  health(now = this.clock.now()): HealthNumbers {
    // What this relay knows: its own blocks, and the rounds 2f+1 relays reached in its DAG.
    const round = Math.max(this.core?.currentRound ?? 0, (this.core?.clockRound ?? 1) - 1)
    const clusterRound = this.peers.clusterRound()
    return {
      f: this.committee.f,
      peers: this.committee.keys.length - 1,
      peersConnected: this.options.mesh.connectedPeers().length,
      round,
      clusterRound: Math.max(round, clusterRound),
      pendingEnvelopes: this.core?.queuedEnvelopes ?? 0,
      unorderedWork: this.core?.busy ?? false,
      pendingSince: this.activity.pendingSince,
      lastCommitAt: this.activity.lastCommitAt || null,
      historyPrunedPast: this.core?.historyPrunedPast ?? null,
      now,
    }
  }

  private metricsSnapshot(): MetricsSnapshot {
    const health = this.health()
    const connected = new Set(this.options.mesh.connectedPeers())
    const used = this.budget.usage()
    return {
      ready: readiness(health).ready,
      peers: this.options.cluster.relays.flatMap((_, i) => (i === this.me ? [] : [{ name: this.nameOf(i), connected: connected.has(i) }])),
      clusterRound: health.clusterRound,
      roundsBehind: roundsBehind(health),
      queuedBytes: {
        envelopes: used['queue'] ?? 0,
        'client-send': used['send-buffers'] ?? 0,
        'client-receive': used['receive-backlogs'] ?? 0,
        mesh: this.options.mesh.queuedBytes(),
      },
      memoryUsed: used,
      memoryBudget: this.budget.totalBytes,
      clientKeys: this.sessions.keys,
      spaces: { held: this.ledger.spaces.size, resident: this.ledger.spaces.residentCount },
      lastCommitAt: health.lastCommitAt,
      epoch: { epoch: epochOf(this.committee), proposals: this.ledger.epochEnd ? 0 : this.ledger.openProposals().length, decided: this.ledger.epochEnd !== undefined },
    }
  }

  /**
   * What a client needs to trust this cluster: f and each relay's id, key and
   * API address, as of this relay's epoch (which it names: a client that
   * trusts this committee follows later epochs' certificates from there).
   * Clients without a pinned cluster require every relay they reach to
   * serve the same descriptor.
   */
  clusterDescriptor(): { f: number; epoch: number; startRound?: number; relays: Array<{ id: string; publicKey: string; api: string }> } {
    const epoch = epochOf(this.committee)
    // A later epoch says where it began: a client that first meets the cluster then does not blame a relay for signing an earlier round with a key since rotated.
    return { f: this.options.cluster.f, epoch, ...(epoch > 0 ? { startRound: genesisRoundOf(this.committee) } : {}), relays: this.options.cluster.relays.map((r) => ({ id: r.id, publicKey: toHex(r.publicKey), api: r.api })) }
  }

  /** The certificates of the epoch changes before this relay's epoch, oldest first (see @stead/core's followEpochs). */
  epochCertificates(): EpochCertificate[] {
    return this.store.epochChain()
  }

  /** The epoch this relay runs and its committee: what certificates of later epochs are checked from. */
  get epochCommittee(): EpochCommittee {
    return { epoch: epochOf(this.committee), committee: relayCommitteeOf(this.options.cluster) }
  }

  /**
   * Keeps the certificates of epochs after this relay's that its peers
   * served, once checked from its committee (2f+1 of the committee before
   * each): it was cut off while they ended the epoch. They take effect when
   * the host starts the next epoch's relay. Returns the epoch they lead to.
   *
   * @throws SteadError as followEpochs for a certificate that fails (nothing is kept then).
   */
  async adoptEpochs(certs: readonly EpochCertificate[]): Promise<number> {
    const from = this.epochCommittee
    const followed = await followEpochs(nodeCrypto, from, certs)
    await this.store.keepEpochCertificates(followedCertificates(certs, from.epoch, followed.epoch))
    return followed.epoch
  }

  /** This relay's clock (ms since the epoch; simulated time in the simulator): what its `pong` tells clients, so they stamp register writes with the relays' time. */
  now(): number {
    return this.clock.now()
  }

  /** Signs a client's hello nonce (`welcomeBytes`): how a session proves this relay holds the key the cluster lists for it. */
  signWelcome(nonce: Uint8Array, clientKey: Uint8Array): Uint8Array {
    return this.crypto.sign(this.options.secretKey, welcomeBytes(nonce, clientKey, this.me))
  }

  /**
   * Checks the consensus core's invariants: 'cheap' (a few comparisons; the
   * drain runs it after every batch of events) or 'full' (walks the DAG and
   * the queues; the simulator runs it after every event). Throws
   * ConsensusInvariantError.
   */
  checkInvariants(level: 'cheap' | 'full'): void {
    this.core?.checkInvariants(level)
  }

  /** Resolves once every write issued so far is on disk (persist, then speak: what was said is durable by then). */
  whenDurable(): Promise<void> {
    return this.loop.onDisk
  }

  /** Whether events wait for the event loop, or a drain runs now. */
  get eventsPending(): boolean {
    return this.loop.queue.length > 0 || this.loop.draining
  }

  // ---- the event loop ----

  private onFrame(from: number, frame: Uint8Array): void {
    const admitted = this.peers.admitFrame(from, frame)
    if (!admitted) return
    const { kind, keepBlock } = admitted
    let message: Message
    try {
      // Blocks the core holds or will drop are not verified again (a relay catching up gets many twice).
      message = decodeMessage(this.crypto, this.committee, frame, undefined, (digestHex, round) => this.core.needsVerification(digestHex, round), keepBlock)
    } catch (err) {
      const reason = err instanceof SteadError ? err.reason : 'malformed'
      this.metrics.rejected.inc({ reason, source: 'mesh' })
      this.log.warn({ from: this.nameOf(from), reason, err: (err as Error).message }, 'rejected mesh frame')
      return
    }
    if (message.kind === 'head-ask' || message.kind === 'checkpoint-ask') {
      // Each answer costs a store read and a signature or a hash: queued like a request, after the
      // drain's consensus events, and charged one unit of the peer's serving budget.
      const ask = message
      const answer = (): Output[] => {
        if (this.peers.budget.charge(from, kind, 1, 0)) {
          if (!this.checkpoints.onMessage(from, ask)) this.reads.onPeerMessage(from, ask)
        }
        return []
      }
      if (this.peers.budget.queueRequest(from, kind, answer) && !this.loop.draining) this.loop.run = this.drain()
      return
    }
    if (message.kind === 'clock-votes') {
      // The envelopes first, so the votes for them find them held. Only of spaces this relay holds: a
      // new space's first envelope comes through a client's door or a block, where its quotas are charged.
      for (const { env, frame } of this.peers.votedEnvelopes(from, message.frames ?? [])) {
        if (!this.ledger.spaces.has(env.space) || this.ledger.spaces.read(env.space)?.decided(env)) continue
        const known = this.clockVotes.holds(env.idHex)
        this.clockVotes.see(env, frame)
        // A client's envelope another relay took, new here and not refused: its subscribers here see it now, not when a block brings it.
        if (!known && this.clockVotes.holds(env.idHex)) this.news.envelope(env.space, frame, env.idHex)
      }
      this.clockVotes.onVotes(from, message.votes)
      return
    }
    if (message.kind === 'epoch-vote') return this.handOver.onVote(from, message.epoch, message.sig)
    if (this.checkpoints.onMessage(from, message) || this.reads.onPeerMessage(from, message)) return
    if (message.kind === 'sync' || message.kind === 'fetch' || message.kind === 'own-last-ask') {
      // Served after the drain's consensus events, if the peer's serving budget has room by then.
      const request = message
      const budget = this.peers.budget
      if (budget.queueRequest(from, kind, () => (budget.mayServe(from, kind) ? this.core.onMessage(from, request) : []))) {
        if (!this.loop.draining) this.loop.run = this.drain()
      }
      return
    }
    if (message.kind === 'wake') {
      const payload = this.peers.wakePayload(from, message.payload)
      if (!payload.length) return
      message = { kind: 'wake', payload }
    }
    this.peers.sawBlocks(message)
    const event = message
    if (!this.peers.budget.holdBacklog(from, frame.length, MESH_BACKLOG_BYTES)) return
    this.enqueue(() => {
      this.peers.budget.releaseBacklog(from, frame.length)
      return this.core.onMessage(from, event)
    })
  }

  private onTimer(name: TimerName, round: number): void {
    this.timers.delete(`${name}:${round}`)
    this.enqueue(() => this.core.onTimer(name, round))
  }

  private enqueue(event: () => Output[]): void {
    if (this.loop.stopped) return
    this.loop.queue.push(event)
    if (!this.loop.draining) this.loop.run = this.drain()
  }

  private async drain(): Promise<void> {
    this.loop.draining = true
    try {
      while ((this.loop.queue.length || this.peers.budget.queuedRequests || this.loop.install) && !this.loop.stopped) {
        const install = this.loop.install
        if (install) {
          this.loop.install = undefined
          await this.install(install)
          continue
        }
        const events = this.loop.queue.splice(0)
        const outputs: Output[] = []
        for (const event of events) outputs.push(...event())
        // Peers' requests last: consensus events of this drain go first, and each request only
        // if its peer's serving budget still has room.
        this.peers.budget.runRequests((out) => outputs.push(...out))
        const write: {
          records: WriteBatch['records'][number][]
          batches: { anchorRound: number; frames: Uint8Array[] }[]
          attestations: WriteBatch['attestations'][number][]
          history: HistoryRecord[]
          checkpoint?: CheckpointWrite
        } = {
          records: [],
          batches: [],
          attestations: [],
          history: [],
        }
        const endedBefore = this.ledger.epochEnd !== undefined
        const joining = this.joining
        for (const o of outputs) {
          // After the epoch's last commit the core's later commits are not this epoch's: never
          // recorded nor audited, their envelopes are ordered again in the next epoch. A relay without
          // its epoch's starting state cannot audit them: it takes them from the checkpoint it fetches.
          const committed = o.type === 'commit' ? o.commit.anchorRound : o.type === 'persist' && o.record.kind === 'commit' ? o.record.anchorRound : undefined
          if (committed !== undefined && (joining || committed > (this.ledger.epochEnd?.round ?? Infinity))) continue
          if (o.type === 'persist') {
            write.records.push(o.record)
            if (o.record.kind === 'commit') this.checkpoints.recorded(o.record)
            if (o.record.kind === 'own-block' && o.record.payloadIds) this.metrics.steps.inOwnBlock(o.record.block.header.round, o.record.payloadIds)
          } else if (o.type === 'commit') {
            this.metrics.steps.committed(o.commit.anchorRound, o.commit.payloadIds)
            const attestations = this.ledger.audit(o.commit.anchorRound, o.commit.payload, write.history)
            // A commit that carried nothing and decided nothing changed no replica: replaying the
            // others at their rounds rebuilds the same state (gap timeouts are measured in rounds).
            if (o.commit.payload.length || attestations.length) write.batches.push({ anchorRound: o.commit.anchorRound, frames: [...o.commit.payload] })
            write.attestations.push(...attestations)
            const checkpoint = this.checkpoints.afterCommit(o.commit.anchorRound, write.checkpoint, this.ledger.epochEnd !== undefined)
            if (checkpoint) write.checkpoint = checkpoint
          }
        }
        const epochEnds = !endedBefore && this.ledger.epochEnd !== undefined
        // Envelopes that waited for what these commits decided may get their clock votes now.
        this.clockVotes.settle()
        const snapshot = this.ledger.snapshotDue(write.batches, (spaces) => this.pruneWith(spaces), epochEnds)
        // Persist, then speak, without stopping to listen: the write is issued now (its blocks
        // journaled, its transaction queued: LMDB commits writes in the order issued, several in
        // one sync when they queue up), and the next events run meanwhile.
        const durable = Promise.all([this.loop.onDisk, this.store.write(snapshot ? { ...write, snapshot } : write)]).then(() => undefined)
        this.loop.onDisk = durable
        this.loop.writesInFlight++
        // The drain's blocks are in the journal now (see RelayStore.write): peers hear of them at once;
        // clients, who read commits from the store, once the transaction is durable.
        // Work waits until it is ordered, not only until it is in a block (a stall with full blocks
        // counts), and peers' blocks bring work too, not only this relay's clients.
        if (!this.core.busy) this.activity.pendingSince = null
        else this.activity.pendingSince ??= this.clock.now()
        for (const o of outputs) this.act(o)
        // The core's cheap invariants, after every drain: a broken one stops the relay (see fail)
        // before it votes or attests on a state it cannot vouch for.
        this.core.checkInvariants('cheap')
        const spaces = new Set(write.attestations.map((a) => a.space))
        durable.then(
          () => {
            this.loop.writesInFlight--
            if (this.loop.stopped) return
            if (snapshot) this.ledger.spaces.saved(snapshot.spaces)
            this.ledger.spaces.armSweep()
            this.news.attested(spaces)
            if (epochEnds) {
              try {
                this.endEpoch()
              } catch (err) {
                this.fail(err)
              }
            }
          },
          (err: unknown) => this.fail(err),
        )
        // A disk slower than the traffic holds the loop here instead of piling up writes, and
        // a full journal until the store has all it holds.
        if (this.loop.writesInFlight >= MAX_WRITES_IN_FLIGHT || this.store.journalFull) await durable
      }
    } catch (err) {
      this.fail(err)
    } finally {
      this.loop.draining = false
    }
  }

  /**
   * What the store may let go of with a snapshot of `spaces`: consensus
   * records and blocks below the rounds recovery and lagging peers need,
   * and each space's commit feed below its retention.
   */
  private pruneWith(spaces: ReadonlyArray<{ readonly space: string; readonly stableIndex: number }>): Omit<SnapshotWrite, 'spaces'> {
    // Recovery reads commit records (and blocks) from 2 * gcDepth rounds below the last one on (RelayStore.recover).
    // A relay starting over from the latest checkpoint (at most about two checkpoint intervals
    // old) fetches the blocks from a GC window below it on.
    const gcDepth = this.gcDepth
    const keepRounds = Math.max(4 * gcDepth, 2 * this.options.cluster.checkpointRounds + 2 * gcDepth, this.options.retention?.blockRounds ?? DEFAULT_RETENTION.blockRounds)
    const keepUpdates = Math.max(1, this.options.retention?.updates ?? DEFAULT_RETENTION.updates)
    const feedBelow = spaces.flatMap(({ space, stableIndex }): Array<readonly [string, number]> => {
      const index = stableIndex - keepUpdates
      return index > 0 ? [[space, index]] : []
    })
    // At an epoch's end the core may have committed past the boundary already: recovery reads up to the boundary.
    const committed = Math.min(this.core.committedRound, this.ledger.epochEnd?.round ?? Infinity)
    return { commitsBelow: committed - 2 * gcDepth, blocksBelow: committed - keepRounds, feedBelow }
  }

  /** A relay that cannot persist must not keep accepting work: stop and let the operator's supervisor restart it. */
  private fail(err: unknown): void {
    if (this.loop.stopped) return
    this.loop.stopped = true
    const stop = (cause?: unknown): void => {
      this.log.fatal(cause === undefined ? { err } : { err, cause }, 'relay event loop failed; stopping to protect the store')
      ;(this.options.onFatal ?? (() => process.exit(1)))(err)
    }
    // LMDB rejects a failed write with a generic error whose reason is a separate promise.
    const commitError = (err as { commitError?: unknown } | null)?.commitError
    if (commitError instanceof Promise) commitError.then(() => stop(), stop)
    else stop()
  }

  private act(o: Output): void {
    switch (o.type) {
      case 'send':
        this.peers.send(o.to, o.message)
        break
      case 'broadcast':
        this.options.mesh.broadcast(encodeMessage(o.message))
        break
      case 'timer': {
        const key = `${o.name}:${o.round}`
        if (this.timers.has(key) || this.loop.stopped) break
        this.timers.set(key, this.clock.setTimer(o.afterMs, () => this.onTimer(o.name, o.round)))
        break
      }
      case 'accepted':
        this.onAccepted(o.block)
        break
      case 'commit':
        this.activity.commits++
        this.activity.lastCommitAt = this.clock.now()
        this.metrics.commits.inc()
        this.metrics.committedRound.set(o.commit.anchorRound)
        break
      case 'archive-request':
        this.peers.serveArchive(o.to, o.query)
        break
      case 'history-pruned':
        this.log.warn({ needed: o.needed, keptFrom: o.keptFrom }, 'behind the cluster by more than its retention window: peers no longer keep the rounds this relay needs')
        this.checkpoints.behind(this.core.committedRound)
        break
      case 'rejected':
        this.metrics.rejected.inc({ reason: o.reason, source: 'mesh' })
        this.log.warn({ from: this.nameOf(o.from), reason: o.reason, detail: o.detail }, 'consensus rejected input')
        break
      case 'expired':
        // Subscribers learn it from the commits that never carry these envelopes; their authors resubmit.
        this.log.debug({ round: o.block.round, author: this.nameOf(o.block.author), envelopes: o.payloadIds.length }, 'block expired unordered')
        break
      case 'persist':
        break
    }
    this.metrics.round.set(this.core.currentRound)
  }

  /** A peer's block entered the DAG: its envelopes go to subscribers (ours went when clients sent them). */
  private onAccepted(block: Block): void {
    this.metrics.blocks.inc()
    for (const frame of block.header.payload) {
      const env = this.admission.open(frame)
      if (env instanceof SteadError) continue
      // A block may carry an envelope already decided (ordered by another relay's block first): no news for subscribers then.
      if (this.ledger.spaces.read(env.space)?.decided(env)) continue
      this.news.envelope(env.space, frame, env.idHex)
      this.clockVotes.see(env, frame)
    }
  }

}

/** A committee as status pages and operators read it: the cluster file's shape. */
export interface CommitteeJson {
  readonly f: number
  readonly relays: ReadonlyArray<{ readonly id: string; readonly publicKey: string; readonly api: string; readonly mesh: string; readonly peers?: string }>
}

/** What `committeeChange` reports (GET /v1/status's committeeChange). */
export interface CommitteeChangeStatus {
  readonly proposals: ReadonlyArray<{ readonly id: string; readonly next: CommitteeJson; readonly backers: readonly string[] }>
  readonly decided: { readonly id: string; readonly epoch: number; readonly round: number; readonly next: CommitteeJson; readonly signers: number; readonly needed: number } | null
  /** The committee's relays, each with the sequence number its next request in $committee takes. */
  readonly members: ReadonlyArray<{ readonly id: string; readonly publicKey: string; readonly nextSeq: number }>
}

function committeeJson(c: RelayCommittee): CommitteeJson {
  return { f: c.f, relays: c.members.map((m) => ({ id: m.id, publicKey: toHex(m.publicKey), api: m.api, mesh: m.mesh, ...(m.peers ? { peers: m.peers } : {}) })) }
}

/** A fresh 32-byte nonce for a client challenge. */
export function challengeNonce(): Uint8Array {
  return new Uint8Array(randomBytes(32))
}
