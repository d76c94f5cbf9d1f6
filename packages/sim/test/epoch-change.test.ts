import { relayCommitteeOf } from '@stead/relay'
import type { RelayCommittee } from '@stead/core'
import { describe, expect, it } from 'vitest'
import type { SimCluster } from '../src/index.ts'
import { simWorld } from './helpers/world.ts'

/** Committee changes (issue 49) with real relays and SDK clients in simulated time. */
describe('epoch changes', () => {
  const world = simWorld()

  const epochOf = (c: SimCluster, i: number): unknown => c.relays[i]?.isUp && c.relays[i]?.node.status()['epoch']

  it.each([1, 2, 3])('moves every relay to the committee 2f+1 operators back, while a client keeps writing: nothing lost, nothing twice, one state (seed %i)', async (seed) => {
    const c = await world.start({ seed })
    const client = await world.client(c)
    const a = await client.space('s')
    const counter = a.counter('n')
    const file = relayCommitteeOf(c.config)
    // r1 moves its client API: the same relays and keys, another address.
    const next: RelayCommittee = { f: file.f, members: file.members.map((m, i) => (i === 0 ? { ...m, api: 'relay0-moved.sim' } : m)) }
    let acknowledged = 0
    let writing = true
    const writer = (async () => {
      while (writing) {
        const r = await counter.increment(1, { safe: true, timeoutMs: Infinity })
        if (r.status === 'committed') acknowledged++
      }
    })()
    await c.until('a few safe updates', () => acknowledged >= 3)
    // Two backings are not 2f+1: nothing changes.
    await c.relays[1]?.backCommittee(1, next)
    await c.relays[2]?.backCommittee(1, next)
    await c.advance(2_000)
    expect([0, 1, 2, 3].map((i) => epochOf(c, i))).toEqual([0, 0, 0, 0])
    expect(c.relays[0]?.node.committeeChange().proposals).toEqual([expect.objectContaining({ backers: ['r2', 'r3'] })])
    await c.relays[3]?.backCommittee(1, next)
    await c.until('every relay in epoch 1', () => [0, 1, 2, 3].every((i) => epochOf(c, i) === 1))
    const before = acknowledged
    await c.until('safe updates commit in epoch 1', () => acknowledged >= before + 3)
    writing = false
    await writer
    // Every acknowledged update is in the stable value, once: the relays agree on it.
    await c.until('every relay holds the same state', () => {
      const heads = c.relays.map((r) => r.node.reads.stableHead('s'))
      return heads.every((h) => h.stateHash === heads[0]?.stateHash && h.index === heads[0]?.index) && heads[0]
    })
    expect(c.relays[0]?.stableValue('s', 'n')).toBe(acknowledged)
    expect(counter.stable).toBe(acknowledged)
    const status = c.relays[0]?.node.status() ?? {}
    expect(status).toMatchObject({ epoch: 1, committeeChange: { proposals: [], decided: null } })
    // Rounds go on counting across the boundary, and the new epoch committed rounds of its own.
    expect(status['epochStartRound']).toBeGreaterThan(0)
    expect(status['committedRound']).toBeGreaterThan(status['epochStartRound'] as number)
  })
})
