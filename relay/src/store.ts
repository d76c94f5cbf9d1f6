import { decode, encode, fromHex, toHex, type Signed } from '@stead/core'
import { open, type Database, type Key, type RootDatabase } from 'lmdb'
import { openBlock, type Certificate, type Committee, type PersistRecord, type RecoveredState, type SyncCrypto } from './consensus/index.ts'

/** One audited commit of a space, as clients replay it: the signed attestation and the envelopes it covers. */
export interface StoredAttestation {
  readonly attestation: Signed
  readonly envelopes: readonly Uint8Array[]
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
}

/** An object's stable value from `index` on. */
export interface HistoryRecord {
  readonly space: string
  readonly key: string
  readonly index: number
  readonly value: unknown
}

type Bytes = Uint8Array

/**
 * Envelope frames are stored, and sent to clients, in chunks of about this
 * many bytes (a chunk holds at least one frame), so a commit of any size
 * stays readable and streamable: no record or frame outgrows a limit.
 */
export const CHUNK_BYTES = 1024 * 1024

/**
 * Records in the store were written, and size-checked, by this relay: they
 * are read back with a limit above anything a write can produce (a chunk,
 * or a certificate of a maximal block), never with the wire limits.
 */
const RECORD_LIMIT = 64 * 1024 * 1024

/** Splits frames into runs of about CHUNK_BYTES, in order; always at least one (possibly empty) run. */
export function chunkFrames(frames: readonly Uint8Array[]): Uint8Array[][] {
  const chunks: Uint8Array[][] = [[]]
  let bytes = 0
  for (const f of frames) {
    let last = chunks[chunks.length - 1] as Uint8Array[]
    if (last.length > 0 && bytes + f.length > CHUNK_BYTES) {
      chunks.push((last = []))
      bytes = 0
    }
    last.push(f)
    bytes += f.length
  }
  return chunks
}

/** Where a space's attested commit sits in the store: [stable index it started at, its round]. */
export type FeedPosition = readonly [fromIndex: number, round: number]

/** The head of a stored attested commit: its signed attestation and how many envelope chunks follow. */
export interface StoredCommitHead {
  readonly position: FeedPosition
  readonly attestation: Signed
  readonly chunks: number
}

/**
 * The relay's durable state in LMDB. Consensus records (votes before they
 * are sent, own blocks, certificates, commits), the committed batches the
 * replicas are rebuilt from, and the attestations clients resume from.
 * Values are bytes Stead encoded itself (msgpack), so the store never
 * re-encodes what was signed.
 */
export class RelayStore {
  private readonly root: RootDatabase<Bytes, Key>
  private readonly votes: Database<Bytes, [number, number]>
  private readonly own: Database<Bytes, number>
  private readonly certs: Database<Bytes, [number, number]>
  private readonly digests: Database<Bytes, string>
  private readonly commits: Database<Bytes, number>
  /** [batch number, chunk] → [anchor round, frames of that chunk] */
  private readonly batches: Database<Bytes, [number, number]>
  private readonly attest: Database<Bytes, [string, number, number]>
  private readonly attestChunks: Database<Bytes, [string, number, number, number]>
  /** [space, object key, stable index] → the object's stable value from that index on. */
  private readonly history: Database<Bytes, [string, string, number]>
  private nextBatch: number

  private constructor(path: string) {
    this.root = open<Bytes, Key>({ path, encoding: 'binary', maxDbs: 16 })
    this.votes = this.root.openDB({ name: 'votes', encoding: 'binary' })
    this.own = this.root.openDB({ name: 'own-blocks', encoding: 'binary' })
    this.certs = this.root.openDB({ name: 'certs', encoding: 'binary' })
    this.digests = this.root.openDB({ name: 'cert-digests', encoding: 'binary' })
    this.commits = this.root.openDB({ name: 'commits', encoding: 'binary' })
    this.batches = this.root.openDB({ name: 'batches', encoding: 'binary' })
    this.attest = this.root.openDB({ name: 'attestations', encoding: 'binary' })
    this.attestChunks = this.root.openDB({ name: 'attestation-chunks', encoding: 'binary' })
    this.history = this.root.openDB({ name: 'history', encoding: 'binary' })
    let last = 0
    for (const key of this.batches.getKeys({ reverse: true, limit: 1 })) last = (key as [number, number])[0]
    this.nextBatch = last + 1
  }

  static open(path: string): RelayStore {
    return new RelayStore(path)
  }

  /** Writes one drain's records atomically; resolves once they are on disk. */
  async write(w: WriteBatch): Promise<void> {
    if (w.records.length === 0 && w.batches.length === 0 && w.attestations.length === 0 && !w.history?.length) return
    await this.root.transaction(() => {
      for (const r of w.records) {
        switch (r.kind) {
          case 'vote':
            this.votes.putSync([r.round, r.author], fromHex(r.digestHex))
            break
          case 'own-block':
            this.own.putSync(r.block.header.round, encode([r.block.signed.bytes, r.block.signed.sig]))
            break
          case 'cert': {
            const { round, author } = r.cert.block.header
            this.certs.putSync([round, author], encodeCert(r.cert))
            this.digests.putSync(r.cert.block.digestHex, encode([round, author]))
            break
          }
          case 'commit':
            this.commits.putSync(r.anchorRound, encode([r.ordered, r.payloadIds]))
            break
        }
      }
      for (const b of w.batches) {
        const n = this.nextBatch++
        chunkFrames(b.frames).forEach((frames, k) => this.batches.putSync([n, k], encode([b.anchorRound, frames])))
      }
      for (const a of w.attestations) {
        const chunks = chunkFrames(a.value.envelopes)
        this.attest.putSync([a.space, a.fromIndex, a.round], encode([[a.value.attestation.bytes, a.value.attestation.sig], chunks.length]))
        chunks.forEach((frames, k) => this.attestChunks.putSync([a.space, a.fromIndex, a.round, k], encode(frames)))
      }
      for (const h of w.history ?? []) this.history.putSync([h.space, h.key, h.index], encode(h.value))
    })
  }

