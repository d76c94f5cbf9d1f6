import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { chooseModes, prefersState, SpaceSaving, type ObjectTraffic } from '../src/hot-objects.ts'
import { rng } from '../bench/rng.ts'

type Stream = ReadonlyArray<readonly [key: string, weight: number]>

/** A key of an alphabet of `n`, skewed towards the low ones (u³ piles the mass near 0), so some keys are heavy and many are light. */
const skewedKey = (n: number): fc.Arbitrary<string> => fc.integer({ min: 0, max: 9_999 }).map((u) => `k${Math.floor(n * (u / 10_000) ** 3)}`)

/** Streams over a small alphabet (few keys, often fewer than the counters) or a large one (evictions all the time), unit or random weights. */
const streams: fc.Arbitrary<Stream> = fc.oneof(
  fc.array(fc.tuple(skewedKey(6), fc.constant(1)), { maxLength: 300 }),
  fc.array(fc.tuple(skewedKey(6), fc.integer({ min: 1, max: 9 })), { maxLength: 300 }),
  fc.array(fc.tuple(skewedKey(300), fc.constant(1)), { maxLength: 300 }),
  fc.array(fc.tuple(skewedKey(300), fc.integer({ min: 1, max: 9 })), { maxLength: 300 }),
)
const capacities = fc.integer({ min: 1, max: 24 })

function run(capacity: number, stream: Stream): { ss: SpaceSaving; exact: Map<string, number> } {
  const ss = new SpaceSaving(capacity)
  const exact = new Map<string, number>()
  for (const [k, w] of stream) {
    ss.offer(k, w)
    exact.set(k, (exact.get(k) ?? 0) + w)
  }
  return { ss, exact }
}

const byKey = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)

