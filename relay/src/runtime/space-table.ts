import { StableAudit, type Envelope, type ReplicaOptions, type Signed, type SpacePolicy } from '@stead/core'
import type { HostClock, HostTimer } from '@stead/core'
import { decodeSpaceSnapshot, encodeSpaceSnapshot } from '../store/store.ts'
import type { SpaceRetention } from '../store/history-retention.ts'

/**
 * What a resident replica is charged besides its state: its maps, indexes
 * and Merkle trees (measured: about 7 KiB for a space holding one counter).
 */
const REPLICA_BYTES = 8 * 1024
/** A replica's decoded objects weigh about this many times their msgpack record. */
const BYTES_PER_RECORD_BYTE = 4

/** A space's stable head: what quorum reads, listings and checkpoint manifests need of it. */
export interface SpaceHead {
  readonly index: number
  readonly stateHash: Uint8Array
}

export interface SpaceTableOptions {
  /** The space's record in the store's latest snapshot (encodeSpaceSnapshot bytes), undefined if it has none. */
  readonly stored: (space: string) => Uint8Array | undefined
  /** How a space's replica is built (the cluster's policy for it). */
  readonly replicaOptions: (space: string) => ReplicaOptions
  /** Opens a parked envelope of a stored record (trusted: the relay checked it before storing it). */
  readonly open: (signed: Signed) => Envelope
  readonly sha256: (bytes: Uint8Array) => Uint8Array
  readonly clock: HostClock
  /** A replica unused this long leaves memory once its state is in a snapshot record. */
  readonly idleMs: number
  /** Called when a space's replica leaves memory: what the relay cached beside it can go too. */
  readonly evicted: (space: string) => void
  /** The user a space is charged to (see SpaceQuota), kept in its snapshot record. */
  readonly starterOf: (space: string) => string | undefined
}

/** A space's snapshot record as the store reads it back (see decodeSpaceSnapshot). */
export interface StoredSpace {
  readonly space: string
  readonly checkpoint: unknown
  readonly lastAttested: number
  readonly recordBytes: number
  readonly starter?: string
}

interface Entry {
  /** The round of the space's latest attestation: the next one chains to it. */
  lastAttested: number
  /** Its snapshot record's size when last encoded or read: what its memory estimate scales with. */
  recordBytes: number
  usedAt: number
  /** Kept when the replica leaves memory, so heads are read without loading it. */
  head: SpaceHead | undefined
  /** The space's policy as of its replica's last use (null: it has none; undefined: not seen since start). */
  policy: SpacePolicy | null | undefined
}

/**
 * Every space a relay holds, with its audit replica in memory only while
 * the space is in use. A replica leaves memory when it has been unused for
 * `idleMs` (or when the memory budget needs room, least recently used
 * first), but only once its whole state is in a snapshot record: one that
 * changed since (dirty) or holds envelopes parked behind a gap stays. It
 * comes back from that record, from the store or from a record encoded but
 * not yet written, exactly as a restart would build it; the audit of a
 * replica that came back is the audit of one that never left. So a space
 * at rest costs its name and a few numbers, and 20,000 idle spaces cost a
 * few megabytes instead of a replica each.
 */
export class SpaceTable {
  private readonly entries = new Map<string, Entry>()
  /** The replicas in memory, least recently used first. */
  private readonly resident = new Map<string, StableAudit>()
  private residentEstimate = 0
  /** Spaces whose replica changed since its snapshot record was last encoded. */
  private readonly dirty = new Set<string>()
  /** Records encoded for a snapshot whose write has not ended yet: newer than the store's. */
  private readonly unsaved = new Map<string, Uint8Array>()
  /** Spaces with envelopes parked behind a gap: the audit visits them at every commit (gap waits end by round). */
  private readonly parked = new Set<string>()
  /** Armed while some replica in memory may leave it once idle; null once stopped. */
  private sweepTimer: HostTimer | undefined | null
  private readonly o: SpaceTableOptions

  constructor(options: SpaceTableOptions) {
    this.o = options
  }

  get size(): number {
    return this.entries.size
  }

  get residentCount(): number {
    return this.resident.size
  }

