import { randomBytes } from 'node:crypto'
import {
  StableAudit,
  SteadError,
  authorIdOf,
  type Authorize,
  asSigned,
  decode,
  encode,
  historyPageBytes,
  attestedDecision,
  batchDigest,
  decodeAttestation,
  encodeAttestation,
  encodeObjectProof,
  judgeClock,
  latestRegisterStamp,
  openEnvelopeSync,
  stableReadBytes,
  welcomeBytes,
  freshHeadBytes,
  toHex,
  fromHex,
  type ClockInputs,
  type DeltaMode,
  type Envelope,
  type ReplicaOptions,
  type Signed,
} from '@stead/core'
import { nodeCrypto, signSync, verifySync } from '@stead/core/node'
import type { Logger } from 'pino'
import { RelayCheckpoints, type FetchedRelayCheckpoint } from './checkpoints.ts'
import { committeeOf, type ClusterConfig } from './config.ts'
import {
  ConsensusCore,
  SYNC_BATCH,
  SYNC_BYTES,
  byBytes,
  decodeMessage,
  encodeMessage,
  signStatement,
  type ArchiveQuery,
  type Block,
  type ByzantineStrategy,
  type Committee,
  type Message,
  type Output,
  payloadInfoOf,
  type PayloadInfo,
  type SyncCrypto,
  type TimerName,
} from './consensus/index.ts'
import type { Mesh } from './mesh/types.ts'
import { MeshBudget, peekBlockCount, peekKind, type MeshLimits, type Throttled } from './mesh/budget.ts'
import { systemClock, type HostClock, type HostTimer } from '@stead/core'
import { MemoryBudget } from './budget.ts'
import { CommitFeed } from './feed.ts'
import { HeadProofs } from './head-proofs.ts'
import { readiness, roundsBehind, type HealthNumbers } from './health.ts'
import { Metrics, type MetricsSnapshot } from './metrics.ts'
import { RelayStore, encodeSpaceSnapshot, type StoreBacking, type CheckpointWrite, type HistoryRecord, type SnapshotWrite, type WriteBatch } from './store.ts'
import { SpaceTable, type SpaceHead } from './space-table.ts'
import { VerdictCache } from './verdict-cache.ts'
import { SnapshotPace } from './snapshot-pace.ts'
import { CatchUpCache } from './catch-up-cache.ts'
import { ClientNews, type Subscriber } from './client-news.ts'
import { SpaceAccess } from './space-access.ts'

export const relayCrypto: SyncCrypto = { sign: signSync, verify: verifySync, sha256: (d) => nodeCrypto.sha256(d) }

export interface RelayNodeOptions {
  readonly cluster: ClusterConfig
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
}

/** Something that wants a space's commits and fresh envelopes: a client session. */
export type { Subscriber } from './client-news.ts'

/**
 * Default of RelayNodeOptions.maxClockAheadMs: five minutes. Offline time
 * needs no room here (what a client wrote offline is stamped in the past
 * when it reaches a relay); this only has to cover clock error: relays'
 * NTP-kept clocks, and a client that wrote before it could measure its
 * offset from the relays. Beyond it, one write would beat every concurrent
 * write for that long.
 */
export const MAX_CLOCK_AHEAD_MS = 5 * 60_000

const GC_DEPTH = 50
/** How long a relay that starts with no block of its own waits for its peers' word on its latest (Sui waits 5 s too). */
const OWN_LAST_TIMEOUT_MS = 5000

/** A space's latest attestation here: its feed position and what it attests (the stable index and state hash after it). */
interface LatestAttestation {
  readonly fromIndex: number
  readonly round: number
  readonly attestation: Signed
  readonly index: number
  readonly stateHash: Uint8Array
}

/**
 * What a peer's fetch and sync requests may make this relay read and send
 * it: each asks for up to SYNC_BYTES in a few bytes, so a Byzantine peer
 * asking over and over would otherwise cost a core. The per-peer budget
 * (MeshBudget, src/mesh/budget.ts) is checked before anything is read and
 * caps what is read; answers past it are dropped (an honest asker asks
 * again on its timers); a relay catching up pulls far less than this from
 * any one peer.
 */

/** Bytes of one peer's frames that may wait for the event loop: two full catch-up answers (SYNC_BYTES). */
const MESH_BACKLOG_BYTES = 2 * SYNC_BYTES

/** A space changed since the last snapshot is snapshotted at the first commit this long after it, however few batches came. */
const SNAPSHOT_INTERVAL_MS = 60_000
/** How long a space's replica stays in memory unused (see SpaceTable). */
const SPACE_IDLE_MS = 60_000

/**
 * Committed envelope bytes after which a snapshot is due even within
 * `snapshotEveryBatches` (a few large batches can carry a long history):
 * at least this, or as much as the last snapshot wrote, so a restart
 * replays O(state) and snapshots cost no more than the updates they cover.
 */
const SNAPSHOT_MIN_REPLAY_BYTES = 256 * 1024

/** Envelope verdicts kept (see open): about ten seconds of envelopes at a busy relay's pace. */
const MAX_VERDICTS = 20_000
/** What a cached verdict holds beyond its frame: the decoded envelope's objects and the cache key. */
const VERDICT_BYTES = 2048

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
}

