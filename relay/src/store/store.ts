import { createHash } from 'node:crypto'
import { join } from 'node:path'
import { decode, encode, epochCertificateFields, epochCertificateFromFields, type EpochCertificate, type Signed } from '@stead/core'
import { FileJournal, JOURNAL_CAPACITY, type Journal } from './journal.ts'
import { HistoryLog, type HistoryRecord } from './history-log.ts'
import { HistoryRetention, type SpaceRetention } from './history-retention.ts'
import { AttestedCommits, chunkFrames, decodeCommitHead, type FeedPosition, type StoredAttestation, type StoredCommitHead } from './attested-commits.ts'

export { CHUNK_BYTES, chunkFrames, type FeedPosition, type StoredAttestation, type StoredCommitHead } from './attested-commits.ts'
import { LmdbKv, RECORD_LIMIT, type Kv, type KvTable } from './kv.ts'
import { blockEpochOf, epochOf, openBlock, type Block, type CommitRecord, type Committee, type PersistRecord, type RecoveredState, type SyncCrypto } from '../consensus/index.ts'

/** The journal beside the LMDB store in a relay's data dir (see RelayStore.write). */
export const JOURNAL_FILE = 'blocks.journal'

/**
 * The store's tables by name in its Kv. Exported with the record decoders
 * below for checkers that watch a relay's Kv (the simulator's), so they
 * follow the layout instead of copying it.
 */
export const STORE_TABLES = {
  ownBlocks: 'own-blocks',
  blocks: 'blocks',
  /** block digest hex → its slot (storeRecords.blockSlot) */
  blockDigests: 'block-digests',
  /** anchor round → the commit (storeRecords.commit) */
  commits: 'commits',
  /** [batch number, chunk] → a committed batch's frames */
  batches: 'batches',
  /** [space, from index, round] → an attestation (storeRecords.attestation) */
  attestations: 'attestations',
  /** [space, from index, round, chunk] → frames of the attested commit (storeRecords.chunk) */
  attestationChunks: 'attestation-chunks',
  /** [space, envelope id hex] → [from index, round] of the attested commit that decided it */
  decidedIds: 'decided-ids',
  /** [space, author id] → [seq, envelope id hex]: the last envelope of each author whose clock this relay voted for (ClockVotes) */
  clockVotes: 'clock-votes',
  history: 'history',
  /** [space, stable index, object key] → nothing: history entries of spaces with a retention, not yet swept (HistoryLog.prune) */
  historyIndex: 'history-index',
  /** space → what its policy says of its history (HistoryRetention) */
  historyRetention: 'history-retention',
  /** [space, stable index] → when a snapshot first found the space there (HistoryRetention) */
  historyStamps: 'history-stamps',
  snapshotHead: 'snapshot-head',
  /** Replaced as a whole when a relay starts over from a checkpoint (RelayStore.install). */
  snapshotSpaces: 'snapshot-spaces',
  checkpointHead: 'checkpoint-head',
  checkpointStates: 'checkpoint-states',
  /** epoch (1, 2, ...) → the certificate of the change that started it: [change bytes, [[relay, sig], ...]] */
  epochs: 'epochs',
} as const

/** Decoders of the store's records, by table (see STORE_TABLES). */
export const storeRecords = {
  commit(value: Uint8Array): { ordered: string[]; payloadIds: string[] } {
    const [ordered, payloadIds] = decode(value, RECORD_LIMIT) as [string[], string[]]
    return { ordered, payloadIds }
  },
  blockSlot(value: Uint8Array): { round: number; author: number; own: boolean } {
    const [round, author, own] = decode(value, RECORD_LIMIT) as [number, number, boolean]
    return { round, author, own }
  },
  attestation: decodeCommitHead,
  chunk(value: Uint8Array): Uint8Array[] {
    return decode(value, RECORD_LIMIT) as Uint8Array[]
  },
}

/** What a relay keeps its state in: an ordered key-value store, and the journal of what must be durable before it speaks. */
export interface StoreBacking {
  readonly kv: Kv
  readonly journal: Journal
}

