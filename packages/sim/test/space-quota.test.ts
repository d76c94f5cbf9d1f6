import { createClient, type SteadClient } from '@stead/client'
import { authorIdOf, clockInit, encodeEnvelope, sealEnvelope, SteadError, type RelayMessage } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { afterEach, describe, expect, it } from 'vitest'
import { SimCluster } from '../src/index.ts'

/** The live spaces a user may hold, counted by the cluster in the committed order (cluster file `spacesPerUser`). */
describe('space quota', () => {
  let cluster: SimCluster | undefined
  const clients: SteadClient[] = []
  afterEach(async () => {
    for (const c of clients.splice(0)) await c.close()
    await cluster?.close()
    cluster = undefined
  })

  const user = (byte: number) => {
    const secretKey = new Uint8Array(32).fill(byte)
    const publicKey = publicKeyOfSync(secretKey)
    return { secretKey, publicKey, id: authorIdOf(nodeCrypto, publicKey) }
  }
  /** An envelope of `key` that starts `space` (one counter increment). */
  const starting = async (key: { secretKey: Uint8Array; publicKey: Uint8Array }, space: string) =>
    encodeEnvelope(await sealEnvelope(nodeCrypto, key, { space, seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'n', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] }))
  const answer = (received: readonly RelayMessage[], id: number) => received.find((m) => (m.type === 'accepted' || m.type === 'error') && m.id === id)
  /** Which of `names` relay `i` holds (each got a commit where it exists). */
  const held = (c: SimCluster, i: number, names: readonly string[]) => names.filter((s) => (c.relays[i]?.node.reads.stableHead(s).index ?? 0) > 0)
  const starts = ['q0', 'q1', 'q2', 'q3']

  it('gives a user submitting to every relay at once no more spaces than spacesPerUser, the same ones on every relay', async () => {
    const c = (cluster = await SimCluster.start({ spacesPerUser: 2 }))
    const mallory = user(7)
    const sessions = await Promise.all(c.relays.map((r) => c.session(r.index, mallory.secretKey)))
    await Promise.all(sessions.map((s) => s.welcomed))
    // Four new spaces, each to another relay: every door sees one start and none committed, and lets it in.
    for (const [i, s] of sessions.entries()) s.send({ type: 'submit', id: 1, envelope: await starting(mallory, `q${i}`) })
    await c.until('every relay to accept its start', () => sessions.every((s) => answer(s.received, 1)?.type === 'accepted') || undefined)
    const two = await c.until('two spaces on every relay', () => {
      const lists = c.relays.map((r) => held(c, r.index, starts))
      return lists.every((l) => l.length === 2 && l.join() === lists[0]?.join()) ? lists[0] : undefined
    })
    // The other two were skipped by every relay's audit alike, and stay skipped.
    await c.advance(5_000)
    for (const r of c.relays) {
      expect(held(c, r.index, starts)).toEqual(two)
      expect(r.node.status().spaces).toBe(2)
      expect(r.node.spaceQuota?.held(mallory.id)).toBe(2)
    }
    // A skipped start sent again, to a relay that did not take it, is refused: its client hears why.
    const skipped = starts.findIndex((name) => !two?.includes(name))
    const next = sessions[(skipped + 1) % 4]
    next?.send({ type: 'submit', id: 3, envelope: await starting(mallory, starts[skipped] as string) })
    expect(await c.until('the door to answer', () => answer(next?.received ?? [], 3))).toMatchObject({ type: 'error', reason: 'quota' })
    // Now each door knows: a fifth start is refused at once, with the reason.
    sessions[0]?.send({ type: 'submit', id: 2, envelope: await starting(mallory, 'q9') })
    const refused = await c.until('the door to answer', () => answer(sessions[0]?.received ?? [], 2))
    expect(refused).toMatchObject({ type: 'error', reason: 'quota' })
    expect(refused?.type === 'error' && refused.detail).toMatch(/holds 2 live spaces.*spacesPerUser 2/)
    // Another user has quota of their own.
    const other = await c.session(1, user(8).secretKey)
    await other.welcomed
    other.send({ type: 'submit', id: 1, envelope: await starting(user(8), 'q-other') })
    await c.until('the other user to start a space everywhere', () => c.relays.every((r) => held(c, r.index, ['q-other']).length === 1) || undefined)
  })

  it('frees a deleted space for another, and counts the same after a relay restarts from its snapshots', async () => {
    const c = (cluster = await SimCluster.start({ spacesPerUser: 2, relay: { snapshotEveryBatches: 1 } }))
    const alice = await createClient(c.clientOptions())
    clients.push(alice)
    const first = await alice.createSpace('q-a')
    await alice.createSpace('q-b')
    const over = await alice.createSpace('q-c').catch((err: unknown) => err)
    expect(over).toBeInstanceOf(SteadError)
    expect((over as SteadError).reason).toBe('quota')
    for (const r of c.relays) expect(held(c, r.index, ['q-c'])).toEqual([])
    // A regular write to a new space is refused as well, through onError.
    const loose = await alice.space('q-loose')
    const errors: SteadError[] = []
    loose.onError((e) => errors.push(e))
    await loose.counter('n').increment(1)
    const refusal = await c.until('the refusal to reach the app', () => errors.find((e) => e.reason === 'quota'))
    expect(refusal.message).toMatch(/spacesPerUser 2/)
    // Deleting one frees its slot (the name stays taken).
    await first.members.deleteSpace()
    await c.until('the deletion to free a slot everywhere', () => c.relays.every((r) => r.node.spaceQuota?.held(alice.userId) === 1) || undefined)
    await alice.createSpace('q-d')
    for (const r of c.relays) expect(r.node.spaceQuota?.held(alice.userId)).toBe(2)
    // A restart rebuilds the count from its snapshot records and the batches after them.
    const relay = c.relays[2]
    await relay?.down()
    await relay?.up()
    expect(relay?.node.spaceQuota?.held(alice.userId)).toBe(2)
    expect(relay?.node.spaceQuota?.starterOf('q-d')).toBe(alice.userId)
    expect(relay?.node.spaceQuota?.starterOf('q-a')).toBeUndefined()
  })
})
