import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { SimCluster } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import { SteadError, lmdbStorage } from '../src/index.node.ts'
import type { Space } from '../src/index.node.ts'
import { fromHome } from '../src/upstream/outbox.ts'
import { committing, simWorld } from './helpers/sim-world.ts'

/** BENDY's live stream: a reader paced at a freshness bound, against real relays in simulated time. */
const world = simWorld()

type Counted = 'envelopes' | 'commits' | 'attests' | 'deltas' | 'paces' | 'bytes'
const total = (c: SimCluster, key: Counted): number => c.relays.reduce((n, r) => n + r.traffic[key], 0)
/** What every relay sent one client (or heard from it: paces). */
const trafficOf = (c: SimCluster, s: Space, key: Counted): number => c.relays.reduce((n, r) => n + (r.trafficOf.get(s.authorId)?.[key] ?? 0), 0)

/** The relay a client of space 'bank' takes its feed from. */
const home = (c: SimCluster): number => fromHome('bank', c.relays.length, c.relays.map((r) => ({ relay: r.index })) as never)[0]!.relay as number

/** When `space`'s stable value of `key` first reached each value, in simulated time. */
function stableTimes(c: SimCluster, space: Space, key: string): Map<number, number> {
  const at = new Map<number, number>()
  const h = space.counter(key)
  space.onChange(() => {
    if (!at.has(h.stable)) at.set(h.stable, c.now)
  })
  return at
}

async function pair(c: SimCluster, freshnessMs: number): Promise<{ writer: Space; reader: Space }> {
  const writer = await world.client(c)
  const reader = await world.client(c)
  await c.until('online', () => writer.status.online && reader.status.online)
  const paces = total(c, 'paces')
  reader.setFreshness(freshnessMs)
  await c.until('the reader paced', () => total(c, 'paces') > paces || undefined)
  return { writer, reader }
}