/** Everything one drain of the relay's event loop makes durable, in one LMDB transaction. */
export interface WriteBatch {
  readonly records: readonly PersistRecord[]
  /** Committed payload per consensus commit, in commit order: the replicas are rebuilt from these. */
  readonly batches: ReadonlyArray<{ readonly anchorRound: number; readonly frames: readonly Uint8Array[] }>
  /** Keyed by where they start and their round: a commit that only parks or drops envelopes keeps the index. */
  readonly attestations: ReadonlyArray<{ readonly space: string; readonly fromIndex: number; readonly round: number; readonly value: StoredAttestation }>
  /** Stable values objects took at these indexes: their whole stable history, for paging. */
  readonly history?: readonly HistoryRecord[]
  /**
   * A snapshot as of the last batch of this write (or the last one stored):
   * the spaces that changed since the previous snapshot. Batches up to it
   * are deleted, and consensus commit records below `commitsBelow`.
   */
  readonly snapshot?: SnapshotWrite
  /** This relay's checkpoint taken in this write (see consensus/checkpoint.ts): it replaces the one stored. */
  readonly checkpoint?: CheckpointWrite
}

/**
 * A checkpoint as a relay keeps it to serve peers: its signed statement,
 * the manifest, and the encoded audit state of every space whose state
 * hash changed since the checkpoint before (the others' stored states are
 * still theirs).
 */
export interface CheckpointWrite {
  readonly anchorRound: number
  readonly statement: Signed
  readonly manifest: Uint8Array
  readonly states: ReadonlyArray<{ readonly space: string; readonly bytes: Uint8Array }>
}

/** The stored checkpoint's head: what a peer asking for statements or the manifest gets. */
export interface StoredCheckpoint {
  readonly anchorRound: number
  readonly statement: Signed
  readonly manifest: Uint8Array
}

/** What a relay that fetched a checkpoint from its peers starts again from (see RelayStore.install). */
export interface CheckpointInstall {
  /** The checkpoint itself, kept to serve others in turn. */
  readonly checkpoint: CheckpointWrite
  /** Each space's snapshot record (encodeSpaceSnapshot), built from its checked state. */
  readonly spaces: ReadonlyArray<{ readonly space: string; readonly bytes: Uint8Array }>
  /** The consensus commit records the core recovers from. */
  readonly commits: readonly CommitRecord[]
  /** The lowest round whose blocks it may hold from now on. */
  readonly blocksFrom: number
}

/** One space's audit state in a snapshot: the replica's checkpoint, the round of its latest attestation, and the user it is charged to (see SpaceQuota), if any. */
export interface SpaceSnapshot {
  readonly space: string
  readonly checkpoint: unknown
  readonly lastAttested: number
  readonly starter?: string
}

/** One space's snapshot record, encoded when the snapshot is taken (the replica goes on changing before the write runs). */
export function encodeSpaceSnapshot(s: SpaceSnapshot): { readonly space: string; readonly bytes: Uint8Array } {
  return { space: s.space, bytes: encode(s.starter === undefined ? [s.checkpoint, s.lastAttested] : [s.checkpoint, s.lastAttested, s.starter]) }
}

/** A space's snapshot record (from encodeSpaceSnapshot) back; records written before spaces had starters have none. */
export function decodeSpaceSnapshot(space: string, bytes: Uint8Array): SpaceSnapshot {
  const [checkpoint, lastAttested, starter] = decode(bytes, RECORD_LIMIT) as [unknown, number, string | undefined]
  return { space, checkpoint, lastAttested, ...(starter === undefined ? {} : { starter }) }
}

export interface SnapshotWrite {
  /** Each from encodeSpaceSnapshot. */
  readonly spaces: ReadonlyArray<{ readonly space: string; readonly bytes: Uint8Array }>
  /** Consensus commit records of rounds below this are no longer needed to recover (see recover). */
  readonly commitsBelow: number
  /** Blocks of rounds below this go (the retention window for peers catching up by range); this relay's latest own block stays. */
  readonly blocksBelow: number
  /** Per space, the attested commits that start below this stable index go (the retention window for clients resuming). */
  readonly feedBelow: ReadonlyArray<readonly [space: string, index: number]>
  /** What the snapshotted spaces' policies say of their histories (see HistoryRetention); absent: nothing changed. */
  readonly retention?: readonly SpaceRetention[]
  /** The relay's clock at the snapshot (ms): what retentions in days are measured against. */
  readonly now?: number
}

/** The latest snapshot: every space's state as of committed batch `batch`; replay the batches after it. */
export interface StoredSnapshot {
  readonly batch: number
  readonly spaces: readonly SpaceSnapshot[]
}

export type { HistoryRecord } from './history-log.ts'

type Bytes = Uint8Array


