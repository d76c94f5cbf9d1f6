import 'fake-indexeddb/auto'
import type { Envelope } from '@stead/core'
import { describe, expect, it } from 'vitest'
import type { Space } from '../src/index.node.ts'
import { committing, simWorld } from './helpers/sim-world.ts'

/** Bounded counters' rights moving between clients (the Bounded Counter paper's asks and grants), on real relays in simulated time. */
const world = simWorld()

/** The bounded-counter ops of `kind` an author submitted on `key`. */
function opsOf(envs: Iterable<Envelope>, author: string, key: string, kind: string): unknown[][] {
  const out: unknown[][] = []
  for (const env of envs) {
    if (env.authorId !== author) continue
    for (const u of env.updates) if (u.key === key) for (const op of u.ops as unknown as unknown[][]) if (op[0] === kind) out.push(op)
  }
  return out
}

async function online(c: Awaited<ReturnType<typeof world.cluster>>, spaces: readonly Space[]): Promise<void> {
  await c.until('online', () => spaces.every((s) => s.status.online) || undefined)
}

/** Two clients with the counter `stock` open, a holding `amount` rights to decrement it (its increment, stable at b). */
async function twoClients(amount: number) {
  const c = await world.cluster()
  const a = await world.client(c)
  const b = await world.client(c)
  await online(c, [a, b])
  const atA = a.boundedCounter('stock', { min: 0, initial: 0 })
  const atB = b.boundedCounter('stock', { min: 0, initial: 0 })
  const stop = committing(c)
  await atA.increment(amount)
  await a.flush()
  await c.until(`stable ${amount} at b`, () => atB.stable === amount || undefined)
  return { c, a, b, atA, atB, stop }
}

describe('rights that move', () => {
  it('a client short of rights asks the one holding the most, which grants before anything is ordered; the spend waits for the grant to be stable', async () => {
    const { c, a, b, atA, atB, stop } = await twoClients(20)
    stop()

    // Held: nothing is ordered, yet the ask reaches a through the relays' forwarding and a answers it.
    const spend = atB.decrement(6)
    await c.until('a grant from a', () => opsOf(c.submitted.values(), a.authorId, 'stock', 'g').length > 0 || undefined)
    expect(opsOf(c.submitted.values(), b.authorId, 'stock', 'q')).toEqual([['q', 10, a.authorId, 0, 1]])
    // Half of what a holds, and exactly what b asked for: the ask named what a had given b so far (0).
    expect(opsOf(c.submitted.values(), a.authorId, 'stock', 'g')).toEqual([['g', 10, b.authorId, 0]])
    expect(atB.stable).toBe(20)

    const go = committing(c)
    expect(await spend).toMatchObject({ status: 'stored' })
    await b.flush()
    await c.until('stable 14', () => (atA.stable === 14 && atB.stable === 14) || undefined)
    go()
    expect(atA.rights).toBe(10)
    expect(atB.rights).toBe(4)
    // Answered once: a's view of the ask (it saw b's ask again with every change since) brought no second grant.
    expect(opsOf(c.submitted.values(), a.authorId, 'stock', 'g')).toHaveLength(1)
  })

  it('spends waiting for the same rights side by side: only as many go as the rights cover, and each that resolves stored commits', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    await online(c, [a])
    const seats = a.boundedCounter('seats', { min: 0, initial: 2 })
    const stop = committing(c)
    const results = await Promise.all([seats.decrement(1), seats.decrement(1), seats.decrement(1)])
    expect(results.map((r) => r.status).sort()).toEqual(['rejected', 'stored', 'stored'])
    const errors: string[] = []
    a.onError((e) => errors.push(e.message))
    await a.flush()
    await c.until('stable 0', () => seats.stable === 0 || undefined)
    await a.settled({ timeoutMs: 10_000 })
    stop()
    expect(errors).toEqual([])
    expect(seats.stable).toBe(0)
  })

  it("{ rights: 'fail' } refuses a spend beyond the client's rights at once, and sends nothing", async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    await online(c, [a])
    const seats = a.boundedCounter('seats', { min: 0, initial: 5 })
    const before = c.submitted.size
    expect(await seats.decrement(1, { rights: 'fail' })).toMatchObject({ status: 'rejected', reason: 'invariant' })
    await c.advance(2000)
    expect(c.submitted.size).toBe(before)
    // More than there is anywhere: refused at once with the default too.
    expect(await seats.decrement(6)).toMatchObject({ status: 'rejected', reason: 'invariant' })
    await expect(seats.decrement(1, { rights: 'later' as never })).rejects.toMatchObject({ reason: 'malformed' })
  })

  it('a client that spends keeps a stock of rights in the background, so its next spends stay local', async () => {
    const { c, b, atA, atB, stop } = await twoClients(40)
    expect(await atB.decrement(2)).toMatchObject({ status: 'stored' }) // asks a for half of its 40, then spends
    expect(await atB.decrement(13, { rights: 'fail' })).toMatchObject({ status: 'stored' }) // within the 18 left
    await b.flush()
    await c.until('b spent 15', () => atA.stable === 25 || undefined)
    // b holds 5, below half an equal share of the 25 left (6): it asks a again, with no spend waiting.
    const held = atB.rights
    expect(held).toBe(5)
    await c.until('b restocked', () => atB.rights > held || undefined)
    stop()
    const asks = opsOf(c.submitted.values(), b.authorId, 'stock', 'q')
    expect(asks.length).toBeGreaterThanOrEqual(2)
    expect(asks.map((q) => q[4])).toEqual(asks.map((_, i) => i + 1))
    // Spends within that stock need no relay at all.
    for (const r of c.relays) await r.down()
    expect(await atB.decrement(atB.rights, { rights: 'fail' })).toMatchObject({ status: 'stored' })
  })

  it("reclaims a replica's rights into the pool: its own, always; another's, not without a policy that says so", async () => {
    const { c, a, b, atA, atB, stop } = await twoClients(10)
    expect(await atB.reclaim(a.authorId)).toMatchObject({ status: 'rejected', reason: 'unauthorized' })
    expect(atA.rights).toBe(10)
    expect(await atA.reclaim(a.authorId)).toMatchObject({ status: 'committed' })
    expect(atA.rights).toBe(0)
    await c.until('b sees the pool', () => atB.stable === 10 || undefined)
    // The pool holds them now: b's spend claims from it.
    expect(await atB.decrement(4)).toMatchObject({ status: 'stored' })
    await b.flush()
    await c.until('stable 6', () => atA.stable === 6 || undefined)
    stop()
    await expect(atA.reclaim('')).rejects.toMatchObject({ reason: 'malformed' })
  })
})
