/**
 * The pure parts of the binding: UTF-16 <-> code point positions of a
 * CodeMirror document, cutting long inserts, text deltas as CodeMirror
 * changes, and the one-replacement difference a resync dispatches. Checked
 * against the string iterator (how TextHandle counts) on random texts with
 * emoji, lone surrogate halves and line breaks.
 */
import { ChangeSet, EditorState, type Text } from '@codemirror/state'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { Positions, codePoints, pieces } from '../src/positions.ts'
import { difference, toChangeSpecs } from '../src/sync.ts'

/** Characters that exercise every case: ASCII, BMP, astral (two units), lone halves, a line break. */
const char = fc.constantFrom('a', 'é', '中', '😀', '𝄞', '\uD83D', '\uDE00', '\n', '\r')
const text = fc.array(char, { maxLength: 40 }).map((cs) => cs.join(''))

/** A CodeMirror document holding exactly `s` (lines split at "\n" only, as the binding configures it). */
function docOf(s: string): Text {
  return EditorState.create({ doc: s, extensions: EditorState.lineSeparator.of('\n') }).doc
}

describe('Positions', () => {
  it('converts both ways as the string iterator counts, for every position that does not split a pair', () => {
    fc.assert(
      fc.property(text, (s) => {
        const doc = docOf(s)
        expect(doc.toString()).toBe(s)
        const pos = Positions.of(doc)
        const points = [...s]
        expect(pos.points).toBe(points.length)
        expect(codePoints(s)).toBe(points.length)
        let unit = 0
        for (let point = 0; point <= points.length; point++) {
          expect(pos.toUnits(point)).toBe(unit)
          expect(pos.toPoints(unit)).toBe(point)
          expect(pos.toPoints(unit, 'up')).toBe(point)
          expect(pos.splitsPair(unit)).toBe(false)
          unit += points[point]?.length ?? 0
        }
      }),
    )
  })

  it('takes a position inside a surrogate pair as the start of its character, or the end with round up', () => {
    const pos = Positions.of(docOf('a😀b😀'))
    expect([pos.splitsPair(2), pos.toPoints(2), pos.toPoints(2, 'up')]).toEqual([true, 1, 2])
    expect([pos.splitsPair(5), pos.toPoints(5), pos.toPoints(5, 'up')]).toEqual([true, 3, 4])
    expect(pos.toUnits(4)).toBe(6)
  })

  it('is found once per document', () => {
    const doc = docOf('x😀')
    expect(Positions.of(doc)).toBe(Positions.of(doc))
  })
})

describe('pieces', () => {
  it('cuts a string into pieces of at most max code points, never inside a pair, losing nothing', () => {
    fc.assert(
      fc.property(text, fc.integer({ min: 1, max: 7 }), (s, max) => {
        const out = pieces(s, max)
        expect(out.join('')).toBe(s)
        for (const p of out) expect(codePoints(p)).toBeLessThanOrEqual(max)
        for (const p of out.slice(0, -1)) expect(codePoints(p)).toBe(max)
        for (const p of out) expect(codePoints(p)).toBe([...p].length)
      }),
    )
  })
})

describe('toChangeSpecs', () => {
  it('turns a code point delta of the text into changes of the document that give the same text', () => {
    fc.assert(
      fc.property(text, fc.array(fc.tuple(fc.nat(), fc.nat(3), text), { maxLength: 4 }), (s, edits) => {
        // A random delta: per edit, keep some code points, delete some, insert something.
        let rest = [...s]
        const delta: Array<{ retain: number } | { delete: number } | { insert: string; author: string }> = []
        let out = ''
        for (const [keep, del, ins] of edits) {
          const k = Math.min(keep % 5, rest.length)
          if (k) delta.push({ retain: k })
          out += rest.slice(0, k).join('')
          rest = rest.slice(k)
          const d = Math.min(del, rest.length)
          if (d) delta.push({ delete: d })
          rest = rest.slice(d)
          if (ins) delta.push({ insert: ins, author: 'x' })
          out += ins
        }
        out += rest.join('')
        const doc = docOf(s)
        const changes = toChangeSpecs(doc, delta)
        expect(changes).toBeDefined()
        // Split as the bound editor splits (the lineSeparator the binding sets).
        expect(ChangeSet.of(changes ?? [], doc.length, '\n').apply(doc).toString()).toBe(out)
      }),
    )
  })

  it('refuses a delta that does not fit the document', () => {
    const doc = docOf('a😀')
    expect(toChangeSpecs(doc, [{ retain: 3 }])).toBeUndefined()
    expect(toChangeSpecs(doc, [{ retain: 1 }, { delete: 2 }])).toBeUndefined()
    expect(toChangeSpecs(doc, [{ retain: 3 }, { insert: 'x', author: 'a' }])).toBeUndefined()
    expect(toChangeSpecs(doc, [{ retain: 2 }, { insert: 'x', author: 'a' }])).toEqual([{ from: 3, insert: 'x' }])
  })
})

describe('difference', () => {
  it('is one replacement that turns a into b, keeping their common ends, never cutting a pair', () => {
    fc.assert(
      fc.property(text, text, (a, b) => {
        const { from, to, insert } = difference(a, b)
        expect(a.slice(0, from) + insert + a.slice(to)).toBe(b)
        for (const cut of [from, to]) expect(/[\uD800-\uDBFF]/.test(a[cut - 1] ?? '') && /[\uDC00-\uDFFF]/.test(a[cut] ?? '')).toBe(false)
        if (a === b) expect(to - from + insert.length).toBe(0)
      }),
    )
    expect(difference('a😀c', 'a😁c')).toEqual({ from: 1, to: 3, insert: '😁' })
  })
})