/** Peers' blocks held back from the disk (see RelayStore.write) past which they are written at once. */
const HELD_BYTES = 4 * 1024 * 1024

/**
 * The relay's durable state (LMDB in a relay; see kv.ts). Consensus records (own blocks before
 * they are sent, peers' blocks, commits), the latest snapshot of every
 * space's audit state and the committed batches since (a restart loads the
 * one and replays the others), and the attestations clients resume from.
 * Values are bytes Stead encoded itself (msgpack), so the store never
 * re-encodes what was signed.
 */
export class RelayStore {
  private readonly kv: Kv
  private readonly journal: Journal
  /** Writes with journaled records whose store transaction is not durable yet: at 0 the journal is dropped. */
  private journalLive = 0
  private readonly own: KvTable<number>
  /** [round, author, digest] → a peer's block (several per slot when its author equivocated). */
  private readonly blocks: KvTable<[number, number, string]>
  private readonly digests: KvTable<string>
  private readonly commits: KvTable<number>
  /** [batch number, chunk] → [anchor round, frames of that chunk] */
  private readonly batches: KvTable<[number, number]>
  /** Every space's attested commits, for clients resuming. */
  private readonly attested: AttestedCommits
  /** The clock votes this relay cast, per author: what its monotonicity validator remembers across restarts. */
  private readonly clockVotes: KvTable<[string, string]>
  /** Objects' stable histories: [space, object key, stable index] → its value from then on, whole or as a patch. */
  private readonly history: HistoryLog
  /** Prunes histories and commits as the spaces' retentions say, with each snapshot. */
  private readonly retention: HistoryRetention
  /** 'head' → [batch number of the latest snapshot]. */
  private readonly snapshotHead: KvTable<string>
  /**
   * space → [checkpoint, lastAttested]: each space as of the latest snapshot
   * that changed it. A space no batch touched since keeps its older record,
   * which is also its state at the head (nothing changed it in between).
   */
  private readonly snapshotSpaces: KvTable<string>
  /** 'head' → [anchor round, statement bytes, signature, manifest]. */
  private readonly checkpointHead: KvTable<string>
  /** space → its encoded audit state as of the latest checkpoint that changed it. */
  private readonly checkpointStates: KvTable<string>
  private nextBatch: number
  /** Peers' blocks waiting to go with the next write (see write), and at start the journal's; and their bytes. */
  private held: { records: PersistRecord[]; bytes: number } = { records: [], bytes: 0 }
  /** What the journal kept from before the start (see absorbJournal). */
  private fromJournal: Array<Extract<PersistRecord, { kind: 'own-block' | 'block' }>> = []
  /** Blocks of rounds below this were pruned (0: none were). */
  private blocksFrom: number

  constructor({ kv, journal }: StoreBacking) {
    this.kv = kv
    this.journal = journal
    this.own = kv.table(STORE_TABLES.ownBlocks)
    this.blocks = kv.table(STORE_TABLES.blocks)
    this.digests = kv.table(STORE_TABLES.blockDigests)
    this.commits = kv.table(STORE_TABLES.commits)
    this.batches = kv.table(STORE_TABLES.batches)
    this.attested = new AttestedCommits(kv.table(STORE_TABLES.attestations), kv.table(STORE_TABLES.attestationChunks), kv.table(STORE_TABLES.decidedIds))
    this.clockVotes = kv.table(STORE_TABLES.clockVotes)
    this.history = new HistoryLog(kv.table(STORE_TABLES.history), kv.table(STORE_TABLES.historyIndex), (space) => this.retention.covers(space))
    this.retention = new HistoryRetention(kv.table(STORE_TABLES.historyRetention), kv.table(STORE_TABLES.historyStamps), this.history, (space, below, limit) => this.attested.prune(space, below, limit))
    this.snapshotHead = kv.table(STORE_TABLES.snapshotHead)
    this.snapshotSpaces = kv.table(STORE_TABLES.snapshotSpaces)
    this.checkpointHead = kv.table(STORE_TABLES.checkpointHead)
    this.checkpointStates = kv.table(STORE_TABLES.checkpointStates)
    const from = this.snapshotHead.get('blocks-from')
    this.blocksFrom = from ? ((decode(from, RECORD_LIMIT) as [number])[0] ?? 0) : 0
    // Batch numbers only grow, also when every batch was pruned into a snapshot.
    let last = this.snapshotBatch()
    for (const key of this.batches.getKeys({ reverse: true, limit: 1 })) last = Math.max(last, (key as [number, number])[0])
    this.nextBatch = last + 1
  }

