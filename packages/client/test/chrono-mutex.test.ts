import { nodeCrypto } from '@stead/core/node'
import { SimCluster } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import { createClient, type ClockProof, type Space, type SteadClient } from '../src/index.node.ts'
import { challengeBytes, ChronoMutex, GuardedResource, registerKey, verifyAcquisition, type AcquisitionProof, type Holder, type MutexMessage, type MutexRules, type Trust } from '../examples/chrono/mutex.ts'

const open: SteadClient[] = []
const mutexes: ChronoMutex[] = []
let sim: SimCluster | undefined

afterEach(async () => {
  for (const m of mutexes.splice(0)) m.close()
  for (const c of open.splice(0)) await c.close()
  await sim?.close()
  sim = undefined
})

/** `n` members of one resource over 4 real relays in simulated time. */
async function members(n: number): Promise<{ c: SimCluster; rules: MutexRules; trust: Trust; spaces: Space[]; ids: string[]; keys: Uint8Array[]; mutex: ChronoMutex[] }> {
  const c = (sim = await SimCluster.start())
  const keys = Array.from({ length: n }, () => nodeCrypto.generateSecretKey())
  const clients = await Promise.all(keys.map((secretKey) => createClient(c.clientOptions({ identity: { secretKey } }))))
  open.push(...clients)
  const ids = clients.map((cl) => cl.authorId)
  const rules: MutexRules = { resource: 'printer', members: ids }
  const trust: Trust = { crypto: nodeCrypto, cluster: { f: c.f, relayKeys: c.relays.map((r) => r.publicKey) } }
  const spaces = await Promise.all(clients.map((cl) => cl.space('locks')))
  const mutex = spaces.map((s, i) => new ChronoMutex(s, rules, { authorId: ids[i] as string, secretKey: keys[i] as Uint8Array }, trust))
  mutexes.push(...mutex)
  return { c, rules, trust, spaces, ids, keys, mutex }
}

/** Shows `owner` a proof, presented by `member` (it signs the owner's challenge). */
async function enter(owner: GuardedResource, member: ChronoMutex, proof: AcquisitionProof): Promise<Holder> {
  const nonce = owner.challenge()
  return owner.enter(proof, nonce, await member.present(nonce))
}


/** The proof of the message `author` wrote that `pick` chooses, as the stable history of its register holds it. */
async function proofOf(space: Space, author: string, pick: (m: MutexMessage) => boolean): Promise<ClockProof> {
  const entry = space
    .register<MutexMessage>(registerKey('printer', author))
    .history()
    .find((h) => pick(h.value as MutexMessage))
  if (!entry) throw new Error(`no such message of ${author}`)
  return space.clockProof(entry.index)
}

