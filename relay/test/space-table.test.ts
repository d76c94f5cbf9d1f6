import { clockInit, openEnvelopeSync, sealEnvelope, toHex, type Envelope } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { SpaceTable } from '../src/runtime/space-table.ts'
import { decodeSpaceSnapshot } from '../src/store/store.ts'

const author = { secretKey: new Uint8Array(32).fill(9), publicKey: publicKeyOfSync(new Uint8Array(32).fill(9)) }
const sha256 = (b: Uint8Array) => nodeCrypto.sha256(b)
const open = (signed: { bytes: Uint8Array; sig: Uint8Array }) => openEnvelopeSync({ sha256, verify: () => true }, signed)

const deposit = (space: string, seq: number, amount = 1): Promise<Envelope> =>
  sealEnvelope(nodeCrypto, author, { space, seq, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [amount] }], safe: [] })

/** A table over an in-memory "store" of snapshot records, on a clock the test moves. */
function table(idleMs = 1000) {
  const stored = new Map<string, Uint8Array>()
  const evicted: string[] = []
  let now = 0
  const t = new SpaceTable({
    stored: (space) => stored.get(space),
    replicaOptions: (space) => ({ space, historyLimit: 0 }),
    open,
    sha256,
    clock: { now: () => now, setTimer: () => ({ cancel: () => undefined }) },
    idleMs,
    evicted: (space) => evicted.push(space),
    starterOf: () => undefined,
  })
  /** Takes a snapshot and writes it to the "store" at once. */
  const snapshot = () => {
    const records = t.takeSnapshot()
    for (const r of records) stored.set(r.space, r.bytes)
    t.saved(records)
    return records
  }
  return { t, stored, evicted, snapshot, later: (ms: number) => (now += ms) }
}

/** Commits envelopes to a space as the relay's audit does. */
function commit(t: SpaceTable, space: string, envs: Envelope[], round: number): void {
  const replica = t.forAudit(space)
  replica.commit(envs, round)
  t.audited(space, replica, round)
}

const hashOf = (t: SpaceTable, space: string) => toHex((t.head(space) as { stateHash: Uint8Array }).stateHash)

describe('SpaceTable', () => {
  it('lets an idle replica leave memory once its state is in a snapshot record, and brings it back auditing exactly as one that stayed', async () => {
    const a = table()
    const twin = table(Number.MAX_SAFE_INTEGER)
    const first = [await deposit('s', 1), await deposit('s', 2, 5)]
    commit(a.t, 's', first, 1)
    commit(twin.t, 's', first, 1)
    a.later(5000)
    a.t.sweep()
    // Changed since its last snapshot record: it stays.
    expect(a.t.residentCount).toBe(1)
    a.snapshot()
    a.t.sweep()
    expect(a.t.residentCount).toBe(0)
    expect(a.evicted).toEqual(['s'])
    // Its head is kept: read without loading it.
    expect(hashOf(a.t, 's')).toBe(hashOf(twin.t, 's'))
    expect(a.t.residentCount).toBe(0)
    // Back from the record, it audits the next commit as the twin that never left does.
    const next = [await deposit('s', 3, 7)]
    commit(a.t, 's', next, 2)
    commit(twin.t, 's', next, 2)
    expect(a.t.residentCount).toBe(1)
    expect(a.t.read('s')?.stableValue('k')).toBe(13)
    expect(hashOf(a.t, 's')).toBe(hashOf(twin.t, 's'))
    expect(a.t.lastAttested('s')).toBe(2)
    // A duplicate is still known as one after the round trip.
    expect(a.t.read('s')?.decided(first[0] as Envelope)).toBe('duplicate')
  })

  it('brings a replica back from a record whose write has not ended, not from the older one in the store', async () => {
    const a = table()
    commit(a.t, 's', [await deposit('s', 1)], 1)
    a.snapshot()
    commit(a.t, 's', [await deposit('s', 2)], 2)
    // Encoded, not written yet.
    const records = a.t.takeSnapshot()
    a.later(5000)
    a.t.sweep()
    expect(a.t.residentCount).toBe(0)
    expect(a.t.read('s')?.stableValue('k')).toBe(2)
    // Once written, the store's record is the one read.
    for (const r of records) a.stored.set(r.space, r.bytes)
    a.t.saved(records)
    a.later(5000)
    a.t.sweep()
    a.stored.set('s', new Uint8Array([0xc0]))
    expect(() => a.t.read('s')).toThrow()
  })

  it('keeps a space with envelopes parked behind a gap in memory, and lists it for every commit', async () => {
    const a = table()
    // Seq 2 without seq 1: parked.
    commit(a.t, 'gap', [await deposit('gap', 2)], 1)
    commit(a.t, 'plain', [await deposit('plain', 1)], 1)
    expect(a.t.parkedSpaces()).toEqual(['gap'])
    a.snapshot()
    a.later(5000)
    a.t.sweep()
    expect(a.t.residentCount).toBe(1)
    expect(a.t.read('gap')?.waitingCount).toBe(1)
    commit(a.t, 'gap', [await deposit('gap', 1)], 2)
    expect(a.t.parkedSpaces()).toEqual([])
    expect(a.t.read('gap')?.stableValue('k')).toBe(2)
  })

  it('frees memory for the budget least recently used first, never a replica that changed since its snapshot', async () => {
    const a = table(Number.MAX_SAFE_INTEGER)
    for (const space of ['x', 'y', 'z']) commit(a.t, space, [await deposit(space, 1)], 1)
    a.snapshot()
    a.t.read('x')
    commit(a.t, 'z', [await deposit('z', 2)], 2)
    const before = a.t.residentBytes
    a.t.reclaim(Number.MAX_SAFE_INTEGER)
    // y was least recently used, then x; z changed since the snapshot and stays.
    expect(a.evicted).toEqual(['y', 'x'])
    expect(a.t.residentCount).toBe(1)
    expect(a.t.residentBytes).toBeLessThan(before)
    expect(a.t.residentBytes).toBeGreaterThan(0)
  })

  it('starts from the store knowing every space, building only those with parked envelopes', async () => {
    const a = table()
    commit(a.t, 'gap', [await deposit('gap', 2)], 1)
    commit(a.t, 'plain', [await deposit('plain', 1)], 1)
    const records = a.snapshot()
    const b = table()
    b.t.restore(records.map((r) => ({ space: r.space, checkpoint: decodeSpaceSnapshot(r.space, r.bytes).checkpoint, lastAttested: 1, recordBytes: r.bytes.length })))
    expect(b.t.size).toBe(2)
    expect(b.t.residentCount).toBe(1)
    expect(b.t.parkedSpaces()).toEqual(['gap'])
    expect(hashOf(b.t, 'plain')).toBe(hashOf(a.t, 'plain'))
    expect(b.t.residentCount).toBe(1)
  })
})
