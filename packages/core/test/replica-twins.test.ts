import { describe, expect, it } from 'vitest'
import { clockInit } from '../src/clock.ts'
import type { Declaration } from '../src/crdt/index.ts'
import { nodeCrypto } from '../src/crypto/node.ts'
import { sealEnvelope, type Envelope, type ObjectUpdate } from '../src/envelope.ts'
import { ReliableReplica } from '../src/replica.ts'

// Regressions found in review: twins (one author, one seq, two contents) once
// shared op tags, so undoing the loser undid the winner and broke G5.
const author = { secretKey: new Uint8Array(32).fill(1), publicKey: await nodeCrypto.publicKeyOf(new Uint8Array(32).fill(1)) }
const seal = (seq: number, updates: ObjectUpdate[]): Promise<Envelope> =>
  sealEnvelope(nodeCrypto, author, { space: 's', seq, clock: clockInit(), deps: [], updates, safe: [] })
const reg: Declaration = { type: 'register' }
const set: Declaration = { type: 'set', bounds: {} }

describe('twin envelopes keep prospective == stable (G5)', () => {
  it('register: the superseded twin does not withdraw the committed write', async () => {
    const a = await seal(1, [{ key: 'r', decl: reg, ops: [['s', 'A', 1]] }])
    const b = await seal(1, [{ key: 'r', decl: reg, ops: [['s', 'B', 1]] }])
    const r = new ReliableReplica({ space: 's' })
    r.receive(a)
    r.receive(b)
    expect(r.commit([a]).decisions.map((d) => d.kind)).toEqual(['committed', 'superseded'])
    expect([r.pendingCount, r.value('r'), r.stableValue('r')]).toEqual([0, 'A', 'A'])
  })

  it('register: the committed twin was never received', async () => {
    const a = await seal(1, [{ key: 'r', decl: reg, ops: [['s', 'A', 1]] }])
    const b = await seal(1, [{ key: 'r', decl: reg, ops: [['s', 'B', 1]] }])
    const r = new ReliableReplica({ space: 's' })
    r.receive(b)
    r.commit([a])
    expect([r.value('r'), r.stableValue('r')]).toEqual(['A', 'A'])
  })

  it('set: both twins add the same element, the second is dropped as a conflict', async () => {
    const a = await seal(1, [{ key: 's', decl: set, ops: [['a', 'x']] }])
    const b = await seal(1, [{ key: 's', decl: set, ops: [['a', 'x'], ['a', 'y']] }])
    const r = new ReliableReplica({ space: 's' })
    r.receive(a)
    r.receive(b)
    r.commit([a, b])
    expect(r.value('s')).toEqual(['x'])
    expect(r.stableValue('s')).toEqual(['x'])
  })

  it('a rejected op does not fix the declaration of a new key', async () => {
    const r = new ReliableReplica({ space: 's' })
    const bad = await sealEnvelope(nodeCrypto, author, {
      space: 's', seq: 1, clock: clockInit(), deps: [], updates: [],
      safe: [{ atomic: false, updates: [{ key: 'k', decl: { type: 'counter', bounds: { min: 0 } }, op: -1 }] }],
    })
    const good = await seal(2, [{ key: 'k', decl: { type: 'counter', bounds: { min: -10 } }, ops: [-5] }])
    const { decisions } = r.commit([bad, good])
    expect(decisions.map((d) => d.kind === 'committed' && d.units[0]?.status)).toEqual(['rejected', 'committed'])
    expect(r.declaration('k')).toEqual({ type: 'counter', bounds: { min: -10 } })
  })
})
