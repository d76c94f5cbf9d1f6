import { authorIdOf, clockInit, encodeClockVote, sealEnvelope, type Envelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { SimCluster } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import { createClient, type ClockProof, type Space, type SteadClient } from '../src/index.node.ts'
import { challengeBytes, ChronoMutex, GuardedResource, messageIn, registerKey, verifyAcquisition, type AcquisitionProof, type Holder, type MutexMessage, type MutexRules, type Trust } from '../examples/chrono/mutex.ts'
import { verifyVoted } from '../examples/chrono/trust.ts'

const open: SteadClient[] = []
const mutexes: ChronoMutex[] = []
let sim: SimCluster | undefined

afterEach(async () => {
  for (const m of mutexes.splice(0)) m.close()
  for (const c of open.splice(0)) await c.close()
  await sim?.close()
  sim = undefined
})

/** `n` members of one resource over 4 real relays in simulated time (`byzantine` of them, the last, run no ChronoMutex: the test drives them). */
async function members(n: number, byzantine = 0, more: { resubmitAfterMs?: number } = {}): Promise<{ c: SimCluster; rules: MutexRules; trust: Trust; spaces: Space[]; ids: string[]; keys: Uint8Array[]; mutex: ChronoMutex[] }> {
  const c = (sim = await SimCluster.start())
  const keys = Array.from({ length: n }, () => nodeCrypto.generateSecretKey())
  const clients = await Promise.all(keys.map((secretKey) => createClient(c.clientOptions({ identity: { secretKey }, ...more }))))
  open.push(...clients)
  const ids = clients.map((cl) => cl.authorId)
  const rules: MutexRules = { resource: 'printer', members: ids }
  const trust: Trust = { crypto: nodeCrypto, cluster: { f: c.f, relayKeys: c.relays.map((r) => r.publicKey) } }
  const spaces = await Promise.all(clients.map((cl) => cl.space('locks')))
  const mutex = spaces.slice(0, n - byzantine).map((s, i) => new ChronoMutex(s, rules, { authorId: ids[i] as string, secretKey: keys[i] as Uint8Array }, trust))
  mutexes.push(...mutex)
  return { c, rules, trust, spaces, ids, keys, mutex }
}

/**
 * Each member acquires `turns` times, all at once: holds for 10 ms of
 * simulated time, checked by an owner (one holder at a time, in the order
 * of requests) and by counting the correct members inside at once.
 */
async function takeTurns(c: SimCluster, mutex: ChronoMutex[], trust: Trust, rules: MutexRules, turns: number): Promise<Holder[]> {
  const owner = new GuardedResource(trust, rules)
  let inside = 0
  const granted: Holder[] = []
  await Promise.all(
    mutex.map(async (m) => {
      for (let k = 0; k < turns; k++) {
        const proof = await m.acquire({ timeoutMs: 120_000 })
        inside++
        expect(inside).toBe(1)
        // Throws if another holder is in, or for a request not after the last one let in.
        const who = await enter(owner, m, proof)
        granted.push(who)
        await c.advance(10)
        inside--
        owner.exit(who)
        await m.release()
      }
    }),
  )
  return granted
}

/** Shows `owner` a proof, presented by `member` (it signs the owner's challenge). */
async function enter(owner: GuardedResource, member: ChronoMutex, proof: AcquisitionProof): Promise<Holder> {
  const nonce = owner.challenge()
  return owner.enter(proof, nonce, await member.present(nonce))
}

/** The certified messages `author` wrote that `space` holds (undecided, or committed while it ran), with their validator proofs. */
async function messagesOf(space: Space, author: string, trust: Trust): Promise<Array<{ proof: ClockProof; message: MutexMessage }>> {
  const handle = space.register<MutexMessage>(registerKey('printer', author))
  const fromHistory = await Promise.all(handle.history().map((h) => space.clockProof(h.index).then((p) => p.id, () => undefined)))
  const ids = new Set([...handle.undecided().map((u) => u.id), ...fromHistory].filter((id): id is string => id !== undefined))
  const out: Array<{ proof: ClockProof; message: MutexMessage }> = []
  for (const id of ids) {
    const proof = await space.clockProof(id, { kind: 'validators' }).catch(() => undefined)
    const message = proof && messageIn('printer', await verifyVoted(trust, proof), author)
    if (proof && message) out.push({ proof, message })
  }
  return out
}

/** The validator proof of the message `author` wrote that `pick` chooses, waiting until `space` holds one. */
async function proofOf(space: Space, author: string, trust: Trust, pick: (m: MutexMessage) => boolean): Promise<ClockProof> {
  return (sim as SimCluster).until(`a message of ${author.slice(0, 8)}`, async () => (await messagesOf(space, author, trust)).find((m) => pick(m.message))?.proof)
}

describe('Byzantine-tolerant mutual exclusion without total order (Chrono §5.1 on Stead)', () => {
  it('lets contending members in one at a time, in the order of their requests, on the relays’ clock votes alone', async () => {
    const { c, rules, trust, mutex } = await members(3)
    const granted = await takeTurns(c, mutex, trust, rules, 2)
    expect(granted).toHaveLength(6)
    // Every proof is the relays' votes (a commit's states no weight): the order each came in is theirs.
    for (const who of granted) expect(who.clock.weight).toBeGreaterThan(0)
  })

  it('grants at most one correct member at a time with a Byzantine member and a lying relay', async () => {
    const { c, rules, trust, mutex, spaces, ids } = await members(4, 1)
    const byz = spaces[3] as Space
    const byzId = ids[3] as string
    await c.relays[1]?.lie('lie-votes', 'forge-envelope')
    // The Byzantine member answers every request at once, listing nothing (so it never stalls anyone), asks for the
    // resource itself now and then and never releases, releases others' requests in its own register and writes into theirs.
    let stop = false
    const answered = new Set<string>()
    const nonce = (): string => Array.from({ length: 32 }, () => '0123456789abcdef'[Math.floor(Math.random() * 16)]).join('')
    const mischief = (async () => {
      const own = byz.register<MutexMessage>(registerKey('printer', byzId))
      for (let round = 0; !stop; round++) {
        for (const member of ids.slice(0, 3)) {
          const value = byz.register<MutexMessage>(registerKey('printer', member)).value
          const to = value?.kind === 'request' ? { author: member, nonce: value.nonce } : value?.kind === 'reply' ? value.pending : null
          if (to && to.author === member && !answered.has(to.nonce)) {
            answered.add(to.nonce)
            await own.set({ kind: 'reply', to, before: [], pending: null })
            await own.set({ kind: 'release', of: to.nonce })
            await byz.register<MutexMessage>(registerKey('printer', member)).set({ kind: 'release', of: to.nonce })
          }
        }
        if (round % 10 === 0) await own.set({ kind: 'request', nonce: nonce() })
        await c.advance(20)
      }
    })()
    const granted = await takeTurns(c, mutex, trust, rules, 2)
    stop = true
    await mischief
    expect(granted).toHaveLength(6)
  })

  it('takes turns while the relays order nothing at all', async () => {
    // Unordered envelopes reach the other relays as their authors send them on (the relays pass nothing to each other here).
    const { c, rules, trust, mutex, spaces } = await members(3, 0, { resubmitAfterMs: 300 })
    await spaces[0]?.settled()
    c.hold()
    const stableBefore = spaces.map((s) => s.status.stableIndex)
    expect(await takeTurns(c, mutex, trust, rules, 1)).toHaveLength(3)
    // Not one message committed: every proof was the relays' clock votes.
    expect(spaces.map((s) => s.status.stableIndex)).toEqual(stableBefore)
    c.release()
  })

  it('refuses proofs that do not entitle their holder: a listed request not released, a missing member, a commit’s proof, a replay, too few relay votes', async () => {
    const { c, spaces, ids, keys, rules, trust, mutex } = await members(3)
    const [a, b] = mutex as [ChronoMutex, ChronoMutex, ChronoMutex]
    const sb = spaces[1] as Space
    const [idA, idB, idC] = ids as [string, string, string]
    const owner = new GuardedResource(trust, rules)
    const held = await a.acquire({ timeoutMs: 20_000 })
    const inA = await enter(owner, a, held)
    // B asks while A holds: both other members reply, and A's reply lists A's own request, which is not released.
    const waiting = b.acquire({ timeoutMs: 20_000 })
    const request = await c.until('B requested', () => b.request)
    const replyTo = (m: MutexMessage): boolean => m.kind === 'reply' && m.to.author === idB && m.to.nonce === request.nonce
    const early: AcquisitionProof = { request: await sb.clockProof(request.id, { kind: 'validators' }), replies: [await proofOf(sb, idA, trust, replyTo), await proofOf(sb, idC, trust, replyTo)], releases: [] }
    await expect(verifyAcquisition(trust, rules, early)).rejects.toMatchObject({ reason: 'unauthorized', message: expect.stringContaining(`${idA}'s request ${inA.nonce}`) })
    await expect(verifyAcquisition(trust, rules, { ...early, replies: early.replies.slice(1) })).rejects.toMatchObject({ reason: 'unauthorized', message: expect.stringContaining(`neither a reply of ${idA}`) })
    // C writes a release into A's register: it is C's message, not A's, and releases nothing.
    const sc = spaces[2] as Space
    const fake = await sc.register<MutexMessage>(registerKey('printer', idA)).set({ kind: 'release', of: inA.nonce })
    const fakeProof = await c.until('the fake release is certified', () => sc.clockProof(fake.status === 'stored' ? (fake.update as string) : '', { kind: 'validators' }).catch(() => undefined))
    await expect(verifyAcquisition(trust, rules, { ...early, releases: [fakeProof] })).rejects.toMatchObject({ reason: 'malformed' })
    // A leaves and releases: B's own proof now holds A's release, and B gets in.
    owner.exit(inA)
    await a.release()
    const proof = await waiting
    expect(proof.releases.length).toBe(1)
    const inB = await enter(owner, b, proof)
    expect(inB).toMatchObject({ author: idB, nonce: request.nonce, id: request.id })
    // A commit's proof of the request states no weight: nothing to rank by.
    const committed = await c.until('B’s request commits', () => sb.clockProof(request.id).then((p) => (p.index === undefined ? undefined : p), () => undefined))
    await expect(verifyAcquisition(trust, rules, { ...proof, request: committed })).rejects.toMatchObject({ reason: 'unsupported' })
    owner.exit(inB)
    // A's old proof, presented by B: B's signature is not A's.
    await expect(enter(owner, b, held)).rejects.toMatchObject({ reason: 'unauthenticated' })
    // A asks again, to have a request to sign for; the old proof does not carry the new request's id.
    const again = a.acquire({ timeoutMs: 20_000 })
    await c.until('A asked again', () => (a.request && a.request.nonce !== inA.nonce ? true : undefined))
    const nonce = owner.challenge()
    const signed = await a.present(nonce)
    await expect(owner.enter(held, nonce, signed)).rejects.toMatchObject({ reason: 'unauthenticated' })
    await expect(owner.enter(proof, owner.challenge(), signed)).rejects.toMatchObject({ reason: 'unauthenticated' })
    // Signed for the old request by its author, the old proof is a replay: its request is not after the last one let in.
    const n2 = owner.challenge()
    const replay = await nodeCrypto.sign(keys[0] as Uint8Array, challengeBytes('printer', n2, held.request.id))
    await expect(owner.enter(held, n2, replay)).rejects.toMatchObject({ reason: 'conflict', message: expect.stringContaining('replayed') })
    await b.release()
    const fresh = await again
    await expect(owner.enter(fresh, nonce, signed)).rejects.toMatchObject({ reason: 'unauthenticated' }) // a nonce is used once
    const inAgain = await enter(owner, a, fresh)
    expect(inAgain.clock.weight).toBeGreaterThan(inB.clock.weight)
    const weak: AcquisitionProof = { ...proof, request: { ...proof.request, certificate: { ...proof.request.certificate, signatures: proof.request.certificate.signatures.slice(0, 2) } } }
    await expect(verifyAcquisition(trust, rules, weak)).rejects.toMatchObject({ reason: 'bad-signature' })
    await expect(verifyAcquisition(trust, { ...rules, members: [idA, idC, 'someone-else'] }, proof)).rejects.toMatchObject({ reason: 'unauthorized', message: expect.stringContaining(`${idB} is not a member`) })
  })

  it('counts a reply only when it ranks after the request it names: one that does not follow it entitles nobody', async () => {
    // Four relays of the test's own, whose votes it signs with any weight it likes (as ceil((N+f+1)/2) colluding relays could not).
    const relayKeys = Array.from({ length: 4 }, () => nodeCrypto.generateSecretKey())
    const trust: Trust = { crypto: nodeCrypto, cluster: { f: 1, relayKeys: await Promise.all(relayKeys.map((k) => nodeCrypto.publicKeyOf(k))) } }
    const [a, b] = await Promise.all([0, 1].map(async () => {
      const secretKey = nodeCrypto.generateSecretKey()
      const publicKey = await nodeCrypto.publicKeyOf(secretKey)
      return { secretKey, publicKey, id: authorIdOf(nodeCrypto, publicKey) }
    })) as [{ secretKey: Uint8Array; publicKey: Uint8Array; id: string }, { secretKey: Uint8Array; publicKey: Uint8Array; id: string }]
    const rules: MutexRules = { resource: 'printer', members: [a.id, b.id] }
    const write = (who: typeof a, seq: number, value: MutexMessage): Promise<Envelope> =>
      sealEnvelope(nodeCrypto, who, { space: 'locks', seq, clock: clockInit(), deps: [], updates: [{ key: registerKey('printer', who.id), decl: { type: 'register' }, ops: [['s', value, seq]] }], safe: [] })
    const voted = async (env: Envelope, weight: number): Promise<ClockProof> => ({
      id: env.idHex,
      index: undefined,
      envelope: env.signed,
      certificate: { kind: 'validators', weight, signatures: await Promise.all(relayKeys.slice(0, 3).map(async (k, relay) => ({ relay, sig: await nodeCrypto.sign(k, encodeClockVote('locks', env.id, weight)) }))) },
    })
    const nonce = 'ab'.repeat(16)
    const request = await write(b, 1, { kind: 'request', nonce })
    const reply = await write(a, 1, { kind: 'reply', to: { author: b.id, nonce }, before: [], pending: null })
    // Weight 5 for the request: a reply of weight 5 or less (and author before b's) does not follow it.
    const low = { request: await voted(request, 5), replies: [await voted(reply, a.id < b.id ? 5 : 4)], releases: [] }
    await expect(verifyAcquisition(trust, rules, low)).rejects.toMatchObject({ reason: 'unauthorized', message: expect.stringContaining(`neither a reply of ${a.id}`) })
    const high = { ...low, replies: [await voted(reply, 6)] }
    expect(await verifyAcquisition(trust, rules, high)).toMatchObject({ author: b.id, nonce })
  })
})
