import { authorIdOf, clockFrom, clockInit, encodeAttestation, encodeClockVote, sealEnvelope, type Envelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { SimCluster } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import { createClient, type ClockProof, type RegisterValue, type Space, type SteadClient } from '../src/index.node.ts'
import { CausalSession, KvReplica, compareVersions, keyOf, versionOf, type Replica, type Version } from '../examples/chrono/causal-store.ts'
import { verifyVoted, type Trust } from '../examples/chrono/trust.ts'

const open: SteadClient[] = []
const replicas: KvReplica[] = []
let sim: SimCluster | undefined

afterEach(async () => {
  for (const r of replicas.splice(0)) r.close()
  for (const c of open.splice(0)) await c.close()
  await sim?.close()
  sim = undefined
})

/** Two replicas (Stead clients) of one space over 4 real relays in simulated time, and what sessions trust: the relays' keys. */
async function store(relay: { paceMs?: number } = {}): Promise<{ a: KvReplica; b: KvReplica; trust: Trust; spaces: [Space, Space] }> {
  const c = (sim = await SimCluster.start({ relay }))
  const clients = await Promise.all([1, 2].map(() => createClient(c.clientOptions())))
  open.push(...clients)
  const spaces = (await Promise.all(clients.map((cl) => cl.space('kv')))) as [Space, Space]
  const trust: Trust = { crypto: nodeCrypto, cluster: { f: c.f, relayKeys: c.relays.map((r) => r.publicKey) } }
  const [a, b] = spaces.map((s) => new KvReplica(s, trust)) as [KvReplica, KvReplica]
  replicas.push(a, b)
  return { a, b, trust, spaces }
}

/** A replica that answers gets from a fixed script (a lying or lagging one), and puts through an honest one. */
function scripted(honest: Replica, answers: Record<string, ClockProof | undefined>): Replica {
  return { get: async (key) => answers[key], put: (key, value, deps) => honest.put(key, value, deps) }
}

const version = async (trust: Trust, proof: ClockProof | undefined): Promise<Version> => versionOf(await verifyVoted(trust, proof as ClockProof))

/**
 * A cluster of the test's own four relays, whose keys it holds: it signs
 * any certificate it likes for envelopes made by hand, as a Byzantine
 * writer and replica together could not (it would need ceil((N+f+1)/2)
 * relays), to reach the session's own checks.
 */
async function forger(): Promise<{
  trust: Trust
  author: () => Promise<{ secretKey: Uint8Array; publicKey: Uint8Array; id: string }>
  put: (who: { secretKey: Uint8Array; publicKey: Uint8Array }, o: { key: string; value: RegisterValue; deps: RegisterValue[]; seq?: number; base?: number; clock?: Array<[string, number]> }) => Promise<Envelope>
  voted: (env: Envelope, weight: number) => Promise<ClockProof>
  committed: (env: Envelope, index: number) => Promise<ClockProof>
}> {
  const keys = Array.from({ length: 4 }, () => nodeCrypto.generateSecretKey())
  const trust: Trust = { crypto: nodeCrypto, cluster: { f: 1, relayKeys: await Promise.all(keys.map((k) => nodeCrypto.publicKeyOf(k))) } }
  return {
    trust,
    author: async () => {
      const secretKey = nodeCrypto.generateSecretKey()
      const publicKey = await nodeCrypto.publicKeyOf(secretKey)
      return { secretKey, publicKey, id: authorIdOf(nodeCrypto, publicKey) }
    },
    put: (who, o) =>
      sealEnvelope(nodeCrypto, who, { space: 'kv', seq: o.seq ?? 1, base: o.base ?? 0, clock: o.clock ? clockFrom(o.clock) : clockInit(), deps: [], updates: [{ key: keyOf(o.key), decl: { type: 'register' }, ops: [['s', { v: o.value, deps: o.deps } as RegisterValue, 1]] }], safe: [] }),
    voted: async (env, weight) => ({
      id: env.idHex,
      index: undefined,
      envelope: env.signed,
      certificate: { kind: 'validators', weight, signatures: await Promise.all(keys.slice(0, 3).map(async (k, relay) => ({ relay, sig: await nodeCrypto.sign(k, encodeClockVote('kv', env.id, weight)) }))) },
    }),
    committed: async (env, index) => {
      const attestation = encodeAttestation({ space: 'kv', round: index, prevRound: 0, fromIndex: index - 1, toIndex: index, decisions: [[env.id, 'committed', index, [], true]], stateHash: new Uint8Array(32), batch: new Uint8Array(32) })
      return { id: env.idHex, index, envelope: env.signed, certificate: { attestation, signatures: await Promise.all(keys.slice(0, 2).map(async (k, relay) => ({ relay, sig: await nodeCrypto.sign(k, attestation) }))) } }
    },
  }
}

describe('causally consistent key-value store (Chrono §5.2 on Stead, on clock certificates)', () => {
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
    expect(compareVersions(photo, await version(trust, old))).toBeGreaterThan(0)
    // Proven by the relays' clock votes, not by a commit.
    expect(old.index).toBeUndefined()

    // Bob reads the album, so he depends on the photo version it depended on.
    const bob = new CausalSession(trust)
    await (sim as SimCluster).until('replica b serves the album', async () => ((await b.get('album').catch(() => undefined))?.id ? true : undefined))
    expect(await bob.get(b, 'album')).toBe('shows photo v1')
    expect(new Map(bob.dependencies).get('photo')).toEqual(photo)
    // A replica that serves the old photo (a real, certified version) is behind Bob: refused.
    await expect(bob.get(scripted(a, { photo: old }), 'photo')).rejects.toMatchObject({ reason: 'gap' })
    // One that holds no photo at all is refused too; one that passes the album's certificate off as the photo is caught.
    await expect(bob.get(scripted(a, {}), 'photo')).rejects.toMatchObject({ reason: 'gap' })
    await expect(bob.get(scripted(a, { photo: (await b.get('album')) as ClockProof }), 'photo')).rejects.toMatchObject({ reason: 'untrusted' })
    // A certificate with too few relays' votes vouches for nothing.
    const weak: ClockProof = { ...old, certificate: { ...old.certificate, signatures: old.certificate.signatures.slice(0, 2) } }
    await expect(new CausalSession(trust).get(scripted(a, { photo: weak }), 'photo')).rejects.toMatchObject({ reason: 'bad-signature' })
    // An honest replica serves the photo Bob depends on.
    expect(await bob.get(b, 'photo')).toBe('v1')
    // A session with no dependencies may read an older version: causal consistency allows it.
    expect(await new CausalSession(trust).get(scripted(a, { photo: old }), 'photo')).toBe('v0')
  })

  it('needs no total order: puts and causal reads across replicas answer while nothing commits', async () => {
    // Relays that start a round only every 10 minutes when no safe update waits: regular writes stay undecided.
    const { a, b, trust, spaces } = await store({ paceMs: 600_000 })
    // A relay takes envelopes its peers pass on only for spaces it holds: one safe update (which rounds do not wait
    // for) makes the space known to all four. From then on nothing commits.
    await spaces[0].register('opened').set(true, { safe: true })
    await (sim as SimCluster).until('both replicas applied it', async () => (spaces.every((s) => s.status.stableIndex === 1) ? true : undefined))
    const before = spaces.map((s) => s.status.stableIndex)
    const t0 = (sim as SimCluster).now
    const alice = new CausalSession(trust)
    await alice.put(a, 'photo', 'v1')
    await alice.put(a, 'album', 'shows photo v1')
    const bob = new CausalSession(trust)
    const album = await (sim as SimCluster).until('bob reads the album through replica b', async () => bob.get(b, 'album').catch(() => undefined))
    expect(album).toBe('shows photo v1')
    expect(await bob.get(b, 'photo')).toBe('v1')
    // Bob's reply, through replica b, follows what he read (b's clock lists alice's writes: they are undecided).
    const reply = await bob.put(b, 'comment', 'nice')
    expect(compareVersions(reply, new Map(bob.dependencies).get('album') as Version)).toBeGreaterThan(0)
    expect(spaces.map((s) => s.status.stableIndex)).toEqual(before)
    expect(spaces[0]?.register(keyOf('album')).history()).toEqual([])
    expect((sim as SimCluster).now - t0).toBeLessThan(5_000)
  })

  it('converges on the highest-ranked of concurrent puts, on every replica', async () => {
    const { a, b, trust } = await store()
    const [alice, bob] = [new CausalSession(trust), new CausalSession(trust)]
    const [va, vb] = await Promise.all([alice.put(a, 'x', 'alice'), bob.put(b, 'x', 'bob')])
    const winner = compareVersions(va, vb) > 0 ? 'alice' : 'bob'
    for (const r of [a, b]) {
      await (sim as SimCluster).until(`a replica serves ${winner}'s put`, async () => ((await new CausalSession(trust).get(r, 'x').catch(() => undefined)) === winner ? true : undefined))
    }
    // The loser's own session depends on its own write, which ranks below: it reads the winner.
    expect(await (winner === 'alice' ? bob : alice).get(winner === 'alice' ? b : a, 'x')).toBe(winner)
  })

  it('puts only through a replica that holds the session’s dependencies', async () => {
    const { a, b, trust } = await store()
    const alice = new CausalSession(trust)
    await alice.put(a, 'x', 1)
    // A replica that holds none of it (a space with no writes at all) refuses the put, and writes nothing.
    const writes: unknown[] = []
    const register = { undecided: () => [], history: () => [], subscribe: () => () => undefined, stable: undefined, set: async (v: unknown) => writes.push(v) }
    const empty = new KvReplica({ register: () => register } as never, trust)
    await expect(empty.put('y', 2, alice.dependencies)).rejects.toMatchObject({ reason: 'gap' })
    expect(writes).toEqual([])
    // Through an honest replica that holds it, the put follows x.
    await (sim as SimCluster).until('replica b holds x', async () => ((await b.get('x').catch(() => undefined)) ? true : undefined))
    expect(compareVersions(await alice.put(b, 'y', 2), new Map(alice.dependencies).get('x') as Version)).toBeGreaterThan(0)
  })

  it('proves a dependency the write’s clock covers through its base by the dependency’s commit', async () => {
    const { a, b, trust, spaces } = await store()
    const alice = new CausalSession(trust)
    await alice.put(a, 'x', 1)
    // Replica b applies x's commit: its next clock covers x through its base, and lists it no more.
    await spaces[0]?.register('flush').set(1, { safe: true })
    await (sim as SimCluster).until('replica b applied x', async () => (spaces[1]?.register(keyOf('x')).history().length ? true : undefined))
    const answer = await b.put('y', 2, alice.dependencies)
    expect(answer.committed.map((p) => p.index)).toEqual([1])
    // The session takes it with the commit proof, and not without.
    await expect(alice.put({ get: async () => undefined, put: async () => ({ ...answer, committed: [] }) }, 'y', 2)).rejects.toMatchObject({ reason: 'untrusted' })
    const y = await alice.put({ get: async () => undefined, put: async () => answer }, 'y', 2)
    expect(compareVersions(y, new Map(alice.dependencies).get('x') as Version)).toBeGreaterThan(0)
  })
})

