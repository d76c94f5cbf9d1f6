import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { clockCompare, clockInit, clockMerge, clockUpdate, decodeClock, encodeClock, type Clock } from '../src/clock.ts'
import {
  allowAuthors,
  attest,
  quorumThreshold,
  validateClockUpdate,
  validateMonotonic,
  verifyClockProof,
  verifyQuorumCertificate,
  type MonotonicityState,
  type QuorumCertificate,
} from '../src/chrono.ts'
import { nobleCrypto } from '../src/crypto/noble.ts'
import { isSteadError } from '../src/errors.ts'

const ids = ['a', 'b', 'c', 'd']
const clockArb: fc.Arbitrary<Clock> = fc
  .array(fc.tuple(fc.constantFrom(...ids), fc.integer({ min: 1, max: 5 })), { maxLength: 4 })
  .map((entries) => new Map(entries))

const flip = { before: 'after', after: 'before', equal: 'equal', concurrent: 'concurrent' } as const

describe('logical clock laws', () => {
  it('compare is antisymmetric and equal means same entries', () => {
    fc.assert(
      fc.property(clockArb, clockArb, (a, b) => {
        const ab = clockCompare(a, b)
        expect(clockCompare(b, a)).toBe(flip[ab])
        expect(ab === 'equal').toBe(JSON.stringify(encodeClock(a)) === JSON.stringify(encodeClock(b)))
      }),
    )
  })
  it('compare agrees with the pointwise definition', () => {
    fc.assert(
      fc.property(clockArb, clockArb, (a, b) => {
        const le = ids.every((id) => (a.get(id) ?? 0) <= (b.get(id) ?? 0))
        const ge = ids.every((id) => (a.get(id) ?? 0) >= (b.get(id) ?? 0))
        const expected = le && ge ? 'equal' : le ? 'before' : ge ? 'after' : 'concurrent'
        expect(clockCompare(a, b)).toBe(expected)
      }),
    )
  })
  it('merge is commutative, associative, idempotent and an upper bound', () => {
    fc.assert(
      fc.property(clockArb, clockArb, clockArb, (a, b, c) => {
        const eq = (x: Clock, y: Clock) => expect(clockCompare(x, y)).toBe('equal')
        eq(clockMerge(a, b), clockMerge(b, a))
        eq(clockMerge(clockMerge(a, b), c), clockMerge(a, clockMerge(b, c)))
        eq(clockMerge(a, a), a)
        expect(['after', 'equal']).toContain(clockCompare(clockMerge(a, b), a))
        expect(['after', 'equal']).toContain(clockCompare(clockMerge(a, b), b))
      }),
    )
  })
  it('update is strictly after every input and advances only its own entry by one', () => {
    fc.assert(
      fc.property(fc.constantFrom(...ids), clockArb, fc.array(clockArb, { maxLength: 3 }), (id, c, others) => {
        const next = clockUpdate(id, c, others)
        for (const input of [c, ...others]) expect(clockCompare(next, input)).toBe('after')
        const merged = clockMerge(c, ...others)
        expect(next.get(id)).toBe((merged.get(id) ?? 0) + 1)
        expect(validateClockUpdate(id, next, [c, ...others])).toEqual({ ok: true })
      }),
    )
  })
  it('inputs are never mutated', () => {
    const c = new Map([['a', 1]])
    clockUpdate('a', c, [new Map([['b', 2]])])
    clockMerge(c, new Map([['a', 5]]))
    expect([...c]).toEqual([['a', 1]])
    expect(clockInit().size).toBe(0)
  })
  it('wire form round-trips and rejects bad input', () => {
    fc.assert(fc.property(clockArb, (c) => {
      expect(clockCompare(decodeClock(encodeClock(c), 10), c)).toBe("equal")
    }))
    for (const bad of [['a'], ['b', 1, 'a', 1], ['a', 0], ['a', -1], ['a', 1.5], [1, 1], 'a', ['a', 1, 'a', 2]]) {
      expect(() => decodeClock(bad, 10)).toThrow()
      try {
        decodeClock(bad, 10)
      } catch (e) {
        expect(isSteadError(e, 'malformed')).toBe(true)
      }
    }
    expect(() => decodeClock(['a', 1, 'b', 1], 1)).toThrowError(expect.objectContaining({ reason: 'too-large' }))
  })
})