/** When things last happened, for status, readiness and logs. */
interface Activity {
  lastCommitAt: number
  commits: number
  /** Since when envelopes have waited in the queue for a block (null: the queue is empty). */
  pendingSince: number | null
  meshDropLoggedAt: number
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
  readonly me: number
  readonly committee: Committee
  readonly publicKey: Uint8Array
  /** This relay's name in the cluster file, e.g. "r1": what logs, metrics, status and errors call it. */
  readonly name: string
  readonly metrics: Metrics
  readonly budget: MemoryBudget
  private readonly options: RelayNodeOptions
  private readonly log: Logger
  private store!: RelayStore
  private core!: ConsensusCore
  private readonly spaces: SpaceTable
  /** Each space's latest attestation since start (the store has the older ones): what the replica's state is the result of. */
  private readonly latestAttestation = new Map<string, LatestAttestation>()
  /** Bootstrap snapshots and catch-up deltas, built once per commit for every client that asks. */
  private readonly catchUp = new CatchUpCache()
  /** Subscribers, decision watchers and attestation waiters: who hears what, once it may be said. */
  private readonly news = new ClientNews()
  private readonly timers = new Map<string, HostTimer>()
  /** Time and timers: the system's in a relay process, simulated in the simulator (sessions run on it too). */
  readonly clock: HostClock
  private readonly crypto: SyncCrypto
  /** The event loop's state: events waiting, the drain running, writes on their way to disk (see DrainState). */
  private readonly loop: DrainState = { queue: [], draining: false, run: Promise.resolve(), onDisk: Promise.resolve(), writesInFlight: 0, stopped: false }
  /** Verdicts on envelope frames by content id: a pure function of the bytes. */
  private readonly verified = new VerdictCache<Envelope | SteadError>(MAX_VERDICTS)
  /**
   * The latest round each relay has signed a block for, as received. The
   * (f+1)-th highest is a round some correct relay reached: f liars cannot
   * inflate it. How far this relay trails it says whether it is caught up.
   */
  private readonly latestRoundOf: number[]
  /** Per peer: what its frames may cost at the door, its requests waiting, what it may be served, its frames' bytes waiting (see onFrame). */
  private readonly meshBudget: MeshBudget<Output[]>
  /** When things last happened, for status, readiness and logs (see Activity). */
  private readonly activity: Activity = { lastCommitAt: 0, commits: 0, pendingSince: null, meshDropLoggedAt: 0 }
  /** Open client sessions, as the API counts them (see trackSessions). */
  private sessionCount: () => { open: number; addresses: number; keys: number } = () => ({ open: 0, addresses: 0, keys: 0 })
  /** When the spaces' audit state is snapshotted next. */
  private readonly snapshots: SnapshotPace
  /** While the core re-accepts the blocks recovered from the store (see start). */
  private recovering = false
  private readonly checkpoints: RelayCheckpoints
  private readonly headProofs: HeadProofs
  /** A checkpoint fetched from peers, to start over from before the next events (see drain). */
  private pendingInstall: FetchedRelayCheckpoint | undefined
  /** Who may write and read which space, and the quota on starting spaces. */
  private readonly access: SpaceAccess

