import type { RelayMessage } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { PACED_HEARTBEAT_MS, PacedStream, type PacedHost } from '../src/api/paced-stream.ts'
import type { CertifiedDelta } from '../src/runtime/client-reads.ts'
import { HandClock } from './helpers/hand-clock.ts'

/** A space whose commits the test makes: each changes the keys given, at the clock's time. */
function space(clock: HandClock) {
  const commits: string[][] = []
  const sent: Array<{ at: number; m: RelayMessage }> = []
  let unavailable = false
  const host: PacedHost = {
    clock,
    stableIndex: () => commits.length,
    changedSince: (after) => [...new Set(commits.slice(after).flat())],
    certifiedDelta: async (from): Promise<CertifiedDelta | 'unavailable'> => (unavailable ? 'unavailable' : { toIndex: commits.length, delta: new Uint8Array([from]), attestation: new Uint8Array(), sigs: [] }),
    send: (m) => sent.push({ at: clock.now(), m }),
    backedUp: () => false,
    hold: (bytes) => {
      if (bytes > 0 && budget.held + bytes > budget.max) return false
      budget.held += bytes
      return true
    },
  }
  const budget = { held: 0, max: Number.POSITIVE_INFINITY }
  return { commits, sent, host, budget, refuse: () => void (unavailable = true) }
}