  /**
   * What the consensus core needs after a restart: votes, own blocks and
   * certificates above the GC horizon, and the recent commits. Certificates
   * are re-opened (signature checked): a corrupted store fails loudly here.
   */
  recover(crypto: SyncCrypto, committee: Committee, gcDepth: number): RecoveredState {
    let lastAnchor = 0
    for (const key of this.commits.getKeys({ reverse: true, limit: 1 })) lastAnchor = key as number
    const horizon = Math.max(0, lastAnchor - 2 * gcDepth)
    const votes: Array<{ author: number; round: number; digestHex: string }> = []
    for (const { key, value } of this.votes.getRange({ start: [horizon, 0] })) votes.push({ round: key[0], author: key[1], digestHex: toHex(value) })
    const ownBlocks = []
    for (const { value } of this.own.getRange({ start: horizon })) {
      const [bytes, sig] = decode(value, RECORD_LIMIT) as [Bytes, Bytes]
      ownBlocks.push(openBlock(crypto, committee, { bytes, sig }))
    }
    const certs: Certificate[] = []
    for (const { value } of this.certs.getRange({ start: [horizon, 0] })) certs.push(decodeCert(crypto, committee, value))
    const commits = []
    for (const { key, value } of this.commits.getRange({ start: horizon })) {
      const [ordered, payloadIds] = decode(value, RECORD_LIMIT) as [string[], string[]]
      commits.push({ anchorRound: key, ordered, payloadIds })
    }
    return { votes, ownBlocks, certs, commits }
  }

  /** Every committed batch in commit order, its chunks joined, to rebuild the replicas. */
  *committedBatches(): Generator<{ anchorRound: number; frames: Uint8Array[] }> {
    let current: { n: number; anchorRound: number; frames: Uint8Array[] } | undefined
    for (const { key, value } of this.batches.getRange({})) {
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

  certificatesInRounds(crypto: SyncCrypto, committee: Committee, fromRound: number, toRound: number, limit: number): Certificate[] {
    const out: Certificate[] = []
    for (const { value } of this.certs.getRange({ start: [fromRound, 0], end: [toRound + 1, 0], limit })) out.push(decodeCert(crypto, committee, value, false))
    return out
  }

  certificatesByDigest(crypto: SyncCrypto, committee: Committee, digests: readonly string[]): Certificate[] {
    const out: Certificate[] = []
    for (const d of digests) {
      const where = this.digests.get(d)
      if (!where) continue
      const value = this.certs.get(decode(where, RECORD_LIMIT) as [number, number])
      if (value) out.push(decodeCert(crypto, committee, value, false))
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
    for (const { key, value } of this.attest.getRange({ start: [space, from[0], from[1]], end: [space, Number.MAX_SAFE_INTEGER, 0], limit: 1 })) {
      const [[bytes, sig], chunks] = decode(value, RECORD_LIMIT) as [[Bytes, Bytes], number]
      return { position: [key[1], key[2]], attestation: { bytes, sig }, chunks }
    }
    return undefined
  }

  /** Up to `limit` entries of an object's stable history before stable index `before`, newest first. */
  historyOf(space: string, key: string, before: number, limit: number): Array<{ index: number; value: unknown }> {
    const out: Array<{ index: number; value: unknown }> = []
    for (const { key: k, value } of this.history.getRange({ start: [space, key, before], end: [space, key, -1], reverse: true, limit })) {
      if (k[2] >= before) continue
      out.push({ index: k[2], value: decode(value, RECORD_LIMIT) })
    }
    return out
  }

  /** Chunk `k` of the envelopes of the commit at `position` (see commitAt), as stored: one encoded msgpack array of frames. */
  commitChunk(space: string, position: FeedPosition, k: number): Uint8Array {
    const value = this.attestChunks.get([space, position[0], position[1], k])
    if (!value) throw new Error(`store: chunk ${k} of the ${space} commit at ${position.join('/')} is missing`)
    return value
  }

  async close(): Promise<void> {
    await this.root.close()
  }
}

function encodeCert(c: Certificate): Uint8Array {
  return encode([[c.block.signed.bytes, c.block.signed.sig], c.votes.map(([v, s]) => [v, s])])
}

/** `verify` is off for what we only forward to peers (they verify); recovery verifies. */
function decodeCert(crypto: SyncCrypto, committee: Committee, value: Uint8Array, verify = true): Certificate {
  const [[bytes, sig], votes] = decode(value, RECORD_LIMIT) as [[Bytes, Bytes], Array<[number, Bytes]>]
  return { block: openBlock(crypto, committee, { bytes, sig }, undefined, verify), votes: votes.map(([v, s]) => [v, s] as const) }
}