describe('Byzantine-tolerant mutual exclusion (Chrono §5.1 on Stead)', () => {
  it('lets contending members in one at a time, in the order of their requests, each with a proof the owner verifies', async () => {
    const { rules, trust, mutex } = await members(3)
    const owner = new GuardedResource(trust, rules)
    const granted: number[] = []
    let inside = 0
    await Promise.all(
      mutex.map(async (m) => {
        for (let k = 0; k < 2; k++) {
          const proof = await m.acquire({ timeoutMs: 20_000 })
          const who = await enter(owner, m, proof) // throws if another holder is in, or for an older request
          inside++
          expect(inside).toBe(1)
          granted.push(who.index)
          await new Promise((r) => setTimeout(r, 5))
          inside--
          owner.exit(who)
          await m.release()
        }
      }),
    )
    expect(granted).toHaveLength(6)
    // Ordered access: requests are let in by the order ≺ (their certified stable index).
    expect(granted).toEqual([...granted].sort((a, b) => a - b))
  })

  it('refuses proofs that do not entitle their holder: an earlier request not released, a missing member, a replay, too few relay signatures', async () => {
    const { spaces, ids, keys, rules, trust, mutex } = await members(3)
    const [a, b] = mutex as [ChronoMutex, ChronoMutex, ChronoMutex]
    const sb = spaces[1] as Space
    const [idA, idB, idC] = ids as [string, string, string]
    const owner = new GuardedResource(trust, rules)
    const held = await a.acquire({ timeoutMs: 20_000 })
    const inA = await enter(owner, a, held)
    // B asks while A holds: both other members reply, and A's reply lists A's own request, which is not released.
    const waiting = b.acquire({ timeoutMs: 20_000 })
    await (sim as SimCluster).until('B requested', () => b.request !== undefined)
    const request = (b.request as { index: number }).index
    const replyTo = (m: MutexMessage): boolean => m.kind === 'reply' && m.to.author === idB && m.to.index === request
    await (sim as SimCluster).until('A and C replied to B', () =>
      [idA, idC].every((id) => sb.register<MutexMessage>(registerKey('printer', id)).history().some((h) => replyTo(h.value as MutexMessage))),
    )
    const early: AcquisitionProof = { request: await sb.clockProof(request), replies: [await proofOf(sb, idA, replyTo), await proofOf(sb, idC, replyTo)], releases: [] }
    await expect(verifyAcquisition(trust, rules, early)).rejects.toMatchObject({ reason: 'unauthorized', message: expect.stringContaining(`${idA}'s request at ${inA.index}`) })
    await expect(verifyAcquisition(trust, rules, { ...early, replies: early.replies.slice(1) })).rejects.toMatchObject({ reason: 'unauthorized', message: expect.stringContaining(`neither a reply of ${idA}`) })
    // C writes a release into A's register: it is C's message, not A's, and releases nothing.
    const sc = spaces[2] as Space
    const fake = await sc.register<MutexMessage>(registerKey('printer', idA)).set({ kind: 'release', of: inA.index }, { safe: true })
    if (fake.status !== 'committed') throw new Error('the fake release did not commit')
    await expect(verifyAcquisition(trust, rules, { ...early, releases: [await sc.clockProof(fake.index)] })).rejects.toMatchObject({ reason: 'malformed' })
    // A leaves and releases: B's own proof now holds A's release, and B gets in.
    owner.exit(inA)
    await a.release()
    const proof = await waiting
    expect(proof.releases.length).toBe(1)
    const inB = await enter(owner, b, proof)
    expect(inB).toMatchObject({ author: idB, index: request })
    // A's old proof is a replay; one with f relay signatures is no certificate; a non-member's rules do not list the holder.
    owner.exit(inB)
    await expect(enter(owner, b, held)).rejects.toMatchObject({ reason: 'unauthenticated' })
    // A's own old proof is a replay (A asks again to have a request to sign for).
    const again = a.acquire({ timeoutMs: 20_000 })
    await (sim as SimCluster).until('A asked again', () => a.request !== undefined && a.request.index > inA.index)
    const nonce = owner.challenge()
    const signed = await a.present(nonce)
    await expect(owner.enter(held, nonce, signed)).rejects.toMatchObject({ reason: 'unauthenticated' })
    await expect(owner.enter(proof, owner.challenge(), signed)).rejects.toMatchObject({ reason: 'unauthenticated' })
    // Signed for the old request by its author, the old proof is a replay.
    const n2 = owner.challenge()
    const replay = await nodeCrypto.sign(keys[0] as Uint8Array, challengeBytes('printer', n2, held.request.id))
    await expect(owner.enter(held, n2, replay)).rejects.toMatchObject({ reason: 'conflict', message: expect.stringContaining('replayed') })
    await b.release()
    const fresh = await again
    await expect(owner.enter(fresh, nonce, signed)).rejects.toMatchObject({ reason: 'unauthenticated' }) // a nonce is used once
    expect((await enter(owner, a, fresh)).index).toBeGreaterThan(inB.index)
    const weak: AcquisitionProof = { ...proof, request: { ...proof.request, certificate: { ...proof.request.certificate, signatures: proof.request.certificate.signatures.slice(0, 1) } } }
    await expect(verifyAcquisition(trust, rules, weak)).rejects.toMatchObject({ reason: 'bad-signature' })
    await expect(verifyAcquisition(trust, { ...rules, members: [idA, idC, 'someone-else'] }, proof)).rejects.toMatchObject({ reason: 'unauthorized', message: expect.stringContaining(`${idB} is not a member`) })
  })
})
