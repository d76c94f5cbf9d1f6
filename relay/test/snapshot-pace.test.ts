import { describe, expect, it } from 'vitest'
import { SnapshotPace } from '../src/runtime/snapshot-pace.ts'

describe('SnapshotPace', () => {
  it('is due after so many batches, once the batches since weigh as much as the last snapshot, or a while after it', () => {
    const pace = new SnapshotPace({ everyBatches: 10, minReplayBytes: 100, intervalMs: 60_000, now: 0 })
    pace.took(9, 50)
    expect(pace.due(1000)).toBe(false)
    pace.took(1, 0)
    expect(pace.due(1000)).toBe(true)
    pace.taken(1000, 500)
    // Now the replay bound is the last snapshot's size, 500 bytes.
    pace.took(2, 499)
    expect(pace.due(2000)).toBe(false)
    pace.took(1, 1)
    expect(pace.due(2000)).toBe(true)
    pace.taken(2000, 50)
    pace.took(1, 99)
    expect(pace.due(2000 + 59_999)).toBe(false)
    expect(pace.due(2000 + 60_000)).toBe(true)
  })
})