  constructor(options: RelayNodeOptions) {
    if ((options.dataDir === undefined) === (options.storage === undefined)) throw new SteadError('malformed', 'a RelayNode keeps its state in a dataDir or in a given storage: exactly one of them')
    this.options = options
    this.clock = options.clock ?? systemClock
    this.access = new SpaceAccess(options.cluster, this.clock)
    this.crypto = options.crypto ?? relayCrypto
    this.snapshots = new SnapshotPace({ everyBatches: options.snapshotEveryBatches ?? 1000, minReplayBytes: SNAPSHOT_MIN_REPLAY_BYTES, intervalMs: SNAPSHOT_INTERVAL_MS, now: this.clock.now() })
    this.me = options.me
    this.committee = options.committee ?? committeeOf(options.cluster)
    this.publicKey = this.committee.keys[options.me] as Uint8Array
    this.name = this.nameOf(options.me)
    this.latestRoundOf = this.committee.keys.map(() => 0)
    this.meshBudget = new MeshBudget(this.committee.keys.length, () => this.clock.now(), (t) => this.throttled(t), options.meshLimits)
    this.log = options.logger
    this.metrics = new Metrics(this.name)
    this.metrics.observe(() => this.metricsSnapshot())
    this.budget = new MemoryBudget(options.memoryBudgetBytes ?? 512 * 1024 * 1024)
    this.budget.track('queue', () => this.core?.queuedBytes ?? 0)
    this.budget.track('verify-cache', () => this.verified.bytes, (bytes) => this.verified.evict(bytes))
    this.budget.track('mesh-backlog', () => this.meshBudget.backlogBytes())
    this.budget.track('store-held', () => this.store?.heldBlockBytes ?? 0)
    this.spaces = new SpaceTable({
      stored: (space) => this.store.spaceSnapshotBytes(space),
      replicaOptions: (space) => this.replicaOptions(space),
      open: (signed) => this.openOrThrow(signed),
      sha256: (b) => this.crypto.sha256(b),
      clock: this.clock,
      idleMs: options.spaceIdleMs ?? SPACE_IDLE_MS,
      evicted: (space) => {
        this.latestAttestation.delete(space)
        this.catchUp.evicted(space)
      },
    })
    this.budget.track('spaces', () => this.spaces.residentBytes, (bytes) => this.spaces.reclaim(bytes))
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
        spaces: () => this.spaces.names().map((space) => ({ space, stateHash: (this.spaces.head(space) as SpaceHead).stateHash, lastAttested: this.spaces.lastAttested(space) })),
        auditState: (space) => (this.spaces.read(space) as StableAudit).auditState(),
        send: (to, message) => this.options.mesh.send(to, encodeMessage(message)),
        broadcast: (message) => this.options.mesh.broadcast(encodeMessage(message)),
        openEnvelope: (signed) => this.openOrThrow(signed),
        install: (checkpoint) => {
          this.pendingInstall = checkpoint
          if (!this.loop.draining) this.loop.run = this.drain()
        },
      },
    })
    this.headProofs = new HeadProofs({
      committee: this.committee,
      me: this.me,
      secretKey: options.secretKey,
      crypto: this.crypto,
      clock: this.clock,
      host: {
        latest: (space) => {
          const latest = this.latestAttested(space)
          if (latest) return latest
          // State without an attestation of it (started over from a checkpoint): no provable head.
          if (this.spaces.head(space)?.index) return null
          return { fromIndex: 0, round: 0, ...this.currentHead(space) }
        },
        attested: async (space, fromIndex, round, timeoutMs) => {
          const latest = this.latestAttested(space)
          if (latest && latest.fromIndex === fromIndex && latest.round === round) return latest
          const signed = await this.attestationAt(space, fromIndex, round, timeoutMs)
          if (!signed) return undefined
          const a = decodeAttestation(signed.bytes)
          return { index: a.toIndex, stateHash: a.stateHash }
        },
        send: (to, message) => this.options.mesh.send(to, encodeMessage(message)),
      },
    })
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
    this.spaces.restore(this.store.snapshotSpaceRecords())
    // The recovered blocks' signatures were checked just now (RelayStore.recover) and cover their
    // payload, whose envelopes this relay checked before it accepted them: not again.
    this.recovering = true
    this.core = new ConsensusCore(
      {
        committee: this.committee,
        me: this.me,
        secretKey: this.options.secretKey,
        crypto: this.crypto,
        inspect: (frame) => this.inspect(frame),
        gcDepth: this.gcDepth,
        leaderTimeoutMs: this.options.leaderTimeoutMs ?? 250,
        syncIntervalMs: this.options.syncIntervalMs ?? 500,
        ...(this.options.paceMs === undefined ? {} : { paceMs: this.options.paceMs }),
        ownLastTimeoutMs: this.options.ownLastTimeoutMs ?? OWN_LAST_TIMEOUT_MS,
      },
      recovered,
    )
    this.recovering = false
    this.checkpoints.load(this.store, this.core.committedRound, recovered.commits)
    // The stable state is the snapshot plus every batch committed after it: same order, same result.
    // (Batches carry no signature of their own: their envelopes are checked again.)
    let batches = 0
    for (const b of this.store.committedBatches(snapshotAfter ?? 0)) {
      this.audit(b.anchorRound, b.frames)
      batches++
      this.snapshots.took(1, frameBytes(b.frames))
    }
    this.log.info(
      { round: this.core.currentRound, clockRound: this.core.clockRound, committedRound: this.core.committedRound, snapshotBatch: snapshotAfter ?? null, batches, spaces: this.spaces.size, resident: this.spaces.residentCount, ms: this.clock.now() - startedAt },
      'recovered from store',
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
    // A peer that had not pruned yet may have brought it this far meanwhile: never go back.
    if (round <= this.core.committedRound) {
      this.log.info({ checkpoint: round, committedRound: this.core.committedRound }, 'caught up past the fetched checkpoint by range; not installing it')
      return
    }
    const spaces = c.spaces.map((s) => {
      const replica = StableAudit.fromAuditState(this.replicaOptions(s.space), s.state.state, round)
      return encodeSpaceSnapshot({ space: s.space, checkpoint: replica.checkpoint(), lastAttested: s.lastAttested })
    })
    // It checked the checkpoint against f+1 statements: it vouches for it in turn, and serves it.
    const statement = signStatement(this.crypto, this.options.secretKey, this.me, round, c.digest)
    const checkpoint: CheckpointWrite = { anchorRound: round, statement: statement.signed, manifest: c.manifestBytes, states: c.spaces.map((s) => ({ space: s.space, bytes: s.state.bytes })) }
    const before = this.core.committedRound
    await this.store.install({ checkpoint, spaces, commits: c.manifest.commits, blocksFrom: Math.max(0, round - this.gcDepth + 1) })
    for (const t of this.timers.values()) t.cancel()
    this.timers.clear()
    this.latestAttestation.clear()
    this.access.clear()
    this.catchUp.clear()
    this.spaces.clear()
    this.activity.pendingSince = null
    this.load()
    this.log.info({ from: before, to: round, spaces: spaces.length }, 'started over from a checkpoint f+1 relays vouch for')
    this.loop.queue.push(() => this.core.start())
  }

  async stop(): Promise<void> {
    this.loop.stopped = true
    this.checkpoints.stop()
    this.news.stopped()
    for (const t of this.timers.values()) t.cancel()
    this.timers.clear()
    this.spaces.stop()
    await this.options.mesh.stop()
    // Let a drain in flight finish, and its writes reach the disk, before the store closes.
    await this.loop.run
    await this.loop.onDisk.catch(() => undefined)
    // Undefined when stopped without a start (or a start that failed before it opened the store).
    await this.store?.close()
  }

  // ---- inputs ----

  /**
   * Validates a client's envelope, queues it for the next block and forwards
   * it to the space's subscribers. `onDecided` is called once, when the audit
   * decides it (committed or dropped), which may happen before this returns
   * (a one-relay cluster commits at once); `stopWatching` forgets it. A
   * decision calls its own watchers only, however many sessions are open.
   *
   * Throws SteadError: 'rate-limited', 'too-large', 'malformed',
   * 'bad-signature', 'unauthorized', 'conflict'; returns 'duplicate' for one
   * already decided or queued.
   */
  submit(frame: Uint8Array, origin = 'local', onDecided?: (idHex: string) => void): { status: 'queued' | 'duplicate'; idHex: string; stopWatching: () => void } {
    if (this.loop.stopped) throw new SteadError('closed', 'this relay is stopping')
    // Queued and forwarded as an exact copy, not a view into the socket read it came in (see exact).
    const bytes = exact(frame)
    const { env, decided, charge } = this.door(bytes, origin)
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
    if (status === 'queued') this.activity.pendingSince ??= this.clock.now()
    this.news.submitted(env.idHex, this.clock.now())
    // Proposing is consensus work: an event of the drain, where a failed invariant stops the relay.
    if (status === 'queued') this.enqueue(() => this.core.onSubmitted())
    this.metrics.envelopesAccepted.inc()
    return { status, idHex: env.idHex, stopWatching }
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

  /**
   * The checks a client envelope passes before the core sees it, whoever
   * brings it (a client's submit, a peer's wake): the memory budget, the
   * signature, the space's policy and, unless the audit decided its slot
   * already (`decided`: the caller's call), its clock and its register
   * stamps. `charge` (for an envelope that starts a space) takes the
   * new-space quota of the author's key and of `origin`; the caller calls
   * it once the envelope is queued. Throws SteadError.
   */
  private door(frame: Uint8Array, origin: string): { env: Envelope; decided: 'duplicate' | 'conflict' | undefined; charge: (() => void) | undefined } {
    if (!this.budget.admits(frame.length)) throw new SteadError('rate-limited', `this relay holds ${this.budget.used()} of its ${this.budget.totalBytes} bytes for clients; retry later`)
    const env = this.open(frame)
    if (env instanceof SteadError) throw env
    this.access.checkWriter(env)
    const replica = this.spaces.read(env.space)
    const decided = replica?.decided(env)
    if (decided === 'duplicate' || decided === 'conflict') return { env, decided, charge: undefined }
    checkClockAtDoor(replica, env)
    checkStampsAtDoor(env, this.clock.now(), this.options.maxClockAheadMs ?? MAX_CLOCK_AHEAD_MS)
    return { env, decided: undefined, charge: this.access.startCharge(env.space, this.spaces.has(env.space), env.authorId, origin) }
  }

  /** The stable index a space's commit feed starts from here (above 0 once older commits were pruned), or undefined if it has none. */
  feedStart(space: string): number | undefined {
    return this.store.feedStart(space)
  }

  /** This relay's signature on the last commit of `space` that ends at or below stable index `index`, if it stored one: it vouches for every commit up to there. */
  attestedBy(space: string, index: number): { round: number; sig: Uint8Array } | undefined {
    const head = this.store.commitEndingBy(space, index)
    return head && { round: head.position[1], sig: head.attestation.sig }
  }

  /**
   * Registers `sub` for a space's live news and returns its feed of stored
   * commits from `fromIndex` on: the subscriber reads the feed at its own
   * pace, and `committed` tells it when there is more to read. Without
   * `frames` the feed carries attestations only; `chunkFor` rewrites each
   * stored chunk of envelope frames before it is sent (see CommitFeed).
   */
  subscribe(space: string, fromIndex: number, sub: Subscriber, frames = true, chunkFor?: (chunk: Uint8Array) => Uint8Array): { feed: CommitFeed; unsubscribe: () => void } {
    return { feed: new CommitFeed(this.store, space, fromIndex, frames, chunkFor), unsubscribe: this.news.subscribe(space, sub) }
  }

  /**
   * Whether a session that proved `key` (undefined: no key, e.g. plain HTTP)
   * may read a space: spaces whose policy lists `readers` are readable by
   * those keys and the writers; all others by anyone.
   */
  canRead(space: string, key: Uint8Array | undefined): boolean {
    return this.access.canRead(space, key)
  }

  /** Spaces this relay holds, in name order after `after`, at most `limit`; spaces with readers are left out. */
  listSpaces(after: string, limit: number): Array<{ space: string; stableIndex: number }> {
    const names = this.spaces.names().filter((name) => name > after && this.canRead(name, undefined)).sort()
    return names.slice(0, limit).map((space) => ({ space, stableIndex: (this.spaces.head(space) as SpaceHead).index }))
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
      round: this.core.currentRound,
      clockRound: this.core.clockRound,
      clusterRound: health.clusterRound,
      committedRound: this.core.committedRound,
      /** Blocks of rounds below this were pruned from the store (retention). */
      blocksKeptFrom: this.store.blocksKeptFrom,
      commits: this.activity.commits,
      lastCommitAt: this.activity.lastCommitAt ? new Date(this.activity.lastCommitAt).toISOString() : null,
      queuedEnvelopes: this.core.queuedEnvelopes,
      spaces: this.spaces.size,
      residentSpaces: this.spaces.residentCount,
      memory: { budget: this.budget.totalBytes, used: this.budget.usage() },
      peers: { connected: this.connectedPeerNames(), total: this.committee.keys.length - 1 },
      sessions: this.sessions,
      ready: readiness(health).ready,
      byzantine: this.options.byzantine ?? null,
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
    const clusterRound = [...this.latestRoundOf].sort((a, b) => b - a)[this.committee.f] ?? 0
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
      spaces: { held: this.spaces.size, resident: this.spaces.residentCount },
      lastCommitAt: health.lastCommitAt,
    }
  }

  /**
   * What a client needs to trust this cluster: f and each relay's id, key and
   * API address. Clients without a pinned cluster require every relay they
   * reach to serve the same descriptor.
   */
  clusterDescriptor(): { f: number; relays: Array<{ id: string; publicKey: string; api: string }> } {
    return { f: this.options.cluster.f, relays: this.options.cluster.relays.map((r) => ({ id: r.id, publicKey: toHex(r.publicKey), api: r.api })) }
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
   * This relay's current (index, state hash) of a space, signed by it alone
   * (stableReadBytes); index 0 with the empty state's hash for a space with
   * no commit yet. For progress checks: quorum reads take provenHead.
   */
  stableHead(space: string): { relay: number; index: number; stateHash: string; sig: string } {
    const { index, stateHash } = this.currentHead(space)
    return { relay: this.me, index, stateHash: toHex(stateHash), sig: toHex(this.crypto.sign(this.options.secretKey, stableReadBytes(space, index, stateHash))) }
  }

  /** The space's stable index and state hash as this relay's replica holds them (0 and the empty state's hash for a space it has none of). */
  private currentHead(space: string): { index: number; stateHash: Uint8Array } {
    return this.spaces.head(space) ?? { index: 0, stateHash: new StableAudit({ space }).stableHash((b) => this.crypto.sha256(b)) }
  }

  /**
   * A signed page of an object's stable history: up to `limit` entries
   * before stable index `before`, newest first, as msgpack [index, value]
   * pairs (values may be bytes, which JSON cannot carry). The page stops
   * early once its values reach `maxBytes` (at least one entry, so every
   * history can be read); `next` is where the next page starts (its
   * `before`), or null at the start of the history. Correct relays cut a
   * page at the same entry, so their pages stay alike.
   */
  historyPage(space: string, key: string, before: number, limit: number, maxBytes = Number.POSITIVE_INFINITY): { relay: number; entries: Uint8Array; sig: Uint8Array; next: number | null } {
    const page = this.store.historyOf(space, key, before, limit, maxBytes)
    const entries = encode(page.entries.map((e) => [e.index, e.value]))
    const next = page.more ? (page.entries[page.entries.length - 1]?.index ?? null) : null
    return { relay: this.me, entries, sig: this.crypto.sign(this.options.secretKey, historyPageBytes(space, key, before, entries)), next }
  }

  /**
   * A space's audit state as of its latest attested commit, with this
   * relay's attestation of that commit (whose state hash covers it): what
   * a client starts from instead of replaying the space's history. The
   * client believes it once f+1 relays signed the same attestation (see
   * attestationAt). Undefined for a space with no attested commit.
   */
  bootstrapSnapshot(space: string): { attestation: Signed; state: Uint8Array } | undefined {
    const replica = this.spaces.read(space)
    if (!replica) return undefined
    const latest = this.latestAttested(space)
    // Many clients opening one space at once get the same bytes: encoded once per commit.
    return latest && this.catchUp.snapshot(space, replica, latest)
  }

  /**
   * One object's stable state at the latest attested commit, with the path
   * proving it (or its absence) against that commit's state hash, and this
   * relay's attestation of the commit: a client believes it once f+1
   * relays signed that attestation. Costs the path, not the space.
   */
  objectProof(space: string, key: string): { attestation: Signed; proof: Uint8Array } | undefined {
    const replica = this.spaces.read(space)
    const latest = replica && this.latestAttested(space)
    if (!replica || !latest) return undefined
    return { attestation: latest.attestation, proof: encodeObjectProof(replica.objectProof((b) => this.crypto.sha256(b), key)) }
  }

  /**
   * What changed in a space from stable index `fromIndex` to the latest
   * attested commit, each object as its ops or its state (BENDY: `mode`,
   * adaptive by default), with this relay's attestation of that commit: a
   * client that is behind applies it and believes it once the result
   * hashes to that attestation's state hash and f+1 relays signed it.
   * Undefined when this relay's change log does not reach back that far
   * (then the client follows the commits instead).
   */
  stateDelta(space: string, fromIndex: number, mode: DeltaMode = 'adaptive'): { attestation: Signed; delta: Uint8Array } | undefined {
    const replica = this.spaces.read(space)
    const latest = replica && this.latestAttested(space)
    return replica && latest && this.catchUp.delta(space, replica, latest, fromIndex, mode)
  }

  /** A space's latest attestation here (undefined for a space with none): what its replica's stable state is the result of. */
  private latestAttested(space: string): LatestAttestation | undefined {
    let latest = this.latestAttestation.get(space)
    if (!latest) {
      // Nothing audited for this space since start: its state is the one its last stored commit attested.
      const head = this.store.latestCommit(space)
      if (!head) return undefined
      const a = decodeAttestation(head.attestation.bytes)
      latest = { fromIndex: head.position[0], round: head.position[1], attestation: head.attestation, index: a.toIndex, stateHash: a.stateHash }
      this.latestAttestation.set(space, latest)
    }
    return latest
  }

  /**
   * This relay's latest attested head of a space, proven by f+1 relays'
   * signatures (see head-proofs.ts), signed over the client's `nonce` so it
   * cannot be replayed: what a linearizable quorum read takes. Gathering
   * the signatures may take up to `timeoutMs`; undefined if they could not
   * be had by then.
   */
  async provenHead(space: string, nonce: Uint8Array, timeoutMs: number): Promise<{ relay: number; index: number; stateHash: string; sig: string; proof: Array<[number, string]> } | undefined> {
    const proof = await this.headProofs.prove(space, timeoutMs)
    if (!proof) return undefined
    const sig = this.crypto.sign(this.options.secretKey, freshHeadBytes(space, proof.index, proof.stateHash, nonce))
    return { relay: this.me, index: proof.index, stateHash: toHex(proof.stateHash), sig: toHex(sig), proof: proof.sigs.map(([relay, s]) => [relay, toHex(s)]) }
  }

  /**
   * This relay's signed attestation of the space's commit at [fromIndex,
   * round], once it is on disk here; waits up to `timeoutMs` for a relay
   * slightly behind to get there. Undefined if it did not (a client asking
   * about a round no correct relay attests waits that long for nothing).
   */
  async attestationAt(space: string, fromIndex: number, round: number, timeoutMs: number): Promise<Signed | undefined> {
    const find = (): Signed | undefined => {
      const head = this.store.commitAt(space, [fromIndex, round])
      return head && head.position[0] === fromIndex && head.position[1] === round ? head.attestation : undefined
    }
    const found = find()
    if (found) return found
    return new Promise((resolve) => {
      const done = (value: Signed | undefined): void => {
        timer.cancel()
        stopListening()
        resolve(value)
      }
      const listener = (spaces: ReadonlySet<string> | null): void => {
        if (!spaces) return done(undefined)
        const a = spaces.has(space) ? find() : undefined
        if (a) done(a)
      }
      const timer = this.clock.setTimer(timeoutMs, () => done(undefined))
      const stopListening = this.news.onAttested(listener)
    })
  }

  /** A signed snapshot of a space's stable state, for quorum reads. */
  stableSnapshot(space: string): { index: number; stateHash: string; sig: string; snapshot: unknown } {
    // A space nothing was committed to yet is at index 0 with an empty state, which every correct relay signs alike.
    const r = this.spaces.read(space) ?? new StableAudit(this.replicaOptions(space))
    const hash = r.stableHash((b) => this.crypto.sha256(b))
    const sig = this.crypto.sign(this.options.secretKey, stableReadBytes(space, r.stableIndex, hash))
    return { index: r.stableIndex, stateHash: toHex(hash), sig: toHex(sig), snapshot: r.stableSnapshot() }
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
    // Frames arrive while the loop awaits the disk; what waits for it is bounded per peer.
    // Past the bound a frame is dropped before any work is spent on it: consensus tolerates
    // loss (sync fetches what is missing), and one peer cannot fill the relay's memory.
    const waiting = this.meshBudget.backlogBytes(from)
    if (waiting + frame.length > MESH_BACKLOG_BYTES) {
      this.metrics.rejected.inc({ reason: 'overloaded', source: 'mesh' })
      const now = this.clock.now()
      if (now - this.activity.meshDropLoggedAt > 10_000) {
        this.activity.meshDropLoggedAt = now
        this.log.warn({ from: this.nameOf(from), waiting, limit: MESH_BACKLOG_BYTES }, 'mesh: dropping frames from a peer while its earlier ones wait to be processed')
      }
      return
    }
    // Each kind of message has a per-peer rate, charged before the frame is decoded or its signatures checked.
    const kind = peekKind(frame) ?? 'malformed'
    if (!this.meshBudget.admit(from, kind, frame.length)) return
    // A `blocks` message is charged per block too, from its declared count: answers to what this relay
    // asked the peer for first, then the peer's unrequested-block budget; blocks past it are not opened.
    const declared = kind === 'blocks' ? peekBlockCount(frame) : undefined
    const keep = declared === undefined ? Infinity : this.meshBudget.admitBlocks(from, declared)
    if (keep === 0 && declared) return
    let message: Message
    try {
      // Blocks the core holds or will drop are not verified again (a relay catching up gets many twice).
      message = decodeMessage(this.crypto, this.committee, frame, undefined, (digestHex, round) => this.core.needsVerification(digestHex, round), keep)
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
        if (this.meshBudget.charge(from, kind, 1, 0)) {
          if (!this.checkpoints.onMessage(from, ask)) this.headProofs.onMessage(from, ask)
        }
        return []
      }
      if (this.meshBudget.queueRequest(from, kind, answer) && !this.loop.draining) this.loop.run = this.drain()
      return
    }
    if (this.checkpoints.onMessage(from, message) || this.headProofs.onMessage(from, message)) return
    if (message.kind === 'sync' || message.kind === 'fetch' || message.kind === 'own-last-ask') {
      // Served after the drain's consensus events, if the peer's serving budget has room by then.
      const request = message
      if (this.meshBudget.queueRequest(from, kind, () => (this.meshBudget.mayServe(from, kind) ? this.core.onMessage(from, request) : []))) {
        if (!this.loop.draining) this.loop.run = this.drain()
      }
      return
    }
    if (message.kind === 'wake') {
      const payload = this.wakePayload(from, message.payload)
      if (!payload.length) return
      message = { kind: 'wake', payload }
    }
    for (const block of message.kind === 'block' ? [message.block] : message.kind === 'blocks' ? message.blocks : []) {
      const { author, round } = block.header
      if (round > (this.latestRoundOf[author] as number)) this.latestRoundOf[author] = round
    }
    const event = message
    if (!this.meshBudget.holdBacklog(from, frame.length, MESH_BACKLOG_BYTES)) return
    this.enqueue(() => {
      this.meshBudget.releaseBacklog(from, frame.length)
      return this.core.onMessage(from, event)
    })
  }

  /**
   * What of a peer's wake may reach the core: each envelope is charged to
   * the peer's wake budget, and must pass the door a client's envelope
   * passes (`door`: signature, the space's policy, the audit's decisions,
   * clock and stamps, and the new-space quota of its author's key, charged
   * as if the peer were the address it came from): a Byzantine relay cannot
   * start spaces, or queue envelopes, that a client could not. The rest is
   * dropped and counted.
   */
  private wakePayload(from: number, frames: readonly Uint8Array[]): Uint8Array[] {
    const wanted = frames.slice(0, this.meshBudget.wakeMaxEnvelopes)
    if (!wanted.length || !this.meshBudget.admit(from, 'wake', 0, wanted.length)) return []
    const out: Uint8Array[] = []
    for (const frame of wanted) {
      try {
        // One the audit decided already still goes to the core: a relay holding a twin of a decided
        // envelope needs a round to see it dropped (the core wakes only for what is not ordered yet).
        const { charge } = this.door(frame, `relay:${this.nameOf(from)}`)
        // Charged now: the core takes the wake's envelopes later, and one it would not queue (queued
        // already) costs the relay that sent it, not an honest client.
        charge?.()
        out.push(exact(frame))
      } catch (err) {
        if (!(err instanceof SteadError)) throw err
        if (err.reason === 'rate-limited') this.throttled({ peer: from, kind: 'wake', why: 'rate' })
        else this.metrics.rejected.inc({ reason: err.reason, source: 'mesh' })
      }
    }
    return out
  }

  /** A peer's frame or request refused by its mesh budget: counted, and logged once in a while. */
  private throttled(t: Throttled): void {
    this.metrics.rejected.inc({ reason: 'rate-limited', source: 'mesh' })
    this.metrics.meshThrottled.inc({ peer: this.nameOf(t.peer), kind: t.kind })
    const now = this.clock.now()
    if (now - this.activity.meshDropLoggedAt > 10_000) {
      this.activity.meshDropLoggedAt = now
      this.log.warn({ from: this.nameOf(t.peer), kind: t.kind, why: t.why }, 'mesh: a peer sends more than its budget allows; dropping what is over it')
    }
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
      while ((this.loop.queue.length || this.meshBudget.queuedRequests || this.pendingInstall) && !this.loop.stopped) {
        const install = this.pendingInstall
        if (install) {
          this.pendingInstall = undefined
          await this.install(install)
          continue
        }
        const events = this.loop.queue.splice(0)
        const outputs: Output[] = []
        for (const event of events) outputs.push(...event())
        // Peers' requests last: consensus events of this drain go first, and each request only
        // if its peer's serving budget still has room.
        this.meshBudget.runRequests((out) => outputs.push(...out))
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
        for (const o of outputs) {
          if (o.type === 'persist') {
            write.records.push(o.record)
            if (o.record.kind === 'commit') this.checkpoints.recorded(o.record)
          } else if (o.type === 'commit') {
            const attestations = this.audit(o.commit.anchorRound, o.commit.payload, write.history)
            // A commit that carried nothing and decided nothing changed no replica: replaying the
            // others at their rounds rebuilds the same state (gap timeouts are measured in rounds).
            if (o.commit.payload.length || attestations.length) write.batches.push({ anchorRound: o.commit.anchorRound, frames: [...o.commit.payload] })
            write.attestations.push(...attestations)
            const checkpoint = this.checkpoints.afterCommit(o.commit.anchorRound, write.checkpoint)
            if (checkpoint) write.checkpoint = checkpoint
          }
        }
        const snapshot = this.snapshotDue(write.batches)
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
        const spaces = new Set(write.attestations.map((a) => a.space))
        durable.then(
          () => {
            this.loop.writesInFlight--
            if (this.loop.stopped) return
            if (snapshot) this.spaces.saved(snapshot.spaces)
            this.spaces.armSweep()
            this.news.attested(spaces)
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
   * Every so many batches, or at the first batch a while after the last
   * snapshot, the spaces the audit changed since then are checkpointed:
   * written with the drain's batches, in the same transaction, so a
   * snapshot is always exactly "after batch n".
   */
  private snapshotDue(newBatches: ReadonlyArray<{ readonly frames: readonly Uint8Array[] }>): SnapshotWrite | undefined {
    this.snapshots.took(newBatches.length, newBatches.reduce((n, b) => n + frameBytes(b.frames), 0))
    if (this.spaces.dirtyCount === 0) return undefined
    const now = this.clock.now()
    if (!this.snapshots.due(now)) return undefined
    // Encoded now: the write runs later, and the replicas go on auditing meanwhile.
    const spaces = this.spaces.takeSnapshot()
    this.snapshots.taken(now, spaces.reduce((n, x) => n + x.bytes.length, 0))
    this.metrics.snapshots.inc()
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
    return { spaces, commitsBelow: this.core.committedRound - 2 * gcDepth, blocksBelow: this.core.committedRound - keepRounds, feedBelow }
  }

  /** Each space's replica audits alone (no prospective state), under the cluster's policy for the space. */
  private replicaOptions(space: string): ReplicaOptions {
    return { space, authorize: this.authorizeFor(space), historyLimit: 0, historyPatches: true, ...(this.options.verifyStateHashes ? { verifyStateHash: (bytes: Uint8Array) => this.crypto.sha256(bytes) } : {}) }
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
        if (o.message.kind === 'blocks' && !this.mayServe(o.to, o.message.blocks)) break
        // What we ask a peer for, it may send: its answers are charged against that, not its unrequested-block budget
        // (a sync is answered from memory and from the store, up to SYNC_BATCH blocks each).
        if (o.message.kind === 'sync') this.meshBudget.asked(o.to, 2 * SYNC_BATCH)
        if (o.message.kind === 'fetch') this.meshBudget.asked(o.to, o.message.digests.length)
        if (o.message.kind === 'own-last' && o.message.block && !this.mayServe(o.to, [o.message.block])) break
        this.options.mesh.send(o.to, encodeMessage(o.message))
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
        this.serveArchive(o.to, o.query)
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
      const env = this.open(frame)
      if (!(env instanceof SteadError)) this.news.envelope(env.space, frame, env.idHex)
    }
  }

  private serveArchive(to: number, query: ArchiveQuery): void {
    // Rounds below the retention window are gone: say so, and the asker knows why nothing comes.
    if ('fromRound' in query && query.fromRound < this.store.blocksKeptFrom) this.options.mesh.send(to, encodeMessage({ kind: 'pruned', keptFrom: this.store.blocksKeptFrom }))
    // Nothing read from the store for a peer past its budget, and never more than the budget has room for.
    if (!this.meshBudget.mayServe(to, 'digests' in query ? 'fetch' : 'sync')) return
    const room = this.meshBudget.allowance(to)
    const digests = 'digests' in query ? query.digests.slice(0, Math.max(1, room.blocks)) : []
    const blocks =
      'digests' in query
        ? this.store.blocksByDigest(this.crypto, this.committee, digests)
        : this.store.blocksInRounds(this.crypto, this.committee, query.fromRound, query.toRound, Math.max(1, Math.min(SYNC_BATCH, room.blocks)), Math.min(SYNC_BYTES, room.bytes))
    if ('digests' in query) {
      // Neither in memory (the core looked) nor on disk: say so, so that a block of ours naming one
      // of these could be recognised as one we never made (see the core's 'unknown'). Only of those looked up.
      const found = new Set(blocks.map((b) => b.digestHex))
      const unknown = digests.filter((d) => !found.has(d))
      if (unknown.length) this.options.mesh.send(to, encodeMessage({ kind: 'unknown', digests: unknown.map(fromHex), keptFrom: this.store.blocksKeptFrom }))
    }
    for (const part of byBytes(blocks)) {
      if (!this.mayServe(to, part)) break
      this.options.mesh.send(to, encodeMessage({ kind: 'blocks', blocks: part }))
    }
  }

  /** Whether `blocks` may be sent to peer `to` as an answer now (its serving budget, MeshBudget); counted and logged if not. */
  private mayServe(to: number, blocks: readonly Block[]): boolean {
    let bytes = 0
    for (const b of blocks) bytes += b.signed.bytes.length
    return this.meshBudget.charge(to, 'blocks', blocks.length, bytes)
  }

  // ---- audit and attestations ----

  /**
   * Feeds one consensus commit to every space's replica (new spaces are
   * created in commit order, so every relay creates them alike) and signs an
   * attestation for each space whose audit decided something. `history`
   * collects the stable values objects took, to store; without it
   * (replaying the store at start) the attestations, stored already, are
   * not made again.
   */
  private audit(anchorRound: number, frames: readonly Uint8Array[], history?: HistoryRecord[]): WriteBatch['attestations'][number][] {
    const replaying = history === undefined
    const bySpace = new Map<string, { envs: Envelope[]; frames: Uint8Array[] }>()
    for (const frame of frames) {
      const env = this.open(frame)
      if (env instanceof SteadError) continue
      // A space this cluster does not serve gets no replica (every relay skips it alike): a
      // Byzantine relay's blocks cannot make correct relays hold spaces that cannot exist.
      if (!this.options.cluster.openSpaces && !this.options.cluster.spaces.has(env.space)) continue
      if (!this.spaces.has(env.space)) this.access.started(env.space)
      let group = bySpace.get(env.space)
      if (!group) bySpace.set(env.space, (group = { envs: [], frames: [] }))
      group.envs.push(env)
      group.frames.push(frame)
    }
    const out: WriteBatch['attestations'][number][] = []
    // A space with nothing in this commit and nothing parked cannot change: only these are visited.
    const visit = new Set([...bySpace.keys(), ...this.spaces.parkedSpaces()])
    for (const space of visit) {
      const group = bySpace.get(space)
      const replica = this.spaces.forAudit(space)
      const fromIndex = replica.stableIndex
      const result = replica.commit(group?.envs ?? [], anchorRound)
      this.catchUp.record(space, fromIndex, result)
      // Every stable value an object took, kept for good (the replica keeps none in memory).
      if (history) for (const h of result.history) history.push({ space, ...h })
      for (const d of result.decisions) {
        if (d.kind === 'committed') this.metrics.clocks.inc({ verified: String(d.clockVerified) })
        const waited = this.news.decided(d.env.idHex, this.clock.now())
        if (waited !== undefined) this.metrics.commitLatency.observe(waited / 1000)
      }
      const decisions = result.decisions.filter((d) => d.kind !== 'superseded').map(attestedDecision)
      // Attest every commit that carried envelopes of this space (some may only wait for a
      // gap) or decided any: replaying exactly these batches at these rounds reproduces the audit.
      if (decisions.length === 0 && !group) {
        this.spaces.audited(space, replica)
        continue
      }
      const prevRound = this.spaces.lastAttested(space)
      this.spaces.audited(space, replica, anchorRound)
      if (replaying) {
        // Its attestation is in the store already: only the chain's position is needed.
        this.latestAttestation.delete(space)
        continue
      }
      const stateHash = replica.stableHash((b) => this.crypto.sha256(b))
      const bytes = encodeAttestation({
        space,
        round: anchorRound,
        prevRound,
        fromIndex,
        toIndex: result.stableIndex,
        decisions,
        stateHash,
        batch: batchDigest((b) => this.crypto.sha256(b), group?.envs.map((e) => e.id) ?? []),
      })
      const attestation: Signed = { bytes, sig: this.crypto.sign(this.options.secretKey, bytes) }
      this.latestAttestation.set(space, { fromIndex, round: anchorRound, attestation, index: result.stableIndex, stateHash })
      out.push({ space, fromIndex, round: anchorRound, value: { attestation, envelopes: group?.frames ?? [] } })
    }
    return out
  }

  /**
   * The cluster's space policy as the audit's application validator: a
   * Byzantine relay can put anything in its blocks, so the check that
   * submit() makes must hold in the stable order too. Every relay must run
   * the same cluster file, or their audits differ.
   */
  private authorizeFor(space: string): Authorize | undefined {
    // (Spaces a closed cluster does not list get no replica at all: see audit.)
    const policy = this.options.cluster.spaces.get(space)
    if (!policy?.writers) return undefined
    const allowed = new Set(policy.writers.map((w) => authorIdOf(nodeCrypto, w)))
    return (author) => (allowed.has(author) ? { ok: true } : { ok: false, reason: 'unauthorized', detail: `${author} may not write to ${space}` })
  }

  // ---- envelopes ----

  private inspect(frame: Uint8Array): PayloadInfo | SteadError {
    const env = this.open(frame)
    return env instanceof SteadError ? env : payloadInfoOf(env)
  }

  private open(frame: Uint8Array): Envelope | SteadError {
    let signed: Signed
    try {
      signed = asSigned(decode(frame))
    } catch (err) {
      return err instanceof SteadError ? err : new SteadError('malformed', String(err))
    }
    return this.openSigned(signed, frame.length)
  }

  /** A parked envelope from a snapshot or a checkpoint: the envelope, or its verdict thrown (a SteadError). */
  private openOrThrow(signed: Signed): Envelope {
    const env = this.openSigned(signed)
    if (env instanceof SteadError) throw env
    return env
  }

  /** An envelope's verdict from its signed bytes (`frameBytes`: the size of the frame they came in), cached. */
  private openSigned(signed: Signed, frameBytes = signed.bytes.length + signed.sig.length): Envelope | SteadError {
    const key = toHex(this.crypto.sha256(signed.bytes)) + toHex(signed.sig)
    const cached = this.verified.get(key)
    if (cached) return cached
    // Kept in exact-size copies: the bytes may be a view into a whole socket read, which the
    // cache would otherwise keep alive while charging only the envelope's size.
    signed = { bytes: exact(signed.bytes), sig: exact(signed.sig) }
    let v: Envelope | SteadError
    try {
      v = openEnvelopeSync({ sha256: (d) => this.crypto.sha256(d), verify: this.recovering ? () => true : (pk, message, sig) => this.crypto.verify(pk, message, sig) }, signed)
    } catch (err) {
      v = err instanceof SteadError ? err : new SteadError('malformed', String(err))
    }
    // Bounded in entries and in bytes, a quarter of the memory budget at most: an opened
    // envelope holds its frame and its decoded objects (about VERDICT_BYTES more). Only a
    // short window matters (an envelope is seen at submit, in blocks and at commit within
    // seconds); the verdict depends only on the bytes, so an evicted one is computed again.
    const bytes = v instanceof SteadError ? VERDICT_BYTES : 2 * frameBytes + VERDICT_BYTES
    this.verified.set(key, v, bytes, this.budget.totalBytes / 4)
    return v
  }
}

/** `bytes` itself when it owns its whole buffer, else a copy that does: what is kept is charged at its size. */
function exact(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : new Uint8Array(bytes)
}

function frameBytes(frames: readonly Uint8Array[]): number {
  let n = 0
  for (const f of frames) n += f.length
  return n
}

/** A fresh 32-byte nonce for a client challenge. */
export function challengeNonce(): Uint8Array {
  return new Uint8Array(randomBytes(32))
}

const NO_HISTORY: ClockInputs = { stableIndex: 0, prev: undefined, dep: () => undefined, committedAt: () => ({ lo: 0, hi: 0 }) }

/**
 * Chrono's update validator at the door: an envelope whose clock its
 * inputs contradict is refused with `bad-clock`. Judged only where this
 * relay's stable history already holds what the audit will judge it
 * against (its author's previous envelope and its base); otherwise the
 * audit judges it when it executes.
 *
 * @throws SteadError `bad-clock`.
 */
/**
 * Refuses an envelope whose register writes are stamped more than
 * `maxAheadMs` ahead of this relay's clock: last-writer-wins orders by
 * those stamps, so a device clock running fast would win every concurrent
 * write until real time caught up. Here at the door, where wall time is
 * injected: the audit behind it stays deterministic.
 */
function checkStampsAtDoor(env: Envelope, now: number, maxAheadMs: number): void {
  const stamp = latestRegisterStamp(env)
  if (stamp === undefined || stamp - now <= maxAheadMs) return
  throw new SteadError(
    'clock-ahead',
    `${env.authorId}:${env.seq} writes a register at timestamp ${stamp}, ${Math.round((stamp - now) / 1000)} s ahead of this relay's clock (${now}); the limit is ${Math.round(maxAheadMs / 1000)} s: the author's device clock runs fast`,
  )
}

function checkClockAtDoor(replica: StableAudit | undefined, env: Envelope): void {
  const next = replica ? replica.nextSeq(env.authorId) : 1
  if (env.seq !== next || env.base > (replica?.stableIndex ?? 0)) return
  const verdict = replica ? replica.judgeClock(env) : judgeClock(env, NO_HISTORY)
  if (!verdict.ok) throw new SteadError('bad-clock', `${env.authorId}:${env.seq}: ${verdict.detail}`)
}
