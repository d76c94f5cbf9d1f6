import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { decodeEpochChange, encode, encodeEpochChange, epochChainFromJson, epochChainToJson, followEpochs, signEpochChange, verifyEpochCertificate, type EpochCertificate, type EpochChange, type EpochCommittee, type RelayCommittee } from '../src/index.ts'
import { nodeCrypto } from '../src/node.ts'

/** Relays with their secret keys: a committee the test can sign for. */
function relays(n: number, from = 1): Array<{ id: string; secretKey: Uint8Array; publicKey: Uint8Array }> {
  return Array.from({ length: n }, (_, i) => {
    const secretKey = nodeCrypto.sha256(new TextEncoder().encode(`epoch-test-relay-${from + i}`))
    return { id: `r${from + i}`, secretKey, publicKey: new Uint8Array(0) }
  })
}

async function committee(rs: ReturnType<typeof relays>, f: number): Promise<{ committee: RelayCommittee; keys: Uint8Array[] }> {
  const members = await Promise.all(rs.map(async (r, i) => ({ id: r.id, publicKey: await nodeCrypto.publicKeyOf(r.secretKey), api: `127.0.0.1:${7400 + i}`, mesh: `/ip4/127.0.0.1/tcp/${7500 + i}` })))
  return { committee: { f, members }, keys: rs.map((r) => r.secretKey) }
}

/** A certificate of `change` signed by the old committee's relays at `signers` (indices into `keys`). */
async function certify(change: EpochChange, keys: readonly Uint8Array[], signers: readonly number[]): Promise<EpochCertificate> {
  const bytes = encodeEpochChange(change)
  return { change: bytes, signatures: await Promise.all(signers.map((i) => signEpochChange(nodeCrypto, keys[i] as Uint8Array, i, bytes))) }
}

const digest = (n: number): Uint8Array => nodeCrypto.sha256(new Uint8Array([n]))

