import { StableAudit, SteadError, authorIdOf, attestedDecision, bytesEqual, batchDigest, decodeAttestation, encodeAttestation, encodeObjectProof, type DeltaMode, type Envelope, type HostClock, type ReplicaOptions, type Signed, type EpochCommittee, type SpacePolicy } from '@stead/core'
import type { Admission } from './admission.ts'
import { COMMITTEE_SPACE, backingKey, tallyCommittee, type DecidedChange, type OpenProposal } from './committee-proposals.ts'
import { CatchUpCache } from './catch-up-cache.ts'
import type { SyncCrypto } from '../consensus/index.ts'
import { SnapshotPace } from './snapshot-pace.ts'
import { createsPolicy } from './space-access.ts'
import { SpaceQuota } from './space-quota.ts'
import { SpaceTable, type SpaceHead, type StoredSpace } from './space-table.ts'
import type { HistoryRecord, RelayStore, SnapshotWrite, WriteBatch } from '../store/store.ts'

/** A space's latest attestation here: its feed position and what it attests (the stable index and state hash after it). */
export interface LatestAttestation {
  readonly fromIndex: number
  readonly round: number
  readonly attestation: Signed
  readonly index: number
  readonly stateHash: Uint8Array
}

/** One attestation of a commit, to store: see Ledger.audit. */
export type AttestationWrite = WriteBatch['attestations'][number]

/** A decision of the audit on one envelope (committed, rejected, dropped, superseded). */
type Decision = ReturnType<StableAudit['commit']>['decisions'][number]

/** A space changed since the last snapshot is snapshotted at the first commit this long after it, however few batches came. */
const SNAPSHOT_INTERVAL_MS = 60_000
/**
 * Committed envelope bytes after which a snapshot is due even within
 * `everyBatches` (a few large batches can carry a long history): at least
 * this, or as much as the last snapshot wrote, so a restart replays
 * O(state) and snapshots cost no more than the updates they cover.
 */
const SNAPSHOT_MIN_REPLAY_BYTES = 256 * 1024

export interface LedgerOptions {
  readonly crypto: SyncCrypto
  readonly secretKey: Uint8Array
  readonly clock: HostClock
  readonly admission: Admission
  /** The relay's store (opened at start, so asked for when needed). */
  readonly store: () => RelayStore
  /** How long a space's replica stays in memory unused (see SpaceTable). */
  readonly spaceIdleMs: number
  /** Committed batches between snapshots (see SnapshotPace). */
  readonly snapshotEveryBatches: number
  /** Live spaces one user may hold (the cluster's spacesPerUser, see SpaceQuota); undefined: not counted. */
  readonly spacesPerUser: number | undefined
  /** Check every replica's stored state hash against its state as it loads (slow: tests and audits of a data dir). */
  readonly verifyStateHashes: boolean
  /** Called for every decision of the audit, as it is made (metrics, and the clients waiting on it). */
  readonly decided: (d: Decision) => void
  /** Called when a snapshot is taken (metrics). */
  readonly snapshotTaken: () => void
  /** The committee ruling this relay's epoch: whose backing in `$committee` counts (see committee-proposals.ts). */
  readonly committee: EpochCommittee
}

/** A committee change 2f+1 members backed, and the round of the commit after which they did: the epoch's last. */
export interface EpochEnd extends DecidedChange {
  readonly round: number
}

/**
 * The relay's deterministic state machine: every space's audit replica
 * fed the committed order, the attestation chain each space's commits
 * form, and when the spaces' state is snapshotted. Every correct relay
 * holds the same ledger at the same commit; what it signs is its own.
 */
export class Ledger {
  /** Every space this relay holds, its replica in memory while in use. */
  readonly spaces: SpaceTable
  /** The live spaces each user started, counted in the committed order; undefined in a cluster that does not count them. */
  readonly quota: SpaceQuota | undefined
  private readonly o: LedgerOptions
  /** Each space's latest attestation since start (the store has the older ones): what the replica's state is the result of. */
  private readonly latestAttestation = new Map<string, LatestAttestation>()
  /** Bootstrap snapshots and catch-up deltas, built once per commit for every client that asks. */
  private readonly catchUp = new CatchUpCache()
  /** When the spaces' audit state is snapshotted next. */
  private readonly snapshots: SnapshotPace
  /** The committee change the audit decided, once it has: nothing after its commit belongs to this epoch. */
  private end: EpochEnd | undefined

