import { clockInit, decodeEpochChange, encodeEnvelope, sealEnvelope, toHex, authorIdOf, followEpochs, type EpochCertificate, type EpochChange, type RelayCommittee } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import pino from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { clusterInEpoch, parseCluster, relayCommitteeOf, type ClusterConfig } from '../src/process/config.ts'
import type { Mesh } from '../src/mesh/types.ts'
import { RelayNode } from '../src/runtime/node.ts'
import { COMMITTEE_SPACE, backingKey, encodeCommitteeRequest } from '../src/runtime/committee-proposals.ts'
import { MemoryJournal } from '../src/store/journal.ts'
import { MemoryKv } from '../src/store/kv.ts'
import { storedChain } from '../src/store/store.ts'

const relayKey = new Uint8Array(32).fill(3)
const relay = { secretKey: relayKey, publicKey: publicKeyOfSync(relayKey) }
const author = { secretKey: new Uint8Array(32).fill(7), publicKey: publicKeyOfSync(new Uint8Array(32).fill(7)) }
const stranger = { secretKey: new Uint8Array(32).fill(9), publicKey: publicKeyOfSync(new Uint8Array(32).fill(9)) }
const idOf = (key: Uint8Array): string => authorIdOf(nodeCrypto, key)

const deposit = (seq: number) => sealEnvelope(nodeCrypto, author, { space: 's', seq, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter' as const, bounds: {} }, ops: [1] }], safe: [] }).then(encodeEnvelope)

/** An envelope of `who` in $committee: its register backing `next` for `epoch`. */
const backing = (who: typeof relay, seq: number, epoch: number, next: RelayCommittee, key = backingKey(idOf(who.publicKey))) =>
  sealEnvelope(nodeCrypto, who, { space: COMMITTEE_SPACE, seq, clock: clockInit(), deps: [], updates: [{ key, decl: { type: 'register' as const }, ops: [['s', encodeCommitteeRequest({ epoch, next }), Date.now()]] }], safe: [] }).then(encodeEnvelope)

const nowhere: Mesh = {
  start: async () => undefined,
  stop: async () => undefined,
  send: () => undefined,
  broadcast: () => undefined,
  onFrame: () => undefined,
  onPeerConnected: () => {},
  connectedPeers: () => [],
  queuedBytes: () => 0,
}

const nodes: RelayNode[] = []
afterEach(async () => {
  for (const n of nodes.splice(0)) await n.stop()
})

/** A one-relay cluster (f = 0: one signature is 2f+1) on a store in memory that outlives its relays. */
function soloCluster(): { file: ClusterConfig; kv: MemoryKv; journal: MemoryJournal; start: (cluster: ClusterConfig, epoch?: { epoch: number; startRound: number }) => Promise<{ node: RelayNode; ended: Promise<{ change: EpochChange; cert: EpochCertificate }> }> } {
  const file = parseCluster({ f: 0, relays: [{ id: 'solo', publicKey: toHex(relay.publicKey), mesh: '/ip4/127.0.0.1/tcp/1', api: '127.0.0.1:1' }], openSpaces: true })
  const kv = new MemoryKv()
  const journal = new MemoryJournal()
  return {
    file,
    kv,
    journal,
    async start(cluster, epoch) {
      let ended!: (v: { change: EpochChange; cert: EpochCertificate }) => void
      const endedP = new Promise<{ change: EpochChange; cert: EpochCertificate }>((ok) => (ended = ok))
      const node = new RelayNode({ cluster, me: 0, secretKey: relayKey, storage: { kv, journal }, mesh: nowhere, logger: pino({ level: 'silent' }), paceMs: 0, ...(epoch ? { epoch } : {}), onEpochEnd: (change, cert) => ended({ change, cert }) })
      nodes.push(node)
      await node.start()
      return { node, ended: endedP }
    },
  }
}

const decided = (node: RelayNode, frame: Uint8Array) => new Promise<void>((ok) => void node.submit(frame, 'test', () => ok()))

describe('an epoch change on one relay', () => {
  it('decides a change ordered in $committee, certifies it, and goes on in the next epoch on the same store with the state it had', async () => {
    const c = soloCluster()
    const { node, ended } = await c.start(c.file)
    await decided(node, await deposit(1))
    expect(node.reads.stableIndexOf('s')).toBe(1)
    // The relay moves its API: the same key, another address.
    const moved: RelayCommittee = { f: 0, members: [{ ...relayCommitteeOf(c.file).members[0]!, api: '127.0.0.1:2' }] }
    await decided(node, await backing(relay, 1, 1, moved))
    const { change, cert } = await ended
    expect(change.epoch).toBe(1)
    expect(change.next).toEqual(moved)
    expect(node.status()).toMatchObject({ epoch: 0, committeeChange: { decided: { epoch: 1, signers: 1, needed: 1 } } })
    expect(await node.metrics.registry.metrics()).toMatch(/^stead_epoch 0$[^]*^stead_committee_change_decided 1$/m)
    // Work that comes now waits for the next epoch (clients resubmit what is rate-limited).
    expect(() => node.submit(new Uint8Array(0))).toThrow(expect.objectContaining({ reason: 'rate-limited' }))
    // Whoever pinned epoch 0's committee follows the certificate the store keeps.
    const chain = storedChain(c.kv)
    expect(chain).toHaveLength(1)
    const followed = await followEpochs(nodeCrypto, { epoch: 0, committee: relayCommitteeOf(c.file) }, chain)
    expect(followed).toEqual({ epoch: 1, committee: moved, startRound: change.startRound })
    expect(decodeEpochChange(cert.change).stateDigest).toEqual(change.stateDigest)
    await node.stop()

    // The host starts the next epoch's relay on the same store.
    const next = await c.start(clusterInEpoch(c.file, followed.committee), { epoch: 1, startRound: followed.startRound })
    expect(next.node.status()).toMatchObject({ epoch: 1, epochStartRound: change.startRound, committeeChange: { proposals: [], decided: null } })
    expect(next.node.reads.stableIndexOf('s')).toBe(1)
    expect(await next.node.metrics.registry.metrics()).toMatch(/^stead_epoch 1$[^]*^stead_committee_proposals 0$[^]*^stead_committee_change_decided 0$/m)
    await decided(next.node, await deposit(2))
    expect(next.node.reads.stableIndexOf('s')).toBe(2)
    expect(next.node.status()['committedRound']).toBeGreaterThan(change.startRound)
  })

  it("refuses at the door a $committee write by a key outside the committee, or to another relay's register", async () => {
    const c = soloCluster()
    const { node } = await c.start(c.file)
    const next: RelayCommittee = { f: 0, members: [{ ...relayCommitteeOf(c.file).members[0]!, api: '127.0.0.1:2' }] }
    expect(() => node.submit(new Uint8Array(0))).toThrow(expect.objectContaining({ reason: 'malformed' }))
    const strangers = [await backing(stranger, 1, 1, next), await backing(stranger, 1, 1, next, backingKey(idOf(relay.publicKey)))]
    for (const frame of strangers) expect(() => node.submit(frame)).toThrow(expect.objectContaining({ reason: 'unauthorized' }))
    expect(node.committeeChange()).toMatchObject({ proposals: [], decided: null, members: [{ id: 'solo', nextSeq: 1 }] })
  })
})