describe('Chrono validators', () => {
  it('update validator: an author may advance only its own entry, by exactly one', () => {
    const prev = new Map([['a', 1], ['b', 2]])
    expect(validateClockUpdate('a', new Map([['a', 2], ['b', 2]]), [prev]).ok).toBe(true)
    const skip = validateClockUpdate('a', new Map([['a', 3], ['b', 2]]), [prev])
    expect(!skip.ok && skip.reason).toBe('bad-clock')
    const other = validateClockUpdate('a', new Map([['a', 2], ['b', 3]]), [prev])
    expect(!other.ok && other.detail).toMatch(/entry b/)
    const dropped = validateClockUpdate('a', new Map([['a', 2]]), [prev])
    expect(dropped.ok).toBe(false)
  })
  it('monotonicity validator: no repeats with other content, no going back', () => {
    let state: MonotonicityState = new Map()
    const d1 = new Uint8Array([1])
    const d2 = new Uint8Array([2])
    let r = validateMonotonic(state, 'a', 1, d1)
    expect(r.verdict.ok).toBe(true)
    state = r.state
    r = validateMonotonic(state, 'a', 1, d1)
    expect(!r.verdict.ok && r.verdict.reason).toBe('duplicate')
    r = validateMonotonic(state, 'a', 1, d2)
    expect(!r.verdict.ok && r.verdict.reason).toBe('conflict')
    state = validateMonotonic(state, 'a', 3, d2).state
    r = validateMonotonic(state, 'a', 2, d1)
    expect(!r.verdict.ok && r.verdict.reason).toBe('conflict')
    expect(state.get('a')?.counter).toBe(3)
  })
  it('application validator: allow-list', () => {
    const v = allowAuthors(new Set(['a']))
    expect(v('a', new Map(), null).ok).toBe(true)
    const no = v('b', new Map(), null)
    expect(!no.ok && no.reason).toBe('unauthorized')
  })
  it('quorum thresholds: f+1 stateless, ceil((N+f+1)/2) stateful', () => {
    expect(quorumThreshold('update', 4, 1)).toBe(2)
    expect(quorumThreshold('monotonicity', 4, 1)).toBe(3)
    expect(quorumThreshold('application', 7, 2)).toBe(5)
    expect(quorumThreshold('monotonicity', 10, 3)).toBe(7)
  })
})

describe('clock proofs', () => {
  const crypto = nobleCrypto
  const relaySecrets = [1, 2, 3, 4].map((i) => new Uint8Array(32).fill(i))
  const author = new Uint8Array(32).fill(9)

  it('verify a signed clock with quorum certificates; reject short or forged ones', async () => {
    const relayKeys = await Promise.all(relaySecrets.map((s) => crypto.publicKeyOf(s)))
    const cluster = { f: 1, relayKeys }
    const bytes = new TextEncoder().encode('envelope bytes carrying the clock')
    const subject = crypto.sha256(bytes)
    const proofFor = async (signers: number[], kind: 'update' | 'monotonicity'): Promise<QuorumCertificate> => ({
      kind,
      subject,
      signatures: await Promise.all(signers.map(async (relay) => ({ relay, sig: await attest(crypto, relaySecrets[relay]!, kind, subject) }))),
    })
    const signed = { bytes, sig: await crypto.sign(author, bytes) }
    const authorKey = await crypto.publicKeyOf(author)

    const good = [await proofFor([0, 1], 'update'), await proofFor([0, 1, 2], 'monotonicity')]
    expect(await verifyClockProof(crypto, cluster, subject, { authorKey, signed, certificates: good })).toEqual({ ok: true })

    // Two stateful signatures are not a quorum of 4 with f=1.
    const short = [good[0]!, await proofFor([0, 1], 'monotonicity')]
    expect((await verifyClockProof(crypto, cluster, subject, { authorKey, signed, certificates: short })).ok).toBe(false)

    // The same relay counted twice does not make a quorum.
    const doubled: QuorumCertificate = { ...good[1]!, signatures: [good[1]!.signatures[0]!, good[1]!.signatures[0]!, good[1]!.signatures[1]!] }
    expect(await verifyQuorumCertificate(crypto, cluster, doubled)).toBe(false)

    // A signature for another kind does not count.
    const wrongKind: QuorumCertificate = { ...good[0]!, kind: 'monotonicity' }
    expect(await verifyQuorumCertificate(crypto, cluster, wrongKind)).toBe(false)

    // Tampered bytes or a forged author signature fail.
    const tampered = { bytes: new Uint8Array([...bytes, 1]), sig: signed.sig }
    expect((await verifyClockProof(crypto, cluster, subject, { authorKey, signed: tampered, certificates: good })).ok).toBe(false)
    const forged = { bytes, sig: await crypto.sign(relaySecrets[0]!, bytes) }
    expect((await verifyClockProof(crypto, cluster, subject, { authorKey, signed: forged, certificates: good })).ok).toBe(false)
  })
})
