import 'fake-indexeddb/auto'
import { clockInit, clockQuorum, clockRank, sealEnvelope, verifyClockCertificate, type CertifiedClock } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import type { SimCluster } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import type { ClockProof, Space } from '../src/index.node.ts'
import { commitUntil, simWorld, submit } from './helpers/sim-world.ts'

/** Chrono's clock certificates before any order: relays' validators vote as envelopes arrive; proofs for any update, from any client. */
const world = simWorld()

async function subscribed(c: SimCluster, spaces: readonly Space[]): Promise<void> {
  await c.until('connected to every relay', () => spaces.every((s) => s.status.relays.every((r) => r.connected)) || undefined)
  await c.advance(20)
}

/** A held cluster and `n` clients of space bank on it, each following every relay. */
async function clients(n: number): Promise<{ c: SimCluster; spaces: Space[] }> {
  const c = await world.cluster()
  const spaces: Space[] = []
  for (let i = 0; i < n; i++) spaces.push(await world.client(c))
  await subscribed(c, spaces)
  return { c, spaces }
}

/** `s` adds 1 to counter k and sends it: the id of that update. */
async function increment(s: Space): Promise<string> {
  await s.counter('k').increment(1)
  await s.flush()
  const [p] = s.pendingUpdates()
  if (!p) throw new Error('nothing pending')
  return p.id
}

/** An update by an author that saw nothing (base 0, empty clock), handed to three relays as a client does after its first relay is slow (held clusters make no blocks to carry it to the others). */
async function stranger(c: SimCluster): Promise<string> {
  const secretKey = nodeCrypto.generateSecretKey()
  const env = await sealEnvelope(nodeCrypto, { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })
  for (const relay of [0, 1, 2]) submit(c, env, relay)
  return env.idHex
}

/** The proof of `id` as soon as some relays hold enough to make one (simulated time runs meanwhile). */
async function proofOf(c: SimCluster, s: Space, id: string): Promise<ClockProof> {
  let proof: ClockProof | undefined
  await c.until(`a proof of ${id.slice(0, 8)}`, async () => (proof = await s.clockProof(id).catch(() => undefined)) !== undefined || undefined)
  return proof as ClockProof
}

