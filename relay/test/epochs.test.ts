import { encodeEpochChange, toHex, type EpochCertificate, type EpochChange, type RelayCommittee } from '@stead/core'
import { publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { parseCluster, relayCommitteeOf } from '../src/process/config.ts'
import { adoptEpochChain, storedEpoch } from '../src/runtime/epochs.ts'
import { relayCrypto } from '../src/runtime/node.ts'
import { MemoryKv } from '../src/store/kv.ts'


const secret = (n: number): Uint8Array => new Uint8Array(32).fill(n)
const file = parseCluster({
  f: 1,
  relays: [1, 2, 3, 4].map((n) => ({ id: `r${n}`, publicKey: toHex(publicKeyOfSync(secret(n))), mesh: `/ip4/127.0.0.1/tcp/${7500 + n}`, api: `127.0.0.1:${7400 + n}` })),
  openSpaces: true,
})
const genesis = relayCommitteeOf(file)
/** The committee with relay `out` (1-based) replaced by a relay of key byte `by`. */
const replacing = (c: RelayCommittee, out: number, by: number): RelayCommittee => ({ f: c.f, members: c.members.map((m, i) => (i === out - 1 ? { id: `r${by}`, publicKey: publicKeyOfSync(secret(by)), api: `127.0.0.1:${7400 + by}`, mesh: `/ip4/127.0.0.1/tcp/${7500 + by}` } : m)) })
/** A certificate for `change` signed by the relays of key bytes `signers`, at their index in `by`. */
function certify(change: EpochChange, by: RelayCommittee, signers: number[]): EpochCertificate {
  const bytes = encodeEpochChange(change)
  return {
    change: bytes,
    signatures: signers.map((n) => ({ relay: by.members.findIndex((m) => toHex(m.publicKey) === toHex(publicKeyOfSync(secret(n)))), sig: relayCrypto.sign(secret(n), bytes) })),
  }
}
const digest = new Uint8Array(32).fill(9)
const first = replacing(genesis, 4, 5)
const second = replacing(first, 1, 6)
const e1 = certify({ epoch: 1, startRound: 20, stateDigest: digest, next: first }, genesis, [1, 2, 3])
const e2 = certify({ epoch: 2, startRound: 50, stateDigest: digest, next: second }, first, [2, 3, 5])

describe('a relay taking epoch certificates from its peers', () => {
  it('takes a chain each of whose certificates 2f+1 of the committee before signed, and starts in its last epoch', async () => {
    const kv = new MemoryKv()
    expect(await adoptEpochChain(kv, file, [e1, e2])).toMatchObject({ epoch: 2, startRound: 50 })
    const stored = storedEpoch(kv, file)
    expect(stored.epoch).toEqual({ epoch: 2, startRound: 50, stateDigest: digest })
    expect(stored.cluster.relays.map((r) => r.id)).toEqual(['r6', 'r2', 'r3', 'r5'])
    // Later, from where the store is: a chain it already holds changes nothing.
    expect(await adoptEpochChain(kv, file, [e1, e2])).toMatchObject({ epoch: 2 })
  })

  it('refuses a forged chain, and keeps nothing of it: 2f signatures, keys of the next committee, or a change its committee never signed', async () => {
    const forged = [
      // Two of the old committee (2f) and the new relay itself.
      certify({ epoch: 1, startRound: 20, stateDigest: digest, next: first }, first, [1, 2, 5]),
      // Two signatures of one relay.
      { ...e1, signatures: [e1.signatures[0]!, e1.signatures[0]!, e1.signatures[1]!] },
      // Signed over another committee than the one it names.
      { change: encodeEpochChange({ epoch: 1, startRound: 20, stateDigest: digest, next: replacing(genesis, 4, 7) }), signatures: e1.signatures },
    ]
    for (const cert of forged) {
      const kv = new MemoryKv()
      await expect(adoptEpochChain(kv, file, [cert, e2])).rejects.toMatchObject({ reason: 'bad-signature' })
      expect(storedEpoch(kv, file).epoch).toBeUndefined()
    }
    // A good first certificate and a forged second: nothing is kept (the chain is checked before anything is written).
    const kv = new MemoryKv()
    // Epoch 2's signed by r2 of epoch 1's committee, and by r4 (which left) and r6 (which is not in it yet) at r5's and r1's places.
    const bytes = encodeEpochChange({ epoch: 2, startRound: 50, stateDigest: digest, next: second })
    const forged2 = { change: bytes, signatures: [{ relay: 1, sig: relayCrypto.sign(secret(2), bytes) }, { relay: 3, sig: relayCrypto.sign(secret(4), bytes) }, { relay: 0, sig: relayCrypto.sign(secret(6), bytes) }] }
    await expect(adoptEpochChain(kv, file, [e1, forged2])).rejects.toMatchObject({ reason: 'bad-signature' })
    expect(storedEpoch(kv, file).epoch).toBeUndefined()
  })
})