  constructor(options: LedgerOptions) {
    this.o = options
    this.quota = options.spacesPerUser === undefined ? undefined : new SpaceQuota(options.spacesPerUser)
    this.snapshots = new SnapshotPace({ everyBatches: options.snapshotEveryBatches, minReplayBytes: SNAPSHOT_MIN_REPLAY_BYTES, intervalMs: SNAPSHOT_INTERVAL_MS, now: options.clock.now() })
    this.spaces = new SpaceTable({
      stored: (space) => this.o.store().spaceSnapshotBytes(space),
      replicaOptions: (space) => this.replicaOptions(space),
      open: (signed) => this.o.admission.openOrThrow(signed),
      sha256: (b) => this.o.crypto.sha256(b),
      clock: options.clock,
      idleMs: options.spaceIdleMs,
      evicted: (space) => {
        this.latestAttestation.delete(space)
        this.catchUp.evicted(space)
      },
      starterOf: (space) => this.quota?.starterOf(space),
    })
  }

  /** Each space's replica audits alone (no prospective state), under the cluster's policy for the space. */
  replicaOptions(space: string): ReplicaOptions {
    const { admission, verifyStateHashes, crypto } = this.o
    return { space, authorize: admission.authorizeFor(space), verify: (pk, message, sig) => crypto.verify(pk, message, sig), historyLimit: 0, historyPatches: true, ...(verifyStateHashes ? { verifyStateHash: (bytes: Uint8Array) => crypto.sha256(bytes) } : {}) }
  }

  /** Builds the spaces, and what each user holds, from the store's latest snapshot (at start, and after installing a checkpoint); `replay` then brings them up to the last batch. */
  restore(records: Iterable<StoredSpace>): void {
    const charged: Array<[string, string]> = []
    this.spaces.restore(
      (function* () {
        for (const r of records) {
          if (r.starter !== undefined) charged.push([r.space, r.starter])
          yield r
        }
      })(),
    )
    for (const [space, user] of charged) this.quota?.restore(space, user)
    // A change decided before the snapshot: its commit was the last one (nothing after it is replayed).
    this.end = this.tallyEnd(this.spaces.lastAttested(COMMITTEE_SPACE))
  }

  /** The committee change the audit decided (the epoch ends at its commit), or undefined. */
  get epochEnd(): EpochEnd | undefined {
    return this.end
  }

  /** The proposals for the next epoch's committee and their backers, as the stable order stands. */
  openProposals(): OpenProposal[] {
    return this.tally().open
  }

  private tally(): ReturnType<typeof tallyCommittee> {
    const replica = this.spaces.read(COMMITTEE_SPACE)
    // Made before relays reserved the name (an open cluster let anyone create it with a policy of its
    // own): its registers may be written by others than the relays, so they decide nothing.
    if (replica?.policy()) return { open: [], decided: undefined }
    const sha256 = (b: Uint8Array): Uint8Array => this.o.crypto.sha256(b)
    return tallyCommittee(this.o.committee, (author) => replica?.stableValue(backingKey(author)), (key) => authorIdOf({ sha256 }, key), sha256)
  }

  private tallyEnd(round: number): EpochEnd | undefined {
    if (!this.spaces.has(COMMITTEE_SPACE)) return undefined
    const decided = this.tally().decided
    return decided && { ...decided, round }
  }

  /** Audits a batch committed after the latest snapshot again (at start): the same order gives the same state, its attestations stored already. */
  replay(anchorRound: number, frames: readonly Uint8Array[]): void {
    this.audit(anchorRound, frames)
    this.snapshots.took(1, frameBytes(frames))
  }

  /** Forgets everything held in memory: the store is about to hold another state (a checkpoint). */
  clear(): void {
    this.latestAttestation.clear()
    this.catchUp.clear()
    this.spaces.clear()
    this.quota?.clear()
    this.end = undefined
  }

