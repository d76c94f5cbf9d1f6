import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { clockCompare, clockEquals, clockFrom, clockInit, clockMerge, clockUpdate, decodeClock, encodeClock, type Clock, type Ordering } from '../src/clock.ts'
import { decode, encode } from '../src/codec.ts'
import { allowAuthors } from '../src/chrono.ts'
import { isSteadError } from '../src/errors.ts'

const ids = ['a', 'b', 'c', 'd']
const clockArb: fc.Arbitrary<Clock> = fc
  .array(fc.tuple(fc.constantFrom(...ids), fc.integer({ min: 1, max: 5 })), { maxLength: 4 })
  .map((entries) => clockFrom(entries))

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
      }),
    )
  })
  it('inputs are never mutated', () => {
    const c = clockFrom([['a', 1]])
    clockUpdate('a', c, [clockFrom([['b', 2]])])
    clockUpdate('b', c)
    clockMerge(c, clockFrom([['a', 5]]))
    clockMerge(c, clockFrom([['0', 5]]))
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

// The straightforward Map clock that Clock replaced, as the reference: absent ids count as 0.
type RefClock = ReadonlyMap<string, number>
const at = (c: RefClock, id: string): number => c.get(id) ?? 0
function refCompare(a: RefClock, b: RefClock): Ordering {
  let le = true
  let ge = true
  for (const id of new Set([...a.keys(), ...b.keys()])) {
    if (at(a, id) > at(b, id)) le = false
    if (at(a, id) < at(b, id)) ge = false
  }
  return le && ge ? 'equal' : le ? 'before' : ge ? 'after' : 'concurrent'
}
function refMerge(...cs: RefClock[]): Map<string, number> {
  const out = new Map<string, number>()
  for (const c of cs) for (const [id, n] of c) out.set(id, Math.max(n, out.get(id) ?? 0))
  return out
}
/** A Clock's expected entries: the reference's nonzero ones, in ascending id (UTF-16) order. */
const canonical = (c: RefClock): Array<[string, number]> => [...c].filter(([, n]) => n > 0).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0))

// Ids from a small pool (so clocks overlap) plus arbitrary strings (so order is
// exercised beyond ASCII); zero counters, which Clock drops, included on purpose.
const refId = fc.oneof(fc.constantFrom('a', 'b', 'ab', 'B', 'é', '😀', 'zz'), fc.string({ minLength: 1, maxLength: 6, unit: 'grapheme' }))
const refArb: fc.Arbitrary<RefClock> = fc
  .array(fc.tuple(refId, fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 4 }), fc.maxSafeNat())), { maxLength: 40 })
  .map((entries) => new Map(entries))
// Locally built, or decoded from msgpack bytes (ids then come out of msgpackr's decoder, as from the wire).
const toClock = (r: RefClock, wire: boolean): Clock => {
  const c = clockFrom(r)
  return wire ? decodeClock(decode(encode(encodeClock(c))), 1_000) : c
}
/** Mostly-shared pairs: b is a with some entries changed, as for the clocks replicas actually compare. */
const pairArb = fc.oneof(
  fc.tuple(refArb, refArb),
  fc.tuple(refArb, fc.array(fc.tuple(refId, fc.integer({ min: -2, max: 2 })), { maxLength: 4 })).map(([a, edits]): [RefClock, RefClock] => {
    const b = new Map(a)
    for (const [id, d] of edits) b.set(id, Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, at(a, id) + d)))
    return [a, b]
  }),
)

