import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { authorIdOf, clockFrom, clockInit, decodeAttestation, encodeEnvelope, sealEnvelope, toHex } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import pino from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { parseCluster } from '../src/process/config.ts'
import type { Mesh } from '../src/mesh/types.ts'
import { ConsensusInvariantError, decodeMessage, encodeMessage, signBlock } from '../src/consensus/index.ts'
import { RelayNode, relayCrypto } from '../src/runtime/node.ts'
import { MemoryJournal, type Journal } from '../src/store/journal.ts'
import { MemoryKv } from '../src/store/kv.ts'
import type { RelayStore, WriteBatch } from '../src/store/store.ts'
import type { VerdictCache } from '../src/runtime/verdict-cache.ts'
import { until as waitUntil } from './helpers/cluster.ts'

const author = { secretKey: new Uint8Array(32).fill(7), publicKey: publicKeyOfSync(new Uint8Array(32).fill(7)) }
const deposit = (seq: number, space = 's') =>
  sealEnvelope(nodeCrypto, author, { space, seq, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter' as const, bounds: {} }, ops: [1] }], safe: [] }).then(encodeEnvelope)

/** Waits for `check` to hold, looking every 2 ms. */
const until = (what: string, check: () => boolean): Promise<unknown> => waitUntil(what, check, 10_000, 2)

/** A one-relay cluster (f = 0: every block commits at once) with a mesh that goes nowhere. */
function soloRelay(dataDir: string, extra: Partial<ConstructorParameters<typeof RelayNode>[0]> = {}, checkpointRounds = 1000): { node: RelayNode; spoken: string[]; sent: Uint8Array[] } {
  const secretKey = new Uint8Array(32).fill(3)
  const cluster = parseCluster({ f: 0, relays: [{ id: 'solo', publicKey: toHex(publicKeyOfSync(secretKey)), mesh: '/ip4/127.0.0.1/tcp/1', api: '127.0.0.1:1' }], openSpaces: true, checkpointRounds })
  const spoken: string[] = []
  const sent: Uint8Array[] = []
  const mesh: Mesh = {
    start: async () => undefined,
    stop: async () => undefined,
    send: (_to, frame) => {
      spoken.push('send')
      sent.push(frame)
    },
    broadcast: () => spoken.push('broadcast'),
    onFrame: () => undefined,
    onPeerConnected: () => {},
    connectedPeers: () => [],
    queuedBytes: () => 0,
  }
  const node = new RelayNode({ cluster, me: 0, secretKey, dataDir, mesh, logger: pino({ level: 'silent' }), paceMs: 0, ...extra })
  nodes.push(node)
  return { node, spoken, sent }
}

/** Relay r1 of a four-relay cluster whose mesh is the test: `deliver` hands it a peer's frame, `send`/`broadcast` see what it says. */
function clusterMember(say: Partial<Pick<Mesh, 'send' | 'broadcast'>> = {}): { node: RelayNode; deliver: (from: number, frame: Uint8Array) => void } {
  const secrets = [3, 4, 5, 6].map((n) => new Uint8Array(32).fill(n))
  const cluster = parseCluster({
    f: 1,
    relays: secrets.map((k, i) => ({ id: `r${i + 1}`, publicKey: toHex(publicKeyOfSync(k)), mesh: `/ip4/127.0.0.1/tcp/${i + 1}`, api: `127.0.0.1:${i + 1}` })),
    openSpaces: true,
  })
  let handler: (from: number, frame: Uint8Array) => void = () => undefined
  const mesh: Mesh = {
    start: async () => undefined,
    stop: async () => undefined,
    send: () => undefined,
    broadcast: () => undefined,
    ...say,
    onFrame: (h) => (handler = h),
    onPeerConnected: () => {},
    connectedPeers: () => [1, 2, 3],
    queuedBytes: () => 0,
  }
  // Its peers are stand-ins that never answer: it proposes without asking them for its own latest block.
  const node = new RelayNode({ cluster, me: 0, secretKey: secrets[0]!, dataDir: mkdtempSync(join(tmpdir(), 'stead-node-')), mesh, logger: pino({ level: 'silent' }), paceMs: 0, ownLastTimeoutMs: 0 })
  nodes.push(node)
  return { node, deliver: (from, frame) => handler(from, frame) }
}

/** Makes the store start each write only when the test calls the function this pushes for it. */
function holdWrites(store: RelayStore): Array<() => void> {
  const write = store.write.bind(store)
  const held: Array<() => void> = []
  store.write = (w: WriteBatch) => new Promise((ok) => held.push(() => void write(w).then(ok)))
  return held
}

/**
 * Lets the store journal and start each write, but has the write's promise
 * (its transaction being durable) resolve only when the test calls the
 * function this pushes for it; `journaled` counts the journal's appends,
 * `journaledWhileFull` those made while the store said its journal was full.
 */
function lagTransactions(node: RelayNode): { store: Pick<RelayStore, 'write' | 'journalFull'> & { journal: Journal }; transactions: Array<() => void>; journaled: () => number; journaledWhileFull: () => number; restore: () => void } {
  const store = (node as unknown as { store: Pick<RelayStore, 'write' | 'journalFull'> & { journal: Journal } }).store
  const write = store.write.bind(store)
  const transactions: Array<() => void> = []
  store.write = (w) => {
    const done = write(w)
    return new Promise((ok) => transactions.push(() => void done.then(ok)))
  }
  const append = store.journal.append.bind(store.journal)
  let appends = 0
  let whileFull = 0
  store.journal.append = (record) => {
    appends++
    if (store.journalFull) whileFull++
    append(record)
  }
  const restore = () => {
    store.write = write
    store.journal.append = append
    for (const done of transactions.splice(0)) done()
  }
  return { store, transactions, journaled: () => appends, journaledWhileFull: () => whileFull, restore }
}

const nodes: RelayNode[] = []
afterEach(async () => {
  for (const n of nodes.splice(0)) await n.stop()
})

describe('the relay event loop', () => {
  it('answers a fetch of blocks it holds neither in memory nor on disk with unknown, and the round it keeps blocks from', async () => {
    const sent: Array<{ to: number; frame: Uint8Array }> = []
    const { node, deliver } = clusterMember({ send: (to, frame) => void sent.push({ to, frame }) })
    await node.start()
    const fake = new Uint8Array(32).fill(9)
    deliver(1, encodeMessage({ kind: 'fetch', digests: [fake] }))
    await until('an answer to relay 1', () => sent.some((s) => s.to === 1))
    const answers = sent.filter((s) => s.to === 1).map((s) => decodeMessage(nodeCrypto as never, node.committee, s.frame))
    expect(answers.map((a) => (a.kind === 'unknown' ? { digests: a.digests.map((d) => toHex(d)), keptFrom: a.keptFrom } : a))).toEqual([{ digests: [toHex(fake)], keptFrom: 0 }])
  })

  it("refuses a clock its inputs contradict with bad-clock at the door, and queues one whose dep it has not seen for the audit", async () => {
    const { node } = soloRelay(mkdtempSync(join(tmpdir(), 'stead-node-')))
    await node.start()
    const other = { secretKey: new Uint8Array(32).fill(9), publicKey: publicKeyOfSync(new Uint8Array(32).fill(9)) }
    const otherId = authorIdOf(nodeCrypto, other.publicKey)
    const envelope = (who: typeof author, seq: number, clock = clockInit(), deps: Uint8Array[] = []) =>
      sealEnvelope(nodeCrypto, who, { space: 'clocks', seq, clock, deps, updates: [{ key: 'k', decl: { type: 'counter' as const, bounds: {} }, ops: [1] }], safe: [] })
    const decided = (frame: Uint8Array) => new Promise<void>((ok) => void node.submit(frame, 'test', () => ok()))
    // A space nobody wrote to yet: nothing can give other:999.
    const forged = encodeEnvelope(await envelope(author, 1, clockFrom([[otherId, 999]])))
    expect(() => node.submit(forged)).toThrow(expect.objectContaining({ reason: 'bad-clock' }))
    await decided(encodeEnvelope(await envelope(author, 1)))
    // Without a dep that carries it, other:1 is a forgery too.
    const picked = encodeEnvelope(await envelope(author, 2, clockFrom([[otherId, 1]])))
    expect(() => node.submit(picked)).toThrow(expect.objectContaining({ reason: 'bad-clock' }))
    // With a dep this relay has not seen, the claim may be right: queued, and the audit decides.
    const unseen = await envelope(other, 1)
    await decided(encodeEnvelope(await envelope(author, 2, clockFrom([[otherId, 1]]), [unseen.id])))
  })

  it('keeps its state in a data dir or in a given storage, and refuses neither or both with a reason', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stead-node-'))
    expect(() => soloRelay(dir, { dataDir: undefined })).toThrow(/exactly one of them/)
    expect(() => soloRelay(dir, { storage: { kv: new MemoryKv(), journal: new MemoryJournal() } })).toThrow(expect.objectContaining({ reason: 'malformed' }))
    expect(() => soloRelay(dir, { dataDir: undefined, storage: { kv: new MemoryKv(), journal: new MemoryJournal() } })).not.toThrow()
  })

  it("speaks to peers once its block is in the journal, without waiting for the store's transaction, and goes on taking events meanwhile", async () => {
    const { node, spoken } = soloRelay(mkdtempSync(join(tmpdir(), 'stead-node-')))
    await node.start()
    await until('the start-up write', () => spoken.length === 0)
    // Store transactions that never end while the test runs; how many messages had gone out when each block was journaled.
    const lag = lagTransactions(node)
    const sentAtAppend: number[] = []
    const append = lag.store.journal.append.bind(lag.store.journal)
    lag.store.journal.append = (record) => {
      sentAtAppend.push(spoken.length)
      append(record)
    }
    try {
      node.submit(await deposit(1))
      await until('the first block broadcast', () => spoken.length > 0)
      node.submit(await deposit(2))
      await until('a second block journaled and broadcast while the first transaction is still running', () => sentAtAppend.length === 2 && spoken.length > (sentAtAppend[1] as number))
      // Nothing went out before the first block was journaled, and no transaction has finished.
      expect(sentAtAppend[0]).toBe(0)
      expect(new Set(spoken)).toEqual(new Set(['broadcast']))
      expect(lag.transactions.length).toBeGreaterThanOrEqual(2)
    } finally {
      lag.restore()
    }
  })

  it('keeps its journal within its capacity while transactions lag: no block is journaled until the store holds what the journal does', async () => {
    const { node } = soloRelay(mkdtempSync(join(tmpdir(), 'stead-node-')))
    await node.start()
    const lag = lagTransactions(node)
    const big = (seq: number) =>
      sealEnvelope(nodeCrypto, author, { space: 'big', seq, clock: clockInit(), deps: [], updates: [{ key: 'b', decl: { type: 'register' as const }, ops: [['s', new Uint8Array(700_000).fill(seq), seq]] }], safe: [] }).then(encodeEnvelope)
    let decided = 0
    try {
      // 16 envelopes of 700 KB, one block each (f = 0: each commits at once), while no transaction ends.
      for (let seq = 1; seq <= 16; seq++) {
        node.submit(await big(seq), 'test', () => decided++)
        await until(`envelope ${seq} journaled, or the loop waiting for the disk`, () => lag.journaled() >= seq || lag.store.journalFull)
      }
      expect(lag.store.journalFull).toBe(true)
      const journaled = lag.journaled()
      // The journal passed 8 MiB with the block that filled it, and nothing was journaled after.
      expect(journaled).toBeLessThan(16)
      expect(lag.store.journal.size).toBeLessThan(8 * 1024 * 1024 + 800_000)
      // The disk catches up: the journal starts over and the rest goes in, and nothing was ever journaled while it was full.
      for (let rounds = 0; decided < 16; rounds++) {
        for (const done of lag.transactions.splice(0)) done()
        await new Promise((r) => setTimeout(r, 5))
        expect(rounds).toBeLessThan(1000)
      }
      expect(lag.store.journal.size).toBeLessThan(8 * 1024 * 1024)
      expect(lag.journaledWhileFull()).toBe(0)
    } finally {
      lag.restore()
    }
  })

  it('writes a snapshot as the state stood at its batch, even when the write runs after later commits', async () => {
    const { node } = soloRelay(mkdtempSync(join(tmpdir(), 'stead-node-')), { snapshotEveryBatches: 2 })
    await node.start()
    const decided = (frame: Uint8Array) => new Promise<void>((ok) => void node.submit(frame, 'test', () => ok()))
    const store = (node as unknown as { store: RelayStore }).store
    const write = store.write.bind(store)
    // The disk starts each write only when the test says so: the event loop runs ahead of it.
    const held = holdWrites(store)
    for (let seq = 1; seq <= 3; seq++) await decided(await deposit(seq))
    expect(held).toHaveLength(3)
    for (const release of held) release()
    await node.whenDurable()
    store.write = write
    // Taken after the second batch: index 2, whatever the replica held when the write ran.
    const [, stable] = store.snapshot()?.spaces[0]?.checkpoint as [string, [string, string, number]]
    expect(stable[2]).toBe(2)
  })

  it('stops on a broken invariant in the consensus reached from a client submit, and refuses submits after, instead of answering malformed and going on', async () => {
    for (const where of ['submit', 'onSubmitted'] as const) {
      const fatal: unknown[] = []
      const { node } = soloRelay(mkdtempSync(join(tmpdir(), 'stead-node-')), { onFatal: (err) => void fatal.push(err) })
      await node.start()
      const core = (node as unknown as { core: Record<typeof where, () => never> }).core
      core[where] = () => {
        throw new Error(`assertion failed in ${where}`)
      }
      let refused: unknown
      try {
        node.submit(await deposit(1, where))
      } catch (err) {
        refused = err
      }
      await until('the relay stops', () => fatal.length > 0)
      expect((fatal[0] as Error).message).toBe(`assertion failed in ${where}`)
      if (where === 'submit') expect(refused).toMatchObject({ reason: 'closed' })
      expect(() => node.submit(new Uint8Array(8))).toThrowError(expect.objectContaining({ reason: 'closed' }))
    }
  })

  it("stops when its consensus core's state breaks an invariant, found in the drain of the next event", async () => {
    const fatal: unknown[] = []
    const { node } = soloRelay(mkdtempSync(join(tmpdir(), 'stead-node-')), { onFatal: (err) => void fatal.push(err) })
    await node.start()
    const frameBefore = await deposit(1, 'before')
    await new Promise<void>((ok) => void node.submit(frameBefore, 'test', () => ok()))
    // A commit record moved behind the core's methods' backs (its GC round no longer follows from
    // it): the next drain's cheap check sees it.
    ;(node as unknown as { core: { linearizer: { lastCommitRound: number } } }).core.linearizer.lastCommitRound += 1000
    node.submit(await deposit(2, 'after'))
    await until('the relay stops', () => fatal.length > 0)
    expect(fatal[0]).toBeInstanceOf(ConsensusInvariantError)
    expect(() => node.submit(new Uint8Array(8))).toThrowError(expect.objectContaining({ reason: 'closed' }))
  })

  it('keeps what it caches of an envelope in exact-size copies, not a view pinning the whole read it came in', async () => {
    const { node } = soloRelay(mkdtempSync(join(tmpdir(), 'stead-node-')))
    await node.start()
    const frame = await deposit(1, 'pin')
    // As a socket read delivers it: a view into a much larger buffer.
    const read = new Uint8Array(1024 * 1024)
    read.set(frame, 4096)
    const view = read.subarray(4096, 4096 + frame.length)
    await new Promise<void>((ok) => void node.submit(view, 'test', () => ok()))
    const cached = (node as unknown as { admission: { verified: VerdictCache<{ signed?: { bytes: Uint8Array }; author?: Uint8Array }> } }).admission.verified.values()
    expect(cached.length).toBeGreaterThan(0)
    for (const verdict of cached) {
      expect(verdict.signed?.bytes.buffer.byteLength).toBeLessThan(64 * 1024)
      expect(verdict.author?.buffer.byteLength).toBeLessThan(64 * 1024)
    }
  })

  it('lets idle spaces leave memory and reads them back from the store when they are used, through a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stead-node-'))
    const decided = (node: RelayNode, frame: Uint8Array) => new Promise<void>((ok) => void node.submit(frame, 'test', () => ok()))
    const resident = (node: RelayNode) => node.status()['residentSpaces'] as number
    const first = soloRelay(dir, { snapshotEveryBatches: 1, spaceIdleMs: 20 }).node
    await first.start()
    for (const space of ['a', 'b', 'c']) await decided(first, await deposit(1, space))
    await decided(first, await deposit(2, 'a'))
    await until('idle spaces to leave memory', () => resident(first) === 0)
    expect(first.status()['spaces']).toBe(3)
    const head = first.reads.stableHead('a')
    expect(head.index).toBe(2)
    // Used again: back from the store, and on from where it stood.
    await decided(first, await deposit(3, 'a'))
    expect(first.reads.stableHead('a').index).toBe(3)
    expect(resident(first)).toBe(1)
    const hashes = ['a', 'b', 'c'].map((space) => first.reads.stableHead(space).stateHash)
    await first.whenDurable()
    await first.stop()
    nodes.splice(nodes.indexOf(first), 1)

    const second = soloRelay(dir, { snapshotEveryBatches: 1, spaceIdleMs: 20 }).node
    await second.start()
    expect(second.status()['spaces']).toBe(3)
    expect(['a', 'b', 'c'].map((space) => second.reads.stableHead(space).stateHash)).toEqual(hashes)
    await decided(second, await deposit(2, 'b'))
    expect(second.reads.stableHead('b').index).toBe(2)
    // A duplicate of an envelope decided before the spaces left memory is still one.
    expect(second.submit(await deposit(1, 'c')).status).toBe('duplicate')
  })

  it('restarts from its latest snapshot plus the batches since, to the same state, and prunes what the snapshot covers', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stead-node-'))
    const decided = (node: RelayNode, frame: Uint8Array) => new Promise<void>((ok) => void node.submit(frame, 'test', () => ok()))
    const first = soloRelay(dir, { snapshotEveryBatches: 3 }).node
    await first.start()
    // Seven commits of two spaces, one envelope each: snapshots after the third and the sixth.
    const seqs = { s: 0, t: 0 }
    for (let i = 1; i <= 7; i++) {
      const space = i % 2 ? 's' : 't'
      await decided(first, await deposit(++seqs[space], space))
    }
    const before = { s: first.reads.stableHead('s'), t: first.reads.stableHead('t') }
    expect(before.s.index).toBe(4)
    expect(before.t.index).toBe(3)
    // Decisions are made before their write is on disk: wait for the disk.
    const { store: stored } = first as unknown as { store: RelayStore }
    await first.whenDurable()
    expect(stored.snapshot()?.spaces.map((x) => x.space).sort()).toEqual(['s', 't'])
    // Only the batch after the second snapshot is left to replay.
    expect([...stored.committedBatches()]).toHaveLength(1)
    await first.stop()
    nodes.splice(nodes.indexOf(first), 1)

    const second = soloRelay(dir, { snapshotEveryBatches: 3 }).node
    await second.start()
    expect({ s: second.reads.stableHead('s'), t: second.reads.stableHead('t') }).toEqual(before)
    // The audit goes on where it stood: the next envelope of each space takes the next index.
    await decided(second, await deposit(5, 's'))
    await decided(second, await deposit(4, 't'))
    expect(second.reads.stableHead('s').index).toBe(5)
    expect(second.reads.stableHead('t').index).toBe(4)
    // Each space's attestation chain goes on from its last attestation before the restart.
    const { store: reopened } = second as unknown as { store: RelayStore }
    await second.whenDurable()
    const attested = (space: string, fromIndex: number) => decodeAttestation((reopened.commitAt(space, [fromIndex, 0]) as { attestation: { bytes: Uint8Array } }).attestation.bytes)
    expect(attested('s', 4).prevRound).toBe(attested('s', 3).round)
    expect(attested('t', 3).prevRound).toBe(attested('t', 2).round)
  })
})

