import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { applyValuePatch, arrayPatch, recordPatch, stringPatch } from '../src/crdt/value-patch.ts'
import { SteadError } from '../src/errors.ts'

describe('value patches (stable histories of long objects)', () => {
  it('turn any string, array or record into any other, and hold only what changed between common ends', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), fc.string({ unit: 'grapheme' }), (a, b) => {
        const p = stringPatch(a, b)
        expect(applyValuePatch(a, p)).toBe(b)
        expect((p[3] as string).length).toBeLessThanOrEqual(b.length)
      }),
    )
    fc.assert(
      fc.property(fc.array(fc.nat(9)), fc.array(fc.nat(9)), (a, b) => {
        expect(applyValuePatch(a, arrayPatch(a, b, (x, y) => x === y))).toEqual(b)
      }),
    )
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.nat(3)), fc.dictionary(fc.string(), fc.nat(3)), (a, b) => {
        const sorted = (r: Record<string, number>): Array<[string, number]> => Object.entries(r).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0))
        const got = applyValuePatch(Object.fromEntries(sorted(a)), recordPatch(a, b, (x, y) => x === y)) as Record<string, number>
        // Fields in name order, as a map's value keeps them (JavaScript lists integer-like names first in both).
        expect(Object.entries(got)).toEqual(Object.entries(Object.fromEntries(sorted(b))))
      }),
    )
    expect(stringPatch('Hello world', 'Hello, world')).toEqual(['s', 5, 0, ','])
    expect(arrayPatch([1, 2, 3, 4], [1, 4], (x, y) => x === y)).toEqual(['a', 1, 2, []])
  })

  it('refuses a patch that does not fit its value with a typed error', () => {
    expect(() => applyValuePatch('abc', ['s', 2, 5, 'x'])).toThrow(SteadError)
    expect(() => applyValuePatch('abc', ['a', 0, 0, []])).toThrow(SteadError)
    expect(() => applyValuePatch([1], ['o', [], []])).toThrow(SteadError)
  })
})