describe('Clock agrees with a Map reference', () => {
  it('compare and equals', () => {
    fc.assert(
      fc.property(pairArb, fc.boolean(), fc.boolean(), ([ra, rb], wa, wb) => {
        const a = toClock(ra, wa)
        const b = toClock(rb, wb)
        const want = refCompare(ra, rb)
        expect(clockCompare(a, b)).toBe(want)
        expect(clockEquals(a, b)).toBe(want === 'equal')
        // One representation per clock: deep equality is clock equality.
        if (want === 'equal') expect(a).toEqual(b)
      }),
      { numRuns: 500 },
    )
  })
  it('compare of clocks derived from one clock (which may share its storage)', () => {
    const sub = (r: RefClock, of: RefClock): RefClock => new Map([...r].filter(([id]) => at(of, id) > 0))
    fc.assert(
      fc.property(refArb, refArb, refArb, fc.nat(), fc.nat(), fc.boolean(), (ra, rb, rc, k1, k2, wire) => {
        const a = toClock(ra, wire)
        // Ids with room to advance (clockUpdate refuses to pass 2^53 - 1); longer than any refId otherwise.
        const own = [...a.keys()].filter((id) => (a.get(id) as number) < Number.MAX_SAFE_INTEGER)
        const pick = (k: number): string => own[k % own.length] ?? 'not-in-any-clock'
        // Updates at ids a has, and merges of clocks over a's ids, keep a's ids.
        const variants: Array<[Clock, RefClock]> = [
          [a, ra],
          [clockUpdate(pick(k1), a), refMerge(ra, new Map([[pick(k1), at(ra, pick(k1)) + 1]]))],
          [clockUpdate(pick(k2), a), refMerge(ra, new Map([[pick(k2), at(ra, pick(k2)) + 1]]))],
          [clockMerge(a, toClock(sub(rb, ra), !wire)), refMerge(ra, sub(rb, ra))],
          [clockMerge(toClock(sub(rc, ra), wire), a), refMerge(ra, sub(rc, ra))],
        ]
        for (const [x, rx] of variants) for (const [y, ry] of variants) expect(clockCompare(x, y)).toBe(refCompare(rx, ry))
      }),
    )
  })
  it('merge and update', () => {
    fc.assert(
      fc.property(pairArb, fc.array(refArb, { maxLength: 3 }), refId, fc.boolean(), ([ra, rb], rest, id, wire) => {
        const a = toClock(ra, wire)
        const b = toClock(rb, !wire)
        const others = rest.map((r) => toClock(r, wire))
        const merged = clockMerge(a, b, ...others)
        const want = refMerge(ra, rb, ...rest)
        expect([...merged]).toEqual(canonical(want))
        expect(clockCompare(merged, toClock(want, false))).toBe('equal')
        if (at(want, id) === Number.MAX_SAFE_INTEGER) {
          expect(() => clockUpdate(id, a, [b, ...others])).toThrow(RangeError)
          return
        }
        const next = clockUpdate(id, a, [b, ...others])
        want.set(id, at(want, id) + 1)
        expect([...next]).toEqual(canonical(want))
      }),
      { numRuns: 500 },
    )
  })
  it('lookups, size and iteration', () => {
    fc.assert(
      fc.property(refArb, fc.boolean(), refId, (r, wire, probe) => {
        const c = toClock(r, wire)
        const entries = canonical(r)
        expect(c.size).toBe(entries.length)
        expect([...c.entries()]).toEqual(entries)
        expect([...c.keys()]).toEqual(entries.map(([id]) => id))
        for (const id of [probe, ...r.keys()]) {
          expect(c.get(id)).toBe(at(r, id) > 0 ? r.get(id) : undefined)
          expect(c.has(id)).toBe(at(r, id) > 0)
        }
        expect(encodeClock(c)).toEqual(entries.flat())
      }),
    )
  })
  it('clockFrom: last counter wins, zeros are dropped, counters are checked', () => {
    expect([...clockFrom([['b', 1], ['a', 2], ['b', 3], ['c', 0]])]).toEqual([['a', 2], ['b', 3]])
    expect(clockFrom(new Map([['c', 1], ['a', 1]]))).toEqual(clockFrom([['a', 1], ['c', 1]]))
    expect(clockFrom([['a', 0]])).toEqual(clockInit())
    for (const bad of [-1, 1.5, NaN, Infinity, 2 ** 53]) expect(() => clockFrom([['a', bad]])).toThrow(RangeError)
  })
  it('update refuses to advance a counter past the largest safe integer', () => {
    const top = clockFrom([['a', Number.MAX_SAFE_INTEGER]])
    expect(() => clockUpdate('a', top)).toThrow(RangeError)
    expect(clockUpdate('b', top).get('b')).toBe(1)
  })
  it('update inserts a new id in order', () => {
    const c = clockFrom([['b', 1], ['d', 1]])
    for (const id of ['a', 'c', 'e']) expect([...clockUpdate(id, c).keys()]).toEqual([...'bd', id].sort())
    expect(clockUpdate('b', c).get('b')).toBe(2)
    expect([...clockUpdate('x', clockInit())]).toEqual([['x', 1]])
  })
})

describe('Chrono validators', () => {
  it('application validator: allow-list', () => {
    const v = allowAuthors(new Set(['a']))
    expect(v('a', clockInit(), null).ok).toBe(true)
    const no = v('b', clockInit(), null)
    expect(!no.ok && no.reason).toBe('unauthorized')
  })
})
