import { ChangeLog, ReliableReplica, StableAudit, clockInit, encodeAttestation, encodeStateDelta, sealEnvelope, type Declaration, type RelayMessage } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { certifyDelta } from '../src/upstream/pacing.ts'
import type { ClusterDescriptor } from '../src/transport/cluster.ts'

/** What a paced client believes of a `delta` message: only what f+1 relays signed, only a delta that leads there. */
const crypto = nodeCrypto
const SPACE = 'bank'
const sha = (b: Uint8Array): Uint8Array => crypto.sha256(b)
const relayKeys = [1, 2, 3, 4].map((i) => new Uint8Array(32).fill(i))
const cluster = { f: 1, relays: await Promise.all(relayKeys.map(async (k, i) => ({ url: `ws://relay${i}`, publicKey: await crypto.publicKeyOf(k) }))) } as unknown as ClusterDescriptor
const author = { secretKey: new Uint8Array(32).fill(9), publicKey: await crypto.publicKeyOf(new Uint8Array(32).fill(9)) }
const counter: Declaration = { type: 'counter', bounds: {} }

/** A relay's audit two commits on, a client's replica after the first, and the delta between with the second commit's attestation. */
async function scene() {
  const relay = new StableAudit({ space: SPACE })
  const log = new ChangeLog()
  const client = new ReliableReplica({ space: SPACE })
  const seal = (seq: number, n: number) => sealEnvelope(crypto, author, { space: SPACE, seq, clock: clockInit(), deps: [], updates: [{ key: 'acct', decl: counter, ops: [n] }], safe: [] })
  const first = [await seal(1, 5)]
  log.record(0, relay.commit(first, 2))
  client.commit(first, 2)
  const from = relay.stableIndex
  log.record(from, relay.commit([await seal(2, 7)], 4))
  const attestation = encodeAttestation({ space: SPACE, round: 4, prevRound: 2, fromIndex: from, toIndex: relay.stableIndex, decisions: [], stateHash: relay.stableHash(sha), batch: new Uint8Array(32) })
  const delta = encodeStateDelta(log.delta(relay, from, 'adaptive')!)
  const sign = (relays: number[], bytes = attestation) => Promise.all(relays.map(async (r) => [r, await crypto.sign(relayKeys[r]!, bytes)] as const))
  return { relay, client, delta, attestation, sign }
}

const message = (m: Omit<Extract<RelayMessage, { type: 'delta' }>, 'type' | 'space'>): Extract<RelayMessage, { type: 'delta' }> => ({ type: 'delta', space: SPACE, ...m })

describe('certifying a paced delta', () => {
  it('believes a delta under an attestation f+1 relays signed that leads to the attested state', async () => {
    const { client, delta, attestation, sign, relay } = await scene()
    const got = await certifyDelta(crypto, cluster, client, message({ delta, attestation, sigs: await sign([0, 2]) }))
    if (got === 'stale' || 'faulty' in got) throw new Error(JSON.stringify(got))
    client.applyDelta(sha, got.delta, got.attestation.round)
    expect(client.stableHash(sha)).toEqual(relay.stableHash(sha))
  })

  it('refuses f signatures, the same relay twice, a signature that does not verify, and unknown relays', async () => {
    const { client, delta, attestation, sign } = await scene()
    const one = await sign([0])
    const other = (await sign([1], new Uint8Array([1, 2, 3])))[0]![1]
    for (const sigs of [one, [...one, ...one], [...one, [1, other] as const], [...one, [7, one[0]![1]] as const]]) {
      const got = await certifyDelta(crypto, cluster, client, message({ delta, attestation, sigs }))
      expect(got).toHaveProperty('faulty')
    }
  })

  it('refuses a delta that does not lead to the attested state, and calls one from another index stale', async () => {
    const { client, attestation, sign } = await scene()
    const sigs = await sign([0, 1])
    const empty = encodeStateDelta({ space: SPACE, fromIndex: client.stableIndex, toIndex: client.stableIndex + 1, authors: [], waiting: [], objects: [] })
    expect(await certifyDelta(crypto, cluster, client, message({ delta: empty, attestation, sigs }))).toHaveProperty('faulty')
    const elsewhere = encodeStateDelta({ space: SPACE, fromIndex: 0, toIndex: client.stableIndex + 1, authors: [], waiting: [], objects: [] })
    expect(await certifyDelta(crypto, cluster, client, message({ delta: elsewhere, attestation, sigs }))).toBe('stale')
    expect(await certifyDelta(crypto, cluster, client, message({ delta: new Uint8Array([0xc1]), attestation, sigs }))).toHaveProperty('faulty')
  })
})