describe("a peer's wake", () => {
  it("passes the door a client's submit passes: a register stamped hours ahead is dropped, a good envelope goes into a block", async () => {
    const said: Uint8Array[] = []
    const { node, deliver } = clusterMember({ broadcast: (frame) => void said.push(frame), send: (_to, frame) => void said.push(frame) })
    await node.start()
    const register = (seq: number, stamp: number) =>
      sealEnvelope(nodeCrypto, author, { space: 'w', seq, clock: clockInit(), deps: [], updates: [{ key: 'r', decl: { type: 'register' }, ops: [['s', 'v', stamp]] }], safe: [] }).then(encodeEnvelope)
    const ahead = await register(1, Date.now() + 3 * 3600_000)
    const good = await register(1, Date.now())
    // A client gets the reason.
    expect(() => node.submit(ahead)).toThrow(/ahead of this relay's clock/)
    const carried = (frame: Uint8Array) => said.some((f) => contains(f, frame))
    deliver(1, encodeMessage({ kind: 'wake', payload: [ahead] }))
    deliver(1, encodeMessage({ kind: 'wake', payload: [good] }))
    await until('the good one in a block', () => carried(good))
    expect(carried(ahead)).toBe(false)
  })
})

function contains(haystack: Uint8Array, needle: Uint8Array): boolean {
  outer: for (let i = 0; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer
    return true
  }
  return false
}

describe('peers faster than the disk', () => {
  it('hold at most a bounded backlog of their frames while writes are in flight, and drop the rest unread', async () => {
    const { node, deliver } = clusterMember()
    await node.start()
    const store = (node as unknown as { store: RelayStore }).store
    const write = store.write.bind(store)
    const held = holdWrites(store)
    // A valid message of 1 MiB: r2's block of round 1 carrying a payload the core will refuse, once it gets to it.
    const genesis = (a: number) => ({ round: 0, author: a, digest: new Uint8Array(32) })
    const block = signBlock(relayCrypto, new Uint8Array(32).fill(4), { round: 1, author: 1, ancestors: [genesis(1), genesis(0), genesis(2)], payload: [new Uint8Array(1024 * 1024)] })
    const frame = encodeMessage({ kind: 'block', block })
    // Each frame is one drain and one write; at 32 writes in flight the loop waits for the
    // disk, and the frames after that wait in the event queue.
    for (let i = 0; i < 132; i++) deliver(1, frame)
    const used = () => (node.status().memory as { used: Record<string, number> }).used['mesh-backlog']
    expect(used()).toBeLessThanOrEqual(32 * 1024 * 1024)
    expect(used()).toBeGreaterThan(16 * 1024 * 1024)
    const dropped = (await node.metrics.registry.getSingleMetric('stead_rejected_total')?.get())?.values.find((v) => v.labels.reason === 'overloaded')
    expect(dropped?.value).toBeGreaterThanOrEqual(60)
    // Another peer's frames are still taken.
    deliver(2, frame)
    expect(used()).toBeGreaterThan(32 * 1024 * 1024)
    store.write = write
    for (const release of held.splice(0)) release()
    await until('the backlog processed', () => used() === 0 && held.length === 0)
  })
})

describe('serving peers', () => {
  it('sends a peer that asks for blocks over and over at most its budget of bytes, and still answers the others', async () => {
    const answered = [0, 0, 0, 0]
    let proposed = false
    const { node, deliver } = clusterMember({
      send: (to, frame) => {
        if (decodeMessage(nodeCrypto as never, node.committee, frame, undefined, () => false).kind !== 'blocks') return
        answered[to] = (answered[to] as number) + frame.length
      },
      broadcast: () => (proposed = true),
    })
    await node.start()
    // One block of about 300 KB: 3,000 updates under 100-character keys.
    const updates = Array.from({ length: 3000 }, (_, i) => ({ key: `${i}`.padStart(100, 'k'), decl: { type: 'counter' as const, bounds: {} }, ops: [1] }))
    node.submit(encodeEnvelope(await sealEnvelope(nodeCrypto, author, { space: 's', seq: 1, clock: clockInit(), deps: [], updates, safe: [] })))
    await until('its block proposed', () => proposed)
    // 1,000 requests of a few bytes each would make it send 300 MB or more (some twice: from memory and from the store).
    const refused = async () => (await node.metrics.registry.getSingleMetric('stead_rejected_total')?.get())?.values.find((v) => v.labels.reason === 'rate-limited' && v.labels.source === 'mesh')?.value ?? 0
    const t0 = Date.now()
    const sync = encodeMessage({ kind: 'sync', fromRound: 0 })
    for (let i = 0; i < 1000; i++) deliver(1, sync)
    await until('every request processed', () => !node.eventsPending)
    await node.whenDurable()
    const seconds = (Date.now() - t0) / 1000
    // Its requests wait in a queue of 8 (the rest are dropped unread), and what is served stays within its
    // serving budget: a burst of 32 MiB and what refilled meanwhile (32 MiB a second), give or take one block.
    expect(answered[1]).toBeGreaterThan(0)
    expect(answered[1]).toBeLessThanOrEqual(32 * 1024 * 1024 * (1 + seconds) + 400_000)
    expect(await refused()).toBeGreaterThan(900)
    deliver(2, sync)
    await until('the other peer answered', () => (answered[2] as number) > 0)
  })
})

describe('retention', () => {
  it('deletes blocks below the retention window and commits a space no longer keeps, still restarts to the same state, and tells a subscriber from too far back', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stead-node-'))
    const decided = (node: RelayNode, frame: Uint8Array) => new Promise<void>((ok) => void node.submit(frame, 'test', () => ok()))
    // GC depth 2 and a checkpoint every 10 rounds: at least 24 rounds of blocks are kept (two
    // checkpoint intervals and two GC depths); 3 stable indexes of commits per space.
    const options = { snapshotEveryBatches: 2, gcDepth: 2, retention: { blockRounds: 1, updates: 3 } }
    const first = soloRelay(dir, options, 10).node
    await first.start()
    for (let seq = 1; seq <= 40; seq++) await decided(first, await deposit(seq))
    const { store } = first as unknown as { store: RelayStore }
    await first.whenDurable()
    const committed = first.status().committedRound as number
    const crypto = { sha256: (b: Uint8Array) => nodeCrypto.sha256(b), verify: () => true, sign: () => new Uint8Array(64) }
    const committee = first.committee
    expect(store.blocksInRounds(crypto as never, committee, 1, committed - 28, 1000, 1 << 30)).toEqual([])
    expect(store.blocksInRounds(crypto as never, committee, committed - 24, committed, 1000, 1 << 30).length).toBeGreaterThan(0)
    // Commits of 's' are kept from a stable index 3 below the last snapshot's on.
    const start = store.feedStart('s') as number
    expect(start).toBeGreaterThan(30)
    const head = first.reads.stableHead('s')
    await first.stop()
    nodes.splice(nodes.indexOf(first), 1)
    const keptFrom = store.blocksKeptFrom
    expect(keptFrom).toBeGreaterThan(committed - 28)
    const restarted = soloRelay(dir, options, 10)
    const second = restarted.node
    await second.start()
    expect(second.reads.stableHead('s')).toEqual(head)
    expect(second.reads.feedStart('s')).toBe(start)
    // A peer asking for rounds below the window is told where it starts, with what is kept.
    ;(second as unknown as { peers: { serveArchive(to: number, q: { fromRound: number; toRound: number }): void } }).peers.serveArchive(0, { fromRound: 1, toRound: keptFrom + 1 })
    const answers = restarted.sent.map((f) => decodeMessage(crypto as never, committee, f, undefined, true))
    expect(answers[0]).toEqual({ kind: 'pruned', keptFrom })
    expect(answers[1]?.kind).toBe('blocks')
    await decided(second, await deposit(41))
    expect(second.reads.stableHead('s').index).toBe(41)
  })
})

