import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { Shares } from '../src/api/shares.ts'

describe('Shares', () => {
  it('knows who holds the most after any sequence of adds and deletes', () => {
    const step = fc.record({ add: fc.boolean(), who: fc.constantFrom('a', 'b', 'c', 'd'), item: fc.integer({ min: 0, max: 6 }) })
    fc.assert(
      fc.property(fc.array(step, { maxLength: 200 }), (steps) => {
        const shares = new Shares<number>()
        const model = new Map<string, Set<number>>()
        for (const s of steps) {
          const set = model.get(s.who) ?? new Set<number>()
          model.set(s.who, set)
          if (s.add) {
            shares.add(s.who, s.item)
            set.add(s.item)
          } else {
            shares.delete(s.who, s.item)
            set.delete(s.item)
          }
          const counts = [...model.values()].map((x) => x.size)
          const max = Math.max(0, ...counts)
          const top = shares.heaviest()
          expect(top?.count ?? 0).toBe(max)
          if (top) expect(model.get(top.who)?.size).toBe(max)
          expect(shares.holders).toBe(counts.filter((n) => n > 0).length)
          expect(shares.count(s.who)).toBe(set.size)
        }
      }),
    )
  })

  it('lists what a holder holds oldest first', () => {
    const shares = new Shares<string>()
    for (const item of ['x', 'y', 'z']) shares.add('a', item)
    shares.delete('a', 'y')
    expect([...shares.itemsOf('a')]).toEqual(['x', 'z'])
    expect([...shares.itemsOf('nobody')]).toEqual([])
  })
})
