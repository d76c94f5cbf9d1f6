import { decodePresence, decodeRelayMessage, encodePresence, type RegisterValue } from '@stead/core'
import { publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { PresenceRoom, type PresenceLimits } from '../src/api/presence.ts'

class Watcher {
  readonly got: Array<{ author: number; state: RegisterValue | null }> = []
  deliverPresence(frame: Uint8Array): boolean {
    const m = decodeRelayMessage(frame)
    if (m.type !== 'presence') throw new Error('not presence')
    this.got.push({ author: m.author[0] as number, state: decodePresence(m.signed.bytes).state })
    return true
  }
}

const keys = Array.from({ length: 8 }, (_, i) => new Uint8Array(32).fill(i + 1))
const pub = keys.map((k) => publicKeyOfSync(k))

function world(limits: Partial<PresenceLimits> = {}, admits = () => true) {
  let now = 1_000_000
  const room = new PresenceRoom<Watcher>(limits, { now: () => now, verify: verifySync, admits })
  const sign = (who: number, seq: number, state: RegisterValue | null, ttlMs = 10_000, space = 's', ahead = false) => {
    const bytes = encodePresence({ space, seq, ttlMs, state, ...(ahead ? { ahead: true as const } : {}) })
    return { bytes, sig: signSync(keys[who] as Uint8Array, bytes) }
  }
  const seqs = new Map<number, number>()
  /** Publishes `who`'s next state (seq + 2 each time: the leave signed ahead takes seq + 1). */
  const publish = (w: Watcher, who: number, state: RegisterValue | null, leave = true, ttlMs = 10_000, seq = (seqs.get(who) ?? 0) + 2) => {
    seqs.set(who, seq)
    room.publish('s', w, pub[who] as Uint8Array, sign(who, seq, state, ttlMs), leave && state !== null ? sign(who, seq + 1, null, ttlMs, 's', true) : undefined)
  }
  return { room, sign, publish, tick: (ms: number) => void (now += ms) }
}

describe('PresenceRoom', () => {
  it('passes a state to the space’s other watchers at once, shows newcomers who is there, and sends the leave signed ahead when a session goes', () => {
    const { room, publish } = world()
    const [a, b, c] = [new Watcher(), new Watcher(), new Watcher()]
    room.watch('s', b)
    publish(a, 0, { name: 'a' })
    expect(b.got).toHaveLength(1)
    expect(a.got).toHaveLength(0)
    room.watch('s', c)
    expect(c.got).toHaveLength(1)
    expect(room.size('s')).toBe(1)
    room.closed(a)
    expect(room.size('s')).toBe(0)
    // b and c hear a's leave.
    expect(b.got).toHaveLength(2)
    expect(c.got).toHaveLength(2)
    expect(room.held).toBe(0)
  })

  it('keeps a state until its ttl, and an older seq from the same session changes nothing', () => {
    const { room, publish, tick } = world()
    const [a, b] = [new Watcher(), new Watcher()]
    room.watch('s', b)
    publish(a, 0, { v: 2 }, true, 5000, 10)
    publish(a, 0, { v: 1 }, true, 5000, 8)
    expect(b.got).toHaveLength(1)
    tick(4999)
    expect(room.size('s')).toBe(1)
    tick(1)
    expect(room.size('s')).toBe(0)
  })

  it('refuses what is not the session key’s, another space’s, too large, or a leave that is none', () => {
    const { room, sign } = world()
    const a = new Watcher()
    expect(() => room.publish('s', a, pub[0] as Uint8Array, sign(1, 1, { x: 1 }), undefined)).toThrow(expect.objectContaining({ reason: 'bad-signature' }))
    expect(() => room.publish('s', a, pub[0] as Uint8Array, sign(0, 1, { x: 1 }, 10_000, 't'), undefined)).toThrow(expect.objectContaining({ reason: 'malformed' }))
    expect(() => room.publish('s', a, pub[0] as Uint8Array, sign(0, 1, { x: 'y'.repeat(5000) }), undefined)).toThrow(expect.objectContaining({ reason: 'too-large' }))
    expect(() => room.publish('s', a, pub[0] as Uint8Array, sign(0, 1, { x: 1 }), sign(0, 3, null, 10_000, 's', true))).toThrow(/seq 2/)
    expect(() => room.publish('s', a, pub[0] as Uint8Array, sign(0, 1, { x: 1 }), sign(0, 2, null))).toThrow(/marked so/)
    expect(() => room.publish('s', a, pub[0] as Uint8Array, sign(0, 2, null, 10_000, 's', true), undefined)).toThrow(/goes with a state/)
    expect(() => room.publish('s', a, pub[0] as Uint8Array, sign(0, 1, { x: 1 }), sign(0, 2, { x: 2 }))).toThrow(/no state/)
    expect(room.size('s')).toBe(0)
  })

  it('holds each session to its publish rate, each space to its count of authors, and the room to the relay’s memory', () => {
    const { room, publish, tick } = world({ perSpace: 3, publish: { perSecond: 10, burst: 5, bytesPerSecond: 1e9, burstBytes: 1e9 } })
    const a = new Watcher()
    for (let i = 0; i < 5; i++) publish(a, 0, { i }, true)
    expect(() => publish(a, 0, { i: 5 })).toThrow(expect.objectContaining({ reason: 'rate-limited' }))
    tick(100)
    publish(a, 0, { i: 6 })
    const others = [new Watcher(), new Watcher(), new Watcher()]
    publish(others[0] as Watcher, 1, { n: 1 })
    publish(others[1] as Watcher, 2, { n: 2 })
    expect(() => publish(others[2] as Watcher, 3, { n: 3 })).toThrow(/most this relay keeps/)
    expect(room.size('s')).toBe(3)
    // Reclaimed on the relay's demand, those expiring first.
    const before = room.held
    room.reclaim(1)
    expect(room.size('s')).toBe(2)
    expect(room.held).toBeLessThan(before)
    const full = world({}, () => false)
    expect(() => full.publish(new Watcher(), 0, { n: 1 })).toThrow(/memory budget/)
  })

  it('drops, never queues, what a watcher is sent past its byte budget', () => {
    const { room, publish } = world({ deliverBytesPerSecond: 1, deliverBurstBytes: 1000, publish: { perSecond: 1e6, burst: 1e6, bytesPerSecond: 1e12, burstBytes: 1e12 } })
    const [a, b] = [new Watcher(), new Watcher()]
    room.watch('s', b)
    for (let i = 0; i < 50; i++) publish(a, 0, { i, pad: 'x'.repeat(100) })
    expect(b.got.length).toBeGreaterThan(0)
    expect(b.got.length).toBeLessThan(10)
    expect(room.dropped).toBe(50 - b.got.length)
  })
})
