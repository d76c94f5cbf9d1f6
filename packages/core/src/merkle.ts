import { bytesEqual } from './bytes.ts'
import { encode } from './codec.ts'

/**
 * A keyed Merkle tree for the state hash: one leaf digest per key (an
 * object or an author), so one key's entry can be proven against the root
 * with a short path instead of every other leaf.
 *
 * A key falls in one of 2^16 buckets by the first 16 bits of the SHA-256
 * of its UTF-8 bytes; a binary tree of depth 16 sits above the buckets.
 * A subtree hashes to
 * - `EMPTY` (32 zero bytes) when no key falls under it;
 * - its bucket's hash when exactly one bucket under it holds keys: the
 *   bucket's number and its [key, leaf] pairs in key order, so a space of
 *   a few keys costs a hash or two, not 16 per key;
 * - the hash of its two children's hashes otherwise (tagged, so that no
 *   bucket or leaf encoding reads as a pair).
 * The shape depends on the set of keys only, never on the order they
 * arrived in, so every replica computes the same root.
 *
 * A proof is the key's bucket (its pairs) and the sibling hashes on the way
 * up, and for an empty bucket, the lone bucket of the first non-empty
 * sibling if there is one. It proves presence (the pair is there) and
 * absence (it is not) alike, since the root binds the whole bucket.
 *
 * Keys are chosen by clients, who can grind keys into one bucket; a
 * bucket's hash then costs its size, which is at worst what hashing every
 * leaf in a flat list costs.
 */
export const MERKLE_DEPTH = 16

type Sha256 = (bytes: Uint8Array) => Uint8Array

/** One bucket entry: a key and its leaf digest. */
export type MerkleEntry = readonly [key: string, leaf: Uint8Array]

/** A key's path to the root. */
export interface MerklePath {
  /** The key's whole bucket. */
  readonly bucket: readonly MerkleEntry[]
  /** The sibling hashes from the bucket up (MERKLE_DEPTH of them). */
  readonly siblings: readonly Uint8Array[]
  /**
   * For an empty bucket whose first non-empty sibling holds one bucket
   * only: that bucket, whose hash is then the sibling's (the verifier
   * must see it is a lone bucket to hash on as the tree did).
   */
  readonly lone?: LoneBucket
}

/** A bucket that is the only one holding keys under some subtree. */
export interface LoneBucket {
  /** Its number. */
  readonly bucket: number
  /** Its entries, in key order. */
  readonly entries: readonly MerkleEntry[]
}

/** The hash of a subtree no key falls under. */
export const EMPTY_HASH: Uint8Array = new Uint8Array(32)

const BUCKETS = 1 << MERKLE_DEPTH
/** Changed buckets past which `rootOf` may rebuild the forks top down instead of walking up from each (if they are an eighth of the non-empty ones). */
const REBUILD_AT = 256
const utf8 = new TextEncoder()

/** The bucket a key falls in. */
export function bucketOf(sha256: Sha256, key: string): number {
  const h = sha256(utf8.encode(key))
  return ((h[0] as number) << 8) | (h[1] as number)
}

function bucketHash(sha256: Sha256, bucket: number, entries: readonly MerkleEntry[]): Uint8Array {
  return sha256(encode(['b', bucket, entries]))
}

/** Tags a pair's bytes: no msgpack encoding (what buckets and leaves hash) starts with 0xc1, which msgpack never uses. */
const PAIR_TAG = 0xc1

function pairHash(sha256: Sha256, left: Uint8Array, right: Uint8Array): Uint8Array {
  const both = new Uint8Array(65)
  both[0] = PAIR_TAG
  both.set(left, 1)
  both.set(right, 33)
  return sha256(both)
}

function levelOf(node: number): number {
  return 31 - Math.clz32(node)
}

/** The buckets under `node`: [first, end). */
function rangeOf(node: number): [number, number] {
  const width = 1 << (MERKLE_DEPTH - levelOf(node))
  const first = (node - (1 << levelOf(node))) * width
  return [first, first + width]
}

/**
 * The tree of one keyed list, kept up to date incrementally: `touch` the
 * keys that changed, and `rootOf` recomputes their leaves, their buckets
 * and the nodes above them. Of the inner nodes only those with keys under
 * both children are kept (about one per bucket); a node with keys on one
 * side hashes like the child it leads to, or hashes that child with
 * `EMPTY`.
 */
export class MerkleIndex {
  private readonly leaves = new Map<string, Uint8Array>()
  /** Bucket number → its keys, sorted. */
  private readonly buckets = new Map<number, string[]>()
  private readonly bucketHashes = new Map<number, Uint8Array>()
  /** The non-empty buckets, ascending: what lies under a node is a binary search away. */
  private nonEmpty: number[] = []
  /** Hashes of inner nodes with keys under both children, by heap number (1 the root, 2^16 + b bucket b). */
  private readonly forks = new Map<number, Uint8Array>()
  private readonly dirty = new Set<string>()
  private root: Uint8Array | undefined