describe('the session’s checks, against certificates of the test’s own relays', () => {
  it('refuses a put answered with another write, or with a write whose clock does not follow a dependency', async () => {
    const f = await forger()
    const [w, other] = [await f.author(), await f.author()]
    const session = new CausalSession(f.trust)
    // The session read x, written by `other` at seq 3 (weight 10).
    const x = await f.put(other, { key: 'x', value: 'x', deps: [], seq: 3 })
    await session.get(scripted(undefined as never, { x: await f.voted(x, 10) }), 'x')
    const dep = ['x', other.id, 3, 10, x.idHex]
    const answer = (env: Envelope, weight: number, committed: ClockProof[] = []): Replica => ({ get: async () => undefined, put: async () => ({ written: await f.voted(env, weight), committed }) })
    // Not listing x, base 0, no commit proof: does not follow.
    const blind = await f.put(w, { key: 'y', value: 2, deps: [dep] })
    await expect(session.put(answer(blind, 20), 'y', 2)).rejects.toMatchObject({ reason: 'untrusted', message: expect.stringContaining('does not follow x') })
    // Another value, or other dependencies, than the session put: another write.
    const listed = await f.put(w, { key: 'y', value: 2, deps: [dep], clock: [[other.id, 3]], seq: 2 })
    await expect(session.put(answer(listed, 20), 'y', 3)).rejects.toMatchObject({ reason: 'untrusted', message: expect.stringContaining('another write') })
    const noDeps = await f.put(w, { key: 'y', value: 2, deps: [], clock: [[other.id, 3]], seq: 3 })
    await expect(session.put(answer(noDeps, 20), 'y', 2)).rejects.toMatchObject({ reason: 'untrusted', message: expect.stringContaining('another write') })
    // Listing x at its seq, but with a weight not above x's: no cause of it ranks below it.
    await expect(session.put(answer(listed, 10), 'y', 2)).rejects.toMatchObject({ reason: 'untrusted', message: expect.stringContaining('does not follow x') })
    // Listing x at its seq: follows.
    expect(await session.put(answer(listed, 20), 'y', 2)).toEqual({ author: w.id, seq: 2, weight: 20, id: listed.idHex })
  })

  it('takes a dependency covered by the write’s base only with the commit of that very envelope, at or below the base', async () => {
    const f = await forger()
    const [w, other] = [await f.author(), await f.author()]
    const x = await f.put(other, { key: 'x', value: 'x', deps: [], seq: 3 })
    // `other` equivocated: a twin of x (same author and seq) that no quorum voted for, committed.
    const twin = await f.put(other, { key: 'x', value: 'twin', deps: [], seq: 3 })
    const unrelated = await f.put(other, { key: 'u', value: 'u', deps: [], seq: 2 })
    const session = new CausalSession(f.trust)
    await session.get(scripted(undefined as never, { x: await f.voted(x, 10) }), 'x')
    const based = await f.put(w, { key: 'z', value: 1, deps: [['x', other.id, 3, 10, x.idHex]], base: 7, seq: 4 })
    const answer = (committed: ClockProof[]): Replica => ({ get: async () => undefined, put: async () => ({ written: await f.voted(based, 30), committed }) })
    await expect(session.put(answer([]), 'z', 1)).rejects.toMatchObject({ reason: 'untrusted' })
    await expect(session.put(answer([await f.committed(x, 8)]), 'z', 1)).rejects.toMatchObject({ reason: 'untrusted' })
    await expect(session.put(answer([await f.committed(twin, 5)]), 'z', 1)).rejects.toMatchObject({ reason: 'untrusted' })
    await expect(session.put(answer([await f.committed(unrelated, 5)]), 'z', 1)).rejects.toMatchObject({ reason: 'untrusted' })
    // More commit proofs than dependencies: refused before any is checked.
    await expect(session.put(answer([await f.committed(x, 7), await f.committed(twin, 5)]), 'z', 1)).rejects.toMatchObject({ reason: 'too-large' })
    expect(await session.put(answer([await f.committed(x, 7)]), 'z', 1)).toEqual({ author: w.id, seq: 4, weight: 30, id: based.idHex })
  })

  it('refuses a value that declares a dependency ranked at or above its write', async () => {
    const f = await forger()
    const [w, other] = [await f.author(), await f.author()]
    const photo = await f.put(other, { key: 'photo', value: 'p', deps: [] })
    const lie = await f.put(w, { key: 'album', value: 'shows photo', deps: [['photo', other.id, 1, 50, photo.idHex]] })
    await expect(new CausalSession(f.trust).get(scripted(undefined as never, { album: await f.voted(lie, 50) }), 'album')).rejects.toMatchObject({ reason: 'untrusted' })
    const bob = new CausalSession(f.trust)
    expect(await bob.get(scripted(undefined as never, { album: await f.voted(lie, 51) }), 'album')).toBe('shows photo')
    expect(new Map(bob.dependencies).get('photo')).toEqual({ author: other.id, seq: 1, weight: 50, id: photo.idHex })
    // Malformed declared dependencies are no put at all.
    const junk = await f.put(w, { key: 'album', value: 'x', deps: [['photo', other.id, 0, 5, photo.idHex]], seq: 2 })
    await expect(new CausalSession(f.trust).get(scripted(undefined as never, { album: await f.voted(junk, 60) }), 'album')).rejects.toMatchObject({ reason: 'untrusted' })
  })
})
