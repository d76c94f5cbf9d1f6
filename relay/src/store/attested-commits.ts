import { decode, decodeAttestation, encode, toHex, type Signed } from '@stead/core'
import { RECORD_LIMIT, type KvTable } from './kv.ts'

/**
 * Envelope frames are stored, and sent to clients, in chunks of about this
 * many bytes (a chunk holds at least one frame), so a commit of any size
 * stays readable and streamable: no record or frame outgrows a limit.
 */
export const CHUNK_BYTES = 1024 * 1024

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

/** One audited commit of a space, as clients replay it: the signed attestation and the envelopes it covers. */
export interface StoredAttestation {
  readonly attestation: Signed
  readonly envelopes: readonly Uint8Array[]
}

/** Where a space's attested commit sits in the store: [stable index it started at, its round]. */
export type FeedPosition = readonly [fromIndex: number, round: number]

/** The head of a stored attested commit: its signed attestation and how many envelope chunks follow. */
export interface StoredCommitHead {
  readonly position: FeedPosition
  readonly attestation: Signed
  readonly chunks: number
}

/** A stored commit head's record: [[attestation bytes, signature], chunks]. */
export function decodeCommitHead(value: Uint8Array): { attestation: Signed; chunks: number } {
  const [[bytes, sig], chunks] = decode(value, RECORD_LIMIT) as [[Uint8Array, Uint8Array], number]
  return { attestation: { bytes, sig }, chunks }
}

type HeadKey = [string, number, number]
type ChunkKey = [string, number, number, number]
type DecidedKey = [string, string]

/**
 * Every space's attested commits, as clients resume from them: each
 * commit's signed attestation at [space, stable index it started at,
 * round], and its envelope frames in chunks beside it (so a reader takes a
 * commit a frame's worth at a time; see CommitFeed).
 */
export class AttestedCommits {
  private readonly heads: KvTable<HeadKey>
  private readonly chunks: KvTable<ChunkKey>
  /** [space, envelope id hex] → the position of the commit that committed it: how a clock proof of any kept update is found. */
  private readonly decided: KvTable<DecidedKey>

  constructor(heads: KvTable<HeadKey>, chunks: KvTable<ChunkKey>, decided: KvTable<DecidedKey>) {
    this.heads = heads
    this.chunks = chunks
    this.decided = decided
  }

  /** Stores one (only inside Kv.write). */
  put(a: { readonly space: string; readonly fromIndex: number; readonly round: number; readonly value: StoredAttestation }): void {
    const chunks = chunkFrames(a.value.envelopes)
    this.heads.put([a.space, a.fromIndex, a.round], encode([[a.value.attestation.bytes, a.value.attestation.sig], chunks.length]))
    chunks.forEach((frames, k) => this.chunks.put([a.space, a.fromIndex, a.round, k], encode(frames)))
    const position = encode([a.fromIndex, a.round])
    for (const idHex of decidedIds(a.value.attestation.bytes)) this.decided.put([a.space, idHex], position)
  }

  /** Removes them all (only inside Kv.write). */
  clear(): void {
    for (const key of [...this.heads.getKeys()]) this.heads.remove(key as HeadKey)
    for (const key of [...this.chunks.getKeys()]) this.chunks.remove(key as ChunkKey)
    for (const key of [...this.decided.getKeys()]) this.decided.remove(key as DecidedKey)
  }

  /** The kept commit that decided envelope `idHex` of `space`, if this store holds it. */
  decidedBy(space: string, idHex: string): StoredCommitHead | undefined {
    const value = this.decided.get([space, idHex])
    if (!value) return undefined
    const [fromIndex, round] = decode(value, RECORD_LIMIT) as [number, number]
    const head = this.heads.get([space, fromIndex, round])
    return head && { position: [fromIndex, round], ...decodeCommitHead(head) }
  }

  /**
   * Removes the space's commits that start below stable index `below`, at
   * most `limit` of them (only inside Kv.write), but never its latest (what
   * the relay's head is proven by after a restart); returns how many it
   * removed.
   */
  prune(space: string, below: number, limit = Number.POSITIVE_INFINITY): number {
    const latest = this.latest(space)
    if (!latest) return 0
    const end = Math.min(below, latest.position[0])
    const keys = [...this.heads.getKeys({ start: [space, 0, 0], end: [space, end, 0], ...(limit < Number.POSITIVE_INFINITY ? { limit } : {}) })] as HeadKey[]
    for (const key of keys) {
      const [, fromIndex, round] = key
      const head = this.heads.get(key)
      if (head) for (const idHex of decidedIds(decodeCommitHead(head).attestation.bytes)) this.decided.remove([space, idHex])
      for (const chunk of [...this.chunks.getKeys({ start: [space, fromIndex, round, 0], end: [space, fromIndex, round + 1, 0] })]) this.chunks.remove(chunk as ChunkKey)
      this.heads.remove(key)
    }
    return keys.length
  }

  /** The first of a space's commits at or after position `from`, in commit order. */
  at(space: string, from: FeedPosition): StoredCommitHead | undefined {
    for (const { key, value } of this.heads.getRange({ start: [space, from[0], from[1]], end: [space, Number.MAX_SAFE_INTEGER, 0], limit: 1 })) return commitHead(key, value)
    return undefined
  }

  /** A space's latest commit that ends at or below stable index `index`. */
  endingBy(space: string, index: number): StoredCommitHead | undefined {
    for (const { key, value } of this.heads.getRange({ start: [space, index, Number.MAX_SAFE_INTEGER], end: [space, -1, 0], reverse: true, limit: 4 })) {
      const head = commitHead(key, value)
      if (decodeAttestation(head.attestation.bytes).toIndex <= index) return head
    }
    return undefined
  }

  /** A space's latest commit (highest stable index, then round). */
  latest(space: string): StoredCommitHead | undefined {
    for (const { key, value } of this.heads.getRange({ start: [space, Number.MAX_SAFE_INTEGER, 0], end: [space, -1, 0], reverse: true, limit: 1 })) return commitHead(key, value)
    return undefined
  }

  /** Chunk `k` of the envelopes of the commit at `position`, as stored. */
  chunk(space: string, position: FeedPosition, k: number): Uint8Array {
    const value = this.chunks.get([space, position[0], position[1], k])
    if (!value) throw new Error(`store: chunk ${k} of the ${space} commit at ${position.join('/')} is missing`)
    return value
  }
}

/**
 * The envelope ids an attestation commits, hex. Only those: a copy of a
 * committed envelope ordered again later is decided anew (a duplicate),
 * and must not hide the commit that took it.
 */
function decidedIds(attestation: Uint8Array): string[] {
  return decodeAttestation(attestation).decisions.flatMap((d) => (d[1] === 'committed' ? [toHex(d[0])] : []))
}

function commitHead(key: HeadKey, value: Uint8Array): StoredCommitHead {
  return { position: [key[1], key[2]], ...decodeCommitHead(value) }
}