  /** The estimated bytes of the replicas in memory (for the memory budget). */
  get residentBytes(): number {
    return this.residentEstimate
  }

  /** Spaces changed since the last snapshot. */
  get dirtyCount(): number {
    return this.dirty.size
  }

  /** Whether a replica in memory could leave it once idle (one that changed since the last snapshot cannot yet). */
  private get sweepable(): boolean {
    for (const space of this.resident.keys()) if (this.evictable(space)) return true
    return false
  }

  has(space: string): boolean {
    return this.entries.has(space)
  }

  names(): string[] {
    return [...this.entries.keys()]
  }

  /** Spaces with envelopes parked behind a gap, in the order they got them. */
  parkedSpaces(): string[] {
    return [...this.parked]
  }

  /**
   * The replica the audit feeds a commit: created for a new space, loaded
   * for one that left memory, and marked changed before the caller changes
   * it (so it cannot leave memory before its next snapshot record).
   */
  forAudit(space: string): StableAudit {
    let replica = this.read(space)
    if (!replica) {
      this.entries.set(space, { lastAttested: 0, recordBytes: 0, usedAt: this.o.clock.now(), head: undefined, policy: undefined })
      replica = new StableAudit(this.o.replicaOptions(space))
      this.keep(space, replica)
    }
    this.dirty.add(space)
    return replica
  }

  /** After the audit fed `space` a commit attested at `round` (undefined: it attested nothing new). */
  audited(space: string, replica: StableAudit, round?: number): void {
    const entry = this.entries.get(space) as Entry
    if (round !== undefined) entry.lastAttested = round
    entry.policy = replica.policy() ?? null
    if (replica.waitingCount > 0) this.parked.add(space)
    else this.parked.delete(space)
  }

  /** A space's replica for reading (loaded if it left memory), or undefined for a space this relay does not hold. */
  read(space: string): StableAudit | undefined {
    const entry = this.entries.get(space)
    if (!entry) return undefined
    entry.usedAt = this.o.clock.now()
    let replica = this.resident.get(space)
    if (replica) {
      // Least recently used first: a use moves it to the end.
      this.resident.delete(space)
      this.resident.set(space, replica)
      return replica
    }
    const bytes = this.unsaved.get(space) ?? this.o.stored(space)
    if (!bytes) throw new Error(`space ${space} left memory without a snapshot record`)
    const record = decodeSpaceSnapshot(space, bytes)
    replica = StableAudit.restore(this.o.replicaOptions(space), record.checkpoint, this.o.open)
    entry.recordBytes = bytes.length
    this.keep(space, replica)
    return replica
  }

  lastAttested(space: string): number {
    return this.entries.get(space)?.lastAttested ?? 0
  }

  /** A space's stable head, without loading its replica when it is kept; undefined for a space this relay does not hold. */
  head(space: string): SpaceHead | undefined {
    const entry = this.entries.get(space)
    if (!entry) return undefined
    if (entry.head && !this.resident.has(space)) return entry.head
    const replica = this.read(space) as StableAudit
    return { index: replica.stableIndex, stateHash: replica.stableHash(this.o.sha256) }
  }

  /**
   * The snapshot records of the spaces changed since the last one, encoded
   * now (the replicas go on changing before the write runs); until
   * `saved` says they are on disk, a replica that leaves memory comes back
   * from them.
   */
  takeSnapshot(): Array<{ readonly space: string; readonly bytes: Uint8Array; readonly stableIndex: number; readonly retention: SpaceRetention }> {
    const out = [...this.dirty].map((space) => {
      const replica = this.resident.get(space) as StableAudit
      const starter = this.o.starterOf(space)
      const record = encodeSpaceSnapshot({ space, checkpoint: replica.checkpoint(), lastAttested: this.lastAttested(space), ...(starter === undefined ? {} : { starter }) })
      this.unsaved.set(space, record.bytes)
      const entry = this.entries.get(space) as Entry
      this.residentEstimate += estimate(record.bytes.length) - estimate(entry.recordBytes)
      entry.recordBytes = record.bytes.length
      const policy = replica.policy()
      const keep = policy && (policy.retention.entries > 0 || policy.retention.days > 0) ? policy.retention : undefined
      return { ...record, stableIndex: replica.stableIndex, retention: { space, stableIndex: replica.stableIndex, deleted: policy?.deleted ?? false, ...(keep ? { keep } : {}) } }
    })
    this.dirty.clear()
    return out
  }