  /** The certificates of the epoch changes this store went through, oldest first. */
  epochChain(): EpochCertificate[] {
    return storedChain(this.kv)
  }

  /** Keeps the certificates that start these epochs; resolves once they are durable (after every write issued before). */
  keepEpochCertificates(certs: ReadonlyMap<number, EpochCertificate>): Promise<void> {
    return keepEpochCertificates(this.kv, certs)
  }

  /** The store of a relay's data dir: LMDB, and the journal beside it. */
  static open(path: string): RelayStore {
    return new RelayStore({ kv: new LmdbKv(path), journal: new FileJournal(join(path, JOURNAL_FILE)) })
  }

  /**
   * Takes what the journal kept from before a crash (blocks this relay may
   * have spoken of while their transaction was still running): `recover`
   * returns them with the store's, and the next write puts them in the
   * store. Call once, before `recover`. Returns how many blocks it held.
   */
  absorbJournal(crypto: SyncCrypto, committee: Committee): number {
    for (const entry of this.journal.recovered()) {
      for (const [own, bytes, sig] of decode(entry, RECORD_LIMIT) as Array<[boolean, Bytes, Bytes]>) {
        // A block of the epoch before an epoch change is of no use in the next one.
        if (blockEpochOf(bytes) !== epochOf(committee)) continue
        const block = openBlock(crypto, committee, { bytes, sig })
        this.fromJournal.push(own ? { kind: 'own-block', block } : { kind: 'block', block })
      }
    }
    this.held.records.push(...this.fromJournal)
    return this.fromJournal.length
  }

  /**
   * Writes one drain's records atomically in one store transaction;
   * resolves once they are on disk. A write with one of the relay's own
   * blocks first appends that block, and the peers' blocks written with it,
   * to the journal (see journal.ts): once `write` returns, a killed process
   * cannot lose them, and peers may hear of them without waiting for the
   * transaction's disk sync (what the relay says next builds on blocks it
   * cannot lose, and the commits it makes follow from the DAG). Waiting for
   * the transaction before each block cost 3-4 ms of every safe update with
   * 4 relays on one disk (BENCHMARKS.md). Clients read attested commits
   * from the store, once the transaction is durable.
   *
   * Peers' blocks alone are not written at once: they need to be on disk
   * only before something this relay says builds on them (its next block,
   * which references them; an attestation of a commit that orders them),
   * and whatever says it is written by a later write. So a write of nothing
   * but peers' blocks is held in memory (resolving at once) and goes first
   * in the next write, in the same transaction: a round costs the relay one
   * disk sync instead of one per block received. A crash loses only blocks
   * nothing this relay said depends on (it fetches them again if it needs
   * them). Past HELD_BYTES they are written at once; close() writes them.
   */
  write(w: WriteBatch): Promise<void> {
    const recordsOnly = w.batches.length === 0 && w.attestations.length === 0 && !w.history?.length && !w.snapshot && !w.checkpoint
    if (recordsOnly && w.records.length === 0) return Promise.resolve()
    if (recordsOnly && w.records.every((r) => r.kind === 'block') && this.held.bytes < HELD_BYTES) {
      for (const r of w.records) {
        this.held.records.push(r)
        this.held.bytes += r.kind === 'block' ? r.block.signed.bytes.length : 0
      }
      return Promise.resolve()
    }
    const records = [...this.takeHeld(), ...w.records]
    const journaled = records.some((r) => r.kind === 'own-block')
    if (journaled) {
      this.journal.append(encode(records.flatMap((r) => (r.kind === 'commit' ? [] : [[r.kind === 'own-block', r.block.signed.bytes, r.block.signed.sig]]))))
      this.journalLive++
    }
    // Not async up to here: a journal that cannot be written throws before anything is sent.
    return this.transact(records, w).then(() => {
      // Every block journaled so far is in the store now: the journal starts over.
      if (journaled && --this.journalLive === 0) this.journal.drop()
    })
  }

  /**
   * The journal holds as much as its file was made for, and some writes
   * are not durable yet: the relay issues no write with an own block until
   * they are (then the journal is dropped). Without this, a store that
   * always has a transaction in flight would never let the journal start
   * over, and it would grow without end.
   */
  get journalFull(): boolean {
    return this.journalLive > 0 && this.journal.size >= JOURNAL_CAPACITY
  }

