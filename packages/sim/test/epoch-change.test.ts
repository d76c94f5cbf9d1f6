import { relayCommitteeOf } from '@stead/relay'
import { decodeEpochChange, toHex, type RelayCommittee } from '@stead/core'
import { isStorageError, memoryStorage, type ClientStorage, type SteadError } from '@stead/client'
import { describe, expect, it } from 'vitest'
import { entryOf, epochOf, keepWriting, settledIn, type SimCluster } from '../src/index.ts'
import { simWorld } from './helpers/world.ts'

/** Three new machines join the first four relays (f from 1 to 2), backed by three of them: until all seven run epoch 1 with one state. */
async function growToSeven(c: SimCluster): Promise<void> {
  const added = [c.addRelay(), c.addRelay(), c.addRelay()]
  const next: RelayCommittee = { f: 2, members: [0, 1, 2, 3, 4, 5, 6].map((i) => entryOf(c, i)) }
  for (const i of [0, 1, 2]) await c.relays[i]!.backCommittee(1, next)
  // The epoch waits for the new relays: the first four get there first.
  await c.until('the first four in epoch 1', () => [0, 1, 2, 3].every((i) => epochOf(c, i) === 1))
  for (const r of added) await r.up()
  await settledIn(c, [0, 1, 2, 3, 4, 5, 6], 1)
}

