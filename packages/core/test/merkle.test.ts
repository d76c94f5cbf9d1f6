import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { nodeCrypto } from '../src/crypto/node.ts'
import { encode } from '../src/codec.ts'
import { bucketOf, EMPTY_HASH, MERKLE_DEPTH, MerkleIndex, merkleRoot, merkleRootOfPath, type MerkleEntry } from '../src/merkle.ts'

const sha = (b: Uint8Array): Uint8Array => nodeCrypto.sha256(b)
const leafOf = (n: number): Uint8Array => sha(new Uint8Array([n & 0xff, n >> 8]))

/** Edits to a keyed list: [key, leaf seed] sets a key, [key, null] deletes it. */
const edits = fc.array(fc.tuple(fc.string({ minLength: 1, maxLength: 6 }), fc.option(fc.integer({ min: 0, max: 65535 }))), { maxLength: 60 })

function apply(list: Map<string, Uint8Array>, batch: ReadonlyArray<readonly [string, number | null]>): void {
  for (const [k, v] of batch) {
    if (v === null) list.delete(k)
    else list.set(k, leafOf(v))
  }
}

/** The root by the definition (merkle.ts), node by node over the whole range of buckets: a reference for the kept tree. */
function referenceRoot(list: ReadonlyMap<string, Uint8Array>): Uint8Array {
  const byBucket = new Map<number, MerkleEntry[]>()
  for (const [k, leaf] of [...list].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const b = bucketOf(sha, k)
    byBucket.set(b, [...(byBucket.get(b) ?? []), [k, leaf]])
  }
  const filled = [...byBucket.keys()]
  const node = (first: number, width: number): Uint8Array => {
    const under = filled.filter((b) => b >= first && b < first + width)
    if (under.length === 0) return EMPTY_HASH
    if (under.length === 1) return sha(encode(['b', under[0], byBucket.get(under[0]!)]))
    const half = width / 2
    const both = new Uint8Array(65)
    both[0] = 0xc1
    both.set(node(first, half), 1)
    both.set(node(first + half, half), 33)
    return sha(both)
  }
  return node(0, 1 << MERKLE_DEPTH)
}

