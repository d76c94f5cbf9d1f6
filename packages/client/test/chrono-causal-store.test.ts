import { clockInit, encodeEnvelope, sealEnvelope, type Envelope, type SafeUpdate } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { SimCluster } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import { createClient, type ClockProof, type RegisterValue, type Space, type SteadClient } from '../src/index.node.ts'
import { CausalSession, KvReplica, type Dependencies, type PutAnswer, type Replica } from '../examples/chrono/causal-store.ts'
import type { Trust } from '../examples/chrono/trust.ts'

const open: SteadClient[] = []
let sim: SimCluster | undefined

afterEach(async () => {
  for (const c of open.splice(0)) await c.close()
  await sim?.close()
  sim = undefined
})

/** Two replicas (Stead clients) of one space over 4 real relays in simulated time, and what sessions trust: the relays' keys. */
async function store(): Promise<{ a: KvReplica; b: KvReplica; trust: Trust; spaces: Space[] }> {
  const c = (sim = await SimCluster.start())
  const clients = await Promise.all([1, 2].map(() => createClient(c.clientOptions())))
  open.push(...clients)
  const [sa, sb] = await Promise.all(clients.map((cl) => cl.space('kv')))
  const trust: Trust = { crypto: nodeCrypto, cluster: { f: c.f, relayKeys: c.relays.map((r) => r.publicKey) } }
  return { a: new KvReplica(sa as Space, trust), b: new KvReplica(sb as Space, trust), trust, spaces: [sa as Space, sb as Space] }
}

/** A replica that answers gets from a fixed script (a lying or lagging one), and puts through an honest one. */
function scripted(honest: Replica, answers: Record<string, ClockProof | undefined>): Replica {
  return {
    get: async (key) => answers[key],
    put: (key: string, value: RegisterValue, deps: Dependencies): Promise<PutAnswer> => honest.put(key, value, deps),
  }
}

/** A Byzantine author's envelope, made by hand (any timestamp, any type) and submitted to a relay to order. */
async function byzantine(update: SafeUpdate): Promise<Envelope> {
  const secretKey = nodeCrypto.generateSecretKey()
  const env = await sealEnvelope(nodeCrypto, { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }, { space: 'kv', seq: 1, base: 0, clock: clockInit(), deps: [], updates: [], safe: [{ atomic: false, updates: [update] }] })
  sim?.relays[0]?.node.submit(encodeEnvelope(env))
  return env
}


