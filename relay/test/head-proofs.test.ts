import { encode, stableReadBytes } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { decodeMessage, encodeMessage, type Committee, type Message, type SyncCrypto } from '../src/consensus/index.ts'
import { systemClock } from '@stead/core'
import { HeadProofs, type HeadProofHost } from '../src/runtime/head-proofs.ts'

const crypto: SyncCrypto = { sign: signSync, verify: verifySync, sha256: (b) => nodeCrypto.sha256(b) }
const secrets = [1, 2, 3, 4].map((i) => new Uint8Array(32).fill(i))
const committee: Committee = { f: 1, keys: secrets.map((s) => publicKeyOfSync(s)) }
const hash = (n: number): Uint8Array => new Uint8Array(32).fill(n)
/** Stands for the attestation of the commit ending at a head: correct relays' bytes are alike, a liar's other hash makes other bytes. */
const attestationBytes = (head: { index: number; stateHash: Uint8Array }, other = false): Uint8Array => encode(['attestation', head.index, head.stateHash, other])
const attestationOf = (me: number, head: { index: number; stateHash: Uint8Array }, other = false) => {
  const bytes = attestationBytes(head, other)
  return { bytes, sig: signSync(secrets[me] as Uint8Array, bytes) }
}

/** A relay's attested heads of space 's': position [fromIndex, round] → (index, hash), and whether it has them yet. */
interface FakeRelayState {
  latest: { fromIndex: number; round: number; index: number; stateHash: Uint8Array } | null
  /** Resolves the attested() calls that wait (a relay catching up). */
  reached: Array<() => void>
  has: boolean
  /** What to sign when asked (a liar's other hash). */
  signs: { index: number; stateHash: Uint8Array }
  /** Signs other attestation bytes for the same head (a liar about the commit, not the state). */
  otherAttestation?: boolean
}

/** Four HeadProofs wired by a mesh that delivers every message on the next microtask, through the real codec. */
function cluster(states: FakeRelayState[], now = () => 0): { proofs: HeadProofs[]; sent: Message[] } {
  const sent: Message[] = []
  const proofs: HeadProofs[] = []
  states.forEach((st, me) => {
    const signed = <H extends { index: number; stateHash: Uint8Array }>(head: H) => ({ ...head, attestation: attestationOf(me, head, st.otherAttestation) })
    const host: HeadProofHost = {
      latest: () => st.latest && signed(st.latest),
      attested: (_space, _from, _round, timeoutMs) =>
        st.has
          ? Promise.resolve(signed(st.signs))
          : new Promise((resolve) => {
              const t = setTimeout(() => resolve(undefined), timeoutMs)
              st.reached.push(() => {
                clearTimeout(t)
                resolve(signed(st.signs))
              })
            }),
      send: (to, m) => {
        sent.push(m)
        const frame = encodeMessage(m)
        queueMicrotask(() => proofs[to]?.onMessage(me, decodeMessage(crypto, committee, frame)))
      },
    }
    proofs.push(new HeadProofs({ committee, me, secretKey: secrets[me] as Uint8Array, crypto, host, clock: { ...systemClock, now } }))
  })
  return { proofs, sent }
}

const at = (index: number, n = index): FakeRelayState => ({ latest: { fromIndex: index - 1, round: index * 3, index, stateHash: hash(n) }, reached: [], has: true, signs: { index, stateHash: hash(n) } })