  /** The entry under `key` changed, appeared or went away. */
  touch(key: string): void {
    this.dirty.add(key)
    this.root = undefined
  }

  /** How many keys the tree holds (as of the last `rootOf`). */
  get size(): number {
    return this.leaves.size
  }

  /** The root over every entry; `leafOf` gives a changed entry's leaf, or undefined if it no longer exists. */
  rootOf(sha256: Sha256, leafOf: (key: string) => Uint8Array | undefined): Uint8Array {
    if (this.root) return this.root
    const changed = new Set<number>()
    /** Buckets that became empty or non-empty. */
    const flipped: number[] = []
    for (const key of this.dirty) {
      const leaf = leafOf(key)
      const had = this.leaves.has(key)
      if (!leaf && !had) continue
      const b = bucketOf(sha256, key)
      changed.add(b)
      if (leaf) this.leaves.set(key, leaf)
      else this.leaves.delete(key)
      if ((!leaf || !had) && this.bucketGainsOrLoses(b, key, leaf !== undefined)) flipped.push(b)
    }
    this.dirty.clear()
    for (const b of changed) {
      const keys = this.buckets.get(b)
      if (keys) this.bucketHashes.set(b, bucketHash(sha256, b, this.entriesOf(keys)))
      else this.bucketHashes.delete(b)
    }
    // A bucket may have emptied and filled again in one batch: what counts is whether it holds keys now.
    const flips = new Set(flipped)
    if (flips.size > REBUILD_AT) this.nonEmpty = [...this.buckets.keys()].sort((x, y) => x - y)
    else {
      for (const b of flips) {
        const at = lowerBound(this.nonEmpty, b)
        const listed = this.nonEmpty[at] === b
        if (this.buckets.has(b) && !listed) this.nonEmpty.splice(at, 0, b)
        else if (!this.buckets.has(b) && listed) this.nonEmpty.splice(at, 1)
      }
    }
    // Walking up costs up to 16 hashes per changed bucket, a rebuild one per fork (about one per
    // non-empty bucket): rebuild only when the walks would cost more.
    if (changed.size > Math.max(REBUILD_AT, this.nonEmpty.length / 8)) {
      // Many changes (a state restored or built from scratch): every fork again, top down, one hash each.
      this.forks.clear()
      this.root = this.rebuild(sha256, 1, 0, this.nonEmpty.length)
      return this.root
    }
    // Bottom up, the forks above what changed (their children below are already recomputed).
    let level = new Set([...changed].map((b) => BUCKETS + b))
    for (let l = MERKLE_DEPTH - 1; l >= 0; l--) {
      const parents = new Set<number>()
      for (const node of level) parents.add(node >> 1)
      for (const p of parents) {
        this.forks.delete(p)
        if (this.holds(2 * p) && this.holds(2 * p + 1)) this.forks.set(p, pairHash(sha256, this.hashOf(sha256, 2 * p), this.hashOf(sha256, 2 * p + 1)))
      }
      level = parents
    }
    this.root = this.hashOf(sha256, 1)
    return this.root
  }

  /** The path proving `key`'s entry (or its absence) against the root `rootOf` returned last; call `rootOf` first. */
  path(sha256: Sha256, key: string): MerklePath {
    if (!this.root || this.dirty.size) throw new Error('MerkleIndex.path: the tree has changes rootOf has not applied')
    const b = bucketOf(sha256, key)
    const keys = this.buckets.get(b)
    const siblings: Uint8Array[] = []
    let lone: MerklePath['lone']
    for (let node = BUCKETS + b; node > 1; node >>= 1) {
      const sibling = node ^ 1
      siblings.push(this.hashOf(sha256, sibling))
      if (!keys && !lone && siblings.every((s, i) => i === siblings.length - 1 || s === EMPTY_HASH)) {
        const only = this.loneBucket(sibling)
        if (only !== undefined) lone = { bucket: only, entries: this.entriesOf(this.buckets.get(only) as string[]) }
      }
    }
    return { bucket: keys ? this.entriesOf(keys) : [], siblings, ...(lone ? { lone } : {}) }
  }

  private entriesOf(keys: readonly string[]): MerkleEntry[] {
    return keys.map((k): MerkleEntry => [k, this.leaves.get(k) as Uint8Array])
  }

  /** Adds or removes `key` in bucket `b`; whether the bucket became empty or non-empty. */
  private bucketGainsOrLoses(b: number, key: string, gains: boolean): boolean {
    const keys = this.buckets.get(b) ?? []
    const at = lowerBound(keys, key)
    if (gains) keys.splice(at, 0, key)
    else keys.splice(at, 1)
    if (keys.length === 0) {
      this.buckets.delete(b)
      return true
    }
    if (gains && keys.length === 1) {
      this.buckets.set(b, keys)
      return true
    }
    return false
  }

