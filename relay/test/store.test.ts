import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { GENESIS_DIGEST, signBlock, type Block, type BlockRef, type Committee } from '../src/consensus/index.ts'
import { LmdbKv, MemoryKv, type Kv } from '../src/kv.ts'
import { RelayStore, type WriteBatch } from '../src/store.ts'

const secrets = [3, 4, 5, 6].map((n) => new Uint8Array(32).fill(n))
const committee: Committee = { f: 1, keys: secrets.map((k) => publicKeyOfSync(k)) }
const genesis = (a: number): BlockRef => ({ round: 0, author: a, digest: GENESIS_DIGEST })
const roundOne = (a: number): Block => signBlock(nodeCrypto as never, secrets[a]!, { round: 1, author: a, ancestors: [a, ...[0, 1, 2, 3].filter((x) => x !== a)].map(genesis), payload: [] })
const refOf = (b: Block): BlockRef => ({ round: b.header.round, author: b.header.author, digest: b.digest })
const only = (records: WriteBatch['records']): WriteBatch => ({ records, batches: [], attestations: [] })

/** Each backend, opened again on the same data (a restart). */
const backends: Array<[string, () => () => Kv]> = [
  ['LMDB', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stead-store-'))
    return () => new LmdbKv(dir)
  }],
  ['memory', () => {
    const kv = new MemoryKv()
    return () => kv
  }],
]

describe.each(backends)('the relay store over %s', (_, backend) => {
  it("holds a write of peers' blocks alone until the next write, which carries them in its transaction; close writes what is held", async () => {
    const open = backend()
    const store = new RelayStore(open())
    const stored = (s: RelayStore, ...blocks: Block[]) => s.blocksByDigest(nodeCrypto as never, committee, blocks.map((b) => b.digestHex)).map((b) => b.digestHex)
    const [own, b1, b2, b3] = [0, 1, 2, 3].map(roundOne) as [Block, Block, Block, Block]
    await store.write(only([{ kind: 'block', block: b1 }]))
    await store.write(only([{ kind: 'block', block: b2 }]))
    // Nothing this relay said depends on them yet: not on disk.
    expect(stored(store, b1, b2)).toEqual([])
    const own2 = signBlock(nodeCrypto as never, secrets[0]!, { round: 2, author: 0, ancestors: [refOf(own), refOf(b1), refOf(b2)], payload: [] })
    await store.write(only([{ kind: 'own-block', block: own }, { kind: 'own-block', block: own2 }]))
    expect(stored(store, b1, b2, own2)).toEqual([b1.digestHex, b2.digestHex, own2.digestHex])
    await store.write(only([{ kind: 'block', block: b3 }]))
    expect(stored(store, b3)).toEqual([])
    await store.close()
    const reopened = new RelayStore(open())
    expect(stored(reopened, b1, b2, b3, own2)).toEqual([b1.digestHex, b2.digestHex, b3.digestHex, own2.digestHex])
    await reopened.close()
  })
})