describe('a paced stream (BENDY on the live stream)', () => {
  it('sends a changed object by its first change + δ − μ, and learns μ per object from the client’s acknowledgements', async () => {
    const clock = new HandClock()
    const s = space(clock)
    s.commits.push(['a'])
    const stream = new PacedStream('bank', 0, 1000, 'adaptive', s.host)
    // First change at 0, no μ yet: sent at δ.
    await clock.advance(999)
    expect(s.sent).toHaveLength(0)
    await clock.advance(1000)
    expect(s.sent.map((x) => [x.at, x.m.type])).toEqual([[1000, 'delta']])
    // The client took 200 ms to apply it: μ_a = 200 and its deviation 100 (half the first sample), so the
    // next change of `a` leaves δ − (200 + 2 × 100) = 600 ms after it.
    await clock.advance(1200)
    stream.applied(1)
    expect(stream.muOf('a')).toBe(400)
    s.commits.push(['a'])
    stream.committed()
    await clock.advance(1200 + 599)
    expect(s.sent).toHaveLength(1)
    await clock.advance(1200 + 600)
    expect(s.sent.map((x) => x.at)).toEqual([1000, 1800])
    // Another object has no estimate of its own: the stream's.
    expect(stream.muOf('b')).toBe(400)
    // 300 ms this time: the mean moves a quarter of the way (225), the deviation to 100 × 0.75 + 100 × 0.25.
    await clock.advance(2100)
    stream.applied(2)
    expect(stream.muOf('a')).toBe(225 + 2 * 100)
    // An acknowledgement of something not in flight teaches nothing.
    stream.applied(2)
    expect(stream.muOf('a')).toBe(425)
    stream.close()
  })

  it('one delta at a time: the next waits for the acknowledgement, or δ, and covers everything since', async () => {
    const clock = new HandClock()
    const s = space(clock)
    s.commits.push(['a'])
    const stream = new PacedStream('bank', 0, 500, 'adaptive', s.host)
    await clock.advance(500)
    for (let i = 0; i < 5; i++) {
      s.commits.push(['b'])
      stream.committed()
      await clock.advance(clock.now() + 50)
    }
    // Unacknowledged: nothing more until δ after the first one left.
    expect(s.sent).toHaveLength(1)
    await clock.advance(1000)
    const deltas = s.sent.map((x) => x.m).filter((m) => m.type === 'delta')
    expect(deltas).toHaveLength(2)
    // The second starts where the first ended and covers the five commits.
    expect(deltas[1]?.type === 'delta' && deltas[1].delta[0]).toBe(1)
    stream.close()
  })

  it('a quiet space gets a heartbeat; a relay without the change log says unpaced and stops', async () => {
    const clock = new HandClock()
    const s = space(clock)
    s.commits.push(['a'])
    const stream = new PacedStream('bank', 1, 200, 'adaptive', s.host)
    await clock.advance(PACED_HEARTBEAT_MS)
    expect(s.sent.map((x) => x.m.type)).toEqual(['delta'])
    stream.applied(1)
    s.refuse()
    await clock.advance(2 * PACED_HEARTBEAT_MS)
    expect(s.sent.map((x) => x.m.type)).toEqual(['delta', 'unpaced'])
    await clock.advance(10 * PACED_HEARTBEAT_MS)
    expect(s.sent).toHaveLength(2)
  })

  it('a space still at stable index 0 (commits that only parked envelopes) has nothing to certify: the stream waits, it does not spin', async () => {
    const clock = new HandClock()
    const s = space(clock)
    const stream = new PacedStream('bank', 0, 100, 'adaptive', s.host)
    for (let i = 0; i < 5; i++) {
      stream.committed()
      await clock.advance(clock.now() + 50)
    }
    await clock.advance(60_000)
    expect(s.sent).toHaveLength(0)
    // One timer per commit and one per heartbeat period, not one per turn of a loop.
    expect(clock.fired).toBeLessThan(30)
    stream.close()
  })

  it('backs off while it cannot certify (fewer than f+1 relays answer): twice as long each time, up to a heartbeat', async () => {
    const clock = new HandClock()
    const s = space(clock)
    let asked = 0
    s.host.certifiedDelta = async () => {
      asked++
      return undefined
    }
    s.commits.push(['a'])
    const stream = new PacedStream('bank', 0, 200, 'adaptive', s.host)
    await clock.advance(60_000)
    // 100 ms, 200, 400, ... 5 s, then every 5 s: about 20 tries in a minute, not 600.
    expect(asked).toBeGreaterThan(10)
    expect(asked).toBeLessThan(30)
    stream.close()
  })

  it('learns from an acknowledgement that comes after the next delta left', async () => {
    const clock = new HandClock()
    const s = space(clock)
    s.commits.push(['a'])
    const stream = new PacedStream('bank', 0, 300, 'adaptive', s.host)
    await clock.advance(300)
    s.commits.push(['a'])
    stream.committed()
    // Unacknowledged for δ: the next one leaves, then the first one's acknowledgement arrives.
    await clock.advance(1000)
    expect(s.sent).toHaveLength(2)
    stream.applied(1)
    expect(stream.muOf('a')).toBe(700 + 2 * 350)
    stream.close()
  })

  it('more changed objects than it tracks: sends by the earliest change with the largest μ, never later', async () => {
    const clock = new HandClock()
    const s = space(clock)
    s.commits.push(Array.from({ length: 2000 }, (_, i) => `k${i}`))
    const stream = new PacedStream('bank', 0, 300, 'adaptive', s.host)
    await clock.advance(300)
    expect(s.sent.map((x) => x.at)).toEqual([300])
    stream.close()
  })

  it('holds what it tracks against the relay budget: past it, tracks less and sends no later; gives everything back when closed', async () => {
    const clock = new HandClock()
    const s = space(clock)
    s.budget.max = 1000
    s.commits.push(Array.from({ length: 50 }, (_, i) => `key-${i}`))
    const stream = new PacedStream('bank', 0, 400, 'adaptive', s.host)
    expect(s.budget.held).toBeGreaterThan(0)
    expect(s.budget.held).toBeLessThanOrEqual(1000)
    await clock.advance(400)
    expect(s.sent.map((x) => x.at)).toEqual([400])
    // Acknowledged: what the delta carried is let go, and μ kept only for what the budget admits.
    stream.applied(1)
    expect(s.budget.held).toBeLessThanOrEqual(1000)
    stream.close()
    expect(s.budget.held).toBe(0)
  })
})