describe('SpaceSaving', () => {
  it('keeps the standard guarantees against an exact count', () => {
    fc.assert(
      fc.property(capacities, streams, (capacity, stream) => {
        const { ss, exact } = run(capacity, stream)
        const total = stream.reduce((s, [, w]) => s + w, 0)
        expect(ss.total).toBe(total)
        expect(ss.size).toBeLessThanOrEqual(capacity)
        expect(ss.size).toBe(Math.min(capacity, exact.size))
        const top = ss.top()
        expect(top.length).toBe(ss.size)
        expect(top.reduce((s, e) => s + e.count, 0)).toBe(total)
        const least = top.length > 0 ? Math.min(...top.map((e) => e.count)) : 0
        for (const [key, trueCount] of exact) {
          const est = ss.estimate(key)
          // More than total/capacity occurrences: necessarily monitored.
          if (trueCount * capacity > total) expect(est).toBeDefined()
          if (est === undefined) {
            expect(trueCount).toBeLessThanOrEqual(least)
          } else {
            expect(est.count - est.error).toBeLessThanOrEqual(trueCount)
            expect(trueCount).toBeLessThanOrEqual(est.count)
            expect(est.error).toBeGreaterThanOrEqual(0)
          }
        }
        for (const e of top) {
          expect(exact.has(e.key)).toBe(true)
          expect(ss.estimate(e.key)).toEqual({ count: e.count, error: e.error })
        }
      }),
      { numRuns: 300 },
    )
  })

  it('lists top() by count descending, equal counts by key ascending, and top(k) is its prefix', () => {
    fc.assert(
      fc.property(capacities, streams, fc.integer({ min: 0, max: 30 }), (capacity, stream, k) => {
        const { ss } = run(capacity, stream)
        const top = ss.top()
        for (let i = 1; i < top.length; i++) {
          const a = top[i - 1]!
          const b = top[i]!
          expect(a.count > b.count || (a.count === b.count && a.key < b.key)).toBe(true)
        }
        expect(ss.top(k)).toEqual(top.slice(0, k))
      }),
      { numRuns: 200 },
    )
  })

  it('counts exactly, with no error, when the counters hold every distinct key', () => {
    fc.assert(
      fc.property(streams, fc.integer({ min: 0, max: 5 }), (stream, spare) => {
        const distinct = new Set(stream.map(([k]) => k)).size
        const { ss, exact } = run(Math.max(1, distinct + spare), stream)
        expect(ss.size).toBe(exact.size)
        for (const [key, c] of exact) expect(ss.estimate(key)).toEqual({ count: c, error: 0 })
      }),
      { numRuns: 200 },
    )
  })

  it('is deterministic: the same stream gives the same top(), also after clear()', () => {
    fc.assert(
      fc.property(capacities, streams, (capacity, stream) => {
        const a = run(capacity, stream).ss
        const b = run(capacity, stream).ss
        expect(b.top()).toEqual(a.top())
        const first = a.top()
        a.clear()
        expect(a.size).toBe(0)
        expect(a.total).toBe(0)
        expect(a.top()).toEqual([])
        for (const [k, w] of stream) a.offer(k, w)
        expect(a.top()).toEqual(first)
      }),
      { numRuns: 150 },
    )
  })

  it('finds the true top 10 of a Zipf stream over 10,000 keys with 100 counters', () => {
    const keys = 10_000
    const cdf: number[] = []
    let mass = 0
    for (let i = 1; i <= keys; i++) cdf.push((mass += 1 / i))
    for (const seed of [1, 2, 3]) {
      const rnd = rng(seed)
      const ss = new SpaceSaving(100)
      const exact = new Map<string, number>()
      for (let n = 0; n < 50_000; n++) {
        const u = rnd() * mass
        let lo = 0
        let hi = keys - 1
        while (lo < hi) {
          const mid = (lo + hi) >> 1
          if (cdf[mid]! < u) lo = mid + 1
          else hi = mid
        }
        const key = `obj${lo}`
        ss.offer(key)
        exact.set(key, (exact.get(key) ?? 0) + 1)
      }
      const ranked = [...exact].sort((a, b) => b[1] - a[1] || byKey(a[0], b[0]))
      // The true top 10 is unambiguous: no tie across the boundary.
      expect(ranked[9]![1]).toBeGreaterThan(ranked[10]![1])
      const truth = ranked.slice(0, 10).map(([k]) => k).sort(byKey)
      expect(ss.top(10).map((e) => e.key).sort(byKey)).toEqual(truth)
    }
  })

  it('replaces a least-counted key, inheriting its count as the error', () => {
    const ss = new SpaceSaving(2)
    for (const k of ['a', 'a', 'b', 'c']) ss.offer(k)
    expect(ss.estimate('b')).toBeUndefined()
    expect(ss.estimate('c')).toEqual({ count: 2, error: 1 })
    expect(ss.top()).toEqual([
      { key: 'a', count: 2, error: 0 },
      { key: 'c', count: 2, error: 1 },
    ])
    expect(ss.total).toBe(4)
    // a and c tie at 2: c, listed last, goes.
    ss.offer('d', 5)
    expect(ss.top()).toEqual([
      { key: 'd', count: 7, error: 2 },
      { key: 'a', count: 2, error: 0 },
    ])
  })

  it('among equal least counts, evicts the key top() lists last', () => {
    const ss = new SpaceSaving(2)
    for (const k of ['a', 'b', 'c']) ss.offer(k)
    expect(ss.top()).toEqual([
      { key: 'c', count: 2, error: 1 },
      { key: 'a', count: 1, error: 0 },
    ])
    ss.offer('d')
    expect(ss.top()).toEqual([
      { key: 'c', count: 2, error: 1 },
      { key: 'd', count: 2, error: 1 },
    ])
  })

  it('rejects bad capacities, weights and k', () => {
    for (const c of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) expect(() => new SpaceSaving(c)).toThrow(RangeError)
    const ss = new SpaceSaving(4)
    for (const w of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) expect(() => ss.offer('a', w)).toThrow(RangeError)
    expect(ss.total).toBe(0)
    expect(ss.size).toBe(0)
    for (const k of [-1, 0.5, Number.NaN]) expect(() => ss.top(k)).toThrow(RangeError)
    ss.offer('a', Number.MAX_SAFE_INTEGER - 1)
    ss.offer('b')
    expect(() => ss.offer('c')).toThrow(RangeError)
    expect(ss.total).toBe(Number.MAX_SAFE_INTEGER)
  })
})

const sizes = fc.integer({ min: 0, max: 1_000_000 })
const counts = fc.integer({ min: 0, max: 10_000 })
const traffics: fc.Arbitrary<ObjectTraffic> = fc.record({ updates: counts, updateBytes: sizes, stateBytes: sizes })