describe('proven heads', () => {
  it('a relay proves its head with f+1 signatures that verify over the stable-read bytes, and a second read of an unchanged head asks nobody', async () => {
    const { proofs, sent } = cluster([at(7), at(7), at(7), at(7)])
    const proof = await (proofs[0] as HeadProofs).prove('s', 1000)
    expect(proof?.index).toBe(7)
    const signers = new Set(proof?.sigs.map(([r]) => r))
    expect(signers.size).toBeGreaterThanOrEqual(2)
    for (const [relay, sig] of proof?.sigs ?? []) expect(verifySync(committee.keys[relay] as Uint8Array, stableReadBytes('s', 7, hash(7)), sig)).toBe(true)
    // The attestation of the commit comes certified too: f+1 signatures over its bytes.
    expect(proof?.attestation?.bytes).toEqual(attestationBytes({ index: 7, stateHash: hash(7) }))
    expect(new Set(proof?.attestation?.sigs.map(([r]) => r)).size).toBeGreaterThanOrEqual(2)
    for (const [relay, sig] of proof?.attestation?.sigs ?? []) expect(verifySync(committee.keys[relay] as Uint8Array, proof?.attestation?.bytes as Uint8Array, sig)).toBe(true)
    const asked = sent.filter((m) => m.kind === 'head-ask').length
    expect(asked).toBe(3)
    expect((await (proofs[0] as HeadProofs).prove('s', 1000))?.index).toBe(7)
    expect(sent.filter((m) => m.kind === 'head-ask').length).toBe(asked)
  })

  it('a peer slightly behind signs once it reaches the head; peers that sign another state do not count', async () => {
    const liar = { ...at(7), signs: { index: 7, stateHash: hash(9) } }
    const behind = { ...at(7), has: false }
    const down = { ...at(7), has: false }
    const { proofs } = cluster([at(7), liar, behind, down])
    const proving = (proofs[0] as HeadProofs).prove('s', 2000)
    await new Promise((r) => setImmediate(r))
    let done = false
    void proving.then(() => (done = true))
    await new Promise((r) => setImmediate(r))
    // Only the liar answered, with a signature over another state: not proven yet.
    expect(done).toBe(false)
    behind.has = true
    for (const go of behind.reached) go()
    const proof = await proving
    expect(proof?.sigs.map(([r]) => r).sort()).toEqual([0, 2])
  })

  it('a signature over other attestation bytes does not count towards the certificate of the commit', async () => {
    const other = { ...at(7), otherAttestation: true }
    const down = () => ({ ...at(7), has: false })
    const { proofs } = cluster([at(7), other, down(), down()])
    const proof = await (proofs[0] as HeadProofs).prove('s', 2000)
    // The head is proven (relay 1 signed the same state) but the commit's attestation is not certified.
    expect(proof?.sigs.map(([r]) => r).sort()).toEqual([0, 1])
    expect(proof?.attestation).toBeUndefined()
  })

  it('a head proven by a relay that sends no attestation signature (a liar, or an older relay) is still certified by a later one that does', async () => {
    const slow = { ...at(7), has: false }
    const down = () => ({ ...at(7), has: false })
    const { proofs } = cluster([at(7), slow, down(), down()])
    const p0 = proofs[0] as HeadProofs
    const certifying = p0.prove('s', 2000, true)
    await new Promise((r) => setImmediate(r))
    // Relay 3 signs the head and nothing more: a proof for quorum reads, not a certificate.
    p0.onMessage(3, { kind: 'head-sig', space: 's', index: 7, stateHash: hash(7), sig: signSync(secrets[3] as Uint8Array, stableReadBytes('s', 7, hash(7))) })
    expect((await p0.prove('s', 10))?.sigs.map(([r]) => r).sort()).toEqual([0, 3])
    let certified = false
    void certifying.then(() => (certified = true))
    await new Promise((r) => setImmediate(r))
    expect(certified).toBe(false)
    slow.has = true
    for (const go of slow.reached) go()
    const proof = await certifying
    expect(proof?.attestation?.sigs.map(([r]) => r).sort()).toEqual([0, 1])
  })

  it('a commit that only parks envelopes (same index, new state) is proven anew, not answered with the old state', async () => {
    const states = [at(7), at(7), at(7), at(7)]
    const { proofs } = cluster(states)
    const p0 = proofs[0] as HeadProofs
    expect((await p0.prove('s', 1000, true))?.stateHash).toEqual(hash(7))
    for (const st of states) {
      st.latest = { fromIndex: 7, round: 30, index: 7, stateHash: hash(8) }
      st.signs = { index: 7, stateHash: hash(8) }
    }
    const again = await p0.prove('s', 1000, true)
    expect(again?.stateHash).toEqual(hash(8))
    expect(again?.attestation?.bytes).toEqual(attestationBytes({ index: 7, stateHash: hash(8) }))
  })

  it('a read still waiting when the head moves on is answered by the later head once that is proven', async () => {
    const r0 = at(7)
    const peers = [1, 2, 3].map(() => ({ ...at(8), has: false }))
    const { proofs } = cluster([r0, ...peers])
    const first = (proofs[0] as HeadProofs).prove('s', 2000)
    r0.latest = at(8).latest
    const second = (proofs[0] as HeadProofs).prove('s', 2000)
    // The peers reach index 8 and sign it (also where they were asked about 7).
    for (const p of peers) {
      p.has = true
      for (const go of p.reached) go()
    }
    const t0 = Date.now()
    expect((await first)?.index).toBe(8)
    expect((await second)?.index).toBe(8)
    expect(Date.now() - t0).toBeLessThan(1000)
  })

  it('gives up after the timeout when fewer than f+1 relays can sign (a head no one else reached is never proven)', async () => {
    const inflated = at(50)
    const { proofs } = cluster([inflated, { ...at(7), has: false, signs: at(7).signs }, { ...at(7), has: false }, { ...at(7), has: false }])
    const t0 = Date.now()
    expect(await (proofs[0] as HeadProofs).prove('s', 100)).toBeUndefined()
    expect(Date.now() - t0).toBeGreaterThanOrEqual(90)
  })

  it('a space without an attested commit has head 0, which needs no signatures', async () => {
    const { proofs, sent } = cluster([{ ...at(1), latest: { fromIndex: 0, round: 0, index: 0, stateHash: hash(0) } }, at(1), at(1), at(1)])
    expect(await (proofs[0] as HeadProofs).prove('s', 100)).toEqual({ index: 0, stateHash: hash(0), sigs: [] })
    expect(sent).toEqual([])
  })

  it('a peer asking over and over gets at most 64 asks waiting and 1,000 a second answered', async () => {
    const waiting = { ...at(7), has: false }
    const { proofs } = cluster([at(7), waiting, at(7), at(7)])
    const target = proofs[1] as HeadProofs
    for (let i = 0; i < 500; i++) target.onMessage(0, { kind: 'head-ask', space: 's', fromIndex: 6, round: 21 })
    expect(waiting.reached.length).toBe(64)
    let now = 0
    const sent: Message[] = []
    const signer = new HeadProofs({
      committee,
      me: 1,
      secretKey: secrets[1] as Uint8Array,
      crypto,
      clock: { ...systemClock, now: () => now },
      host: { latest: () => null, attested: async () => ({ index: 7, stateHash: hash(7), attestation: attestationOf(1, { index: 7, stateHash: hash(7) }) }), send: (_to, m) => sent.push(m) },
    })
    for (let i = 0; i < 3000; i++) {
      signer.onMessage(0, { kind: 'head-ask', space: 's', fromIndex: 6, round: 21 })
      if (i % 50 === 49) await new Promise((r) => setImmediate(r))
    }
    await new Promise((r) => setImmediate(r))
    expect(sent.length).toBe(1000)
    // Half a second later, half the bucket is back.
    now = 500
    for (let i = 0; i < 1000; i++) {
      signer.onMessage(0, { kind: 'head-ask', space: 's', fromIndex: 6, round: 21 })
      if (i % 50 === 49) await new Promise((r) => setImmediate(r))
    }
    await new Promise((r) => setImmediate(r))
    expect(sent.length).toBe(1500)
  })
})