describe('epoch certificates', () => {
  it('round-trips an epoch change, and refuses junk with a typed error', async () => {
    const { committee: next } = await committee(relays(7), 2)
    const change: EpochChange = { epoch: 3, startRound: 1200, stateDigest: digest(1), next: { ...next, members: next.members.map((m, i) => (i === 0 ? { ...m, peers: '/ip4/127.0.0.1/tcp/7600/ws' } : m)) } }
    expect(decodeEpochChange(encodeEpochChange(change))).toEqual(change)
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (junk) => {
        expect(() => decodeEpochChange(junk)).toThrow(expect.objectContaining({ name: 'SteadError' }))
      }),
    )
    // Well-formed messages that name an unsound committee are no epoch change.
    const members = change.next.members.map((m) => [m.id, m.publicKey, m.api, m.mesh, null])
    const bad = (f: number, ms: unknown[]): Uint8Array => encode(['stead/epoch-change/v1', 1, 10, digest(1), f, ms])
    expect(() => decodeEpochChange(bad(3, members))).toThrow(/cannot tolerate f = 3/)
    expect(() => decodeEpochChange(bad(1, members))).toThrow(/exactly 3f\+1/)
    expect(() => decodeEpochChange(bad(1, [...members.slice(0, 3), members[0]]))).toThrow(/keys must be distinct/)
    expect(() => decodeEpochChange(bad(1, members.map((m) => [...m.slice(0, 2), '', ...m.slice(3)])))).toThrow(/api/)
    expect(() => encodeEpochChange({ ...change, stateDigest: new Uint8Array(31) })).toThrow(/stateDigest/)
  })

  it('takes 2f+1 distinct signatures of the old committee, and refuses 2f, repeats, strangers and the new committee’s own', async () => {
    const old = await committee(relays(4), 1)
    const next = await committee(relays(7, 5), 2)
    const from: EpochCommittee = { epoch: 0, committee: old.committee }
    const change: EpochChange = { epoch: 1, startRound: 500, stateDigest: digest(2), next: next.committee }
    expect(await verifyEpochCertificate(nodeCrypto, from, await certify(change, old.keys, [0, 2, 3]))).toEqual(change)
    const twoF = await certify(change, old.keys, [1, 3])
    await expect(verifyEpochCertificate(nodeCrypto, from, twoF)).rejects.toMatchObject({ reason: 'bad-signature', message: expect.stringContaining('2 valid signatures') })
    // One relay's signature three times counts once.
    const repeated = { ...twoF, signatures: [twoF.signatures[0], twoF.signatures[0], twoF.signatures[0], twoF.signatures[1]] } as EpochCertificate
    await expect(verifyEpochCertificate(nodeCrypto, from, repeated)).rejects.toMatchObject({ reason: 'bad-signature' })
    // The new committee vouching for itself, or signatures under indices the old committee does not have, count for nothing.
    const byNew = await certify(change, next.keys, [0, 1, 2, 3, 4])
    await expect(verifyEpochCertificate(nodeCrypto, from, byNew)).rejects.toMatchObject({ reason: 'bad-signature' })
    // A signature over another change does not carry over.
    const other = await certify({ ...change, stateDigest: digest(3) }, old.keys, [0, 1, 2])
    await expect(verifyEpochCertificate(nodeCrypto, from, { change: encodeEpochChange(change), signatures: other.signatures })).rejects.toMatchObject({ reason: 'bad-signature' })
    // Not the next epoch.
    await expect(verifyEpochCertificate(nodeCrypto, from, await certify({ ...change, epoch: 2 }, old.keys, [0, 1, 2]))).rejects.toMatchObject({ reason: 'malformed', message: expect.stringContaining('does not follow epoch 0') })
  })

  it('follows a chain of changes from the pinned committee: replace a relay, grow from 4 to 7, rotate a key', async () => {
    const a = relays(4)
    const e0 = await committee(a, 1)
    // Epoch 1: r1's machine is replaced by r5.
    const b = [relays(1, 5)[0], ...a.slice(1)] as ReturnType<typeof relays>
    const e1 = await committee(b, 1)
    // Epoch 2: three more relays, f = 2.
    const c = [...b, ...relays(3, 6)]
    const e2 = await committee(c, 2)
    // Epoch 3: r3 rotates its key (same id, same addresses).
    const rotated = { ...(c[2] as (typeof c)[number]), secretKey: nodeCrypto.sha256(new TextEncoder().encode('r3 rotated')) }
    const d = c.map((r, i) => (i === 2 ? rotated : r))
    const e3 = await committee(d, 2)
    const changes: EpochChange[] = [
      { epoch: 1, startRound: 100, stateDigest: digest(1), next: e1.committee },
      { epoch: 2, startRound: 250, stateDigest: digest(2), next: e2.committee },
      { epoch: 3, startRound: 900, stateDigest: digest(3), next: e3.committee },
    ]
    const certs = [await certify(changes[0] as EpochChange, e0.keys, [0, 1, 2]), await certify(changes[1] as EpochChange, e1.keys, [1, 2, 3]), await certify(changes[2] as EpochChange, e2.keys, [0, 2, 4, 5, 6])]
    const pinned: EpochCommittee = { epoch: 0, committee: e0.committee }
    expect(await followEpochs(nodeCrypto, pinned, certs)).toEqual({ epoch: 3, committee: e3.committee, startRound: 900 })
    // Already at epoch 1: the first certificate is skipped.
    expect((await followEpochs(nodeCrypto, { epoch: 1, committee: e1.committee }, certs)).epoch).toBe(3)
    // A gap in the chain stops it: epoch 2's certificate cannot be checked against epoch 0's committee.
    await expect(followEpochs(nodeCrypto, pinned, [certs[1] as EpochCertificate])).rejects.toMatchObject({ reason: 'malformed' })
    // Epoch 2 certified by 2f+1 of epoch 2's own committee (a fake the new relays made), not epoch 1's: refused, and nothing after it believed.
    const forged = await certify(changes[1] as EpochChange, e2.keys, [4, 5, 6])
    await expect(followEpochs(nodeCrypto, pinned, [certs[0] as EpochCertificate, forged, certs[2] as EpochCertificate])).rejects.toMatchObject({ reason: 'bad-signature' })
    // After f = 2, 2f+1 = 5 signatures: four of epoch 2's committee are not enough for epoch 3.
    const four = await certify(changes[2] as EpochChange, e2.keys, [0, 2, 4, 5])
    await expect(followEpochs(nodeCrypto, pinned, [certs[0] as EpochCertificate, certs[1] as EpochCertificate, four])).rejects.toMatchObject({ reason: 'bad-signature' })
    // Rounds only go forward: an epoch starting before the one it follows is refused.
    const back = await certify({ ...(changes[1] as EpochChange), startRound: 50 }, e1.keys, [0, 1, 2])
    await expect(followEpochs(nodeCrypto, pinned, [certs[0] as EpochCertificate, back])).rejects.toMatchObject({ reason: 'malformed', message: expect.stringContaining('before round 100') })
  })

  it('carries a chain as GET /v1/epochs serves it, and refuses answers of another shape with a typed error', async () => {
    const old = await committee(relays(4), 1)
    const next = (await committee(relays(4, 5), 1)).committee
    const chain = [await certify({ epoch: 1, startRound: 10, stateDigest: digest(1), next }, old.keys, [0, 1, 2])]
    const json = JSON.parse(JSON.stringify(epochChainToJson(chain)))
    expect(json.epoch).toBe(1)
    const back = epochChainFromJson(json)
    expect(epochChainToJson(back)).toEqual(json)
    expect(await followEpochs(nodeCrypto, { epoch: 0, committee: old.committee }, back)).toMatchObject({ epoch: 1, startRound: 10 })
    expect(epochChainToJson(chain, 1)).toEqual({ epoch: 1, certificates: [] })
    for (const junk of [null, {}, { certificates: [{ change: 5, signatures: [] }] }, { certificates: [{ change: 'AA', signatures: [[0, 7]] }] }, { certificates: [{ change: 'A+', signatures: [] }] }]) {
      expect(() => epochChainFromJson(junk)).toThrow(expect.objectContaining({ reason: 'malformed' }))
    }
  })
})