describe('a paced reader (BENDY on the live stream)', () => {
  it('gets one certified delta per freshness window instead of every envelope and commit, shows only stable values, and is never later than the bound', async () => {
    const c = await world.cluster()
    const { writer, reader } = await pair(c, 600)
    // Beside it, a reader that follows every update: what the paced one saves.
    const follower = await world.client(c)
    await c.until('online', () => follower.status.online || undefined)
    const acct = reader.counter('acct')
    let unstable = 0
    reader.onChange(() => {
      if (acct.value !== acct.stable) unstable++
    })
    const wrote = stableTimes(c, writer, 'acct')
    const read = stableTimes(c, reader, 'acct')
    const before = (s: Space) => ({ deltas: trafficOf(c, s, 'deltas'), envelopes: trafficOf(c, s, 'envelopes'), commits: trafficOf(c, s, 'commits'), bytes: trafficOf(c, s, 'bytes') })
    const paced0 = before(reader)
    const follower0 = before(follower)
    const stop = committing(c)
    const start = c.now
    for (let i = 0; i < 60; i++) {
      void writer.counter('acct').increment(1)
      await c.advance(25)
    }
    await c.until('both readers at the writer state', () => (acct.stable === 60 && follower.counter('acct').stable === 60) || undefined, 10_000)
    stop()
    const paced = before(reader)
    const followed = before(follower)
    const deltas = paced.deltas - paced0.deltas
    // About one delta per window over the writes (1.5 s at 600 ms), not one per commit; no envelope, no commit.
    expect(deltas).toBeGreaterThan(0)
    expect(deltas).toBeLessThanOrEqual(Math.ceil((c.now - start) / 600) + 2)
    expect(paced.envelopes - paced0.envelopes).toBe(0)
    expect(paced.commits - paced0.commits).toBe(0)
    expect(followed.envelopes - follower0.envelopes).toBeGreaterThanOrEqual(60)
    // A counter's state is a few bytes per author: far less than 60 envelopes and their commits' attestations.
    expect((paced.bytes - paced0.bytes) * 4).toBeLessThan(followed.bytes - follower0.bytes)
    expect(unstable).toBe(0)
    // Every value the writer saw stable reached the reader within the bound (the writer's own view is the relays' commit, give or take a message).
    for (const [value, t] of wrote) {
      if (value === 0) continue
      const seen = [...read].filter(([v]) => v >= value).map(([, at]) => at)
      expect(seen.length, `value ${value}`).toBeGreaterThan(0)
      expect(Math.min(...seen) - t, `value ${value}`).toBeLessThanOrEqual(600 + 100)
    }
    expect(reader.status.relays.every((r) => r.faulty === undefined)).toBe(true)
  })

  it('follows every commit while an update of its own is undecided (its outcome needs them), then paces again', async () => {
    const c = await world.cluster()
    const { writer, reader } = await pair(c, 300)
    const stop = committing(c)
    void writer.counter('acct').increment(5)
    await c.until('paced delta applied', () => reader.counter('acct').stable === 5 || undefined)
    const paces = total(c, 'paces')
    const mine = await reader.counter('acct').increment(2, { safe: true })
    expect(mine).toMatchObject({ status: 'committed' })
    await c.until('paced again once decided', () => total(c, 'paces') > paces || undefined)
    void writer.counter('acct').increment(1)
    await c.until('both at 8', () => (reader.counter('acct').stable === 8 && writer.counter('acct').stable === 8) || undefined)
    stop()
  })

  it('refuses a delta that does not lead to its attested state, or whose attestation fewer than f+1 relays signed, and converges from another relay', async () => {
    for (const lie of ['wrong-delta', 'lie-attest'] as const) {
      const c = await world.cluster()
      await c.relays[home(c)]!.lie(lie)
      const { writer, reader } = await pair(c, 300)
      const acct = reader.counter('acct')
      const values: number[] = []
      reader.onChange(() => values.push(acct.stable))
      const stop = committing(c)
      for (let i = 0; i < 10; i++) void writer.counter('acct').increment(1)
      await c.until(`${lie}: the reader at 10`, () => acct.stable === 10 || undefined, 20_000)
      stop()
      expect(reader.status.relays[home(c)]?.faulty, lie).toBeDefined()
      // Never a state the lie made up: the stable value only climbs to what was written.
      expect(values.every((v, i) => v <= 10 && v >= (values[i - 1] ?? 0)), lie).toBe(true)
      await c.close()
    }
  })

  it('passes over a source that goes silent (no delta, not even the heartbeat of a quiet space)', async () => {
    const c = await world.cluster()
    const { writer, reader } = await pair(c, 300)
    await c.relays[home(c)]!.lie('withhold-commits')
    const stop = committing(c)
    void writer.counter('acct').increment(3)
    await c.until('the reader at 3 from another relay', () => reader.counter('acct').stable === 3 || undefined, 40_000)
    stop()
  })

  it('passes over a source that keeps certifying an old state (heartbeats of a space that moved on), by the head f+1 relays report', async () => {
    const c = await world.cluster()
    const { writer, reader } = await pair(c, 300)
    const stop = committing(c)
    void writer.counter('acct').increment(1)
    await c.until('a first delta applied', () => reader.counter('acct').stable === 1 || undefined)
    await c.relays[home(c)]!.lie('stale-delta')
    // The next heartbeat (the space is quiet) is the certified state the liar keeps sending from then on.
    const deltas = trafficOf(c, reader, 'deltas')
    await c.until('a heartbeat', () => trafficOf(c, reader, 'deltas') > deltas || undefined, 10_000)
    void writer.counter('acct').increment(2)
    await c.until('the reader at 3 from another relay', () => reader.counter('acct').stable === 3 || undefined, 60_000)
    stop()
  })

  it('a new bound or mode while paced is sent to the source; undefined follows every update again', async () => {
    const c = await world.cluster()
    const { reader } = await pair(c, 300)
    const paces = trafficOf(c, reader, 'paces')
    reader.setFreshness(300)
    reader.setFreshness(300, { mode: 'adaptive' })
    await c.advance(100)
    expect(trafficOf(c, reader, 'paces')).toBe(paces)
    reader.setFreshness(2000)
    await c.until('the new bound sent', () => trafficOf(c, reader, 'paces') > paces || undefined)
    reader.setFreshness(2000, { mode: 'state' })
    await c.until('the new mode sent', () => trafficOf(c, reader, 'paces') > paces + 1 || undefined)
    const envelopes = trafficOf(c, reader, 'envelopes')
    reader.setFreshness(undefined)
    const writer = await world.client(c)
    const stop = committing(c)
    void writer.counter('acct').increment(1)
    await c.until('every envelope again', () => trafficOf(c, reader, 'envelopes') > envelopes || undefined)
    stop()
  })

  it('writes its checkpoint at most every 10 s while paced, and comes back right after a crash in between, or after its own commits were stored on top', async () => {
    for (const own of [false, true]) {
      const c = await world.cluster()
      const dir = mkdtempSync(join(tmpdir(), 'stead-paced-'))
      const writer = await world.client(c)
      const reader = await world.client(c, { storage: lmdbStorage(dir) })
      await c.until('online', () => (writer.status.online && reader.status.online) || undefined)
      const paces = trafficOf(c, reader, 'paces')
      reader.setFreshness(200)
      await c.until('paced', () => trafficOf(c, reader, 'paces') > paces || undefined)
      const stop = committing(c)
      for (let i = 0; i < 10; i++) {
        void writer.counter('acct').increment(1)
        await c.advance(300)
      }
      await c.until('the reader at 10', () => reader.counter('acct').stable === 10 || undefined)
      // Its own update follows the commits, stored on top of a checkpoint that must be the current state.
      if (own) await reader.counter('acct').increment(5, { safe: true })
      const expected = own ? 15 : 10
      await c.until('both settled', () => (writer.counter('acct').stable === expected && reader.counter('acct').stable === expected) || undefined)
      stop()
      // Dies without closing: what it stored is all the next run has.
      world.abandon(reader)
      const back = await world.client(c, { storage: lmdbStorage(dir) })
      const resumed = committing(c)
      void writer.counter('acct').increment(1)
      await c.until('back, and on', () => back.counter('acct').stable === expected + 1 || undefined)
      resumed()
      expect(back.counter('acct').value).toBe(expected + 1)
      await c.close()
    }
  })

  it('takes only bounds it can honour', async () => {
    const c = await world.cluster()
    const s = await world.client(c)
    for (const bad of [0, 49, 3_600_001, 1.5, Number.NaN]) expect(() => s.setFreshness(bad), String(bad)).toThrow(SteadError)
    expect(() => s.setFreshness(100, { mode: 'diff' as never })).toThrow(/mode/)
    s.setFreshness(100, { mode: 'state' })
    s.setFreshness(undefined)
  })
})
