import { describe, expect, it } from 'vitest'
import { EnvelopeSteps } from '../src/runtime/envelope-steps.ts'

describe('EnvelopeSteps', () => {
  it('times each envelope from its submit to our block and from our block to its commit, in seconds and rounds', () => {
    let now = 1000
    const proposed: number[] = []
    const ordered: Array<[number, number, boolean]> = []
    const steps = new EnvelopeSteps(() => now, { proposed: (s) => proposed.push(s), ordered: (s, r, safe) => ordered.push([s, r, safe]) })
    steps.submitted('a', true)
    steps.submitted('b', false)
    now += 12
    steps.inOwnBlock(7, ['a', 'x'])
    now += 30
    steps.inOwnBlock(8, ['b'])
    now += 5
    steps.committed(10, ['a', 'b', 'y'])
    expect(proposed).toEqual([0.012, 0.042])
    expect(ordered).toEqual([
      [0.035, 3, true],
      [0.005, 2, false],
    ])
    // Each envelope once: a repeat of the commit times nothing more.
    steps.committed(11, ['a'])
    expect(ordered).toHaveLength(2)
  })

  it('forgets an envelope another relay\'s block ordered first, and the oldest past its bound', () => {
    const proposed: number[] = []
    const steps = new EnvelopeSteps(() => 0, { proposed: (s) => proposed.push(s), ordered: () => undefined })
    steps.submitted('a', false)
    steps.committed(3, ['a'])
    steps.inOwnBlock(4, ['a'])
    expect(proposed).toEqual([])
    for (let i = 0; i < 20_001; i++) steps.submitted(`e${i}`, false)
    steps.inOwnBlock(5, ['e0', 'e20000'])
    expect(proposed).toEqual([0])
  })
})
