import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { encode } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { GENESIS_DIGEST, signBlock, type Block, type BlockRef, type Committee } from '../src/consensus/index.ts'
import { FileJournal, MemoryJournal } from '../src/store/journal.ts'
import { LmdbKv, MemoryKv } from '../src/store/kv.ts'
import { RelayStore, type StoreBacking, type WriteBatch } from '../src/store/store.ts'

const secrets = [3, 4, 5, 6].map((n) => new Uint8Array(32).fill(n))
const committee: Committee = { f: 1, keys: secrets.map((k) => publicKeyOfSync(k)) }
const genesis = (a: number): BlockRef => ({ round: 0, author: a, digest: GENESIS_DIGEST })
const roundOne = (a: number): Block => signBlock(nodeCrypto as never, secrets[a]!, { round: 1, author: a, ancestors: [a, ...[0, 1, 2, 3].filter((x) => x !== a)].map(genesis), payload: [] })
const refOf = (b: Block): BlockRef => ({ round: b.header.round, author: b.header.author, digest: b.digest })
const only = (records: WriteBatch['records']): WriteBatch => ({ records, batches: [], attestations: [] })

/** Each backend, opened again on the same data (a restart). */
const backends: Array<[string, () => () => StoreBacking]> = [
  ['LMDB', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stead-store-'))
    return () => ({ kv: new LmdbKv(dir), journal: new FileJournal(join(dir, 'blocks.journal')) })
  }],
  ['memory', () => {
    const kv = new MemoryKv()
    let journal = new MemoryJournal()
    return () => ({ kv, journal: (journal = new MemoryJournal(journal.survivors())) })
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

  it('journals a write with an own block, and the blocks it builds on, before its transaction; what the journal kept goes back into the store at the next start', async () => {
    const open = backend()
    const store = new RelayStore(open())
    const [own, b1] = [0, 1].map(roundOne) as [Block, Block]
    await store.write(only([{ kind: 'block', block: b1 }]))
    await store.write(only([{ kind: 'own-block', block: own }]))
    await store.close()
    const reopened = new RelayStore(open())
    // Dropped once the transaction was durable: nothing to put back.
    expect(reopened.absorbJournal(nodeCrypto as never, committee)).toBe(0)
    expect(reopened.recover(nodeCrypto as never, committee, 50).ownBlocks.map((b) => b.digestHex)).toEqual([own.digestHex])
    await reopened.close()
  })
})

describe('the relay store and its journal', () => {
  it('has a write with an own block in the journal when write returns, before its transaction; after the process is killed, the journal gives back what the transaction lost', async () => {
    // A disk whose transactions never finish before the kill.
    const kv = new MemoryKv(() => {})
    const journal = new MemoryJournal()
    const store = new RelayStore({ kv, journal })
    const [own, b1] = [0, 1].map(roundOne) as [Block, Block]
    void store.write(only([{ kind: 'block', block: b1 }]))
    void store.write(only([{ kind: 'own-block', block: own }]))
    // Peers' blocks alone wait for the next write; with our block, both are journaled at once.
    expect(journal.survivors()).toHaveLength(1)
    expect(kv.unwritten).toBe(1)
    kv.crash()
    const restarted = new RelayStore({ kv: new MemoryKv(), journal: new MemoryJournal(journal.survivors()) })
    // Without the journal the store would hold nothing: the relay could sign another block for round 1.
    expect(restarted.absorbJournal(nodeCrypto as never, committee)).toBe(2)
    const state = restarted.recover(nodeCrypto as never, committee, 50)
    expect(state.ownBlocks.map((b) => b.digestHex)).toEqual([own.digestHex])
    expect(state.blocks.map((b) => b.digestHex)).toEqual([b1.digestHex])
  })

  it('is full once it holds its capacity while transactions are pending, and starts over when they are durable', async () => {
    const finish: Array<() => void> = []
    const journal = new MemoryJournal()
    const store = new RelayStore({ kv: new MemoryKv((done) => finish.push(done)), journal })
    // Own blocks of 1 MiB each (a block's payload is client envelopes): the eighth fills 8 MiB.
    const big = (round: number, prev: BlockRef): Block => signBlock(nodeCrypto as never, secrets[0]!, { round, author: 0, ancestors: [prev, genesis(1), genesis(2)], payload: [new Uint8Array(1024 * 1024).fill(round)] })
    const written: Array<Promise<void>> = []
    let prev = genesis(0)
    for (let round = 1; round <= 8; round++) {
      expect(store.journalFull).toBe(false)
      const block = big(round, prev)
      prev = refOf(block)
      written.push(store.write(only([{ kind: 'own-block', block }])))
    }
    expect(journal.size).toBeGreaterThanOrEqual(8 * 1024 * 1024)
    expect(store.journalFull).toBe(true)
    // The disk takes all but the last: still full (the journal drops only when every journaled write is durable).
    finish.splice(0, 7).forEach((done) => done())
    await Promise.all(written.slice(0, 7))
    expect(store.journalFull).toBe(true)
    finish.splice(0).forEach((done) => done())
    await Promise.all(written)
    expect(store.journalFull).toBe(false)
    expect(journal.size).toBe(0)
  })

  it('keeps the journal\'s own blocks when it starts over from a checkpoint before writing anything', async () => {
    const journal = new MemoryJournal()
    const own = roundOne(0)
    journal.append(encode([[true, own.signed.bytes, own.signed.sig]]))
    const kv = new MemoryKv()
    const store = new RelayStore({ kv, journal: new MemoryJournal(journal.survivors()) })
    expect(store.absorbJournal(nodeCrypto as never, committee)).toBe(1)
    await store.install({ checkpoint: { anchorRound: 40, statement: { bytes: new Uint8Array([1]), sig: new Uint8Array([2]) }, manifest: new Uint8Array([3]), states: [] }, spaces: [], commits: [], blocksFrom: 21 })
    // Round 1 is still ours: the relay never signs another block for it.
    expect(store.recover(nodeCrypto as never, committee, 50).ownBlocks.map((b) => b.digestHex)).toEqual([own.digestHex])
  })
})
