import 'fake-indexeddb/auto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { indexedDbStorage, lmdbStorage, memoryStorage, type ClientStorage, type Space } from '../src/index.node.ts'
import { commitUntil, committing, simWorld } from './helpers/sim-world.ts'

/** A client restarted, reopened or crashed on its storage, against real relays in simulated time. */
const world = simWorld()

describe('persistence', () => {
  function reopenable(): { storage: () => ClientStorage } {
    const dir = mkdtempSync(join(tmpdir(), 'stead-client-'))
    return { storage: () => lmdbStorage(dir) }
  }

  it('comes back after a restart with the same values, identity and unsent updates', async () => {
    const c = await world.cluster()
    const store = reopenable()
    const a = await world.client(c, { storage: store.storage() })
    await c.until('online', () => a.status.online)
    const alice = a.counter('acct:alice')
    await alice.increment(7)
    await a.flush()
    await commitUntil(c, 'stable 7', () => alice.stable === 7)
    // Offline now: this one is stored and not sent.
    for (const r of c.relays) await r.down()
    await alice.increment(3)
    const id = a.authorId
    await world.shutdown(a)

    const b = await world.client(c, { storage: store.storage() })
    expect(b.authorId).toBe(id)
    const again = b.counter('acct:alice')
    expect([again.value, again.stable]).toEqual([10, 7])
    expect(again.history()).toEqual([{ index: 1, value: 7 }])
    expect(b.status.pending).toBe(1)
    expect(b.pendingUpdates()).toEqual([{ id: expect.stringMatching(/^[0-9a-f]{64}$/), keys: ['acct:alice'], safe: 0, regular: 1, sent: false }])
    const settled: unknown[] = []
    b.onSettled((u) => settled.push(u))
    for (const r of c.relays) await r.up()
    await c.until('online', () => b.status.online)
    await b.flush()
    await commitUntil(c, 'stable 10', () => again.stable === 10)
    // The resend was a duplicate at most, never a second update.
    expect(c.relays[0]?.stableValue('bank', 'acct:alice')).toBe(10)
    await c.until('settled', () => settled.length === 1)
    expect(settled).toEqual([{ id: expect.stringMatching(/^[0-9a-f]{64}$/), keys: ['acct:alice'], safe: [], index: 2 }])
  })

  it('keeps the unsent updates of every identity that used a storage (same sequence numbers)', async () => {
    const c = await world.cluster()
    const store = reopenable()
    for (const r of c.relays) await r.down()
    const a = await world.client(c, { storage: store.storage() })
    await a.counter('likes').increment(1)
    const first = a.authorId
    await world.shutdown(a)
    // Another user signs in on the same storage: their first envelope has sequence number 1 too.
    const b = await world.client(c, { storage: store.storage(), identity: { secretKey: new Uint8Array(32).fill(7) } })
    expect(b.authorId).not.toBe(first)
    await b.counter('likes').increment(10)
    expect(b.status.pending).toBe(2)
    await world.shutdown(b)

    const again = await world.client(c, { storage: store.storage() })
    expect(again.status.pending).toBe(2)
    for (const r of c.relays) await r.up()
    await c.until('online', () => again.status.online)
    await again.flush()
    await commitUntil(c, 'both committed', () => again.counter('likes').stable === 11)
    expect(c.relays[0]?.stableValue('bank', 'likes')).toBe(11)
  })

  it('restores a client exactly from IndexedDB', async () => {
    const c = await world.cluster()
    const name = `stead-restore-${Math.random()}`
    const a = await world.client(c, { storage: indexedDbStorage(name) })
    await c.until('online', () => a.status.online)
    const alice = a.counter('acct:alice', { min: 0 })
    const guests = a.set<string>('guests')
    const title = a.register<string>('title')
    await alice.increment(9)
    await guests.add('ann')
    await title.set('Hello')
    const safe = alice.decrement(4, { safe: true })
    await a.flush()
    await commitUntil(c, 'stable', () => alice.stable === 5 && title.stable === 'Hello')
    expect(await safe).toMatchObject({ status: 'committed' })
    // Someone else's update, received but not yet committed, and one of our own not yet sent.
    const b = await world.client(c)
    await c.until('b online', () => b.status.online)
    await b.counter('acct:alice', { min: 0 }).increment(100)
    await b.flush()
    await c.until('a received it', () => alice.value === 105)
    for (const r of c.relays) await r.down()
    await guests.add('bob')
    const snapshot = (x: Space) => ({
      id: x.authorId,
      alice: [x.counter('acct:alice', { min: 0 }).value, x.counter('acct:alice', { min: 0 }).stable, x.counter('acct:alice', { min: 0 }).history()],
      guests: [x.set<string>('guests').values().sort(), x.set<string>('guests').stableValues().sort()],
      title: [x.register<string>('title').value, x.register<string>('title').stable],
      status: [x.status.stableIndex, x.status.pending],
    })
    const before = snapshot(a)
    expect(before.alice.slice(0, 2)).toEqual([105, 5])
    expect(before.guests).toEqual([['ann', 'bob'], ['ann']])
    await world.shutdown(a)
    const again = await world.client(c, { storage: indexedDbStorage(name) })
    expect(snapshot(again)).toEqual(before)
  })

  it('recovers after a crash from its checkpoint plus the commits stored after it', async () => {
    const c = await world.cluster()
    const disk = memoryStorage()
    // The same store seen by a process that may die: once it is dead, nothing more it writes lands.
    const view = (dead: { now: boolean }): ClientStorage => ({
      load: (k) => disk.load(k),
      loadRange: (p) => disk.loadRange(p),
      write: (ch) => (dead.now ? new Promise<void>(() => undefined) : disk.write(ch)),
      removeRange: (p) => (dead.now ? new Promise<void>(() => undefined) : disk.removeRange(p)),
      close: async () => undefined,
    })
    const first = { now: false }
    const a = await world.client(c, { storage: view(first), checkpointEvery: 5 })
    await c.until('online', () => a.status.online)
    const k = a.counter('k', { min: 0 })
    const s = a.set<string>('s')
    for (let i = 1; i <= 8; i++) {
      await k.increment(i)
      await s.add(`e${i}`)
      await a.flush()
      await commitUntil(c, `commit ${i}`, () => a.status.pending === 0)
    }
    expect(k.stable).toBe(36)
    const before = { k: [k.value, k.stable, k.history()], s: s.stableValues().sort(), index: a.status.stableIndex }
    // 8 commits of 2 envelopes with a checkpoint every 5 envelopes: the checkpoint after commit 6, then commits 7 and 8.
    expect((await disk.loadRange(['bank', 'commit'])).length).toBe(2)
    first.now = true // it crashes: no close, no final checkpoint
    const crashed = world.abandon(a)
    ;(crashed as unknown as { lead: { sessions: { close(): void } } }).lead.sessions.close()
    const b = await world.client(c, { storage: view({ now: false }), checkpointEvery: 5 })
    const k2 = b.counter('k', { min: 0 })
    expect({ k: [k2.value, k2.stable, k2.history()], s: b.set<string>('s').stableValues().sort(), index: b.status.stableIndex }).toEqual(before)
    // And it goes on from there with the relays.
    await c.until('online', () => b.status.online)
    const stop = committing(c)
    expect(await k2.decrement(30, { safe: true })).toMatchObject({ status: 'committed' })
    expect(await k2.decrement(7, { safe: true })).toMatchObject({ status: 'rejected', reason: 'invariant' })
    stop()
    expect(k2.stable).toBe(6)
  })
})
