import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestCluster, until } from '@stead/relay/testing'
import { toHex } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { createClient, memoryStorage, type SteadClient } from '../src/index.node.ts'

/**
 * Members at runtime (issue 46) with the SDK against four real relay
 * processes, one of which lies to its clients (`admit-revoked`: it attests
 * writes the policy refused as committed): create a space, invite, join
 * from a second client, write, revoke; the revoked user's next write is
 * refused, and the liar is found out by the client that follows it. The
 * same with a device of a user, revoked by the user's key.
 */
describe('members with the SDK on a real cluster with a lying relay', () => {
  let cluster: TestCluster
  const clients: SteadClient[] = []
  const urls = (): string[] => cluster.relays.map((r) => `ws://${r.api}`)
  const LIAR = 3

  beforeAll(async () => {
    cluster = await TestCluster.create(4, { openSpaces: true })
    await cluster.startAll((i) => (i === LIAR ? ['--byzantine', 'admit-revoked'] : []))
  }, 90_000)

  afterAll(async () => {
    for (const c of clients) await c.close()
    await cluster?.stopAll()
  })

  /** A space name whose home relay (the clients' frame source for it, see fromHome in the outbox) is the liar. */
  const homedAt = (relay: number, prefix = 'team'): string => {
    for (let i = 0; ; i++) {
      const name = `${prefix}-${i}`
      let h = 0
      for (let k = 0; k < name.length; k++) h = (h * 31 + name.charCodeAt(k)) >>> 0
      if (h % 4 === relay) return name
    }
  }

  it('create, invite, join, write, revoke: the next write is refused everywhere, and the relay that attests it otherwise is reported', async () => {
    const person = async (byte: number): Promise<SteadClient> => {
      const c = await createClient({ relays: urls(), storage: memoryStorage(), identity: { secretKey: new Uint8Array(32).fill(byte) } })
      clients.push(c)
      return c
    }
    const [alice, bob] = [await person(41), await person(42)]
    const team = await alice.createSpace(homedAt(LIAR))
    const token = await team.members.invite('writer')
    const bobs = await bob.join(token, { timeoutMs: 60_000 })
    expect(bobs.members.myRole).toBe('writer')
    expect(await bobs.counter('n').increment(2, { safe: true, timeoutMs: 60_000 })).toMatchObject({ status: 'committed' })
    await until('alice has bob\'s write', () => (team.counter('n').stable === 2 ? true : undefined), 30_000)

    expect(await team.members.revoke(bob.userId, { timeoutMs: 60_000 })).toMatchObject({ status: 'committed' })
    // Refused by the relays' doors (f+1 say so), and the envelope that takes its sequence number is
    // rejected by the audit as unauthorized: the liar attests that one as committed.
    expect(await bobs.counter('n').increment(5, { safe: true, timeoutMs: 60_000 })).toMatchObject({ status: 'rejected', reason: 'unauthorized' })
    await until('the liar reported', () => (team.status.relays[LIAR]?.faulty !== undefined ? true : undefined), 60_000)
    for (const r of [0, 1, 2]) expect(team.status.relays[r]?.faulty).toBeUndefined()
    // Alice goes on with the honest relays; bob's earlier write stands, his later one never counted.
    expect(await team.counter('n').increment(1, { safe: true, timeoutMs: 60_000 })).toMatchObject({ status: 'committed' })
    expect(team.counter('n').stable).toBe(3)
  }, 180_000)

  it("a user's phone, certified by its laptop, writes as the user; revoked by the laptop, its next write is refused everywhere and the liar's attestation otherwise is reported", async () => {
    const person = async (byte: number, deviceCertificate?: string): Promise<SteadClient> => {
      const c = await createClient({ relays: urls(), storage: memoryStorage(), identity: { secretKey: new Uint8Array(32).fill(byte) }, ...(deviceCertificate ? { deviceCertificate } : {}) })
      clients.push(c)
      return c
    }
    const [alice, laptop] = [await person(51), await person(52)]
    const phoneKey = toHex(await nodeCrypto.publicKeyOf(new Uint8Array(32).fill(53)))
    const phone = await person(53, await laptop.certifyDevice(phoneKey))
    expect(phone.userId).toBe(laptop.userId)
    const name = homedAt(LIAR, 'devices')
    const team = await alice.createSpace(name, { writers: [laptop.userId] })
    const onPhone = await phone.space(name)
    expect(await onPhone.counter('n').increment(2, { safe: true, timeoutMs: 60_000 })).toMatchObject({ status: 'committed' })
    const onLaptop = await laptop.space(name)
    expect(await onLaptop.members.revokeDevice(phone.authorId, undefined, { timeoutMs: 60_000 })).toMatchObject({ status: 'committed' })
    expect(await onPhone.counter('n').increment(5, { safe: true, timeoutMs: 60_000 })).toMatchObject({ status: 'rejected', reason: 'unauthorized' })
    expect(await onLaptop.counter('n').increment(1, { safe: true, timeoutMs: 60_000 })).toMatchObject({ status: 'committed' })
    await until('alice has the phone\'s first write and the laptop\'s', () => (team.counter('n').stable === 3 ? true : undefined), 30_000)
    await until('the liar reported', () => (onPhone.status.relays[LIAR]?.faulty !== undefined || team.status.relays[LIAR]?.faulty !== undefined ? true : undefined), 60_000)
  }, 180_000)
})
