import { authorIdOf, clockFrom, clockInit, sealEnvelope, toHex, type Envelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import type { SimCluster } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import type { Space } from '../src/index.node.ts'
import { commitUntil, simWorld, submit } from './helpers/sim-world.ts'

/**
 * The Chrono clocks a client signs stay verifiable whatever other writers
 * send it, and what it cites it holds: against real relays in simulated
 * time, other authors' envelopes made by hand. One a relay shows its
 * clients and never orders (`showOnly`) is one a Byzantine writer got
 * through, or one a relay lost after taking it.
 */
const world = simWorld()

/** A signing identity made from one byte, the same in every run. */
async function fixedIdentity(byte: number): Promise<{ secretKey: Uint8Array; publicKey: Uint8Array }> {
  const secretKey = new Uint8Array(32).fill(byte)
  return { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }
}

const op = (k: string) => ({ key: k, decl: { type: 'counter' as const, bounds: {} }, ops: [1] })

/** Every relay shows `env` to its clients (those taking frames there), and none orders it. */
function showOnly(c: SimCluster, env: Envelope): void {
  for (const r of c.relays) r.showOnly(env)
}

/** Waits until every relay follows the space for `space`'s client: then what a relay is handed reaches it. */
async function subscribed(c: SimCluster, space: Space): Promise<void> {
  await c.until('connected to every relay', () => space.status.relays.every((r) => r.connected) || undefined)
  // The subscriptions follow the welcomes by one frame (at most 3 ms of simulated time).
  await c.advance(20)
}

/** Makes one update to `k` and returns the envelope that carried it, as the relays got it. */
function sealingInto(c: SimCluster, space: Space): (k: string) => Promise<Envelope> {
  return async (k) => {
    await space.counter(k).increment(1)
    await space.flush()
    await c.until(`the envelope of ${k} submitted`, () => [...c.submitted.values()].some((e) => e.authorId === space.authorId && e.updates.some((u) => u.key === k)))
    return [...c.submitted.values()].findLast((e) => e.authorId === space.authorId && e.updates.some((u) => u.key === k)) as Envelope
  }
}

describe('clocks a client signs', () => {
  it("keeps its clocks verifiable whatever other writers' clocks say: far-future bases and made-up authors are not cited, a head committed before its dep still counts, a dep that lingers is sent on (or asked for by the relays)", async () => {
    const c = await world.cluster()
    // A fixed identity: which relays judge x's envelopes before they commit, and so which get votes, is the same every run.
    const x = await world.client(c, { resubmitAfterMs: 100, identity: await fixedIdentity(89) })
    await subscribed(c, x)
    const key = (n: number) => fixedIdentity(90 + n)
    const [evil, y1, y2, y3] = [await key(0), await key(1), await key(2), await key(3)]
    const idOf = (k: { publicKey: Uint8Array }) => authorIdOf(nodeCrypto, k.publicKey)
    const sealMine = sealingInto(c, x)
    // A far-future base and 300 made-up authors from a Byzantine writer: shown, never cited.
    const made = clockFrom(Array.from({ length: 300 }, (_, i) => [`fake${i}`, 1_000_000] as [string, number]))
    showOnly(c, await sealEnvelope(nodeCrypto, evil, { space: 'bank', seq: 1, base: 1_000_000, clock: clockInit(), deps: [], updates: [op('e1')], safe: [] }))
    showOnly(c, await sealEnvelope(nodeCrypto, evil, { space: 'bank', seq: 2, clock: made, deps: [new Uint8Array(32).fill(7)], updates: [op('e2')], safe: [] }))
    await c.until('shown', () => x.counter('e1').value === 1 && x.counter('e2').value === 1)
    const first = await sealMine('m1')
    expect(first.base).toBe(x.status.stableIndex)
    expect(first.deps).toHaveLength(0)
    expect(first.clock.size).toBe(0)
    // D (following A) commits before A: x's next clock still counts A.
    const A = await sealEnvelope(nodeCrypto, y1, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('a')], safe: [] })
    const D = await sealEnvelope(nodeCrypto, y2, { space: 'bank', seq: 1, clock: clockFrom([[idOf(y1), 1]]), deps: [A.id], updates: [op('d')], safe: [] })
    showOnly(c, A)
    submit(c, D)
    await c.until('x applied A and D', () => x.counter('a').value === 1 && x.counter('d').value === 1)
    await commitUntil(c, 'D stable', () => x.counter('d').stable === 1 && x.counter('m1').stable === 1)
    expect(x.counter('a').stable).toBe(0)
    const second = await sealMine('m2')
    expect(second.clock.get(idOf(y1))).toBe(1)
    submit(c, A)
    await commitUntil(c, 'all stable', () => x.counter('a').stable === 1 && x.counter('m2').stable === 1)
    // D executed before its dep A, so the audit could not verify D's clock, nor this one, which carries D's claim on
    // (and it committed before enough relays held A to vote for it: no validator certificate either).
    await expect(x.compare(A.idHex, second.idHex)).rejects.toMatchObject({ reason: 'unsupported' })
    // Y3 reached x, but the relay that took it lost it: x cites it, then sends it on itself, and it commits.
    const Y3 = await sealEnvelope(nodeCrypto, y3, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('y3')], safe: [] })
    showOnly(c, Y3)
    await c.until('x applied Y3', () => x.counter('y3').value === 1)
    const third = await sealMine('m3')
    expect(third.deps.map(toHex)).toEqual([Y3.idHex])
    await commitUntil(c, 'Y3 and m3 stable', () => x.counter('y3').stable === 1 && x.counter('m3').stable === 1)
    // The relay that judged m3 asked x for Y3 at once (want), so Y3 was ordered with m3, not after it: the audit
    // verified m3's clock too, and its commit proves it.
    const fourth = await sealMine('m4')
    await commitUntil(c, 'm4 stable', () => x.counter('m4').stable === 1)
    expect((await x.compare(Y3.idHex, fourth.idHex)).order).toBe('before')
    const tf = await x.compare(third.idHex, fourth.idHex)
    expect(tf.order).toBe('before')
    expect(tf.a.certificate.kind).toBeUndefined()
    expect(tf.a.index).toBeGreaterThan(0)
  })

  it("cites only what it holds: not a seq far ahead, not over heads that a far-future base would erase; shows an envelope only once it reached that envelope's base", async () => {
    const c = await world.cluster()
    const x = await world.client(c)
    await subscribed(c, x)
    const key = (n: number) => fixedIdentity(110 + n)
    const [evil, w, y, z] = [await key(0), await key(1), await key(2), await key(3)]
    const sealMine = sealingInto(c, x)
    // Z1 is an honest head; a Byzantine envelope with a far-future base cites it, another claims seq 1,000,000.
    const Z1 = await sealEnvelope(nodeCrypto, z, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('z')], safe: [] })
    submit(c, Z1)
    await c.until('Z1 shown', () => x.counter('z').value === 1)
    showOnly(c, await sealEnvelope(nodeCrypto, evil, { space: 'bank', seq: 1_000_000, clock: clockInit(), deps: [], updates: [op('far')], safe: [] }))
    await c.until('the far seq shown', () => x.counter('far').value === 1)
    const first = await sealMine('m1')
    expect(first.deps.map(toHex)).toEqual([Z1.idHex])
    expect([...first.clock]).toEqual([[authorIdOf(nodeCrypto, z.publicKey), 1]])
    // Y1 counts the stable history up to index 2 as seen: x shows it only once x has reached it, then cites it.
    await commitUntil(c, 'stable 2', () => x.status.stableIndex === 2)
    const W = await sealEnvelope(nodeCrypto, w, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('w')], safe: [] })
    const Y1 = await sealEnvelope(nodeCrypto, y, { space: 'bank', seq: 1, base: 3, clock: clockInit(), deps: [], updates: [op('y')], safe: [] })
    showOnly(c, Y1)
    await c.advance(100)
    expect(x.counter('y').value).toBe(0)
    submit(c, W)
    await commitUntil(c, 'Y1 shown after index 3', () => x.status.stableIndex === 3 && x.counter('y').value === 1)
    const reply = await sealMine('reply')
    expect(reply.deps.map(toHex)).toEqual([Y1.idHex])
    submit(c, Y1)
    await commitUntil(c, 'all stable', () => x.counter('y').stable === 1 && x.counter('reply').stable === 1)
    expect((await x.compare(Y1.idHex, reply.idHex)).order).toBe('before')
  })

  it('keeps and resends an envelope dropped for a gap until its predecessor commits', async () => {
    const c = await world.cluster()
    const a = await world.client(c, { resubmitAfterMs: 60_000 })
    const b = await world.client(c)
    await c.until('online', () => a.status.online && b.status.online)
    // The relays lose a's seq 1 (they answer queued, and drop it): its seq 2 is ordered alone.
    c.censor = (env) => env.authorId === a.authorId && env.seq === 1
    const k = a.counter('k')
    await k.increment(1)
    await a.flush()
    const second = k.increment(10, { safe: true, timeoutMs: Number.POSITIVE_INFINITY })
    await a.flush()
    await c.until('seq 2 submitted', () => [...c.submitted.values()].some((e) => e.authorId === a.authorId && e.seq === 2))
    // Others' commits move the order on past the gap wait (64 commit positions): seq 2 is dropped as a gap.
    c.release()
    for (let i = 0; i < 80; i++) await b.counter('other').increment(1, { safe: true })
    expect(k.stable).toBe(0)
    expect(k.value).toBe(11) // still shown: it is still this client's update
    // The relays take seq 1 when a sends it again: both commit, seq 2 sent again after it.
    c.censor = () => false
    await commitUntil(c, 'both committed', () => k.stable === 11, 300_000)
    expect(await second).toMatchObject({ status: 'committed' })
    expect(k.value).toBe(11)
  })
})