  /** The hash of `node`, whose non-empty buckets are nonEmpty[lo, hi), recording the forks under it. */
  private rebuild(sha256: Sha256, node: number, lo: number, hi: number): Uint8Array {
    if (lo === hi) return EMPTY_HASH
    if (hi - lo === 1) return this.bucketHashes.get(this.nonEmpty[lo] as number) as Uint8Array
    const [first, end] = rangeOf(node)
    const split = lowerBound(this.nonEmpty, first + (end - first) / 2, lo, hi)
    const hash = pairHash(sha256, this.rebuild(sha256, 2 * node, lo, split), this.rebuild(sha256, 2 * node + 1, split, hi))
    if (split > lo && split < hi) this.forks.set(node, hash)
    return hash
  }

  /** Whether any key falls under `node`. */
  private holds(node: number): boolean {
    const [first, end] = rangeOf(node)
    const i = lowerBound(this.nonEmpty, first)
    return i < this.nonEmpty.length && (this.nonEmpty[i] as number) < end
  }

  /** The one non-empty bucket under `node`, or undefined when there are none or several. */
  private loneBucket(node: number): number | undefined {
    const [first, end] = rangeOf(node)
    const i = lowerBound(this.nonEmpty, first)
    const b = this.nonEmpty[i]
    if (b === undefined || b >= end) return undefined
    const next = this.nonEmpty[i + 1]
    return next !== undefined && next < end ? undefined : b
  }

  private hashOf(sha256: Sha256, node: number): Uint8Array {
    const fork = this.forks.get(node)
    if (fork) return fork
    const only = this.loneBucket(node)
    if (only !== undefined) return this.bucketHashes.get(only) as Uint8Array
    if (!this.holds(node)) return EMPTY_HASH
    // Several buckets, all under one child (a fork would be in `forks`).
    return this.holds(2 * node) ? pairHash(sha256, this.hashOf(sha256, 2 * node), EMPTY_HASH) : pairHash(sha256, EMPTY_HASH, this.hashOf(sha256, 2 * node + 1))
  }
}

/**
 * The root over `entries` (any order), computed from scratch: a verifier's
 * view. Throws on a repeated key: a tree is a set, and a list with a key
 * twice would hash like the list without one of them.
 */
export function merkleRoot(sha256: Sha256, entries: Iterable<MerkleEntry>): Uint8Array {
  const leaves = new Map<string, Uint8Array>()
  const index = new MerkleIndex()
  for (const [key, leaf] of entries) {
    if (leaves.has(key)) throw new Error(`merkleRoot: key ${key} appears twice`)
    leaves.set(key, leaf)
    index.touch(key)
  }
  return index.rootOf(sha256, (key) => leaves.get(key))
}

/**
 * The root a path leads to from `key`'s bucket: equal to a trusted root
 * only if the bucket's entries are the tree's. Undefined for a path that
 * is not well formed.
 */
export function merkleRootOfPath(sha256: Sha256, key: string, path: MerklePath): Uint8Array | undefined {
  if (path.siblings.length !== MERKLE_DEPTH) return undefined
  const b = bucketOf(sha256, key)
  let node = BUCKETS + b
  // What lies under the node reached so far: nothing, one bucket, or several.
  let under: 'none' | 'one' | 'several' = path.bucket.length ? 'one' : 'none'
  let hash = path.bucket.length ? bucketHash(sha256, b, path.bucket) : EMPTY_HASH
  for (const sibling of path.siblings) {
    const left = node % 2 === 0
    if (bytesEqual(sibling, EMPTY_HASH)) {
      // An empty sibling: one bucket (or none) stays as it is, several are hashed with it.
      if (under === 'several') hash = left ? pairHash(sha256, hash, EMPTY_HASH) : pairHash(sha256, EMPTY_HASH, hash)
    } else if (under === 'none') {
      // The first keys on the way up are all the sibling's: a lone bucket hashes as itself.
      const lone = path.lone
      if (lone && lone.entries.length > 0) {
        const [first, end] = rangeOf(node ^ 1)
        if (lone.bucket < first || lone.bucket >= end || !bytesEqual(bucketHash(sha256, lone.bucket, lone.entries), sibling)) return undefined
        hash = sibling
        under = 'one'
      } else {
        hash = left ? pairHash(sha256, EMPTY_HASH, sibling) : pairHash(sha256, sibling, EMPTY_HASH)
        under = 'several'
      }
    } else {
      hash = left ? pairHash(sha256, hash, sibling) : pairHash(sha256, sibling, hash)
      under = 'several'
    }
    node >>= 1
  }
  return hash
}

/** The first place in sorted[from, to) whose item is not below `key`. */
function lowerBound<T extends string | number>(sorted: readonly T[], key: T, from = 0, to = sorted.length): number {
  let lo = from
  let hi = to
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if ((sorted[mid] as T) < key) lo = mid + 1
    else hi = mid
  }
  return lo
}