describe('clock certificates before order', () => {
  it('proves an update from the relays’ clock votes while nothing is ordered, and from its commit afterwards', async () => {
    const { c, spaces } = await clients(2)
    const [a, b] = spaces as [Space, Space]
    const id = await increment(a)
    // The cluster is held: nothing commits, yet the relays' validators vote, and any client gathers the votes.
    const early = await proofOf(c, b, id)
    expect(early.index).toBeUndefined()
    expect(early.certificate.kind).toBe('validators')
    const keys = { f: c.f, relayKeys: c.relays.map((r) => r.publicKey) }
    expect(early.certificate.signatures.length).toBeGreaterThanOrEqual(clockQuorum(keys))
    const checked = await verifyClockCertificate(nodeCrypto, keys, early.envelope, early.certificate)
    expect(checked.env.idHex).toBe(id)
    expect(checked.index).toBeUndefined()
    // The relays vouch for its weight too, the sum of its full clock: it saw nothing before it.
    expect(checked.weight).toBe(1)
    // f+1 votes are not a certificate: the monotonicity validator is stateful.
    const short = { ...early.certificate, signatures: early.certificate.signatures.slice(0, c.f + 1) }
    await expect(verifyClockCertificate(nodeCrypto, keys, early.envelope, short)).rejects.toMatchObject({ reason: 'bad-signature' })
    expect(c.relays.every((r) => r.node.reads.stableIndexOf('bank') === 0)).toBe(true)

    await commitUntil(c, 'committed', () => a.counter('k').stable === 1 && b.counter('k').stable === 1)
    const late = await b.clockProof(id)
    expect(late.index).toBe(1)
    expect((await verifyClockCertificate(nodeCrypto, keys, late.envelope, late.certificate)).index).toBe(1)
  })

  it('compares updates before any order, by what their clocks list and their bases', async () => {
    const { c, spaces } = await clients(2)
    const [a, b] = spaces as [Space, Space]
    const first = await increment(a)
    await c.until('b heard a', () => b.counter('k').value === 1 || undefined)
    const second = await increment(b)
    const other = await stranger(c)
    // Each relay votes once it holds the inputs; the client hands its update to more relays as time passes.
    for (const id of [first, second, other]) await proofOf(c, a, id)
    const cmp = await a.compare(first, second)
    expect(cmp.order).toBe('before')
    expect([cmp.a.index, cmp.b.index]).toEqual([undefined, undefined])
    // Their weights extend that order to a total one (the second saw the first: 2 against 1).
    const keys = { f: c.f, relayKeys: c.relays.map((r) => r.publicKey) }
    const [x, y] = await Promise.all([cmp.a, cmp.b].map((p) => verifyClockCertificate(nodeCrypto, keys, p.envelope, p.certificate)))
    expect([x?.weight, y?.weight]).toEqual([1, 2])
    expect(clockRank(x as CertifiedClock, y as CertifiedClock)).toBeLessThan(0)
    expect((await b.compare(second, first)).order).toBe('after')
    // Bases 0 on all three: none can commit at or below another's base, so concurrency is proven too.
    expect((await a.compare(other, second)).order).toBe('concurrent')
    expect(c.relays.every((r) => r.node.reads.stableIndexOf('bank') === 0)).toBe(true)
  })
  it('waits for the commit when the answer hangs on where an update commits, then answers', async () => {
    const { c, spaces } = await clients(1)
    const a = spaces[0] as Space
    await a.counter('k').increment(1)
    await commitUntil(c, 'stable 1', () => a.counter('k').stable === 1 && a.status.pending === 0)
    // a's next update has base 1; another author's, made before it heard anything, base 0.
    const mine = await increment(a)
    const other = await stranger(c)
    for (const id of [mine, other]) await proofOf(c, a, id)
    // Had `other` committed at index 1, a's update would have seen it: only its commit tells.
    let answered: string | undefined
    const cmp = a.compare(other, mine).then((x) => (answered = x.order))
    await c.advance(500)
    expect(answered).toBeUndefined()
    await commitUntil(c, 'both committed', () => a.counter('k').stable === 3)
    await c.until('compared', () => answered)
    expect(await cmp).toBe('concurrent')
    expect((await a.compare(mine, other)).order).toBe('concurrent')
  })
  it('fetches an input no relay holds from the client that cites it, then certifies both, and the audit verifies the clock too', async () => {
    const { c, spaces } = await clients(1)
    const b = spaces[0] as Space
    // X reaches b but no relay holds it (a relay shows it to its clients without taking it, as a peer would hand it on).
    const secretKey = nodeCrypto.generateSecretKey()
    const x = await sealEnvelope(nodeCrypto, { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })
    for (const r of c.relays) r.showOnly(x)
    await c.until('b holds X', () => b.counter('k').value === 1 || undefined)
    // b's update cites X: each relay that judges it asks b for X first.
    const mine = await increment(b)
    // The relay it went to asks at once (not after b's resubmit timeout, 2 s), and votes once X is in.
    const sent = c.now
    await c.until('a relay voted for it', () => c.relays.some((r, i) => r.node.clockEvidence('bank', mine)?.votes.some(([by]) => by === i)) || undefined)
    expect(c.now - sent).toBeLessThan(100)
    const proof = await proofOf(c, b, mine)
    expect(proof.certificate.kind).toBe('validators')
    expect((await proofOf(c, b, x.idHex)).certificate.kind).toBe('validators')
    expect((await b.compare(x.idHex, mine)).order).toBe('before')
    // Ordered: the audit finds X in the stable history before b's update, and verifies its clock as the relays did.
    await commitUntil(c, 'both committed', () => b.counter('k').stable === 2)
    const committed = await b.clockProof(mine)
    expect(committed.index).toBeDefined()
    expect(committed.certificate.kind).toBeUndefined()
  })

  it('gathers validator certificates from the relays’ vote feeds without asking them, and keeps the votes after the commit', async () => {
    const { c, spaces } = await clients(2)
    const [a, b] = spaces as [Space, Space]
    const written = await a.register('r').set('x')
    // A regular update's result names its envelope.
    if (written.status !== 'stored' || !written.update) throw new Error(`no envelope named: ${JSON.stringify(written)}`)
    const id = written.update
    // Held: the envelope reaches the other relays as its author sends it on (every 2 s); each relay votes and tells its subscribers.
    await c.advance(10_000)
    expect(b.register('r').undecided()).toEqual([{ id, author: world.owner(a).authorId, seq: 1 }])
    const asked = (): number => c.relays.flatMap((r) => r.requests).filter((path) => path.includes('/clock/')).length
    const before = asked()
    const proof = await b.clockProof(id, { kind: 'validators' })
    expect(proof.certificate.kind).toBe('validators')
    expect(asked()).toBe(before)
    // Once committed, the strongest proof is the commit's; the votes are still there for whoever needs the weight.
    await commitUntil(c, 'the update commits', () => b.register('r').undecided().length === 0)
    expect((await b.clockProof(id)).index).toBeGreaterThan(0)
    expect((await b.clockProof(id, { kind: 'validators' })).certificate).toEqual(proof.certificate)
    // timeoutMs waits for a certificate that does not exist yet.
    const next = await a.register('r').set('y')
    const later = await b.clockProof((next as { update: string }).update, { kind: 'validators', timeoutMs: 30_000 })
    expect(later.certificate.kind).toBe('validators')
    await expect(b.clockProof('ab'.repeat(32), { kind: 'validators', timeoutMs: 1_000 })).rejects.toMatchObject({ reason: 'unsupported' })
    await expect(b.clockProof(id, { timeoutMs: -1 })).rejects.toMatchObject({ reason: 'malformed' })
  })
})