describe('prefersState', () => {
  it('never flips state to ops for more or bigger updates, nor ops to state for a bigger state', () => {
    fc.assert(
      fc.property(counts, fc.integer({ min: 0, max: 500 }), sizes, counts, fc.integer({ min: 0, max: 500 }), sizes, (u, mean, state, du, dmean, dstate) => {
        const base = prefersState({ updates: u, updateBytes: u * mean, stateBytes: state })
        const busier = prefersState({ updates: u + du, updateBytes: (u + du) * (mean + dmean), stateBytes: state })
        const heavier = prefersState({ updates: u, updateBytes: u * mean, stateBytes: state + dstate })
        if (base) expect(busier).toBe(true)
        if (!base) expect(heavier).toBe(false)
        // The rule itself: U_x * mean update size against the state's size.
        expect(base).toBe(u > 0 && u * mean > state)
      }),
      { numRuns: 500 },
    )
  })

  it('is ops at equal bytes and state one byte past them', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 10_000 }), sizes, (updates, state) => {
        expect(prefersState({ updates, updateBytes: state, stateBytes: state })).toBe(false)
        expect(prefersState({ updates, updateBytes: state + 1, stateBytes: state })).toBe(true)
      }),
    )
  })

  it('is ops for an object with no updates', () => {
    fc.assert(
      fc.property(sizes, sizes, (updateBytes, stateBytes) => {
        expect(prefersState({ updates: 0, updateBytes, stateBytes })).toBe(false)
      }),
    )
  })

  it('follows the paper: 10 updates of 20 bytes outweigh a 150-byte state, 5 do not', () => {
    expect(prefersState({ updates: 10, updateBytes: 200, stateBytes: 150 })).toBe(true)
    expect(prefersState({ updates: 5, updateBytes: 100, stateBytes: 150 })).toBe(false)
  })

  it('throws RangeError for a negative, infinite or non-numeric count or size', () => {
    const bad = fc.constantFrom<unknown>(-1, -0.5, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, '3', undefined)
    fc.assert(
      fc.property(traffics, fc.constantFrom('updates', 'updateBytes', 'stateBytes'), bad, (t, field, v) => {
        expect(() => prefersState({ ...t, [field]: v } as unknown as ObjectTraffic)).toThrow(RangeError)
      }),
      { numRuns: 100 },
    )
  })
})

describe('chooseModes', () => {
  const entries = fc.uniqueArray(fc.tuple(fc.string({ maxLength: 4 }), traffics), { selector: ([k]) => k, maxLength: 30 })

  it('gives every object a mode, state only for hot objects that prefer it', () => {
    fc.assert(
      fc.property(entries, fc.array(fc.boolean(), { maxLength: 30 }), fc.array(fc.string({ maxLength: 4 }), { maxLength: 5 }), (list, picks, strangers) => {
        const traffic = new Map(list)
        const hot = new Set([...list.filter((_, i) => picks[i] === true).map(([k]) => k), ...strangers])
        const modes = chooseModes(traffic, hot)
        expect([...modes.keys()]).toEqual([...traffic.keys()])
        for (const [key, t] of traffic) {
          if (!hot.has(key)) expect(modes.get(key)).toBe('ops')
          else expect(modes.get(key)).toBe(prefersState(t) ? 'state' : 'ops')
        }
      }),
      { numRuns: 300 },
    )
  })

  it('keeps a cold object on ops however much its traffic favours state, and validates it too', () => {
    const traffic = new Map<string, ObjectTraffic>([
      ['hot', { updates: 40, updateBytes: 4_000, stateBytes: 100 }],
      ['cold', { updates: 40, updateBytes: 4_000, stateBytes: 100 }],
      ['small', { updates: 1, updateBytes: 10, stateBytes: 100 }],
    ])
    expect(chooseModes(traffic, new Set(['hot', 'small', 'gone']))).toEqual(
      new Map([
        ['hot', 'state'],
        ['cold', 'ops'],
        ['small', 'ops'],
      ]),
    )
    traffic.set('broken', { updates: -1, updateBytes: 0, stateBytes: 0 })
    expect(() => chooseModes(traffic, new Set(['hot']))).toThrow(RangeError)
  })
})