describe('keyed Merkle tree', () => {
  it('hashes as defined: nothing, a lone bucket as itself, several as the pair of their halves', () => {
    fc.assert(
      fc.property(edits, (batch) => {
        const list = new Map<string, Uint8Array>()
        apply(list, batch)
        expect(merkleRoot(sha, list)).toEqual(referenceRoot(list))
      }),
      { numRuns: 100 },
    )
    expect(merkleRoot(sha, [])).toEqual(EMPTY_HASH)
  })

  it('kept incrementally, its root equals the root computed from scratch, whatever the order of edits and batches', () => {
    fc.assert(
      fc.property(fc.array(edits, { maxLength: 6 }), (batches) => {
        const list = new Map<string, Uint8Array>()
        const index = new MerkleIndex()
        for (const batch of batches) {
          apply(list, batch)
          for (const [k] of batch) index.touch(k)
          const root = index.rootOf(sha, (k) => list.get(k))
          expect(root).toEqual(merkleRoot(sha, [...list].reverse()))
          expect(index.size).toBe(list.size)
        }
      }),
      { numRuns: 200 },
    )
  })

  it('a path proves a key present with its leaf, or absent, and leads nowhere else once the bucket or a sibling changes', () => {
    let lones = 0
    fc.assert(
      fc.property(edits, fc.string({ minLength: 1, maxLength: 6 }), (batch, probe) => {
        const list = new Map<string, Uint8Array>()
        apply(list, batch)
        const index = new MerkleIndex()
        for (const k of list.keys()) index.touch(k)
        const root = index.rootOf(sha, (k) => list.get(k))
        for (const key of [...list.keys(), probe]) {
          const path = index.path(sha, key)
          expect(path.siblings).toHaveLength(MERKLE_DEPTH)
          expect(merkleRootOfPath(sha, key, path)).toEqual(root)
          const entry = path.bucket.find(([k]) => k === key)
          expect(entry?.[1]).toEqual(list.get(key))
          // A different leaf, a dropped entry or a changed sibling no longer reaches the root.
          // Three bytes hashed: no leafOf (two bytes) gives it (leafOf(99999) was leafOf(34463)).
          const forged: MerkleEntry[] = entry ? path.bucket.map(([k, l]) => [k, k === key ? sha(new Uint8Array([0xff, 0xff, 0xff])) : l]) : [...path.bucket, [key, leafOf(1)]]
          expect(merkleRootOfPath(sha, key, { ...path, bucket: forged })).not.toEqual(root)
          const siblings = path.siblings.map((s, i) => (i === 3 ? sha(s) : s))
          expect(merkleRootOfPath(sha, key, { ...path, siblings })).not.toEqual(root)
          expect(merkleRootOfPath(sha, key, { ...path, siblings: path.siblings.slice(1) })).toBeUndefined()
          if (path.lone) {
            lones++
            // The lone bucket must be the sibling's own: another bucket, or other entries, lead nowhere.
            expect(merkleRootOfPath(sha, key, { ...path, lone: { ...path.lone, bucket: path.lone.bucket ^ 1 } })).not.toEqual(root)
            expect(merkleRootOfPath(sha, key, { ...path, lone: { ...path.lone, entries: path.lone.entries.slice(1) } })).not.toEqual(root)
            expect(merkleRootOfPath(sha, key, { bucket: path.bucket, siblings: path.siblings })).not.toEqual(root)
          }
          if (entry) {
            // A present key passed off as absent, with or without another bucket as the lone one.
            expect(merkleRootOfPath(sha, key, { bucket: [], siblings: path.siblings })).not.toEqual(root)
            expect(merkleRootOfPath(sha, key, { bucket: [], siblings: path.siblings, lone: { bucket: bucketOf(sha, key) ^ 1, entries: path.bucket } })).not.toEqual(root)
          }
        }
      }),
      { numRuns: 150 },
    )
    // Sparse trees give absent keys in empty buckets next to a lone one: the case was tried.
    expect(lones).toBeGreaterThan(20)
  })

  it('keys spread over the buckets, and a path costs the bucket and 16 hashes however many keys there are', () => {
    const list = new Map<string, Uint8Array>()
    for (let i = 0; i < 20_000; i++) list.set(`obj:${i}`, leafOf(i))
    const buckets = new Set([...list.keys()].map((k) => bucketOf(sha, k)))
    expect(buckets.size).toBeGreaterThan(15_000)
    const index = new MerkleIndex()
    for (const k of list.keys()) index.touch(k)
    const root = index.rootOf(sha, (k) => list.get(k))
    const path = index.path(sha, 'obj:123')
    expect(path.bucket.length).toBeLessThan(8)
    expect(merkleRootOfPath(sha, 'obj:123', path)).toEqual(root)
    // One change: a new root that a fresh path proves, the old path no longer does.
    list.set('obj:123', leafOf(7))
    index.touch('obj:123')
    const next = index.rootOf(sha, (k) => list.get(k))
    expect(next).not.toEqual(root)
    expect(merkleRootOfPath(sha, 'obj:123', index.path(sha, 'obj:123'))).toEqual(next)
    expect(merkleRootOfPath(sha, 'obj:123', path)).toEqual(root)
  })

  it('stays exact when a bucket empties and fills again in one batch, and across batches past the rebuild size', () => {
    // Two keys of one bucket, found by trying.
    const byBucket = new Map<number, string>()
    let pair: [string, string] | undefined
    for (let i = 0; !pair; i++) {
      const k = `k${i}`
      const b = bucketOf(sha, k)
      const other = byBucket.get(b)
      if (other) pair = [other, k]
      else byBucket.set(b, k)
    }
    const [first, second] = pair
    const list = new Map<string, Uint8Array>([[first, leafOf(1)], ['elsewhere', leafOf(2)]])
    const index = new MerkleIndex()
    for (const k of list.keys()) index.touch(k)
    index.rootOf(sha, (k) => list.get(k))
    list.delete(first)
    list.set(second, leafOf(3))
    index.touch(first)
    index.touch(second)
    expect(index.rootOf(sha, (k) => list.get(k))).toEqual(referenceRoot(list))
    // Batches of hundreds of keys (over and under 256 changed buckets), deletes among them, small ones after.
    let seed = 7
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31)
    for (const size of [255, 300, 3, 800, 1, 257, 40]) {
      const batch: string[] = []
      for (let i = 0; i < size; i++) {
        const k = `x${next() % 900}`
        if (next() % 3 === 0) list.delete(k)
        else list.set(k, leafOf(next() % 60000))
        batch.push(k)
      }
      batch.forEach((k) => index.touch(k))
      const root = index.rootOf(sha, (k) => list.get(k))
      expect(root).toEqual(referenceRoot(list))
      for (const k of [...list.keys()].slice(0, 20)) expect(merkleRootOfPath(sha, k, index.path(sha, k))).toEqual(root)
    }
    // A large tree walks up from a few hundred changed buckets and rebuilds past an eighth of its buckets.
    const large = new Map<string, Uint8Array>()
    const big = new MerkleIndex()
    for (let i = 0; i < 6000; i++) {
      large.set(`y${i}`, leafOf(i))
      big.touch(`y${i}`)
    }
    expect(big.rootOf(sha, (k) => large.get(k))).toEqual(referenceRoot(large))
    for (const size of [400, 700, 300]) {
      for (let i = 0; i < size; i++) {
        const k = `y${next() % 7000}`
        if (next() % 4 === 0) large.delete(k)
        else large.set(k, leafOf(next() % 60000))
        big.touch(k)
      }
      expect(big.rootOf(sha, (k) => large.get(k))).toEqual(referenceRoot(large))
    }
  })

  it('refuses a path while edits are not applied', () => {
    const index = new MerkleIndex()
    index.touch('a')
    expect(() => index.path(sha, 'a')).toThrow(/rootOf/)
  })
})