  /** The records held for the next write, which now goes. */
  private takeHeld(): PersistRecord[] {
    const held = this.held.records
    this.held = { records: [], bytes: 0 }
    return held
  }

  /** Bytes of peers' blocks held for the next write (see write). */
  get heldBlockBytes(): number {
    return this.held.bytes
  }

  /** One transaction: `records` (the held peers' blocks first), then the rest of `w`. */
  private async transact(records: readonly PersistRecord[], w: WriteBatch): Promise<void> {
    try {
      await this.writeTransaction(records, w)
    } catch (err) {
      // A write that failed may have taken history entries with it: the next of each object is stored whole.
      this.history.forget()
      throw err
    }
  }

  private async writeTransaction(records: readonly PersistRecord[], w: WriteBatch): Promise<void> {
    await this.kv.write(() => {
      this.putRecords(records)
      for (const b of w.batches) {
        const n = this.nextBatch++
        chunkFrames(b.frames).forEach((frames, k) => this.batches.put([n, k], encode([b.anchorRound, frames])))
      }
      for (const a of w.attestations) this.attested.put(a)
      for (const h of w.history ?? []) this.history.put(h)
      if (w.snapshot) this.writeSnapshot(w.snapshot)
      if (w.checkpoint) this.writeCheckpoint(w.checkpoint)
    })
  }

  private putRecords(records: readonly PersistRecord[]): void {
    for (const r of records) {
      switch (r.kind) {
        case 'own-block':
          this.own.put(r.block.header.round, encodeBlock(r.block))
          this.digests.put(r.block.digestHex, encode([r.block.header.round, r.block.header.author, true]))
          break
        case 'block': {
          const { round, author } = r.block.header
          this.blocks.put([round, author, r.block.digestHex], encodeBlock(r.block))
          this.digests.put(r.block.digestHex, encode([round, author, false]))
          break
        }
        case 'commit':
          this.commits.put(r.anchorRound, encode([r.ordered, r.payloadIds]))
          break
      }
    }
  }

  private writeCheckpoint(c: CheckpointWrite): void {
    for (const s of c.states) this.checkpointStates.put(s.space, s.bytes)
    this.checkpointHead.put('head', encode([c.anchorRound, c.statement.bytes, c.statement.sig, c.manifest]))
  }

  /** The latest checkpoint this relay took (or installed), if any. */
  checkpoint(): StoredCheckpoint | undefined {
    const head = this.checkpointHead.get('head')
    if (!head) return undefined
    const [anchorRound, bytes, sig, manifest] = decode(head, RECORD_LIMIT) as [number, Bytes, Bytes, Bytes]
    return { anchorRound, statement: { bytes, sig }, manifest }
  }

  /**
   * The stored audit states of these spaces (the latest checkpoint's), in
   * order, up to about `maxBytes` (at least one); read in one go with the
   * head, so a checkpoint written meanwhile cannot mix in.
   */
  checkpointPart(anchorRound: number, spaces: readonly string[], maxBytes: number): Uint8Array[] | undefined {
    return this.kv.read(() => {
      const head = this.checkpointHead.get('head')
      if (!head || (decode(head, RECORD_LIMIT) as [number])[0] !== anchorRound) return undefined
      const out: Uint8Array[] = []
      let bytes = 0
      for (const space of spaces) {
        const state = this.checkpointStates.get(space)
        if (!state) throw new Error(`store: the checkpoint of round ${anchorRound} lists space ${space} but holds no state for it`)
        if (out.length > 0 && bytes + state.length > maxBytes) break
        out.push(state)
        bytes += state.length
      }
      return out
    })
  }

