import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { SimCluster } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import { lmdbStorage } from '../src/index.node.ts'
import { commitUntil, committing, simWorld } from './helpers/sim-world.ts'

/** Freshness bounds (BENDY) and atomic groups in the prospective view, against real relays in simulated time. */
const world = simWorld()

describe('freshness bounds (BENDY)', () => {
  /** Every envelope a relay of `c` is given, in order. */
  function taken(c: SimCluster) {
    const envs: Array<{ at: number; keys: string[]; regular: Array<[string, unknown[]]>; safe: number }> = []
    c.refuse = (env) => {
      envs.push({ at: c.now, keys: env.updates.map((u) => u.key), regular: env.updates.map((u) => [u.key, [...u.ops]]), safe: env.safe.length })
      return undefined
    }
    return envs
  }

  it("holds a bounded object's updates up to its bound, shown at once, and sends them as one merged update; other objects go at once", async () => {
    const c = await world.cluster()
    const envs = taken(c)
    const s = await world.client(c)
    await c.until('online', () => s.status.online)
    const likes = s.counter('likes', { freshness: 400 })
    const t0 = c.now
    const stored: Array<Promise<unknown>> = []
    for (let i = 0; i < 20; i++) {
      stored.push(likes.increment(1))
      await c.advance(5)
    }
    // Local at once (G1), counted as pending, and nothing of it sent yet.
    expect(likes.value).toBe(20)
    expect(s.status.pending).toBe(20)
    await s.counter('views').increment(1)
    await c.until('the unbounded object sent', () => envs.some((e) => e.keys.includes('views')))
    expect(envs.every((e) => !e.keys.includes('likes'))).toBe(true)
    // All 20 leave together within the bound (less the estimated time to reach the relays), as one compacted update.
    await Promise.all(stored)
    await c.until('likes sent', () => envs.some((e) => e.keys.includes('likes')))
    const sent = envs.filter((e) => e.keys.includes('likes'))
    expect(sent).toHaveLength(1)
    expect(sent[0]!.regular).toEqual([['likes', [20]]])
    expect(sent[0]!.at - t0).toBeGreaterThanOrEqual(300)
    expect(sent[0]!.at - t0).toBeLessThan(400 + 200)
    expect(likes.value).toBe(20)
    await commitUntil(c, 'likes stable', () => likes.stable === 20)
  })

  it('sends the waiting updates of an object before a safe update on it, and at once on flush and close', async () => {
    const c = await world.cluster()
    const envs = taken(c)
    const s = await world.client(c)
    await c.until('online', () => s.status.online)
    const acct = s.counter('acct', { min: 0, freshness: 60_000 })
    void acct.increment(5)
    void acct.increment(5)
    void s.register('title', { freshness: 60_000 }).set('a')
    const stop = committing(c)
    // Safe: the two increments go first (same envelope, before the safe group), then the safe spend, which the audit accepts.
    expect(await acct.decrement(8, { safe: true })).toMatchObject({ status: 'committed' })
    stop()
    const withAcct = envs.filter((e) => e.keys.includes('acct') || e.safe > 0)
    expect(withAcct[0]).toMatchObject({ regular: [['acct', [10]]], safe: 1 })
    // The register waits on; flush sends it now.
    expect(envs.some((e) => e.keys.includes('title'))).toBe(false)
    await s.flush()
    expect(envs.some((e) => e.keys.includes('title'))).toBe(true)
  })

  it('stores what waits when the client closes: a restarted client has it among its unsent updates', async () => {
    const c = await world.cluster()
    const dir = mkdtempSync(join(tmpdir(), 'stead-client-'))
    for (const r of c.relays) await r.down()
    const a = await world.client(c, { storage: lmdbStorage(dir) })
    const stored = a.counter('likes', { freshness: 60_000 }).increment(3)
    expect(a.pendingUpdates()).toEqual([])
    await world.shutdown(a)
    expect(await stored).toMatchObject({ status: 'stored' })
    const b = await world.client(c, { storage: lmdbStorage(dir) })
    expect(b.counter('likes').value).toBe(3)
    expect(b.pendingUpdates()).toMatchObject([{ keys: ['likes'], regular: 1 }])
  })

  it('lifting a bound sends what waits before anything later, so a later delete is not overtaken by the add it removes', async () => {
    const c = await world.cluster()
    const s = await world.client(c)
    await c.until('online', () => s.status.online)
    s.set<string>('tags', { freshness: 60_000 }).add('x')
    const tags = s.set<string>('tags', { freshness: 0 })
    void tags.delete('x')
    expect(tags.values()).toEqual([])
    await s.flush()
    await commitUntil(c, 'both decided', () => s.pendingUpdates().length === 0)
    expect(tags.stableValues()).toEqual([])
  })

  it('never puts more than maxBatchOps updates into one envelope when what waits leaves', async () => {
    const c = await world.cluster()
    const envs = taken(c)
    const s = await world.client(c, { maxBatchOps: 10, batchIntervalMs: 60_000 })
    await c.until('online', () => s.status.online)
    // In one task: 7 adds that need no waiting, then 10 that wait, which fill the hold and leave.
    const plain = s.set<string>('plain')
    const hot = s.set<string>('hot', { freshness: 60_000 })
    for (let i = 0; i < 7; i++) void plain.add(`p${i}`)
    for (let i = 0; i < 10; i++) void hot.add(`h${i}`)
    await s.flush()
    const sizes = envs.map((e) => e.regular.reduce((n, [, ops]) => n + ops.length, 0))
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(17)
    expect(Math.max(...sizes)).toBeLessThanOrEqual(10)
  })

  it('bounds what waits by maxBatchOps, and refuses a bad bound with a typed error', async () => {
    const c = await world.cluster()
    const envs = taken(c)
    const s = await world.client(c, { maxBatchOps: 10 })
    await c.until('online', () => s.status.online)
    const hot = s.counter('hot', { freshness: 60_000 })
    for (let i = 0; i < 25; i++) void hot.increment(1)
    // Ten waiting updates are as many as one batch holds: they leave then, without waiting for the bound.
    await c.until('two batches of ten sent', () => envs.filter((e) => e.keys.includes('hot')).length === 2)
    expect(envs.filter((e) => e.keys.includes('hot')).map((e) => e.regular)).toEqual([[['hot', [10]]], [['hot', [10]]]])
    // Pending: the five still waiting, and one entry per envelope not decided yet.
    expect(s.status.pending).toBe(5 + s.pendingUpdates().length)
    expect(() => s.counter('x', { freshness: -1 })).toThrow(expect.objectContaining({ reason: 'malformed' }))
    expect(() => s.register('y', { freshness: Number.NaN })).toThrow(/freshness/)
    // 0 turns waiting off: the five waiting leave at once, with what comes next.
    s.counter('hot', { freshness: 0 })
    await hot.increment(1)
    await c.until('the rest sent', () => envs.some((e) => e.keys.includes('hot') && (e.regular[0]?.[1] as number[])[0] === 6))
  })
})

describe('atomic groups in the prospective view', () => {
  it('shows a transfer all or nothing: a debit that does not fit holds back its credit too', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const from = a.counter('acct:a', { min: 0 })
    const to = a.counter('acct:b')
    await from.increment(20)
    const tooMuch = a.safe((tx) => {
      tx.counter('acct:a').decrement(50)
      tx.counter('acct:b').increment(50)
    })
    expect([from.value, to.value]).toEqual([20, 0])
    expect(from.pending).toEqual([{ amount: -50, own: true }])
    expect(to.pending).toEqual([{ amount: 50, own: true }])
    const fits = a.safe((tx) => {
      tx.counter('acct:a').decrement(5)
      tx.counter('acct:b').increment(5)
    })
    expect([from.value, to.value]).toEqual([15, 5])
    await c.until('online', () => a.status.online)
    const stop = committing(c)
    expect(await tooMuch).toMatchObject({ status: 'rejected', reason: 'invariant' })
    expect(await fits).toMatchObject({ status: 'committed' })
    stop()
    expect([from.value, from.stable, to.value, to.stable]).toEqual([15, 15, 5, 5])
    expect([from.pending, to.pending]).toEqual([[], []])
  })
})
