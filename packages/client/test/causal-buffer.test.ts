import { clockInit, sealEnvelope, type Envelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { CausalBuffer } from '../src/upstream/causal-buffer.ts'

const me = { secretKey: new Uint8Array(32).fill(5), publicKey: await nodeCrypto.publicKeyOf(new Uint8Array(32).fill(5)) }
const envs: Envelope[] = await Promise.all(
  Array.from({ length: 8 }, (_, i) => sealEnvelope(nodeCrypto, me, { space: 's', seq: i + 1, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })),
)
const FRAME = new Uint8Array(1)

describe('CausalBuffer', () => {
  it('lets an envelope go exactly once: when its last missing dep arrives, when its wait runs out, or to make room', () => {
    fc.assert(
      fc.property(
        // For each envelope: the deps it misses (ids d0..d5), when it arrives; then the order deps arrive in, with clock steps.
        fc.array(fc.tuple(fc.subarray(['d0', 'd1', 'd2', 'd3', 'd4', 'd5'], { minLength: 1 }), fc.nat(50)), { minLength: 1, maxLength: 8 }),
        fc.array(fc.tuple(fc.constantFrom('d0', 'd1', 'd2', 'd3', 'd4', 'd5'), fc.nat(400))),
        fc.integer({ min: 1, max: 8 }),
        (held, arrivals, room) => {
          const b = new CausalBuffer(1000, room)
          const out: string[] = []
          const missing = new Map<string, Set<string>>()
          let now = 0
          held.forEach(([deps, dt], i) => {
            now += dt
            const env = envs[i] as Envelope
            missing.set(env.idHex, new Set(deps))
            for (const h of b.hold(env, FRAME, deps, now)) out.push(h.env.idHex)
            expect(b.size).toBeLessThanOrEqual(room)
          })
          for (const [dep, dt] of arrivals) {
            now += dt
            for (const h of b.expired(now)) out.push(h.env.idHex)
            for (const h of b.arrived(dep)) {
              // Released on arrival: this was its last missing dep (or the others arrived before).
              const m = missing.get(h.env.idHex) as Set<string>
              expect(m.has(dep)).toBe(true)
              out.push(h.env.idHex)
            }
            for (const m of missing.values()) m.delete(dep)
          }
          for (const h of b.expired(now + 1000)) out.push(h.env.idHex)
          expect(b.size).toBe(0)
          expect(b.nextDeadline()).toBeUndefined()
          expect(new Set(out).size).toBe(out.length)
          expect(out.sort()).toEqual(held.map((_, i) => (envs[i] as Envelope).idHex).sort())
        },
      ),
    )
  })

  it('forgets an envelope decided meanwhile, and says when the oldest wait ends', () => {
    const b = new CausalBuffer(1000)
    const [x, y] = envs as [Envelope, Envelope]
    b.hold(x, FRAME, ['d'], 10)
    b.hold(y, FRAME, ['d'], 20)
    expect(b.nextDeadline()).toBe(1010)
    b.drop(x.idHex)
    expect(b.nextDeadline()).toBe(1020)
    expect(b.arrived('d').map((h) => h.env.idHex)).toEqual([y.idHex])
    expect(b.size).toBe(0)
  })

  it('names the ids held envelopes wait for, not their bases, and forgets those nothing waits for any more', () => {
    const b = new CausalBuffer()
    b.hold(envs[0] as Envelope, FRAME, ['d1', '@7'], 0)
    b.hold(envs[1] as Envelope, FRAME, ['d1', 'd2'], 0)
    expect(b.awaited().sort()).toEqual(['d1', 'd2'])
    expect(b.arrived('d1').map((h) => h.env.idHex)).toEqual([])
    expect(b.awaited()).toEqual(['d2'])
    expect(b.arrived('d2').map((h) => h.env.idHex)).toEqual([(envs[1] as Envelope).idHex])
    expect(b.awaited()).toEqual([])
  })
})
