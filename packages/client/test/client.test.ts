import 'fake-indexeddb/auto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { authorIdOf, clockFrom, clockInit, encodeEnvelope, sealEnvelope, toHex, type Envelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { afterEach, describe, expect, it } from 'vitest'
import { createClient, lmdbStorage, type ClientOptions, type Space, type SteadClient } from '../src/index.node.ts'
import { FakeCluster, type FakeRelay } from './helpers/fake-cluster.ts'
import { fromHome } from '../src/outbox.ts'
import { until } from './helpers/until.ts'

const open: SteadClient[] = []
const clusters: FakeCluster[] = []

afterEach(async () => {
  for (const c of open.splice(0)) await c.close()
  for (const c of clusters.splice(0)) c.stop()
})

function cluster(n = 4): FakeCluster {
  const c = new FakeCluster('bank', n)
  clusters.push(c)
  return c
}

const owners = new Map<Space, SteadClient>()

/** A new client of the fake cluster, and its space 'bank' (the client is closed after the test). */
async function client(c: FakeCluster, extra: Partial<ClientOptions> = {}): Promise<Space> {
  const cl = await createClient({ ...c.clientOptions(), ...extra })
  open.push(cl)
  const space = await cl.space(c.space)
  owners.set(space, cl)
  return space
}

/** Closes the client a space belongs to (its storage too), as an app shutting down does. */
async function shutdown(space: Space): Promise<void> {
  const cl = owners.get(space) as SteadClient
  open.splice(open.indexOf(cl), 1)
  await cl.close()
}


/** A signing identity made from one byte, the same in every run. */
async function fixedIdentity(byte: number): Promise<{ secretKey: Uint8Array; publicKey: Uint8Array }> {
  const secretKey = new Uint8Array(32).fill(byte)
  return { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }
}

/** Records every envelope the fake cluster takes; the returned function makes one update to `k` and returns the envelope that carried it. */
function sealingInto(c: FakeCluster, space: Space): (k: string) => Promise<Envelope> {
  const taken: Envelope[] = []
  const take = c.take.bind(c)
  c.take = (frame) => {
    const status = take(frame)
    taken.push(c.lastTaken as Envelope)
    return status
  }
  return async (k) => {
    await space.counter(k).increment(1)
    await space.flush()
    return taken.findLast((e) => e.updates.some((u) => u.key === k)) as Envelope
  }
}

/** Commits whatever the relays hold until `check` holds. */
async function commitUntil(c: FakeCluster, what: string, check: () => boolean, ms = 15_000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    c.commit()
    await new Promise((r) => setTimeout(r, 3))
  }
}