describe('snapshot cadence', () => {
  it('takes a snapshot once the batches since the last one carry more than 256 KiB, however few they are', async () => {
    const { node } = soloRelay(mkdtempSync(join(tmpdir(), 'stead-node-')), { snapshotEveryBatches: 1000 })
    await node.start()
    const decided = (frame: Uint8Array) => new Promise<void>((ok) => void node.submit(frame, 'test', () => ok()))
    const big = (seq: number) =>
      sealEnvelope(nodeCrypto, author, { space: 'b', seq, clock: clockInit(), deps: [], updates: [{ key: `doc${seq}`, decl: { type: 'register' as const }, ops: [['s', new Uint8Array(100_000).fill(seq), seq] as const] }], safe: [] }).then(encodeEnvelope)
    const state = node as unknown as { store: RelayStore }
    for (let seq = 1; seq <= 2; seq++) await decided(await big(seq))
    await node.whenDurable()
    // Two batches of 100 KB: not yet.
    expect(state.store.snapshot()).toBeUndefined()
    await decided(await big(3))
    await node.whenDurable()
    expect(state.store.snapshot()?.spaces.map((s) => s.space)).toEqual(['b'])
    expect([...state.store.committedBatches(state.store.snapshot()?.batch)]).toEqual([])
  })
})