  /**
   * Starts this store over from a checkpoint fetched from peers, in one
   * transaction: every space's snapshot becomes the checkpoint's, the
   * consensus commit records become its window, and what came before it
   * goes (batches, peers' blocks, attested commits and stable histories:
   * this relay never saw the commits in between, so it serves none of
   * them). Its own latest block stays: its next block references it.
   */
  async install(c: CheckpointInstall): Promise<void> {
    // Peers' blocks held for the next write belong to the DAG the checkpoint replaces; our own
    // (the journal's, from before a crash) are rounds we signed: they stay.
    const own = this.takeHeld().filter((r) => r.kind === 'own-block')
    this.fromJournal = []
    await this.kv.write(() => {
      this.putRecords(own)
      for (const key of [...this.batches.getKeys()]) this.batches.remove(key as [number, number])
      for (const key of [...this.commits.getKeys()]) this.commits.remove(key as number)
      this.putRecords(c.commits.map((r) => ({ kind: 'commit' as const, ...r })))
      this.attested.clear()
      this.history.clear()
      for (const key of [...this.snapshotSpaces.getKeys()]) this.snapshotSpaces.remove(key as string)
      for (const s of c.spaces) this.snapshotSpaces.put(s.space, s.bytes)
      this.snapshotHead.put('head', encode([this.nextBatch - 1]))
      this.pruneBlocks(Number.MAX_SAFE_INTEGER)
      this.blocksFrom = c.blocksFrom
      this.snapshotHead.put('blocks-from', encode([c.blocksFrom]))
      for (const key of [...this.checkpointStates.getKeys()]) this.checkpointStates.remove(key as string)
      this.writeCheckpoint(c.checkpoint)
      // Which checkpoint this store last started over from: for operators, and for checkers that read the store.
      this.snapshotHead.put('installed', encode([c.checkpoint.anchorRound]))
    })
    // The journal's blocks belong to the replaced DAG too (and every earlier write is durable now).
    this.journal.drop()
  }

  /** Inside write's transaction: the snapshot as of the last batch stored, then what it makes obsolete goes. */
  private writeSnapshot(snap: SnapshotWrite): void {
    const batch = this.nextBatch - 1
    for (const s of snap.spaces) this.snapshotSpaces.put(s.space, s.bytes)
    this.snapshotHead.put('head', encode([batch]))
    // Keys are collected first: a cursor does not walk a range it is deleting from.
    for (const key of [...this.batches.getKeys({ end: [batch + 1, 0] })]) this.batches.remove(key as [number, number])
    for (const key of [...this.commits.getKeys({ end: snap.commitsBelow })]) this.commits.remove(key as number)
    this.pruneBlocks(snap.blocksBelow)
    for (const [space, index] of snap.feedBelow) this.attested.prune(space, index)
    if (snap.now !== undefined) this.retention.compact(snap.retention ?? [], snap.now)
  }

  /** The lowest round whose blocks this store may still hold: those below it were pruned. */
  get blocksKeptFrom(): number {
    return this.blocksFrom
  }

  private pruneBlocks(below: number): void {
    if (below > this.blocksFrom) {
      this.snapshotHead.put('blocks-from', encode([below]))
      this.blocksFrom = below
    }
    for (const key of [...this.blocks.getKeys({ end: [below, 0, ''] })]) {
      this.blocks.remove(key)
      this.digests.remove(key[2])
    }
    let latest = 0
    for (const key of this.own.getKeys({ reverse: true, limit: 1 })) latest = key as number
    for (const { key, value } of [...this.own.getRange({ end: Math.min(below, latest) })]) {
      const [bytes] = decode(value, RECORD_LIMIT) as [Bytes]
      this.digests.remove(createHash('sha256').update(bytes).digest('hex'))
      this.own.remove(key)
    }
  }

  /** The stable index a space's stored commits start from (0 until some were pruned), or undefined for a space with none. */
  feedStart(space: string): number | undefined {
    return this.commitAt(space, [0, 0])?.position[0]
  }

  private snapshotBatch(): number {
    const head = this.snapshotHead.get('head')
    return head ? ((decode(head, RECORD_LIMIT) as [number])[0] ?? 0) : 0
  }

  /** The latest snapshot, if one was written: replay `committedBatches(batch)` on top of it. */
  snapshot(): StoredSnapshot | undefined {
    if (!this.snapshotHead.get('head')) return undefined
    return { batch: this.snapshotBatch(), spaces: [...this.snapshotSpaceRecords()].map(({ recordBytes: _, ...record }) => record) }
  }

  /** The batch the latest snapshot was taken after, or undefined if none was written. */
  snapshotAfter(): number | undefined {
    return this.snapshotHead.get('head') ? this.snapshotBatch() : undefined
  }

  /** Each space's record in the latest snapshot, decoded one at a time (in name order). */
  *snapshotSpaceRecords(): Generator<SpaceSnapshot & { readonly recordBytes: number }> {
    for (const { key, value } of this.snapshotSpaces.getRange({})) yield { ...decodeSpaceSnapshot(key, value), recordBytes: value.length }
  }

  /** One space's record in the latest snapshot as stored (encodeSpaceSnapshot bytes), or undefined if it has none. */
  spaceSnapshotBytes(space: string): Uint8Array | undefined {
    return this.snapshotSpaces.get(space)
  }


