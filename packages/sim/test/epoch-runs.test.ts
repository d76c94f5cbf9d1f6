import { describe, expect, it } from 'vitest'
import { runEpochSeed } from '../src/index.ts'

/**
 * Seeded runs of committee changes (`npm run sim:epochs` runs many). In CI:
 * seeds 2 and 4 (growth to 7 and a shrink with a relay cut off; two
 * replacements and a rotation with relays crashed at the boundary), and the
 * seeds that found bugs: 11 (a client's safe update committed just before
 * the boundary waited for ever for acknowledgements), 35 (the relay left
 * out stopped at once with the certificate while a peer missed its vote
 * and another was down: the others never moved on), 36 (a relay still in
 * the old epoch was marked faulty for good by a client that moved on).
 */
describe('seeded committee changes', () => {
  it.each([
    [2, ['grow', 'shrink (r5 cut off)', 'grow']],
    [4, ['replace (r3 crashed at the boundary)', 'replace', 'rotate (r5 crashed at the boundary)']],
    [11, ['rotate (r2 cut off)', 'move (r3 lies)', 'replace (r2 cut off)']],
    [35, ['replace (r1 crashed at the boundary)', 'move (r1 lies)', 'replace']],
    [36, ['grow (r3 crashed at the boundary)', 'shrink (r2 crashed at the boundary)', 'replace (r6 cut off)']],
  ])('seed %i: three changes with faults; the client follows, nothing lost, one state', async (seed, changes) => {
    const r = await runEpochSeed(seed)
    expect(r.changes).toEqual(changes)
    expect(r.epoch).toBe(3)
    expect(r.acknowledged).toBeGreaterThan(6)
  }, 120_000)
})
