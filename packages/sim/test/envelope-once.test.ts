import { asSigned, decode, toHex } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { simWorld } from './helpers/world.ts'

/** What a reader downloads: each envelope once, however many blocks carry it. */
describe('the prospective feed', () => {
  const world = simWorld()

  it('sends a subscription with refs each envelope once, though blocks of several relays carry it', async () => {
    const c = await world.start()
    const reader = await c.session(0, new Uint8Array(32).fill(5))
    await reader.welcomed
    reader.send({ type: 'subscribe', space: 's', fromIndex: 0, frames: true, refs: true })
    const writers = await Promise.all([1, 2, 3].map(async (i) => {
      const made = await world.client(c, { relays: [c.urls[i] as string, ...c.urls.filter((_, j) => j !== i)] })
      return made.space('s')
    }))
    for (let k = 0; k < 20; k++) {
      for (const w of writers) void w.counter('n').increment(1)
      await c.advance(30)
    }
    const last = writers.map((w) => w.counter('n').increment(1, { safe: true }))
    for (const r of await Promise.all(last)) expect(r.status).toBe('committed')
    await c.until('the reader to have every update', () => (writers.every((w) => w.counter('n').stable === 63) ? true : undefined))
    const ids = reader.received.flatMap((m) => (m.type === 'envelope' ? [toHex(nodeCrypto.sha256(asSigned(decode(m.envelope)).bytes))] : []))
    expect(ids.length).toBeGreaterThan(20)
    expect(ids.length - new Set(ids).size).toBe(0)
  })
})