  /**
   * What the consensus core needs after a restart: own blocks and peers'
   * blocks above the GC horizon, and the recent commits. Blocks are
   * re-opened (signature checked): a corrupted store fails loudly here.
   */
  recover(crypto: SyncCrypto, committee: Committee, gcDepth: number): RecoveredState {
    let lastAnchor = 0
    for (const key of this.commits.getKeys({ reverse: true, limit: 1 })) lastAnchor = key as number
    const horizon = Math.max(0, lastAnchor - 2 * gcDepth)
    const ownBlocks: Block[] = []
    const keep = (into: Block[], block: Block | undefined): void => void (block && into.push(block))
    for (const { value } of this.own.getRange({ start: horizon })) keep(ownBlocks, decodeBlock(crypto, committee, value))
    // The latest own block is needed whatever its age: the next one references it (none in an epoch's first round).
    if (ownBlocks.length === 0) for (const { value } of this.own.getRange({ reverse: true, limit: 1 })) keep(ownBlocks, decodeBlock(crypto, committee, value))
    const blocks: Block[] = []
    for (const { value } of this.blocks.getRange({ start: [horizon, 0, ''] })) keep(blocks, decodeBlock(crypto, committee, value))
    const stored = new Set([...ownBlocks, ...blocks].map((b) => b.digestHex))
    for (const r of this.fromJournal) if (!stored.has(r.block.digestHex)) (r.kind === 'own-block' ? ownBlocks : blocks).push(r.block)
    this.fromJournal = []
    const commits = []
    for (const { key, value } of this.commits.getRange({ start: horizon })) commits.push({ anchorRound: key, ...storeRecords.commit(value) })
    return { ownBlocks, blocks, commits }
  }

  /** The committed batches after batch number `after` (a snapshot's), in commit order, their chunks joined, to rebuild the replicas. */
  *committedBatches(after = 0): Generator<{ anchorRound: number; frames: Uint8Array[] }> {
    let current: { n: number; anchorRound: number; frames: Uint8Array[] } | undefined
    for (const { key, value } of this.batches.getRange({ start: [after + 1, 0] })) {
      const [anchorRound, frames] = decode(value, RECORD_LIMIT) as [number, Uint8Array[]]
      if (current && current.n !== key[0]) {
        yield { anchorRound: current.anchorRound, frames: current.frames }
        current = undefined
      }
      if (current) current.frames.push(...frames)
      else current = { n: key[0], anchorRound, frames: [...frames] }
    }
    if (current) yield { anchorRound: current.anchorRound, frames: current.frames }
  }

  /**
   * Stored blocks (own and peers') of rounds fromRound..toRound for a peer
   * catching up: at most `limit` blocks and about `maxBytes` of them, the
   * lowest rounds first (at least one block).
   */
  blocksInRounds(crypto: SyncCrypto, committee: Committee, fromRound: number, toRound: number, limit: number, maxBytes: number): Block[] {
    const found: Array<{ round: number; value: Uint8Array }> = []
    for (const { key, value } of this.blocks.getRange({ start: [fromRound, 0, ''], end: [toRound + 1, 0, ''], limit })) found.push({ round: key[0], value })
    for (const { key, value } of this.own.getRange({ start: fromRound, end: toRound + 1, limit })) found.push({ round: key, value })
    found.sort((a, b) => a.round - b.round)
    const out: Block[] = []
    let bytes = 0
    for (const { value } of found) {
      if (out.length >= limit || (out.length > 0 && bytes + value.length > maxBytes)) break
      const block = decodeBlock(crypto, committee, value, false)
      if (!block) continue
      out.push(block)
      bytes += value.length
    }
    return out
  }

  blocksByDigest(crypto: SyncCrypto, committee: Committee, digests: readonly string[]): Block[] {
    const out: Block[] = []
    for (const d of digests) {
      const where = this.digests.get(d)
      if (!where) continue
      const { round, author, own } = storeRecords.blockSlot(where)
      const value = own ? this.own.get(round) : this.blocks.get([round, author, d])
      const block = value && decodeBlock(crypto, committee, value, false)
      if (block) out.push(block)
    }
    return out
  }

  /**
   * The first of a space's attested commits at or after position `from`
   * = [stable index the commit started at, its round], in commit order. A
   * client resuming from stable index i asks from [i, 0]: it holds what came
   * before, parked envelopes included.
   */
  commitAt(space: string, from: FeedPosition): StoredCommitHead | undefined {
    return this.attested.at(space, from)
  }