  /** The records of a snapshot are on disk: the store has them now. */
  saved(records: ReadonlyArray<{ readonly space: string; readonly bytes: Uint8Array }>): void {
    for (const r of records) if (this.unsaved.get(r.space) === r.bytes) this.unsaved.delete(r.space)
  }

  /**
   * Sweeps idle replicas out of memory `idleMs` from now, if any may leave
   * (changed ones wait for the next snapshot; the relay arms it again after
   * each write).
   */
  armSweep(): void {
    if (this.sweepTimer !== undefined || !this.sweepable) return
    this.sweepTimer = this.o.clock.setTimer(this.o.idleMs, () => {
      this.sweepTimer = undefined
      this.sweep()
      this.armSweep()
    })
  }

  /** No more sweeps (the relay stops). */
  stop(): void {
    this.sweepTimer?.cancel()
    this.sweepTimer = null
  }

  /** Replicas unused for `idleMs` whose state is in a snapshot record leave memory. */
  sweep(): void {
    const before = this.o.clock.now() - this.o.idleMs
    for (const [space] of this.resident) {
      if ((this.entries.get(space) as Entry).usedAt > before) break
      if (this.evictable(space)) this.evict(space)
    }
  }

  /** For the memory budget: replicas that may leave memory do, least recently used first, until `bytes` are freed. */
  reclaim(bytes: number): void {
    let freed = 0
    for (const [space] of this.resident) {
      if (freed >= bytes) return
      if (!this.evictable(space)) continue
      freed += estimate((this.entries.get(space) as Entry).recordBytes)
      this.evict(space)
    }
  }

  /**
   * The spaces of the store's latest snapshot, at start: each is built once
   * for its head (checkpoint manifests list every space's), and kept in
   * memory only if it holds envelopes parked behind a gap (the audit visits
   * those at every commit).
   */
  restore(records: Iterable<StoredSpace>): void {
    for (const r of records) {
      const replica = StableAudit.restore(this.o.replicaOptions(r.space), r.checkpoint, this.o.open)
      const head = { index: replica.stableIndex, stateHash: replica.stableHash(this.o.sha256) }
      this.entries.set(r.space, { lastAttested: r.lastAttested, recordBytes: r.recordBytes, usedAt: this.o.clock.now(), head, policy: replica.policy() ?? null })
      if (replica.waitingCount === 0) continue
      this.keep(r.space, replica)
      this.parked.add(r.space)
    }
  }

  /** Forgets every space (the relay starts over from a checkpoint). */
  clear(): void {
    for (const s of [this.entries, this.resident, this.dirty, this.unsaved, this.parked]) s.clear()
    this.residentEstimate = 0
  }

  /**
   * The policy `space` follows at its stable index (see StableAudit.policy),
   * null when it has none, undefined for a space this relay does not hold;
   * read without loading its replica, except once after a start.
   */
  policyOf(space: string): SpacePolicy | null | undefined {
    const entry = this.entries.get(space)
    if (!entry) return undefined
    if (entry.policy === undefined) this.read(space)
    return entry.policy
  }

  private keep(space: string, replica: StableAudit): void {
    ;(this.entries.get(space) as Entry).policy = replica.policy() ?? null
    this.resident.set(space, replica)
    this.residentEstimate += estimate((this.entries.get(space) as Entry).recordBytes)
  }

  private evictable(space: string): boolean {
    return !this.dirty.has(space) && !this.parked.has(space)
  }

  private evict(space: string): void {
    const replica = this.resident.get(space) as StableAudit
    const entry = this.entries.get(space) as Entry
    entry.head = { index: replica.stableIndex, stateHash: replica.stableHash(this.o.sha256) }
    this.resident.delete(space)
    this.residentEstimate -= estimate(entry.recordBytes)
    this.o.evicted(space)
  }
}

function estimate(recordBytes: number): number {
  return REPLICA_BYTES + BYTES_PER_RECORD_BYTE * recordBytes
}