describe('causally consistent key-value store (Chrono §5.2 on Stead)', () => {
  it('never shows a session an effect without its cause, whatever replica answers', async () => {
    const { a, b, trust } = await store()
    const alice = new CausalSession(trust)
    // Alice uploads a photo, then (having written it) posts the album that shows it: the album depends on the photo's version.
    await alice.put(a, 'photo', 'v0')
    const old = (await a.get('photo')) as ClockProof
    const photo = await alice.put(a, 'photo', 'v1')
    const album = await alice.put(a, 'album', 'shows photo v1')
    expect(alice.dependencies).toEqual([
      ['photo', photo],
      ['album', album],
    ])
    expect(photo).toBeGreaterThan(old.index as number)

    // Bob reads the album, so he depends on the photo version it depended on.
    const bob = new CausalSession(trust)
    await (sim as SimCluster).until('replica b holds the album', async () => (await b.get('album').catch(() => undefined))?.index === album)
    expect(await bob.get(b, 'album')).toBe('shows photo v1')
    expect(new Map(bob.dependencies).get('photo')).toBe(photo)
    // A replica that serves the old photo (a real, proven version) is behind Bob: refused.
    await expect(bob.get(scripted(a, { photo: old }), 'photo')).rejects.toMatchObject({ reason: 'gap' })
    // One that holds no photo at all is refused too; one that passes the album's proof off as the photo is caught.
    await expect(bob.get(scripted(a, {}), 'photo')).rejects.toMatchObject({ reason: 'gap' })
    await expect(bob.get(scripted(a, { photo: (await b.get('album')) as ClockProof }), 'photo')).rejects.toMatchObject({ reason: 'untrusted' })
    // A proof with f relay signatures vouches for nothing.
    const weak: ClockProof = { ...old, certificate: { ...old.certificate, signatures: old.certificate.signatures.slice(0, 1) } }
    await expect(new CausalSession(trust).get(scripted(a, { photo: weak }), 'photo')).rejects.toMatchObject({ reason: 'bad-signature' })
    // An honest replica serves the photo Bob depends on.
    expect(await bob.get(b, 'photo')).toBe('v1')
    // A session with no dependencies may read an older version: causal consistency allows it.
    expect(await new CausalSession(trust).get(scripted(a, { photo: old }), 'photo')).toBe('v0')
  })

  it('puts only through a replica that holds the session’s dependencies, and checks the proof it answers with', async () => {
    const { a, b, trust } = await store()
    const alice = new CausalSession(trust)
    const version = await alice.put(a, 'x', 1)
    // A replica whose stable state has none of it yet (a space that applied nothing) refuses the put, and writes nothing.
    const writes: unknown[] = []
    const nothingApplied = { status: { stableIndex: 0 }, register: () => ({ set: async (v: unknown) => writes.push(v) }) }
    await expect(new KvReplica(nothingApplied as never, trust).put('y', 2, alice.dependencies)).rejects.toMatchObject({ reason: 'gap' })
    expect(writes).toEqual([])
    // Through an honest replica that holds it, the put follows x: the proof's clock base covers x's version.
    await (sim as SimCluster).until('replica b holds x', async () => (await b.get('x').catch(() => undefined))?.index === version)
    expect(await alice.put(b, 'y', 2)).toBeGreaterThan(version)
    // A replica that answers a put with the proof of another write is caught.
    const other = (await a.get('x')) as ClockProof
    const liar: Replica = { get: (key) => a.get(key), put: async () => ({ written: other }) }
    await expect(alice.put(liar, 'x', 3)).rejects.toMatchObject({ reason: 'untrusted' })
    // A replica that says a concurrent put won, when it did not, is caught too (once replica a holds y, so its put may go on).
    await (sim as SimCluster).until('replica a holds y', async () => ((await a.get('y').catch(() => undefined)) ? true : undefined))
    const claims: Replica = { get: (key) => a.get(key), put: async (key, value, deps) => ({ ...(await a.put(key, value, deps)), current: other }) }
    await expect(alice.put(claims, 'x', 4)).rejects.toMatchObject({ reason: 'untrusted' })
    expect(new Map(alice.dependencies).get('x')).toBe(version)
  })

  it('believes only writes the audit applied: an update whose write of the key was rejected proves no value', async () => {
    const { a, trust, spaces } = await store()
    const sa = spaces[0] as Space
    // kv/x is a counter; a register write to it is rejected (type-mismatch), though its envelope commits.
    expect(await sa.counter('kv/x').increment(1, { safe: true })).toMatchObject({ status: 'committed' })
    const forged = await byzantine({ key: 'kv/x', decl: { type: 'register' }, op: ['s', { v: 'forged', deps: [] }, (sim as SimCluster).now] })
    let rejected: ClockProof | undefined
    // Proven by the relays' clock votes at first (no index); by its commit once decided.
    await (sim as SimCluster).until('the forged write is decided', async () => (rejected = await sa.clockProof(forged.idHex).catch(() => undefined))?.index !== undefined)
    expect(rejected?.index).toBeGreaterThan(0)
    await expect(new CausalSession(trust).get(scripted(a, { x: rejected }), 'x')).rejects.toMatchObject({ reason: 'untrusted' })
  })

  it('refuses a later write that lost to the one the session saw: it never was the value', async () => {
    const { a, trust, spaces } = await store()
    const alice = new CausalSession(trust)
    const won = await alice.put(a, 'x', 'current')
    // A Byzantine author writes x later in the order with a timestamp from long ago: it commits, and loses.
    const loser = await byzantine({ key: 'kv/x', decl: { type: 'register' }, op: ['s', { v: 'stale', deps: [] }, 1] })
    const sa = spaces[0] as Space
    await (sim as SimCluster).until('the losing write committed', async () => sa.register('kv/x').history().some((h) => h.index > won))
    expect(sa.register('kv/x').stable).toMatchObject({ v: 'current' })
    const lost = await sa.clockProof((sa.register('kv/x').history().at(-1) as { index: number }).index)
    expect(lost.id).toBe(loser.idHex)
    await expect(alice.get(scripted(a, { x: lost }), 'x')).rejects.toMatchObject({ reason: 'untrusted' })
    // An honest replica serves the winner, not the latest write.
    expect(await alice.get(a, 'x')).toBe('current')
  })
})