  /**
   * A space's latest attested commit that ends at or below stable index
   * `index`: the last one a client at `index` applied (unless it skipped it
   * by a snapshot). Commits that start at `index` and go past it are not.
   */
  commitEndingBy(space: string, index: number): StoredCommitHead | undefined {
    return this.attested.endingBy(space, index)
  }

  /** A space's latest stored attested commit (highest stable index, then round). */
  latestCommit(space: string): StoredCommitHead | undefined {
    return this.attested.latest(space)
  }

  /**
   * Up to `limit` entries of an object's stable history before stable index
   * `before`, newest first, and as many as fit in `maxBytes` of encoded
   * values (always at least one); a page never holds more than that and one
   * value besides (see HistoryLog.page). `more` says whether older entries
   * remain (the next page starts before the oldest one here).
   */
  historyOf(space: string, key: string, before: number, limit: number, maxBytes = Number.POSITIVE_INFINITY): { entries: Array<{ index: number; value: unknown }>; more: boolean } {
    return this.history.page(space, key, before, limit, maxBytes)
  }

  /** The kept attested commit that decided envelope `idHex` of `space` (undefined once its commit was pruned, or for an envelope never decided). */
  commitDeciding(space: string, idHex: string): StoredCommitHead | undefined {
    return this.kv.read(() => this.attested.decidedBy(space, idHex))
  }

  /** Every author's last clock vote, as written by `writeClockVotes`. */
  *clockVotesCast(): Iterable<{ space: string; authorId: string; seq: number; idHex: string }> {
    for (const { key, value } of this.clockVotes.getRange()) {
      const [seq, idHex] = decode(value, RECORD_LIMIT) as [number, string]
      yield { space: key[0], authorId: key[1], seq, idHex }
    }
  }

  /** Records clock votes (each replaces its author's last); resolves once durable: a vote is sent only then. */
  writeClockVotes(votes: ReadonlyArray<{ readonly space: string; readonly authorId: string; readonly seq: number; readonly idHex: string }>): Promise<void> {
    return this.kv.write(() => {
      for (const v of votes) this.clockVotes.put([v.space, v.authorId], encode([v.seq, v.idHex]))
    })
  }

  /** Chunk `k` of the envelopes of the commit at `position` (see commitAt), as stored: one encoded msgpack array of frames. */
  commitChunk(space: string, position: FeedPosition, k: number): Uint8Array {
    return this.attested.chunk(space, position, k)
  }

  async close(): Promise<void> {
    if (this.held.records.length) await this.transact(this.takeHeld(), { records: [], batches: [], attestations: [] })
    await this.journal.close()
    await this.kv.close()
  }
}

/**
 * The certificates of the epoch changes a store went through, oldest
 * first (none: it is still in the cluster file's epoch 0). Read before a
 * relay is built (its committee is the latest certificate's), so from the
 * Kv itself.
 */
export function storedChain(kv: Kv): EpochCertificate[] {
  const out: EpochCertificate[] = []
  for (const { value } of kv.table<number>(STORE_TABLES.epochs).getRange({})) {
    out.push(epochCertificateFromFields(decode(value, RECORD_LIMIT), 'stored epoch certificate'))
  }
  return out
}

/** Keeps the certificates that start these epochs (see STORE_TABLES.epochs) in one write; resolves once it is durable. */
export async function keepEpochCertificates(kv: Kv, certs: ReadonlyMap<number, EpochCertificate>): Promise<void> {
  if (!certs.size) return
  const table = kv.table<number>(STORE_TABLES.epochs)
  await kv.write(() => certs.forEach((cert, epoch) => table.put(epoch, encode(epochCertificateFields(cert)))))
}

function encodeBlock(b: Block): Uint8Array {
  return encode([b.signed.bytes, b.signed.sig])
}

/**
 * `verify` is off for what we only forward to peers (they verify); recovery
 * verifies. Undefined for a block of another epoch than the committee's
 * (kept from before an epoch change, until retention prunes it).
 */
function decodeBlock(crypto: SyncCrypto, committee: Committee, value: Uint8Array, verify = true): Block | undefined {
  const [bytes, sig] = decode(value, RECORD_LIMIT) as [Bytes, Bytes]
  if (blockEpochOf(bytes) !== epochOf(committee)) return undefined
  return openBlock(crypto, committee, { bytes, sig }, undefined, verify)
}