  /**
   * Feeds one consensus commit to every space's replica (new spaces are
   * created in commit order, so every relay creates them alike) and signs an
   * attestation for each space whose audit decided something. `history`
   * collects the stable values objects took, to store; without it
   * (replaying the store at start) the attestations, stored already, are
   * not made again.
   */
  audit(anchorRound: number, frames: readonly Uint8Array[], history?: HistoryRecord[]): AttestationWrite[] {
    // The epoch's last commit was audited: what comes after is the next epoch's (see RelayNode's drain).
    if (this.end) throw new Error(`the audit was fed the commit at round ${anchorRound} after epoch ${this.o.committee.epoch} ended at round ${this.end.round}`)
    const { admission, crypto } = this.o
    const bySpace = new Map<string, { envs: Envelope[]; frames: Uint8Array[] }>()
    for (const frame of frames) {
      const env = admission.open(frame)
      if (env instanceof SteadError) continue
      if (!bySpace.has(env.space) && !this.spaces.has(env.space) && !this.starts(env)) continue
      let group = bySpace.get(env.space)
      if (!group) bySpace.set(env.space, (group = { envs: [], frames: [] }))
      group.envs.push(env)
      group.frames.push(frame)
    }
    const out: AttestationWrite[] = []
    // A space with nothing in this commit and nothing parked cannot change: only these are visited.
    const visit = new Set([...bySpace.keys(), ...this.spaces.parkedSpaces()])
    for (const space of visit) {
      const group = bySpace.get(space)
      const replica = this.spaces.forAudit(space)
      const fromIndex = replica.stableIndex
      // Read before the commit changes it (the policy is the replica's own object); only where the cluster counts.
      const before = this.quota && policyState(replica.policy())
      const result = replica.commit(group?.envs ?? [], anchorRound)
      if (before) this.charge(space, before, policyState(replica.policy()), result.decisions)
      this.catchUp.record(space, fromIndex, result)
      // Every stable value an object took, kept for good (the replica keeps none in memory).
      if (history) for (const h of result.history) history.push({ space, ...h })
      for (const d of result.decisions) this.o.decided(d)
      const decisions = result.decisions.filter((d) => d.kind !== 'superseded').map(attestedDecision)
      // Attest every commit that carried envelopes of this space (some may only wait for a
      // gap) or decided any: replaying exactly these batches at these rounds reproduces the audit.
      if (decisions.length === 0 && !group) {
        this.spaces.audited(space, replica)
        continue
      }
      const prevRound = this.spaces.lastAttested(space)
      this.spaces.audited(space, replica, anchorRound)
      if (history === undefined) {
        // Replaying: its attestation is in the store already; only the chain's position is needed.
        this.latestAttestation.delete(space)
        continue
      }
      const stateHash = replica.stableHash((b) => crypto.sha256(b))
      const bytes = encodeAttestation({
        space,
        round: anchorRound,
        prevRound,
        fromIndex,
        toIndex: result.stableIndex,
        decisions,
        stateHash,
        batch: batchDigest((b) => crypto.sha256(b), group?.envs.map((e) => e.id) ?? []),
      })
      const attestation: Signed = { bytes, sig: crypto.sign(this.o.secretKey, bytes) }
      this.latestAttestation.set(space, { fromIndex, round: anchorRound, attestation, index: result.stableIndex, stateHash })
      out.push({ space, fromIndex, round: anchorRound, value: { attestation, envelopes: group?.frames ?? [] } })
    }
    if (bySpace.has(COMMITTEE_SPACE)) this.end = this.tallyEnd(anchorRound)
    return out
  }

  /**
   * Whether `env`, the first envelope of a space this relay does not hold,
   * starts it (charged to its user), as every correct relay decides alike
   * at this position: not for a space this cluster does not serve, nor past
   * its user's quota. Either way no replica is made: a Byzantine relay's
   * blocks cannot make correct relays hold spaces that cannot exist, nor
   * more than a user may hold.
   */
  private starts(env: Envelope): boolean {
    const { access } = this.o.admission
    // Decided either way: the door no longer counts it as being started.
    access.started(env.space)
    if (!access.serves(env.space, env)) return false
    if (this.quota && access.charges(env.space, env.userId)) {
      if (!this.quota.admits(env.userId)) return false
      this.quota.start(env.space, env.userId)
    }
    return true
  }

  /**
   * What a commit changed in whom `space` is charged to: its policy
   * created by another user than its starter moves the charge to them,
   * its deletion frees it. Starts are charged as a commit's envelopes are
   * grouped, before its audit: a deletion frees its slot for the next
   * commit's starts.
   */
  private charge(space: string, before: PolicyState, after: PolicyState, decisions: readonly Decision[]): void {
    const quota = this.quota as SpaceQuota
    if (!before.created && after.created) {
      const creation = decisions.find((d) => d.kind === 'committed' && createsPolicy(d.env))
      // A space creator (trusted, charged nothing) taking it over frees the starter's slot.
      if (creation && this.o.admission.access.charges(space, creation.env.userId)) quota.transfer(space, creation.env.userId)
      else if (creation) quota.free(space)
    }
    if (after.deleted && !before.deleted) quota.free(space)
  }

  /**
   * Every so many batches, or at the first batch a while after the last
   * snapshot, the spaces the audit changed since then are checkpointed:
   * written with the drain's batches, in the same transaction, so a
   * snapshot is always exactly "after batch n". `prune` says what the
   * store may let go of with it.
   */
  snapshotDue(newBatches: ReadonlyArray<{ readonly frames: readonly Uint8Array[] }>, prune: (spaces: ReadonlyArray<{ readonly space: string; readonly stableIndex: number }>) => Omit<SnapshotWrite, 'spaces'>, epochEnds = false): SnapshotWrite | undefined {
    this.snapshots.took(newBatches.length, newBatches.reduce((n, b) => n + frameBytes(b.frames), 0))
    if (this.spaces.dirtyCount === 0) return undefined
    const now = this.o.clock.now()
    // At an epoch's end always: the next epoch's relay never replays a batch of this one (whose rules, such as who writes $committee, were this committee's).
    if (!epochEnds && !this.snapshots.due(now)) return undefined
    // Encoded now: the write runs later, and the replicas go on auditing meanwhile.
    const spaces = this.spaces.takeSnapshot()
    this.snapshots.taken(now, spaces.reduce((n, x) => n + x.bytes.length, 0))
    this.o.snapshotTaken()
    return { spaces, ...prune(spaces), now, retention: spaces.map((x) => x.retention) }
  }