describe('handles and values', () => {
  it("keeps its clocks verifiable whatever other writers' clocks say: far-future bases and made-up authors are not cited, a head committed before its dep still counts, a dep that lingers is sent on", async () => {
    const c = cluster()
    const x = await client(c, { resubmitAfterMs: 100 })
    await until('subscribed', () => c.relays.every((r) => [...r.sessions].some((s) => (s as unknown as { subscribed: boolean }).subscribed)))
    const key = (n: number) => fixedIdentity(90 + n)
    const [evil, y1, y2, y3] = [await key(0), await key(1), await key(2), await key(3)]
    const op = (k: string) => ({ key: k, decl: { type: 'counter' as const, bounds: {} }, ops: [1] })
    const idOf = (k: { publicKey: Uint8Array }) => authorIdOf(nodeCrypto, k.publicKey)
    const sealMine = sealingInto(c, x)
    // A far-future base and 300 made-up authors from a Byzantine writer: shown, never cited.
    const made = clockFrom(Array.from({ length: 300 }, (_, i) => [`fake${i}`, 1_000_000] as [string, number]))
    c.take(encodeEnvelope(await sealEnvelope(nodeCrypto, evil, { space: 'bank', seq: 1, base: 1_000_000, clock: clockInit(), deps: [], updates: [op('e1')], safe: [] })))
    c.take(encodeEnvelope(await sealEnvelope(nodeCrypto, evil, { space: 'bank', seq: 2, clock: made, deps: [new Uint8Array(32).fill(7)], updates: [op('e2')], safe: [] })))
    await until('shown', () => x.counter('e1').value === 1 && x.counter('e2').value === 1, 5000)
    const first = await sealMine('m1')
    expect(first.base).toBe(x.status.stableIndex)
    expect(first.deps).toHaveLength(0)
    expect(first.clock.size).toBe(0)
    // D (following A) commits before A: x's next clock still counts A.
    const A = await sealEnvelope(nodeCrypto, y1, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('a')], safe: [] })
    const D = await sealEnvelope(nodeCrypto, y2, { space: 'bank', seq: 1, clock: clockFrom([[idOf(y1), 1]]), deps: [A.id], updates: [op('d')], safe: [] })
    c.take(encodeEnvelope(A))
    c.take(encodeEnvelope(D))
    await until('x applied A and D', () => x.counter('a').value === 1 && x.counter('d').value === 1)
    c.commit((e) => e.idHex === D.idHex || e.idHex === first.idHex)
    await until('D stable', () => x.counter('d').stable === 1)
    const second = await sealMine('m2')
    expect(second.clock.get(idOf(y1))).toBe(1)
    await commitUntil(c, 'all stable', () => x.counter('a').stable === 1 && x.counter('m2').stable === 1)
    // D executed before its dep A, so the audit could not verify D's clock, nor this one, which carries D's claim on.
    await expect(x.compare(A.idHex, second.idHex)).rejects.toMatchObject({ reason: 'unsupported' })
    // Y3 reached x, but the relay that took it lost it: x cites it, then sends it on itself, and it commits.
    const Y3 = await sealEnvelope(nodeCrypto, y3, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('y3')], safe: [] })
    c.take(encodeEnvelope(Y3))
    const lost = c as unknown as { queue: Array<{ env: Envelope }>; queued: Set<string> }
    lost.queue = lost.queue.filter((q) => q.env.idHex !== Y3.idHex)
    lost.queued.delete(Y3.idHex)
    await until('x applied Y3', () => x.counter('y3').value === 1)
    const third = await sealMine('m3')
    expect(third.deps.map(toHex)).toEqual([Y3.idHex])
    await commitUntil(c, 'Y3 and m3 stable', () => x.counter('y3').stable === 1 && x.counter('m3').stable === 1)
    // m3 committed before Y3 came back, so its clock is unverified; nothing after it stays so.
    const fourth = await sealMine('m4')
    await commitUntil(c, 'm4 stable', () => x.counter('m4').stable === 1)
    expect((await x.compare(Y3.idHex, fourth.idHex)).order).toBe('before')
    expect((await x.compare(third.idHex, fourth.idHex).catch((e: unknown) => e)) as object).toMatchObject({ reason: 'unsupported' })
  })

  it("cites only what it holds: not a seq far ahead, not over heads that a far-future base would erase; shows an envelope only once it reached that envelope's base", async () => {
    const c = cluster()
    const x = await client(c)
    await until('subscribed', () => c.relays.every((r) => [...r.sessions].some((s) => (s as unknown as { subscribed: boolean }).subscribed)))
    const key = (n: number) => fixedIdentity(110 + n)
    const [evil, w, y, z] = [await key(0), await key(1), await key(2), await key(3)]
    const op = (k: string) => ({ key: k, decl: { type: 'counter' as const, bounds: {} }, ops: [1] })
    const sealMine = sealingInto(c, x)
    // Z1 is an honest head; a Byzantine envelope with a far-future base cites it, another claims seq 1,000,000.
    const Z1 = await sealEnvelope(nodeCrypto, z, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('z')], safe: [] })
    c.take(encodeEnvelope(Z1))
    await until('Z1 shown', () => x.counter('z').value === 1)
    c.take(encodeEnvelope(await sealEnvelope(nodeCrypto, evil, { space: 'bank', seq: 1_000_000, clock: clockInit(), deps: [], updates: [op('far')], safe: [] })))
    await until('the far seq shown', () => x.counter('far').value === 1)
    const first = await sealMine('m1')
    expect(first.deps.map(toHex)).toEqual([Z1.idHex])
    expect([...first.clock]).toEqual([[authorIdOf(nodeCrypto, z.publicKey), 1]])
    // Y1 counts the stable history up to index 2 as seen: x shows it only once x has reached it, then cites it.
    c.commit()
    await until('stable 2', () => x.status.stableIndex === 2)
    const W = await sealEnvelope(nodeCrypto, w, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('w')], safe: [] })
    const Y1 = await sealEnvelope(nodeCrypto, y, { space: 'bank', seq: 1, base: 3, clock: clockInit(), deps: [], updates: [op('y')], safe: [] })
    c.take(encodeEnvelope(Y1))
    await new Promise((r) => setTimeout(r, 100))
    expect(x.counter('y').value).toBe(0)
    c.take(encodeEnvelope(W))
    c.commit((e) => e.idHex === W.idHex)
    await until('Y1 shown after index 3', () => x.status.stableIndex === 3 && x.counter('y').value === 1)
    const reply = await sealMine('reply')
    expect(reply.deps.map(toHex)).toEqual([Y1.idHex])
    await commitUntil(c, 'all stable', () => x.counter('y').stable === 1 && x.counter('reply').stable === 1)
    expect((await x.compare(Y1.idHex, reply.idHex)).order).toBe('before')
  })
})

