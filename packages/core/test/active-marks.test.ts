import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ActiveMarks, later, type Mark, type Shown } from '../src/crdt/active-marks.ts'
import { MAX_MARKS, MAX_MULTI_VALUED_MARKS, canonicalMarkValue, type MarkOp } from '../src/crdt/marks.ts'
import { CollabText } from '../src/crdt/text.ts'

/** Peritext's rule for what the marks of one type covering a character show, as a scan of them all (the reference). */
function scanned(active: ReadonlySet<Mark>): Shown | undefined {
  let latest: Mark | undefined
  for (const m of active) if (!latest || later(m, latest)) latest = m
  if (!latest) return undefined
  if (latest.op[6] === 0) return latest.op[2] === null ? undefined : { value: latest.op[2], key: latest.valueKey }
  const byValue = new Map<string, Mark>()
  for (const m of active) {
    if (m.op[6] === 0) continue
    const w = byValue.get(m.key)
    if (!w || later(m, w)) byValue.set(m.key, m)
  }
  const kept = [...byValue.entries()].filter(([, m]) => m.op[6] === 1).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  if (!kept.length) return undefined
  return { value: kept.map(([, m]) => m.op[2]), key: `[${kept.map(([, m]) => m.valueKey).join(',')}]` }
}

function mark(n: number, stamp: number, author: string, kind: 0 | 1 | 2, value: string | null): Mark {
  const op: MarkOp = ['m', 'comment', value, ['', 0], ['', 1], stamp, kind]
  const valueKey = canonicalMarkValue(value)
  return { tag: `t${n}`, author, op, valueKey, key: kind === 0 ? 'comment' : `comment\u0000${valueKey}` }
}

describe('ActiveMarks', () => {
  it('shows what a scan of every covering mark shows, through any sequence of marks starting and ending', () => {
    const step = fc.record({
      add: fc.boolean(),
      stamp: fc.integer({ min: 1, max: 6 }),
      author: fc.constantFrom('a', 'b'),
      kind: fc.constantFrom<0 | 1 | 2>(0, 1, 1, 2),
      value: fc.constantFrom('x', 'y', 'z', null),
      pick: fc.nat(),
    })
    fc.assert(
      fc.property(fc.array(step, { maxLength: 60 }), (steps) => {
        const heaps = new ActiveMarks()
        const live = new Set<Mark>()
        const all: Mark[] = []
        steps.forEach((s, n) => {
          if (s.add || live.size === 0) {
            // A multi-valued op always names a value; a single-valued one may take the mark off (null).
            const m = mark(n, s.stamp, s.author, s.kind, s.kind === 0 ? s.value : (s.value ?? 'x'))
            all.push(m)
            live.add(m)
            heaps.add(m)
          } else {
            const m = [...live][s.pick % live.size] as Mark
            live.delete(m)
            heaps.delete(m)
          }
          expect(heaps.shown()).toEqual(scanned(live))
        })
      }),
      { numRuns: 500 },
    )
  })
})

describe('the marks a text holds', () => {
  const ctx = (tag: string) => ({ replica: 'a', tag })

  it(`refuses a mark past ${MAX_MULTI_VALUED_MARKS} comments or ${MAX_MARKS} marks (invariant), so no writer makes every replica's spans cost seconds`, () => {
    const t = new CollabText()
    t.apply(t.insertOp(0, 'x'.repeat(100)), ctx('i'))
    for (let i = 0; i < MAX_MULTI_VALUED_MARKS; i++) expect(t.tryApply(t.markOp(i % 50, 100 - (i % 50), 'comment', `c${i}`, { multiple: true }), ctx(`c${i}`))).toEqual({ ok: true })
    expect(t.tryApply(t.markOp(0, 10, 'comment', 'one more', { multiple: true }), ctx('c+'))).toMatchObject({ ok: false, reason: 'invariant' })
    // Single-valued marks still fit, up to the total.
    for (let i = MAX_MULTI_VALUED_MARKS; i < MAX_MARKS; i++) expect(t.tryApply(t.markOp(i % 50, 100 - (i % 50), 'bold', i % 2 === 0), ctx(`b${i}`)).ok).toBe(true)
    expect(t.tryApply(t.markOp(0, 10, 'bold', true), ctx('b+'))).toMatchObject({ ok: false, reason: 'invariant' })
    expect(t.markCounts).toEqual({ all: MAX_MARKS, multiValued: MAX_MULTI_VALUED_MARKS })
    // Nested, they all show: the spans are computed (once here) with every boundary.
    const spans = t.spans()
    expect(spans.length).toBe(99)
    expect((spans[49]?.marks as { comment: unknown[] }).comment).toHaveLength(MAX_MULTI_VALUED_MARKS)
  })
})
