import { clockFrom, clockInit, encode, encodeEnvelope, sealEnvelope } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { afterAll, describe, expect, it } from 'vitest'
import { TestCluster, until } from '@stead/relay/testing'
import { createClient, memoryStorage, type PeerLink, type PeerNetwork, type Space, type SteadClient, type SteadError } from '../src/index.node.ts'
import { PEER_TAG, decodePeerMessage } from '../src/peers/peers.ts'
import { libp2pPeers, type Libp2pPeers } from '../src/peers-entry.node.ts'

/**
 * Peer-to-peer sync over real libp2p (TCP, noise, yamux) between Node
 * clients of a real relay cluster: the relays are killed, the clients keep
 * collaborating directly, one of their peers lies, and what they did
 * commits once the relays are back.
 */
describe('peer-to-peer sync over libp2p', () => {
  let cluster: TestCluster | undefined
  const clients: SteadClient[] = []

  afterAll(async () => {
    for (const c of clients) await c.close()
    await cluster?.stopAll()
  })

  it('keeps 7 honest clients and a lying peer converging with every relay down, then commits it all', async () => {
    const c = await TestCluster.create(4)
    cluster = c
    await c.startAll()
    const relays = c.relays.map((r) => `ws://${r.api}`)
    const honest: Array<{ client: SteadClient; space: Space; errors: SteadError[]; peers: Libp2pPeers }> = []
    for (let i = 0; i < 7; i++) {
      // Nobody is told an address: clients find each other through the relays they share.
      const peers = libp2pPeers()
      const client = await createClient({ relays, storage: memoryStorage(), peers, batchIntervalMs: 5, resubmitAfterMs: 500 })
      clients.push(client)
      const errors: SteadError[] = []
      client.onError((e) => errors.push(e))
      const space = await client.space('board')
      await until(`client ${i} listening`, () => (peers.addresses().length > 0 ? true : undefined), 10_000)
      honest.push({ client, space, errors, peers })
    }
    await until('all vouched for and online', () => (honest.every((h) => (h.client.peers?.exchanging ?? 0) >= 6 && h.space.status.online) ? true : undefined), 30_000)
    await honest[0]?.space.counter('likes').increment(1)
    await until('first update stable everywhere', () => (honest.every((h) => h.space.counter('likes').stable === 1) ? true : undefined), 30_000)

    // The lying peer: a client of the space like the others (the relays vouch that it may read it), whose peer
    // network lies on every link once the exchange opens: it claims envelopes it never hands out, and sends forgeries.
    const liarKey = new Uint8Array(32).fill(99)
    const liarId = { secretKey: liarKey, publicKey: publicKeyOfSync(liarKey) }
    const forgedClock = encodeEnvelope(await sealEnvelope(nodeCrypto, liarId, { space: 'board', seq: 1, clock: clockFrom([[honest[0]?.client.authorId as string, 500]]), deps: [], updates: [{ key: 'likes', decl: { type: 'counter', bounds: {} }, ops: [1000] }], safe: [] }))
    const forgedSig = encodeEnvelope(await sealEnvelope(nodeCrypto, liarId, { space: 'board', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'likes', decl: { type: 'counter', bounds: {} }, ops: [2000] }], safe: [] }))
    forgedSig[forgedSig.length - 3] = (forgedSig[forgedSig.length - 3] as number) ^ 1
    const lies = [forgedClock, forgedSig]
    let lied = 0
    const real = libp2pPeers()
    const lying: PeerNetwork = {
      addresses: () => real.addresses(),
      dial: (a) => real.dial(a),
      stop: () => real.stop(),
      start: (events, identity) =>
        real.start(
          {
            ...events,
            message: (link, bytes) => {
              // An honest client's `have` means it now hears this peer: lie to it.
              if (decodePeerMessage(bytes).kind === 'have' && !liarLinks.has(link)) {
                liarLinks.add(link)
                link.send(encode([PEER_TAG, 'have', 'board', [new Uint8Array(32).fill(7)], false]))
                link.send(encode([PEER_TAG, 'env', 'board', [lies[lied++ % lies.length]]]))
              }
            },
          },
          identity,
        ),
    }
    const liarLinks = new Set<PeerLink>()
    const liarClient = await createClient({ relays, storage: memoryStorage(), identity: { secretKey: liarKey }, peers: lying })
    clients.push(liarClient)
    await liarClient.space('board')
    await until('every honest client refused the liar', () => (honest.every((h) => (h.client.peers?.faulty ?? 0) === 1) ? true : undefined), 30_000)

    for (let i = 0; i < c.relays.length; i++) c.kill(i)
    await until('every client sees the relays gone', () => (honest.every((h) => !h.space.status.online) ? true : undefined), 30_000)

    // With the relays down, every honest client updates, many times, concurrently.
    for (let round = 0; round < 5; round++) await Promise.all(honest.map((h, i) => h.space.counter('likes').increment(i + 1)))
    const total = 1 + 5 * (1 + 2 + 3 + 4 + 5 + 6 + 7)
    await until('every honest client converged peer to peer', () => (honest.every((h) => h.space.counter('likes').value === total) ? true : undefined), 30_000)
    expect(honest.every((h) => (h.client.peers?.faulty ?? 0) === 1)).toBe(true)
    expect(honest.every((h) => h.space.counter('likes').stable === 1)).toBe(true)
    expect(honest.flatMap((h) => h.errors.map((e) => e.reason))).toEqual(honest.map(() => 'untrusted'))

    // The relays come back: everything done meanwhile commits, and nothing the liar sent.
    for (let i = 0; i < c.relays.length; i++) c.start(i)
    await until('everything stable', () => (honest.every((h) => h.space.counter('likes').stable === total) ? true : undefined), 60_000)
    expect(honest.every((h) => h.space.counter('likes').value === total)).toBe(true)
  }, 120_000)
})
