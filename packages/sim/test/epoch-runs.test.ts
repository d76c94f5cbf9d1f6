import { describe, expect, it } from 'vitest'
import { runEpochSeed } from '../src/index.ts'

/**
 * Seeded runs of committee changes (`npm run sim:epochs` runs many). Two
 * seeds in CI, whose draws cover a growth to 7 and a shrink back to 4 with a
 * relay cut off (seed 2) and two replacements and a rotation with relays
 * crashed at the boundary (seed 4).
 */
describe('seeded committee changes', () => {
  it.each([
    [2, ['grow', 'shrink (r5 cut off)', 'grow']],
    [4, ['replace (r3 crashed at the boundary)', 'replace', 'rotate (r5 crashed at the boundary)']],
  ])('seed %i: three changes with faults; the client follows, nothing lost, one state', async (seed, changes) => {
    const r = await runEpochSeed(seed)
    expect(r.changes).toEqual(changes)
    expect(r.epoch).toBe(3)
    expect(r.acknowledged).toBeGreaterThan(6)
  }, 120_000)
})
