import { describe, expect, it } from 'vitest'
import type { SimCluster } from '../src/index.ts'
import { simWorld } from './helpers/world.ts'

/** The harness client tests run on: real relays and clients in simulated time. */
describe('SimCluster', () => {
  const world = simWorld()
  const client = (c: SimCluster) => world.client(c)

  it('orders a safe update through real relays, and another client sees it stable', async () => {
    const c = await world.start()
    const a = await (await client(c)).space('s')
    const b = await (await client(c)).space('s')
    const started = performance.now()
    const result = await a.counter('n').increment(5, { safe: true })
    expect(result.status).toBe('committed')
    await c.until('b sees it stable', () => b.counter('n').stable === 5)
    expect(c.relays[0]?.node.reads.stableHead('s').index).toBeGreaterThan(0)
    // Simulated, not waited: well under a second of real time per simulated second.
    expect(performance.now() - started).toBeLessThan(20_000)
  })

  it('holds: nothing is ordered while the mesh is cut, however long; prospective values still travel', async () => {
    const c = await world.start()
    const a = await (await client(c)).space('s')
    const b = await (await client(c)).space('s')
    await c.until('online', () => a.status.online && b.status.online)
    c.hold()
    let settled = false
    const safe = a.counter('n').increment(1, { safe: true, timeoutMs: Infinity }).finally(() => (settled = true))
    await c.until('b sees it prospectively', () => b.counter('n').value === 1)
    const before = c.now
    await c.advance(30_000)
    expect(c.now - before).toBeGreaterThanOrEqual(30_000)
    expect(settled).toBe(false)
    expect(b.counter('n').stable).toBe(0)
    c.release()
    expect((await safe).status).toBe('committed')
  })

  it('a relay down and back: clients go on, and it recovers its store', async () => {
    const c = await world.start()
    const a = await (await client(c)).space('s')
    await a.counter('n').increment(1, { safe: true })
    await c.relays[1]?.down()
    await a.counter('n').increment(2, { safe: true })
    await c.relays[1]?.up()
    const head = c.relays[0]?.node.reads.stableHead('s')
    await c.until('relay 1 caught up', () => c.relays[1]?.node.reads.stableHead('s').stateHash === head?.stateHash)
    expect(c.relays[1]?.node.reads.stableHead('s').index).toBe(head?.index)
  })

  it('a relay lying about the state it attests is blamed, and the client still commits', async () => {
    const c = await world.start()
    await c.relays[0]?.lie('lie-attest')
    const made = await client(c)
    const a = await made.space('s')
    expect((await a.counter('n').increment(1, { safe: true })).status).toBe('committed')
    await c.until('relay 0 blamed', () => made.status.relays.find((r) => r.url === c.urls[0])?.faulty)
  })

  it('a relay Byzantine towards its peers (bad signatures): they reject its blocks and still commit; honest again, it is heard again', async () => {
    const c = await world.start()
    const a = await (await client(c)).space('s')
    const rejected = async () => (await c.relays[0]!.node.metrics.rejected.get()).values.filter((v) => v.labels.reason === 'bad-signature').reduce((n, v) => n + v.value, 0)
    c.relays[3]!.misbehave('bad-signature')
    expect((await a.counter('n').increment(1, { safe: true })).status).toBe('committed')
    await c.until('r1 rejected r4 blocks', async () => (await rejected()) > 0 || undefined)
    c.relays[3]!.misbehave()
    // What it sent before may still arrive: the count stops once that is through.
    expect((await a.counter('n').increment(1, { safe: true })).status).toBe('committed')
    const before = await rejected()
    for (let i = 0; i < 3; i++) expect((await a.counter('n').increment(1, { safe: true })).status).toBe('committed')
    expect(await rejected()).toBe(before)
  })

  it('split in two sides without a quorum: nothing is ordered until they heal', async () => {
    const c = await world.start()
    const a = await (await client(c)).space('s')
    await c.until('online', () => a.status.online)
    c.split([0, 1])
    let settled = false
    const safe = a.counter('n').increment(1, { safe: true, timeoutMs: Infinity }).finally(() => (settled = true))
    await c.advance(10_000)
    expect(settled).toBe(false)
    expect(c.relays.map((r) => r.node.reads.stableHead('s').index)).toEqual([0, 0, 0, 0])
    c.heal()
    expect((await safe).status).toBe('committed')
  })
})
