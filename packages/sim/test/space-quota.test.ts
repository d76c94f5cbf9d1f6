import type { SteadClient } from '@stead/client'
import { authorIdOf, clockInit, encodeEnvelope, sealEnvelope, SteadError, type RelayMessage } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import type { SimCluster } from '../src/index.ts'
import { simWorld } from './helpers/world.ts'

/** The live spaces a user may hold, counted by the cluster in the committed order (cluster file `spacesPerUser`). */
describe('space quota', () => {
  const world = simWorld()

  const user = (byte: number) => {
    const secretKey = new Uint8Array(32).fill(byte)
    const publicKey = publicKeyOfSync(secretKey)
    return { secretKey, publicKey, id: authorIdOf(nodeCrypto, publicKey) }
  }
  const sdk = (c: SimCluster, byte: number): Promise<SteadClient> => world.client(c, { identity: { secretKey: user(byte).secretKey } })
  /** An envelope of `key` that starts `space` (one counter increment). */
  const starting = async (key: { secretKey: Uint8Array; publicKey: Uint8Array }, space: string) =>
    encodeEnvelope(await sealEnvelope(nodeCrypto, key, { space, seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'n', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] }))
  const answer = (received: readonly RelayMessage[], id: number) => received.find((m) => (m.type === 'accepted' || m.type === 'error') && m.id === id)
  /** Which of `names` relay `i` holds (each got a commit where it exists). */
  const held = (c: SimCluster, i: number, names: readonly string[]) => names.filter((s) => (c.relays[i]?.node.reads.stableHead(s).index ?? 0) > 0)
  const starts = ['q0', 'q1', 'q2', 'q3']

  it('gives a user submitting to every relay at once no more spaces than spacesPerUser, the same ones on every relay', async () => {
    const c = await world.start({ spacesPerUser: 2 })
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
    // Now every door knows: a fifth start is refused at once, with the reason, and no door still
    // counts a skipped start as one being made (the audit decided it).
    for (const [i, s] of sessions.entries()) {
      s.send({ type: 'submit', id: 10 + i, envelope: await starting(mallory, `q9-${i}`) })
      const refused = await c.until('the door to answer', () => answer(s.received, 10 + i))
      expect(refused).toMatchObject({ type: 'error', reason: 'quota' })
      expect(refused?.type === 'error' && refused.detail).toMatch(/holds 2 live spaces, the most this cluster lets one user hold \(spacesPerUser 2\)/)
    }
    // Another user has quota of their own.
    const other = await c.session(1, user(8).secretKey)
    await other.welcomed
    other.send({ type: 'submit', id: 1, envelope: await starting(user(8), 'q-other') })
    await c.until('the other user to start a space everywhere', () => c.relays.every((r) => held(c, r.index, ['q-other']).length === 1) || undefined)
  })

  // Snapshots after every batch (a restart reads the records), or none taken (a restart replays every batch).
  it.each([1, 1000])('frees a deleted space for another, and counts the same after a relay restarts (a snapshot every %i batches)', async (snapshotEveryBatches) => {
    const c = await world.start({ spacesPerUser: 2, relay: { snapshotEveryBatches } })
    const alice = await world.client(c)
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

  it('charges nobody for listed spaces and the space creators\' spaces, and moves a space to whoever else creates its policy', async () => {
    const c = await world.start({ spacesPerUser: 1, spaces: { listed: {} }, spaceCreators: [user(9).publicKey] })
    const [ursula, mallory, creator] = [await sdk(c, 1), await sdk(c, 2), await sdk(c, 9)]
    const quota = () => c.relays.map((r) => [r.node.spaceQuota?.held(ursula.userId), r.node.spaceQuota?.held(mallory.userId), r.node.spaceQuota?.held(creator.userId)].join('/'))
    expect((await (await ursula.space('listed')).counter('n').increment(1, { safe: true })).status).toBe('committed')
    expect((await (await ursula.space('u1')).counter('n').increment(1, { safe: true })).status).toBe('committed')
    for (const name of ['c1', 'c2']) await creator.createSpace(name)
    expect(quota()).toEqual(Array(4).fill('1/0/0'))
    // u1 has no policy: mallory creates it and administers it, so mallory pays for it, not ursula.
    await mallory.createSpace('u1')
    await c.until('the charge to move everywhere', () => quota().every((q) => q === '0/1/0') || undefined)
    expect(c.relays.every((r) => r.node.spaceQuota?.starterOf('u1') === mallory.userId)).toBe(true)
    await ursula.createSpace('u2')
    // Past the quota now, mallory starts nothing more.
    expect(((await mallory.createSpace('m1').catch((e: unknown) => e)) as SteadError).reason).toBe('quota')
  })
})
