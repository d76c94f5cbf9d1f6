import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { sequenceDelta, type IdStep } from '../src/handles/changes.ts'

/** Applies steps to `before`, taking inserted ids from `after`. */
function applySteps(before: readonly string[], after: readonly string[], steps: readonly IdStep[]): string[] {
  const out: string[] = []
  let i = 0
  for (const s of steps) {
    if ('retain' in s) {
      out.push(...before.slice(i, i + s.retain))
      i += s.retain
    } else if ('delete' in s) i += s.delete
    else out.push(...after.slice(s.from, s.to))
  }
  return [...out, ...before.slice(i)]
}

const changes = fc
  .uniqueArray(fc.integer({ min: 0, max: 60 }), { maxLength: 40 })
  .chain((before) =>
    fc.tuple(
      fc.constant(before.map(String)),
      fc.shuffledSubarray([...before.map(String), ...Array.from({ length: 10 }, (_, k) => `new${k}`)]),
    ),
  )

describe('sequenceDelta', () => {
  it('turns any sequence of unique ids into any other', () => {
    fc.assert(
      fc.property(changes, ([before, after]) => {
        const steps = sequenceDelta(before, after)
        expect(applySteps(before, after, steps)).toEqual(after)
        // Steps never follow one of their own kind (they are joined).
        for (let k = 1; k < steps.length; k++) expect(Object.keys(steps[k] as object)).not.toEqual(Object.keys(steps[k - 1] as object))
      }),
      { numRuns: 500 },
    )
  })

  it('keeps what stays in order: an insert or delete anywhere, or one element moved, is one or two steps besides retains', () => {
    const ids = Array.from({ length: 30 }, (_, k) => `e${k}`)
    const edits = (before: string[], after: string[]): IdStep[] => sequenceDelta(before, after).filter((s) => !('retain' in s))
    expect(edits(ids, [...ids.slice(0, 7), 'x', 'y', ...ids.slice(7)])).toEqual([{ from: 7, to: 9 }])
    expect(edits(ids, [...ids.slice(0, 7), ...ids.slice(12)])).toEqual([{ delete: 5 }])
    for (const [from, to] of [[0, 29], [29, 0], [10, 20], [20, 10], [5, 6]] as const) {
      const after = ids.filter((_, k) => k !== from)
      after.splice(to, 0, ids[from] as string)
      const steps = edits(ids, after)
      expect(steps).toHaveLength(2)
      expect(applySteps(ids, after, sequenceDelta(ids, after))).toEqual(after)
    }
  })
})
