import { clockInit, encodeAttestation, encodeClockVote, encodeEnvelope, sealEnvelope, type Envelope, type HostClock } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { ClockProofs, type RelayEvidence } from '../src/upstream/proofs.ts'

const SPACE = 's'
const relays = [0, 1, 2, 3].map((i) => new Uint8Array(32).fill(60 + i))
const cluster = { f: 1, relayKeys: await Promise.all(relays.map((k) => nodeCrypto.publicKeyOf(k))) }
const who = async (n: number) => {
  const secretKey = new Uint8Array(32).fill(n)
  return { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }
}

/** A clock whose timers never fire: a wait under it never ends. */
const stopped: HostClock = { now: () => 0, setTimer: () => ({ cancel: () => undefined }) }

/** What every relay answers for an envelope: its frame, all four relays' votes for `weight`, and (if `commit`) their attestations of a commit saying so. */
async function evidence(env: Envelope, weight: number, commit?: { index: number; verified: boolean }): Promise<RelayEvidence[]> {
  const votes = await Promise.all(relays.map(async (k, i) => [i, weight, await nodeCrypto.sign(k, encodeClockVote(SPACE, env.id, weight))] as const))
  const attestation = commit && encodeAttestation({ space: SPACE, round: 9, prevRound: 0, fromIndex: commit.index - 1, toIndex: commit.index, decisions: [[env.id, 'committed', commit.index, [], commit.verified]], stateHash: new Uint8Array(32), batch: new Uint8Array(32) })
  return Promise.all(relays.map(async (k, i) => ({ relay: i, frame: encodeEnvelope(env), votes, attestation: attestation && { bytes: attestation, sig: await nodeCrypto.sign(k, attestation) } })))
}

describe('ClockProofs from the relays’ answers', () => {
  it('proves by the commit when f+1 attest it, by the votes before; and does not wait for a commit that can never prove a position', async () => {
    const [a, b] = [await who(1), await who(2)]
    const early = await sealEnvelope(nodeCrypto, a, { space: SPACE, seq: 1, base: 0, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })
    const later = await sealEnvelope(nodeCrypto, b, { space: SPACE, seq: 1, base: 3, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })
    const answers = new Map<string, RelayEvidence[]>()
    const proofs = new ClockProofs(100, { space: SPACE, crypto: nodeCrypto, clock: stopped, cluster: async () => cluster, evidence: async (id) => answers.get(id) ?? [] })
    answers.set(later.idHex, await evidence(later, 4))
    // early committed at index 2, its clock verified: at or below later's base, so before it.
    answers.set(early.idHex, await evidence(early, 1, { index: 2, verified: true }))
    const cmp = await proofs.compare(early.idHex, later.idHex)
    expect(cmp.order).toBe('before')
    expect([cmp.a.index, cmp.a.certificate.kind]).toEqual([2, undefined])
    expect([cmp.b.index, cmp.b.certificate.kind]).toEqual([undefined, 'validators'])
    // Committed with a clock the audit could not verify: its votes prove its clock, not where it committed.
    const [c] = [await who(3)]
    const unverified = await sealEnvelope(nodeCrypto, c, { space: SPACE, seq: 1, base: 0, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [2] }], safe: [] })
    answers.set(unverified.idHex, await evidence(unverified, 1, { index: 2, verified: false }))
    expect((await proofs.proof(unverified.idHex)).certificate.kind).toBe('validators')
    // Whether it is before `later` hangs on that position: said at once, not after waiting (this clock never fires).
    await expect(proofs.compare(unverified.idHex, later.idHex)).rejects.toMatchObject({ reason: 'unsupported' })
    // Fewer than ceil((N+f+1)/2) votes and no commit: no proof.
    const lone = await sealEnvelope(nodeCrypto, c, { space: SPACE, seq: 2, base: 0, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter', bounds: {} }, ops: [3] }], safe: [] })
    answers.set(lone.idHex, (await evidence(lone, 1)).map((e) => ({ ...e, votes: e.votes.slice(0, 2) })))
    await expect(proofs.proof(lone.idHex)).rejects.toMatchObject({ reason: 'unsupported' })
  })
})