/** Committee changes (issue 49) with real relays and SDK clients in simulated time. */
describe('epoch changes', () => {
  const world = simWorld()

  it.each([1, 2, 3])('moves every relay to the committee 2f+1 operators back, while a client keeps writing: nothing lost, nothing twice, one state (seed %i)', async (seed) => {
    const c = await world.start({ seed })
    const client = await world.client(c)
    const a = await client.space('s')
    const counter = a.counter('n')
    const file = relayCommitteeOf(c.config)
    // r1 moves its client API: the same relays and keys, another address.
    const next: RelayCommittee = { f: file.f, members: file.members.map((m, i) => (i === 0 ? { ...m, api: 'relay0-moved.sim' } : m)) }
    const writes = keepWriting(counter)
    await c.until('a few safe updates', () => writes.acknowledged >= 3)
    // Two backings are not 2f+1: nothing changes.
    await c.relays[1]?.backCommittee(1, next)
    await c.relays[2]?.backCommittee(1, next)
    await c.advance(2_000)
    expect([0, 1, 2, 3].map((i) => epochOf(c, i))).toEqual([0, 0, 0, 0])
    expect(c.relays[0]?.node.committeeChange().proposals).toEqual([expect.objectContaining({ backers: ['r2', 'r3'] })])
    await c.relays[3]?.backCommittee(1, next)
    await c.until('every relay in epoch 1', () => [0, 1, 2, 3].every((i) => epochOf(c, i) === 1))
    const before = writes.acknowledged
    await c.until('safe updates commit in epoch 1', () => writes.acknowledged >= before + 3)
    await writes.stop()
    // Every acknowledged update is in the stable value, once: the relays agree on it.
    await c.until('every relay holds the same state', () => {
      const heads = c.relays.map((r) => r.node.reads.stableHead('s'))
      return heads.every((h) => h.stateHash === heads[0]?.stateHash && h.index === heads[0]?.index) && heads[0]
    })
    expect(c.relays[0]?.stableValue('s', 'n')).toBe(writes.acknowledged)
    expect(counter.stable).toBe(writes.acknowledged)
    const status = c.relays[0]?.node.status() ?? {}
    expect(status).toMatchObject({ epoch: 1, committeeChange: { proposals: [], decided: null } })
    // Rounds go on counting across the boundary, and the new epoch committed rounds of its own.
    expect(status['epochStartRound']).toBeGreaterThan(0)
    expect(status['committedRound']).toBeGreaterThan(status['epochStartRound'] as number)
  })

  it('replaces a relay by a new machine: the new one joins from the state the epoch started from, the old one leaves, the client goes on', async () => {
    const c = await world.start({ seed: 7 })
    const counter = (await (await world.client(c)).space('s')).counter('n')
    for (let i = 0; i < 3; i++) await counter.increment(1, { safe: true })
    const r5 = c.addRelay('r5')
    const next: RelayCommittee = { f: 1, members: [entryOf(c, 4), entryOf(c, 1), entryOf(c, 2), entryOf(c, 3)] }
    for (const i of [1, 2, 3]) await c.relays[i]!.backCommittee(1, next)
    await c.until('r1 left', () => c.relays[0]!.hasLeft)
    // Its operator starts it once the change took effect (stead-relay start --join needs a relay that serves the certificate).
    await c.until('the others in epoch 1', () => [1, 2, 3].every((i) => epochOf(c, i) === 1))
    await r5.up()
    await settledIn(c, [1, 2, 3, 4], 1)
    // The joiner took the state at the boundary from a checkpoint f+1 of the new committee vouch for.
    expect(c.relays[4]!.stableValue('s', 'n')).toBe(3)
    // The client pinned r1-r4: r2-r4 are f+1 of them, so it goes on without r1.
    expect((await counter.increment(1, { safe: true })).status).toBe('committed')
    await settledIn(c, [1, 2, 3, 4], 1)
    expect(c.relays[4]!.stableValue('s', 'n')).toBe(4)
  })

  it('grows from 4 relays to 7 (f from 1 to 2): the epoch waits for the new relays, then commits with all 7', async () => {
    const c = await world.start({ seed: 11 })
    const counter = (await (await world.client(c)).space('s')).counter('n')
    await counter.increment(2, { safe: true })
    await growToSeven(c)
    expect((await counter.increment(1, { safe: true })).status).toBe('committed')
    await settledIn(c, [0, 1, 2, 3, 4, 5, 6], 1)
    expect(c.relays.map((r) => r.stableValue('s', 'n'))).toEqual([3, 3, 3, 3, 3, 3, 3])
    expect(c.relays[6]!.node.status()).toMatchObject({ epoch: 1, peers: { total: 6 } })
  })

  it('grows from 4 to 7 with two of the first four down after the change (f = 2 of the new committee): the new relays take the state the certificate names from the two left, and the five commit', async () => {
    const c = await world.start({ seed: 12 })
    const counter = (await (await world.client(c)).space('s')).counter('n')
    await counter.increment(2, { safe: true })
    const added = [c.addRelay(), c.addRelay(), c.addRelay()]
    const next: RelayCommittee = { f: 2, members: [0, 1, 2, 3, 4, 5, 6].map((i) => entryOf(c, i)) }
    for (const i of [0, 1, 2]) await c.relays[i]!.backCommittee(1, next)
    await c.until('the first four in epoch 1', () => [0, 1, 2, 3].every((i) => epochOf(c, i) === 1))
    // Two of the committee's seven are down: f+1 = 3 of it can no longer vouch for the starting state, but the
    // certificate (2f+1 of the old committee) did.
    await c.relays[2]!.down()
    await c.relays[3]!.down()
    for (const r of added) await r.up()
    await settledIn(c, [0, 1, 4, 5, 6], 1)
    expect([4, 5, 6].map((i) => c.relays[i]!.stableValue('s', 'n'))).toEqual([2, 2, 2])
    expect((await counter.increment(1, { safe: true })).status).toBe('committed')
    await settledIn(c, [0, 1, 4, 5, 6], 1)
    expect([0, 1, 4, 5, 6].map((i) => c.relays[i]!.stableValue('s', 'n'))).toEqual([3, 3, 3, 3, 3])
  })

  it('a client that followed a growth to 7 starts again with the four URLs of the app: it reaches all seven relays, and its safe updates commit', async () => {
    const c = await world.start({ seed: 11 })
    // The client's storage outlives it (as IndexedDB does a page): its close does not close this one.
    const data = memoryStorage()
    const kept = { ...data, close: async () => undefined }
    // The app passes the URLs it was built with: the first four relays'.
    const appUrls = [...c.urls]
    const first = await world.client(c, { relays: appUrls, storage: kept, epochPollMs: 1_000 })
    const counter = (await first.space('s')).counter('n')
    await counter.increment(1, { safe: true })
    await growToSeven(c)
    await c.until('the client moved to seven relays', () => first.status.epoch === 1 && first.status.relays.filter((r) => r.connected).length === 7 || undefined)
    await first.close()
    expect(appUrls).toHaveLength(4)
    const again = await world.client(c, { relays: appUrls, storage: kept })
    expect(again.status.epoch).toBe(1)
    const later = (await again.space('s')).counter('n')
    expect((await later.increment(1, { safe: true, timeoutMs: 20_000 })).status).toBe('committed')
    expect(again.status.relays.map((r) => r.relay)).toEqual(['r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7'])
    await settledIn(c, [0, 1, 2, 3, 4, 5, 6], 1)
    expect(c.relays[6]!.stableValue('s', 'n')).toBe(2)
  })

  it('a client whose storage fails to keep the epoch it followed moves all the same, and tells the app why', async () => {
    const c = await world.start({ seed: 11 })
    const data = memoryStorage()
    // The disk fills up once the client is running: what it writes of an epoch from then on fails.
    let diskFull = false
    const full: ClientStorage = { ...data, write: async (changes) => (diskFull && changes.some((ch) => ch.key.join('/') === '/epochs') ? Promise.reject(new Error('disk full')) : data.write(changes)) }
    const client = await world.client(c, { storage: full, epochPollMs: 1_000 })
    diskFull = true
    const errors: SteadError[] = []
    client.onError((e) => errors.push(e))
    const counter = (await client.space('s')).counter('n')
    await counter.increment(1, { safe: true })
    await growToSeven(c)
    await c.until('the client moved to seven relays', () => client.status.epoch === 1 && client.status.relays.filter((r) => r.connected).length === 7 || undefined)
    expect(errors.filter((e) => isStorageError(e, 'io')).map((e) => e.message)).toEqual(['unsupported: storage io: the committee of epoch 1 was not stored: disk full'])
    expect((await counter.increment(1, { safe: true, timeoutMs: 20_000 })).status).toBe('committed')
  })

  it('a relay down while the others changed epochs comes back into the new epoch from the state it started from', async () => {
    const c = await world.start({ seed: 5 })
    const counter = (await (await world.client(c)).space('s')).counter('n')
    await counter.increment(1, { safe: true })
    await c.relays[3]!.down()
    await counter.increment(1, { safe: true })
    const file = relayCommitteeOf(c.config)
    const next: RelayCommittee = { f: 1, members: file.members.map((m, i) => (i === 2 ? { ...m, api: 'relay2-moved.sim' } : m)) }
    for (const i of [0, 1, 2]) await c.relays[i]!.backCommittee(1, next)
    await c.until('three relays in epoch 1', () => [0, 1, 2].every((i) => epochOf(c, i) === 1))
    await counter.increment(1, { safe: true })
    await c.relays[3]!.up()
    await settledIn(c, [0, 1, 2, 3], 1)
    expect(c.relays[3]!.stableValue('s', 'n')).toBe(3)
  })

  it('a relay cut off while the others ended the epoch finds they moved on, and follows them', async () => {
    const c = await world.start({ seed: 6 })
    const counter = (await (await world.client(c)).space('s')).counter('n')
    await counter.increment(1, { safe: true })
    const file = relayCommitteeOf(c.config)
    const next: RelayCommittee = { f: 1, members: file.members.map((m, i) => (i === 1 ? { ...m, api: 'relay1-moved.sim' } : m)) }
    // r4's operator backs it too, but r4 is cut off before the change commits.
    await c.relays[3]!.backCommittee(1, next)
    c.relays[3]!.cutOff()
    for (const i of [0, 1]) await c.relays[i]!.backCommittee(1, next)
    await c.until('three relays in epoch 1', () => [0, 1, 2].every((i) => epochOf(c, i) === 1))
    expect(epochOf(c, 3)).toBe(0)
    await counter.increment(1, { safe: true })
    c.relays[3]!.reconnect()
    await settledIn(c, [0, 1, 2, 3], 1)
    expect(c.relays[3]!.stableValue('s', 'n')).toBe(2)
  })

  it("rotates a relay's key: it runs with the new key from the epoch that lists it, on the same store", async () => {
    const c = await world.start({ seed: 9 })
    const counter = (await (await world.client(c)).space('s')).counter('n')
    await counter.increment(1, { safe: true })
    const rotated = c.relays[1]!.nextKey()
    const file = relayCommitteeOf(c.config)
    const next: RelayCommittee = { f: 1, members: file.members.map((m, i) => (i === 1 ? { ...m, publicKey: rotated } : m)) }
    for (const i of [0, 2, 3]) await c.relays[i]!.backCommittee(1, next)
    await settledIn(c, [0, 1, 2, 3], 1)
    expect(c.relays[1]!.node.status()['publicKey']).toBe(toHex(rotated))
    // The client pinned r2's old key: it goes on with the f+1 others.
    expect((await counter.increment(1, { safe: true })).status).toBe('committed')
    await settledIn(c, [0, 1, 2, 3], 1)
    expect(c.relays[1]!.stableValue('s', 'n')).toBe(2)
  })

  it('a member Byzantine towards its peers misbehaves in a later epoch too: they refuse its blocks of that epoch, and commit without it', async () => {
    const c = await world.start({ seed: 5 })
    const counter = (await (await world.client(c)).space('s')).counter('n')
    await counter.increment(1, { safe: true })
    const file = relayCommitteeOf(c.config)
    const next: RelayCommittee = { f: 1, members: file.members.map((m, i) => (i === 0 ? { ...m, api: 'relay0-moved.sim' } : m)) }
    for (const i of [0, 1, 2]) await c.relays[i]!.backCommittee(1, next)
    await settledIn(c, [0, 1, 2, 3], 1)
    const refused = async () => (await c.relays[0]!.node.metrics.rejected.get()).values.filter((v) => v.labels.reason === 'bad-signature').reduce((n, v) => n + v.value, 0)
    const before = await refused()
    // Its blocks carry epoch 1 and a broken signature: refused for the signature, not for the epoch.
    c.relays[3]!.misbehave('bad-signature')
    expect((await counter.increment(1, { safe: true })).status).toBe('committed')
    await c.until('r1 refuses r4 blocks of epoch 1', async () => (await refused()) > before || undefined)
    expect(epochOf(c, 0)).toBe(1)
  })

  it('a client that first meets the cluster after a rotation trusts the rotated committee, reads the state from before it and commits: no relay is faulty to it', async () => {
    const c = await world.start({ seed: 9 })
    const counter = (await (await world.client(c)).space('s')).counter('n')
    for (let i = 0; i < 3; i++) await counter.increment(1, { safe: true })
    const rotated = c.relays[1]!.nextKey()
    const file = relayCommitteeOf(c.config)
    const next: RelayCommittee = { f: 1, members: file.members.map((m, i) => (i === 1 ? { ...m, publicKey: rotated } : m)) }
    for (const i of [0, 2, 3]) await c.relays[i]!.backCommittee(1, next)
    await settledIn(c, [0, 1, 2, 3], 1)
    // What it trusts on first use names where the epoch began: rounds signed before with r2's old key.
    const startRound = decodeEpochChange(c.relays[0]!.node.epochCertificates()[0]!.change).startRound
    expect(startRound).toBeGreaterThan(0)
    for (const r of c.relays) expect(r.node.clusterDescriptor()).toMatchObject({ epoch: 1, startRound })
    const fresh = await world.client(c, { cluster: undefined })
    const read = (await fresh.space('s')).counter('n')
    await c.until('the newcomer holds the state', () => read.stable === 3 || undefined)
    expect((await read.increment(1, { safe: true })).status).toBe('committed')
    await c.until("r2's session", () => fresh.status.relays[1]?.connected || undefined)
    expect(fresh.status.epoch).toBe(1)
    expect(fresh.status.relays.map((r) => r.faulty ?? null)).toEqual([null, null, null, null])
  })

  it('a client pinned before the first change follows three in a row (replace, rotate, grow to 7) without a restart, and refuses the forged certificate a lying relay serves', async () => {
    const c = await world.start({ seed: 13 })
    // r4 serves a forged certificate after the true chain: a change to made-up relays, 2f signatures not of the committee.
    await c.relays[3]!.lie('forge-epoch')
    const client = await world.client(c, { epochPollMs: 1_000 })
    const counter = (await client.space('s')).counter('n')
    const writes = keepWriting(counter)
    await c.until('a few safe updates', () => writes.acknowledged >= 3)
    await c.until('the liar reported', () => client.status.relays[3]?.faulty)
    expect(client.status.relays[3]?.faulty).toMatch(/epoch certificate that does not verify/)
    expect(client.status.epoch).toBe(0)
    const inEpoch = async (epoch: number, members: number[]) => {
      await settledIn(c, members, epoch)
      await c.until(`the client in epoch ${epoch}, online`, () => client.status.epoch === epoch && client.status.online)
      const before = writes.acknowledged
      await c.until(`safe updates commit in epoch ${epoch}`, () => writes.acknowledged >= before + 2)
    }
    // 1: r1's machine is replaced by r5.
    const r5 = c.addRelay('r5')
    const e1: RelayCommittee = { f: 1, members: [entryOf(c, 4), entryOf(c, 1), entryOf(c, 2), entryOf(c, 3)] }
    for (const i of [1, 2, 3]) await c.relays[i]!.backCommittee(1, e1)
    await c.until('r2-r4 in epoch 1', () => [1, 2, 3].every((i) => epochOf(c, i) === 1))
    await r5.up()
    await inEpoch(1, [1, 2, 3, 4])
    // 2: r2's key is rotated.
    const e2: RelayCommittee = { f: 1, members: e1.members.map((m, i) => (i === 1 ? { ...m, publicKey: c.relays[1]!.nextKey() } : m)) }
    for (const i of [2, 3, 4]) await c.relays[i]!.backCommittee(2, e2)
    await inEpoch(2, [1, 2, 3, 4])
    // 3: three relays join: 7 relays, f = 2.
    const added = [c.addRelay(), c.addRelay(), c.addRelay()]
    const e3: RelayCommittee = { f: 2, members: [...e2.members, entryOf(c, 5), entryOf(c, 6), entryOf(c, 7)] }
    for (const i of [2, 3, 4]) await c.relays[i]!.backCommittee(3, e3)
    await c.until('the four in epoch 3', () => [1, 2, 3, 4].every((i) => epochOf(c, i) === 3))
    for (const r of added) await r.up()
    await inEpoch(3, [1, 2, 3, 4, 5, 6, 7])
    await writes.stop()
    // Every acknowledged update is in the stable value once, on every relay and the client.
    await settledIn(c, [1, 2, 3, 4, 5, 6, 7], 3)
    expect(c.relays[7]!.stableValue('s', 'n')).toBe(writes.acknowledged)
    await c.until('the client holds them all', () => counter.stable === writes.acknowledged)
    // Its sessions are the new committee's: r5 and the three new relays among them, r1 gone.
    expect(client.status.relays.map((r) => r.relay)).toEqual(['r5', 'r2', 'r3', 'r4', 'r6', 'r7', 'r8'])
    await c.until('sessions with the six honest relays', () => client.status.relays.filter((r) => r.connected).length === 6)
    expect(client.status.relays[3]?.faulty).toMatch(/epoch certificate/)
  }, 90_000)
})
