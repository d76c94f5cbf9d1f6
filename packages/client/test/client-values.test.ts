import 'fake-indexeddb/auto'
import { DEFAULT_LIMITS, authorIdOf, clockFrom, clockInit, sealEnvelope, toHex, verifyClockCertificate, type Envelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import type { SimCluster } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import { ClosedError, createClient, memoryStorage, type ClientStorage, type Space } from '../src/index.node.ts'
import { commitUntil, committing, lastSubmitted, simWorld, submit } from './helpers/sim-world.ts'

/** The SDK's handles, values and safe updates against real relays in simulated time. */
const world = simWorld()

/** A signing identity made from one byte, the same in every run. */
async function fixedIdentity(byte: number): Promise<{ secretKey: Uint8Array; publicKey: Uint8Array }> {
  const secretKey = new Uint8Array(32).fill(byte)
  return { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }
}

/** Waits until every relay follows the space for each client: then what a relay is handed reaches them. */
async function subscribed(c: SimCluster, spaces: readonly Space[]): Promise<void> {
  await c.until('connected to every relay', () => spaces.every((s) => s.status.relays.every((r) => r.connected)) || undefined)
  // The subscriptions follow the welcomes by one frame (at most 3 ms of simulated time).
  await c.advance(20)
}

describe('handles and values', () => {
  it('shows a regular update at once, stores it, and makes it stable once f+1 relays attest it', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const alice = a.counter('acct:alice', { min: 0 })
    expect(a.counter('acct:alice', { min: 0 })).toBe(alice)
    let calls = 0
    const unsubscribe = alice.subscribe(() => calls++)
    const stored = alice.increment(5)
    expect(alice.value).toBe(5)
    expect(calls).toBe(1)
    expect(alice.stable).toBe(0)
    expect(await stored).toMatchObject({ status: 'stored' })
    await c.until('online', () => a.status.online)
    await a.flush()
    // Its own decision settles once the commit is stored, a moment after the stable value shows.
    await commitUntil(c, 'stable 5, and settled', () => alice.stable === 5 && a.status.pending === 0)
    expect(alice.history()).toEqual([{ index: 1, value: 5 }])
    expect(a.status.stableIndex).toBe(1)
    expect(a.status.pending).toBe(0)
    unsubscribe()
    const before = calls
    void alice.increment(1)
    expect(calls).toBe(before)
  })

  it('seals an update after a quiet spell at once, a burst as one envelope, and at most one envelope per batchIntervalMs', async () => {
    const c = await world.cluster()
    // An interval far longer than the test: only the quiet-spell rule can seal the first burst.
    const s = await world.client(c, { batchIntervalMs: 60_000 })
    await c.until('online', () => s.status.online)
    const burst = [s.counter('a').increment(1), s.counter('b').increment(2), s.counter('c').increment(3)]
    const stored = await Promise.all(burst)
    expect(stored.map((r) => r.status)).toEqual(['stored', 'stored', 'stored'])
    await c.until('the burst submitted', () => c.submitted.size === 1)
    // One envelope, and each result names it.
    expect(stored.map((r) => (r.status === 'stored' ? r.update : undefined))).toEqual(Array(3).fill([...c.submitted.keys()][0]))
    expect(lastSubmitted(c)?.updates.map((u) => u.key).sort()).toEqual(['a', 'b', 'c'])
    // Within the interval of that envelope: the next update waits (it is shown, not yet signed).
    const next = s.counter('a').increment(4)
    let sealed = false
    void next.then(() => (sealed = true))
    await c.advance(50)
    expect(sealed).toBe(false)
    expect(s.counter('a').value).toBe(5)
    expect(c.submitted.size).toBe(1)
    await s.flush()
    expect(sealed).toBe(true)
    expect(c.submitted.size).toBe(2)
  })

  it('refuses to open a key as another type or with other invariants', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    a.counter('x', { min: 0 })
    expect(() => a.counter('x', { min: -5 })).toThrowError(expect.objectContaining({ reason: 'type-mismatch' }))
    expect(() => a.set('x')).toThrowError(expect.objectContaining({ reason: 'type-mismatch' }))
    // Once committed, the declaration binds other clients too.
    await a.counter('y', { min: 0 }).increment(1)
    await c.until('online', () => a.status.online)
    await a.flush()
    const b = await world.client(c)
    await c.until('b online', () => b.status.online)
    await commitUntil(c, 'b sees y', () => b.status.stableIndex >= 1)
    expect(() => b.counter('y', { max: 3 })).toThrowError(expect.objectContaining({ reason: 'type-mismatch' }))
    expect(b.counter('y', { min: 0 }).stable).toBe(1)
  })

  it('resolves safe updates from f+1 attestations: committed, or rejected with the invariant', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const alice = a.counter('acct:alice', { min: 0 })
    await alice.increment(5)
    const ok = alice.decrement(3, { safe: true })
    const tooMuch = alice.decrement(4, { safe: true })
    // The second decrement would take the prospective value below its minimum: it is held back, not shown.
    expect(alice.value).toBe(2)
    expect(alice.pending).toEqual([{ amount: -4, own: true }])
    await c.until('online', () => a.status.online)
    const stop = committing(c)
    expect(await ok).toEqual({ status: 'committed', index: expect.any(Number) })
    expect(await tooMuch).toMatchObject({ status: 'rejected', reason: 'invariant' })
    stop()
    expect(alice.stable).toBe(2)
    expect(alice.value).toBe(2) // the rejected decrement is gone: prospective equals stable (G5)
    expect(alice.pending).toEqual([])
  })

  it('never shows a prospective value an invariant forbids, whatever order updates arrive in', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    const stop = committing(c)
    await a.counter('acct', { min: 0 }).increment(10, { safe: true })
    await c.until('b sees 10', () => b.counter('acct', { min: 0 }).stable === 10)
    stop()
    // Two users withdraw at once; each shows what fits, holding back what does not.
    const mine = b.counter('acct', { min: 0 })
    const seen: number[] = []
    mine.subscribe(() => seen.push(mine.value))
    const w1 = a.counter('acct', { min: 0 }).decrement(7, { safe: true })
    const w2 = mine.decrement(6, { safe: true })
    await c.until('b hears of a', () => mine.pending.length === 1 && !mine.pending[0]!.own)
    expect(mine.value).toBe(4) // its own withdrawal fits; a's (arriving later) is held back
    const set = a.set<string>('seats', { maxSize: 2 })
    expect(await set.add('x')).toMatchObject({ status: 'stored' })
    await set.add('y')
    // Stored, but it cannot apply now: its promise says so (and the order decides it).
    expect(await set.add('z')).toMatchObject({ status: 'held', reason: 'invariant', detail: expect.stringContaining('seats: held back') })
    expect(set.values().sort()).toEqual(['x', 'y'])
    expect(set.pending).toEqual([{ element: 'z', own: true }])
    const stop2 = committing(c)
    const results = await Promise.all([w1, w2])
    await a.settled({ timeoutMs: 15_000 })
    await c.until('b settles', () => mine.pending.length === 0 && mine.stable === mine.value)
    stop2()
    expect(results.map((r) => r.status).sort()).toEqual(['committed', 'rejected'])
    expect(seen.every((v) => v >= 0)).toBe(true)
    expect(set.pending).toEqual([])
    expect(set.values().length).toBe(2)
  })

  it('applies a safe group all or nothing', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const alice = a.counter('acct:alice', { min: 0 })
    const bob = a.counter('acct:bob', { min: 0 })
    await alice.increment(10)
    await c.until('online', () => a.status.online)
    const stop = committing(c)
    const t1 = await a.safe((tx) => {
      tx.counter('acct:alice').decrement(7)
      tx.counter('acct:bob').increment(7)
    })
    expect(t1.status).toBe('committed')
    const t2 = a.safe((tx) => {
      tx.counter('acct:bob').increment(5) // fine on its own
      tx.counter('acct:alice').decrement(5) // breaks min 0: takes the increment down with it
    })
    // It cannot fit alice's minimum where it stands: neither side shows, both list it as held back.
    expect(bob.value).toBe(7)
    expect(bob.pending).toEqual([{ amount: 5, own: true }])
    expect(await t2).toMatchObject({ status: 'rejected', reason: 'invariant' })
    stop()
    expect([alice.stable, bob.stable]).toEqual([3, 7])
    expect([alice.value, bob.value]).toEqual([3, 7])
    await expect(a.safe(() => undefined)).rejects.toMatchObject({ reason: 'malformed' })
    // A transaction can declare an object no one opened yet, and must match one that is open.
    const carol = a.safe((tx) => tx.counter('acct:carol', { min: 0 }).increment(1))
    await expect(a.safe((tx) => tx.counter('acct:alice', { min: 5 }).increment(1))).rejects.toMatchObject({ reason: 'type-mismatch' })
    await expect(a.safe((tx) => tx.set('acct:alice').add('x'))).rejects.toMatchObject({ reason: 'type-mismatch' })
    const stop2 = committing(c)
    expect(await carol).toMatchObject({ status: 'committed' })
    stop2()
    expect(a.counter('acct:carol', { min: 0 }).stable).toBe(1)
  })

  it('supports sets, registers and bounded counters', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const guests = a.set<string>('guests')
    const title = a.register<string>('title')
    await guests.add('ann')
    await guests.add('bob')
    void guests.delete('bob')
    expect(guests.values().sort()).toEqual(['ann'])
    expect(guests.has('bob')).toBe(false)
    await title.set('Draft')
    await title.set('Final')
    expect(title.value).toBe('Final')
    await c.until('online', () => a.status.online)
    await a.flush()
    await commitUntil(c, 'stable set and register', () => guests.stableValues().length === 1 && title.stable === 'Final')
    expect(guests.stableValues()).toEqual(['ann'])
    await guests.delete('ann')
    await a.flush()
    await commitUntil(c, 'ann removed', () => guests.stableValues().length === 0)

    const seats = a.boundedCounter('seats', { min: 0, initial: 3 })
    expect(seats.value).toBe(3)
    expect(seats.rights).toBe(0)
    // No rights yet: the decrement first claims them from the pool (a safe update), then spends them with a regular one.
    const stop = committing(c)
    expect(await seats.decrement(2)).toMatchObject({ status: 'stored' })
    // Only 1 left anywhere: refused at once.
    expect(await seats.decrement(2)).toMatchObject({ status: 'rejected', reason: 'invariant' })
    expect(seats.value).toBe(1)
    await a.flush()
    await c.until('stable 1', () => seats.stable === 1)
    await seats.increment(4) // gives this client 4 rights (and, having spent, it may claim the pool's last one)
    await a.flush()
    await c.until('stable 5', () => seats.stable === 5 && seats.rights >= 4)
    stop()
    // Within its rights a client decrements with no relay at all.
    for (const r of c.relays) await r.down()
    const before = seats.rights
    expect(await seats.decrement(3)).toMatchObject({ status: 'stored' })
    expect(seats.value).toBe(2)
    expect(seats.rights).toBe(before - 3)
  })

  it('reports status changes, and updates the relays refuse for good through results and onError', async () => {
    const c = await world.cluster()
    c.refuse = (env) => (env.updates.some((u) => u.key.startsWith('admin:')) || env.safe.some((g) => g.updates.some((u) => u.key.startsWith('admin:'))) ? 'unauthorized' : undefined)
    const a = await world.client(c)
    const seen: boolean[] = []
    a.onStatus((s) => seen.push(s.online))
    const errors: Array<{ reason: string; keys: readonly string[] }> = []
    a.onError((e) => errors.push({ reason: e.reason, keys: (e as { keys?: readonly string[] }).keys ?? [] }))
    await c.until('online', () => a.status.online)
    expect(seen).toContain(true)
    const admin = a.counter('admin:budget')
    await admin.increment(5)
    expect(admin.value).toBe(5)
    await c.until('refusal reported', () => errors.length > 0)
    expect(errors[0]).toEqual({ reason: 'unauthorized', keys: ['admin:budget'] })
    expect(admin.value).toBe(0) // undone locally: it will never commit
    expect(await admin.increment(1, { safe: true })).toMatchObject({ status: 'rejected', reason: 'unauthorized' })
    // Their sequence numbers are taken by envelopes that change nothing (nobody's updates, no gap left): they commit.
    expect(a.pendingUpdates().every((p) => p.keys.length === 0)).toBe(true)
    await commitUntil(c, 'the fillers committed', () => a.status.pending === 0)
    expect(admin.stable).toBe(0)
    expect(errors).toHaveLength(1)
    for (const r of c.relays) await r.down()
    await c.until('offline reported', () => seen[seen.length - 1] === false)
  })

  it('says in status while its storage fails, and stops saying so once a write goes through', async () => {
    const c = await world.cluster()
    const inner = memoryStorage()
    let failing = false
    const storage: ClientStorage = { ...inner, write: (changes) => (failing ? Promise.reject(new Error('disk full')) : inner.write(changes)) }
    const a = await world.client(c, { storage })
    const errors: string[] = []
    a.onError((e) => errors.push(e.message))
    await c.until('online', () => a.status.online)
    const b = await world.client(c)
    await c.until('b online', () => b.status.online)
    failing = true
    // Another author's update arrives and commits: storing it fails.
    await b.counter('likes').increment(1)
    await b.flush()
    await commitUntil(c, 'a applied it', () => a.counter('likes').stable === 1)
    await c.until('problem reported', () => a.status.problem?.startsWith('storage failed') === true)
    expect(errors.some((m) => /disk full/.test(m))).toBe(true)
    // The disk has room again: the next write clears the problem.
    failing = false
    await a.counter('likes').increment(1)
    expect(a.status.problem).toBeUndefined()
  })

  it('cites what it heard as deps, at most maxDeps per envelope, and lists clock entries only above its stable base', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    // Relays only forward envelopes to sessions that subscribed.
    await subscribed(c, [a])
    const heard = new Set<string>()
    for (let i = 0; i < 270; i++) {
      const secretKey = nodeCrypto.generateSecretKey()
      const me = { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }
      const env = await sealEnvelope(nodeCrypto, me, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'crowd', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })
      heard.add(env.authorId)
      submit(c, env)
    }
    await c.until('heard all', () => a.counter('crowd').value === 270, 20_000)
    await a.counter('crowd').increment(1)
    await a.flush()
    const first = lastSubmitted(c) as Envelope
    expect(first.authorId).toBe(a.authorId)
    expect(first.deps).toHaveLength(DEFAULT_LIMITS.maxDeps)
    // One entry per cited envelope (each its author's seq 1); the author's own entry is its seq, never listed.
    expect([...first.clock]).toEqual([...first.clock].filter(([id, n]) => heard.has(id) && n === 1))
    expect(first.clock.size).toBe(DEFAULT_LIMITS.maxDeps)
    await a.counter('crowd').increment(1)
    await a.flush()
    const second = lastSubmitted(c) as Envelope
    // The next envelope cites other heads and keeps what the first had seen.
    expect(second.deps.some((d) => first.deps.some((e) => toHex(e) === toHex(d)))).toBe(false)
    expect(second.clock.size).toBe(2 * DEFAULT_LIMITS.maxDeps)
    await commitUntil(c, 'all committed', () => a.counter('crowd').stable === 272)
    await a.counter('crowd').increment(1)
    await a.flush()
    const third = lastSubmitted(c) as Envelope
    // Everything heard is in the stable history now: the base covers it and the clock lists nothing.
    expect(third.base).toBe(a.status.stableIndex)
    expect(third.clock.size).toBe(0)
    expect(third.deps).toHaveLength(0)
  })

  it("shows another author's update only after the updates it follows, or once its wait for them runs out", async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    await subscribed(c, [a])
    const key = (n: number) => fixedIdentity(40 + n)
    const [x, y] = [await key(1), await key(2)]
    const bump = (who: typeof x, n: number, deps: Uint8Array[] = [], clock = clockInit()) =>
      sealEnvelope(nodeCrypto, who, { space: 'bank', seq: 1, clock, deps, updates: [{ key: `k${n}`, decl: { type: 'counter', bounds: {} }, ops: [n] }], safe: [] })
    const first = await bump(x, 1)
    const second = await bump(y, 2, [first.id], clockFrom([[authorIdOf(nodeCrypto, x.publicKey), 1]]))
    // The follower arrives first: it waits for what it follows, then both show, in order.
    const shown: string[] = []
    a.counter('k1').subscribe(() => shown.push('k1'))
    a.counter('k2').subscribe(() => shown.push('k2'))
    submit(c, second)
    await c.advance(100)
    expect(a.counter('k2').value).toBe(0)
    submit(c, first)
    await c.until('both shown', () => a.counter('k1').value === 1 && a.counter('k2').value === 2)
    expect(shown.filter((k, i) => shown.indexOf(k) === i)).toEqual(['k1', 'k2'])
    // One whose dep never comes shows once its wait (1 s) runs out.
    const lost = await bump(x, 3)
    const orphan = await bump(await key(3), 4, [lost.id], clockFrom([[authorIdOf(nodeCrypto, x.publicKey), 1]]))
    const t0 = c.now
    submit(c, orphan)
    await c.until('the orphan shown', () => a.counter('k4').value === 4, 5000)
    expect(c.now - t0).toBeGreaterThanOrEqual(900)
  })

  it('compares committed updates by their verifiable clocks, with proofs that need no single relay trusted', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    await subscribed(c, [a, b])
    const settled = (s: Space) => {
      const ids: string[] = []
      s.onSettled((u) => ids.push(u.id))
      return ids
    }
    const [ofA, ofB] = [settled(a), settled(b)]
    await a.counter('k').increment(1)
    await a.flush()
    await c.until('b heard a', () => b.counter('k').value === 1)
    // b's update follows a's: b had seen it.
    await b.counter('k').increment(1)
    await b.flush()
    // Someone else's update that saw neither.
    const secretKey = nodeCrypto.generateSecretKey()
    const other = await sealEnvelope(nodeCrypto, { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })
    submit(c, other)
    await commitUntil(c, 'all committed', () => ofA.length === 1 && ofB.length === 1 && b.counter('k').stable === 3)
    const [ua, ub] = [ofA[0] as string, ofB[0] as string]
    const cmp = await b.compare(ua, ub)
    expect(cmp.order).toBe('before')
    expect((await a.compare(ub, ua)).order).toBe('after')
    expect((await a.compare(ua, ua)).order).toBe('equal')
    expect((await b.compare(other.idHex, ua)).order).toBe('concurrent')
    // Anyone with the cluster's keys checks the proof: f+1 relays' signatures, the author's.
    const keys = { f: c.f, relayKeys: c.relays.map((r) => r.publicKey) }
    const checked = await verifyClockCertificate(nodeCrypto, keys, cmp.a.envelope, cmp.a.certificate)
    expect(checked.env.idHex).toBe(ua)
    const one = { ...cmp.b.certificate, signatures: cmp.b.certificate.signatures.slice(0, c.f) }
    await expect(verifyClockCertificate(nodeCrypto, keys, cmp.b.envelope, one)).rejects.toMatchObject({ reason: 'bad-signature' })
    // A certificate vouches only for the envelopes its attestation decided.
    const never = await sealEnvelope(nodeCrypto, { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }, { space: 'bank', seq: 2, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [2] }], safe: [] })
    await expect(verifyClockCertificate(nodeCrypto, keys, never.signed, cmp.a.certificate)).rejects.toMatchObject({ reason: 'malformed' })
    await expect(b.compare(ua, 'ff'.repeat(32))).rejects.toMatchObject({ reason: 'unsupported' })
    // One update's proof, by id or by the stable index its object's history names.
    const byId = await b.clockProof(ub)
    const at = b.counter('k').history().find((h) => h.index === byId.index)
    expect(at).toBeDefined()
    const byIndex = await b.clockProof(byId.index as number)
    expect(byIndex.id).toBe(ub)
    expect((await verifyClockCertificate(nodeCrypto, keys, byIndex.envelope, byIndex.certificate)).index).toBe(byId.index)
    await expect(b.clockProof(10_000)).rejects.toMatchObject({ reason: 'unsupported' })
  })

  it('rejects bad input with typed errors and refuses use after close', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    await expect(a.counter('n').increment(1.5)).rejects.toMatchObject({ reason: 'malformed' })
    await expect(a.counter('n').decrement(-1)).rejects.toMatchObject({ reason: 'malformed' })
    await expect(a.set('s').add({} as unknown as string)).rejects.toMatchObject({ reason: 'malformed' })
    await expect(a.register('r').set('x'.repeat(600 * 1024))).rejects.toMatchObject({ reason: 'too-large' })
    expect(() => a.counter('')).toThrowError(expect.objectContaining({ reason: 'malformed' }))
    // An unpaired surrogate would reach every other replica as another key (UTF-8 has no form for it).
    expect(() => a.counter('likes\uD800')).toThrowError(expect.objectContaining({ reason: 'malformed', message: expect.stringMatching(/unpaired surrogate/) }))
    expect(a.counter('likes\uD83D\uDE00').value).toBe(0)
    expect(a.counter('n').value).toBe(0)
    await a.close()
    // An open handle stays readable (a component may render once more); anything new or any update is refused.
    expect(a.counter('n').value).toBe(0)
    expect(() => a.counter('other')).toThrow(ClosedError)
    await expect(a.counter('n').increment(1)).rejects.toBeInstanceOf(ClosedError)
    await expect(a.flush()).rejects.toBeInstanceOf(ClosedError)
    await expect(createClient({ relays: [] })).rejects.toMatchObject({ reason: 'malformed' })
    await expect(world.owner(a).space('')).rejects.toMatchObject({ reason: 'malformed' })
  })
})