  /** A space's latest attestation here (undefined for a space with none): what its replica's stable state is the result of. */
  latestAttested(space: string): LatestAttestation | undefined {
    let latest = this.latestAttestation.get(space)
    if (!latest) {
      // Nothing audited for this space since start: its state is the one its last stored commit attested.
      const head = this.o.store().latestCommit(space)
      if (!head) return undefined
      const a = decodeAttestation(head.attestation.bytes)
      latest = { fromIndex: head.position[0], round: head.position[1], attestation: head.attestation, index: a.toIndex, stateHash: a.stateHash }
      this.latestAttestation.set(space, latest)
    }
    return latest
  }

  /** The space's stable index and state hash as this relay's replica holds them (0 and the empty state's hash for a space it has none of). */
  currentHead(space: string): SpaceHead {
    return this.spaces.head(space) ?? { index: 0, stateHash: new StableAudit({ space }).stableHash((b) => this.o.crypto.sha256(b)) }
  }

  /** The space's replica, or an empty one for a space nothing was committed to yet (index 0, which every correct relay holds alike). */
  replicaOrEmpty(space: string): StableAudit {
    return this.spaces.read(space) ?? new StableAudit(this.replicaOptions(space))
  }

  /**
   * A space's audit state as of its latest attested commit, with this
   * relay's attestation of that commit (whose state hash covers it): what
   * a client starts from instead of replaying the space's history.
   * Undefined for a space with no attested commit.
   */
  bootstrapSnapshot(space: string): { attestation: Signed; state: Uint8Array } | undefined {
    const replica = this.spaces.read(space)
    if (!replica) return undefined
    const latest = this.latestAttested(space)
    // Many clients opening one space at once get the same bytes: encoded once per commit.
    return latest && this.catchUp.snapshot(space, replica, latest)
  }

  /** One object's stable state at the latest attested commit, with the path proving it (or its absence) against that commit's state hash, and the attestation. */
  objectProof(space: string, key: string): { attestation: Signed; proof: Uint8Array } | undefined {
    const replica = this.spaces.read(space)
    const latest = replica && this.latestAttested(space)
    if (!replica || !latest) return undefined
    return { attestation: latest.attestation, proof: encodeObjectProof(replica.objectProof((b) => this.o.crypto.sha256(b), key)) }
  }

  /**
   * What changed in a space from `fromIndex` to the latest attested commit,
   * whose attestation must be `attestation` (a paced client believes the
   * delta by f+1 signatures on those bytes): `moved` when the space is at
   * another commit now, undefined past the change log.
   */
  pacedDelta(space: string, fromIndex: number, mode: DeltaMode, attestation: Uint8Array): Uint8Array | 'moved' | undefined {
    const replica = this.spaces.read(space)
    const latest = replica && this.latestAttested(space)
    if (!replica || !latest) return undefined
    if (latest.index !== replica.stableIndex || !bytesEqual(latest.attestation.bytes, attestation)) return 'moved'
    return this.catchUp.pacedDelta(space, replica, fromIndex, mode)
  }

  /** The objects a space's commits after `afterIndex` changed, or undefined when this relay no longer knows (or would read more than `maxOps` ops to). */
  changedKeys(space: string, afterIndex: number, maxOps: number): string[] | undefined {
    return this.catchUp.changedKeys(space, afterIndex, maxOps)
  }

  /** What changed in a space from `fromIndex` to the latest attested commit (BENDY: each object as ops or state), with the attestation; undefined past the change log. */
  stateDelta(space: string, fromIndex: number, mode: DeltaMode): { attestation: Signed; delta: Uint8Array } | undefined {
    const replica = this.spaces.read(space)
    const latest = replica && this.latestAttested(space)
    return replica && latest && this.catchUp.delta(space, replica, latest, fromIndex, mode)
  }
}

/** What the quota needs of a space's policy at one moment. */
interface PolicyState {
  readonly created: boolean
  readonly deleted: boolean
}

function policyState(policy: SpacePolicy | undefined): PolicyState {
  return { created: policy !== undefined, deleted: policy?.deleted === true }
}

function frameBytes(frames: readonly Uint8Array[]): number {
  let n = 0
  for (const f of frames) n += f.length
  return n
}