describe('transport', () => {
  it('keeps and resends an envelope dropped for a gap until its predecessor commits', async () => {
    const c = cluster()
    const a = await client(c, { resubmitAfterMs: 60_000 })
    await until('online', () => a.status.online)
    const k = a.counter('k')
    await k.increment(1) // seq 1: held back by the relays below
    await a.flush()
    const second = k.increment(10, { safe: true }) // seq 2
    await a.flush()
    c.commit((env) => env.seq === 2) // seq 2 is ordered first: it waits for seq 1
    for (let i = 0; i < 40; i++) c.commit(() => false) // 80 rounds pass: seq 2 is dropped as a gap
    await until('gap decided', () => a.status.stableIndex === 0 && c.log.length >= 2)
    expect(k.value).toBe(11) // still shown: it is still this client's update
    await commitUntil(c, 'both committed', () => k.stable === 11)
    expect(await second).toMatchObject({ status: 'committed' })
    expect(k.value).toBe(11)
  })

})


describe('starting from a verified snapshot', () => {
  /** A cluster whose space holds `n` committed increments of 'acct' and a set, made by one client. */
  async function history(n: number): Promise<{ c: FakeCluster; writer: Space }> {
    const c = cluster()
    const writer = await client(c)
    const acct = writer.counter('acct')
    // One safe update at a time: a history of n + 1 commits.
    const stop = c.autoCommit(2)
    for (let i = 0; i < n; i++) await acct.increment(1, { safe: true })
    await writer.set('tags').add('x', { safe: true })
    stop()
    await until('history stable at the writer', () => acct.stable === n && writer.set('tags').stable.length === 1)
    expect(c.log.length).toBeGreaterThan(n)
    for (const r of c.relays) r.commitsSent = 0
    c.snapshotRequests.length = 0
    return { c, writer }
  }

  /** The relay a client of space 'bank' asks first. */
  const home = (c: FakeCluster): number => fromHome('bank', c.relays.length, c.relays.map((r) => ({ relay: r.index })) as never)[0]!.relay as number

  it('a client with nothing stored starts at the latest snapshot f+1 relays vouch for, replays no earlier commit, and follows from there', async () => {
    const { c, writer } = await history(40)
    const reader = await client(c)
    await until('reader at the writer state', () => reader.counter('acct').stable === 40 && reader.set('tags').stable.length === 1)
    expect(c.relays.reduce((n, r) => n + r.commitsSent, 0)).toBe(0)
    expect(c.snapshotRequests.filter((q) => q.path.endsWith('/snapshot'))).toEqual([{ relay: home(c), path: '/v1/spaces/bank/snapshot' }])
    expect(new Set(c.snapshotRequests.filter((q) => q.path.includes('/attestations/')).map((q) => q.relay)).size).toBeGreaterThanOrEqual(c.f)
    expect(reader.status.relays.every((r) => r.faulty === undefined)).toBe(true)
    // It follows the commits after the snapshot, and its own updates decide as usual.
    const mine = reader.counter('acct').increment(2, { safe: true })
    void writer.counter('acct').increment(3)
    await commitUntil(c, 'both decided', () => reader.counter('acct').stable === 45 && writer.counter('acct').stable === 45)
    expect(await mine).toMatchObject({ status: 'committed' })
  })

  it('a client back after the relays pruned past its position starts again from a verified snapshot, its own envelope decided meanwhile settled', async () => {
    const { c, writer } = await history(5)
    const dir = mkdtempSync(join(tmpdir(), 'stead-client-'))
    const away = await client(c, { storage: lmdbStorage(dir) })
    await until('caught up', () => away.counter('acct').stable === 5)
    // Sent and queued, then the app closes before it commits.
    void away.counter('acct').increment(100).catch(() => undefined)
    await until('queued at the relays', () => c.queuedCount === 1)
    await shutdown(away)
    const stop = c.autoCommit(2)
    for (let i = 0; i < 10; i++) await writer.counter('acct').increment(1, { safe: true })
    stop()
    c.pruneBelow(c.latestSnapshot()!.fromIndex)
    c.snapshotRequests.length = 0
    const back = await client(c, { storage: lmdbStorage(dir) })
    await until('back at the stable state', () => back.counter('acct').stable === 115 && back.status.pending === 0, 15_000)
    expect(back.counter('acct').value).toBe(115)
    expect(c.snapshotRequests.some((q) => q.path.endsWith('/snapshot'))).toBe(true)
    expect(back.status.problem).toBeUndefined()
  })

  /**
   * A client stored at the writer's state (a counter and a set of 20 long elements), closed while
   * the writer adds `hot` increments to the counter and one element to the set.
   */
  async function awayWhile(hot: number): Promise<{ c: FakeCluster; writer: Space; dir: string; at: number }> {
    const { c, writer } = await history(3)
    const stop = c.autoCommit(2)
    for (let i = 0; i < 20; i++) await writer.set('cold').add(`element ${i} of a set whose state outweighs one op`, { safe: true })
    const dir = mkdtempSync(join(tmpdir(), 'stead-client-'))
    const away = await client(c, { storage: lmdbStorage(dir) })
    await until('caught up', () => away.counter('acct').stable === 3 && away.set('cold').stable.length === 20)
    await shutdown(away)
    const at = c.log.length
    for (let i = 0; i < hot; i++) await writer.counter('acct').increment(1, { safe: true })
    await writer.set('cold').add('one more', { safe: true })
    stop()
    for (const r of c.relays) r.commitsSent = 0
    c.snapshotRequests.length = 0
    return { c, writer, dir, at: c.log[at]!.fromIndex }
  }

  it('a client back after a while catches up by a delta f+1 relays vouch for (the hot counter as its state, the cold one as ops), not commit by commit', async () => {
    const { c, writer, dir, at } = await awayWhile(20)
    const delta = c.delta(at)!.delta
    // BENDY's rule on what the relay serves: 20 ops outweigh the counter's state; one op does not.
    expect(delta.objects.map((o) => [o.key, o.mode])).toEqual([
      ['acct', 'state'],
      ['cold', 'ops'],
    ])
    const back = await client(c, { storage: lmdbStorage(dir) })
    await until('back at the stable state', () => back.counter('acct').stable === 23 && back.set('cold').stable.length === 21)
    expect(c.snapshotRequests.filter((q) => q.path.endsWith('/delta'))).toHaveLength(1)
    expect(c.relays.reduce((n, r) => n + r.commitsSent, 0)).toBe(0)
    expect(back.status.problem).toBeUndefined()
    // It follows the commits after the delta, and its own updates decide as usual.
    const mine = back.counter('acct').increment(2, { safe: true })
    await commitUntil(c, 'decided', () => back.counter('acct').stable === 25 && writer.counter('acct').stable === 25)
    expect(await mine).toMatchObject({ status: 'committed' })
  })

  it('refuses a relay that serves a delta leading elsewhere, reports it, and catches up from a true one', async () => {
    const { c, dir } = await awayWhile(12)
    const liar = c.relays[home(c)] as FakeRelay
    liar.misbehaviour = 'wrong-delta'
    const back = await client(c, { storage: lmdbStorage(dir) })
    await until('liar reported', () => back.status.relays[liar.index]?.faulty !== undefined)
    expect(back.status.relays[liar.index]?.faulty).toMatch(/delta that proves nothing/)
    await until('back at the true state', () => back.counter('acct').stable === 15 && back.set('cold').stable.length === 21)
    expect(back.counter('acct').value).toBe(15)
    expect(c.relays.reduce((n, r) => n + r.commitsSent, 0)).toBe(0)
  })

  it('follows the commits instead of a delta that would decide its own envelope (only commits say how a safe update fared)', async () => {
    const { c, writer } = await history(3)
    const dir = mkdtempSync(join(tmpdir(), 'stead-client-'))
    const away = await client(c, { storage: lmdbStorage(dir) })
    await until('caught up', () => away.counter('acct').stable === 3)
    void away.counter('acct').decrement(3, { safe: true }).catch(() => undefined)
    await until('queued at the relays', () => c.queuedCount === 1)
    await shutdown(away)
    const stop = c.autoCommit(2)
    for (let i = 0; i < 5; i++) await writer.counter('acct').increment(1, { safe: true })
    stop()
    for (const r of c.relays) r.commitsSent = 0
    const back = await client(c, { storage: lmdbStorage(dir) })
    await until('back at the stable state', () => back.counter('acct').stable === 5 && back.status.pending === 0)
    expect(c.snapshotRequests.some((q) => q.path.endsWith('/delta'))).toBe(true)
    expect(c.relays.reduce((n, r) => n + r.commitsSent, 0)).toBeGreaterThan(0)
  })

  it('after every session was lost it catches up by delta, and compact attestations of the rounds it skipped are not held against honest relays', async () => {
    const c = cluster()
    const writer = await client(c)
    const reader = await client(c)
    await writer.counter('acct').increment(1)
    await commitUntil(c, 'reader follows', () => reader.counter('acct').stable === 1)
    // The reader's frame source goes quiet for one round: the others' compact attestations of it wait, unmatched.
    const source = c.relays[home(c)] as FakeRelay
    source.misbehaviour = 'silent'
    await writer.counter('acct').increment(1)
    await writer.flush()
    c.commit()
    await new Promise((r) => setTimeout(r, 30))
    for (const r of c.relays) r.setOnline(false)
    await until('offline', () => !reader.status.online)
    source.misbehaviour = 'none'
    c.snapshotRequests.length = 0
    for (const r of c.relays) r.setOnline(true)
    await until('caught up', () => reader.counter('acct').stable === 2)
    expect(c.snapshotRequests.filter((q) => q.path.endsWith('/delta')).length).toBeGreaterThan(0)
    await writer.counter('acct').increment(1)
    await commitUntil(c, 'the next commit applied', () => reader.counter('acct').stable === 3)
    expect(reader.status.relays.filter((r) => r.faulty !== undefined)).toEqual([])
  })

  for (const mode of ['forge-snapshot', 'mismatched-snapshot'] as const) {
    it(`refuses a relay that serves a forged snapshot (${mode}), reports it, and starts from a true one`, async () => {
      const { c } = await history(12)
      const liar = c.relays[home(c)] as FakeRelay
      liar.misbehaviour = mode
      const reader = await client(c)
      await until('liar reported', () => reader.status.relays[liar.index]?.faulty !== undefined)
      expect(reader.status.relays[liar.index]?.faulty).toMatch(mode === 'forge-snapshot' ? /attested differently/ : /does not match the state hash/)
      await until('reader at the true state', () => reader.counter('acct').stable === 12)
      // It never showed the forged 13, and it still did not replay history.
      expect(reader.counter('acct').value).toBe(12)
      expect(c.snapshotRequests.filter((q) => q.path.endsWith('/snapshot')).length).toBe(2)
      expect(c.relays.reduce((n, r) => n + r.commitsSent, 0)).toBe(0)
    })
  }
})
