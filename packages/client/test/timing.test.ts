import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { systemClock } from '@stead/core'
import { DeadlineTimer, SealSchedule } from '../src/space/timing.ts'

beforeEach(() => void vi.useFakeTimers())
afterEach(() => void vi.useRealTimers())

describe('SealSchedule', () => {
  it('seals at the end of the task after a quiet spell, then at most once per interval however often asked', async () => {
    const seals: number[] = []
    const s: SealSchedule = new SealSchedule(10, systemClock, () => {
      seals.push(Date.now())
      s.sealed()
    })
    const t0 = Date.now()
    s.request()
    s.request()
    expect(seals).toEqual([])
    await Promise.resolve()
    expect(seals).toEqual([t0])
    // Asked again at once: waits out the interval since that seal, once.
    s.request()
    s.request()
    await vi.advanceTimersByTimeAsync(9)
    expect(seals).toHaveLength(1)
    await vi.advanceTimersByTimeAsync(1)
    expect(seals).toEqual([t0, t0 + 10])
    // A seal made directly (a full batch) cancels the one waiting and restarts the interval.
    s.request()
    s.sealed()
    await vi.advanceTimersByTimeAsync(20)
    expect(seals).toHaveLength(2)
  })
})

describe('DeadlineTimer', () => {
  it('fires once at the earliest deadline armed last, and not at all once cancelled', async () => {
    let fired = 0
    const t = new DeadlineTimer(systemClock, () => void fired++)
    t.arm(Date.now() + 50)
    t.arm(Date.now() + 20)
    await vi.advanceTimersByTimeAsync(20)
    expect(fired).toBe(1)
    t.arm(Date.now() + 5)
    t.arm(undefined)
    await vi.advanceTimersByTimeAsync(50)
    expect(fired).toBe(1)
  })
})
