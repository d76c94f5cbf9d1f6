import { encodeEpochChange, verifyEpochCertificate, type EpochCertificate, type EpochChange, type RelayCommittee } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import type { Message } from '../src/consensus/index.ts'
import { EpochHandOver } from '../src/runtime/hand-over.ts'
import { relayCrypto } from '../src/runtime/node.ts'

const secrets = [1, 2, 3, 4].map((n) => new Uint8Array(32).fill(n))
const keys = secrets.map((s) => publicKeyOfSync(s))
const members = (ks: readonly Uint8Array[]) => ks.map((publicKey, i) => ({ id: `r${i + 1}`, publicKey, api: `127.0.0.1:${7400 + i}`, mesh: `/ip4/127.0.0.1/tcp/${7500 + i}` }))
const old: RelayCommittee = { f: 1, members: members(keys) }
const next: RelayCommittee = { f: 1, members: members([publicKeyOfSync(new Uint8Array(32).fill(9)), ...keys.slice(1)]) }
const change: EpochChange = { epoch: 1, startRound: 40, stateDigest: new Uint8Array(32).fill(5), next }
const vote = (i: number, c: EpochChange = change): Uint8Array => relayCrypto.sign(secrets[i] as Uint8Array, encodeEpochChange(c))

/** Relay 0's hand-over, with what it said and the certificate it made. */
function relay0(): { h: EpochHandOver; said: Array<{ to: number | 'all'; m: Message }>; certs: EpochCertificate[] } {
  const said: Array<{ to: number | 'all'; m: Message }> = []
  const certs: EpochCertificate[] = []
  const h = new EpochHandOver({
    committee: { f: 1, keys },
    me: 0,
    secretKey: secrets[0] as Uint8Array,
    crypto: relayCrypto,
    clock: { now: () => 0, setTimer: () => ({ cancel: () => undefined, unref: () => undefined }) },
    send: (to, m) => said.push({ to, m }),
    broadcast: (m) => said.push({ to: 'all', m }),
    certified: (cert) => certs.push(cert),
  })
  return { h, said, certs }
}

describe('the end of an epoch', () => {
  it('makes the certificate from 2f+1 valid signatures, counting each relay once, and the old committee vouches for it', async () => {
    const { h, said, certs } = relay0()
    h.begin(change)
    expect(said).toEqual([{ to: 'all', m: { kind: 'epoch-vote', epoch: 1, sig: vote(0) } }])
    h.onVote(1, 1, vote(1))
    h.onVote(1, 1, vote(1))
    expect(certs).toEqual([])
    expect(h.signers).toBe(2)
    h.onVote(2, 1, vote(2))
    expect(certs).toHaveLength(1)
    const cert = certs[0] as EpochCertificate
    expect(cert.signatures.map((s) => s.relay)).toEqual([0, 1, 2])
    expect(await verifyEpochCertificate(nodeCrypto, { epoch: 0, committee: old }, cert)).toEqual(change)
    // Once: a fourth vote makes no second certificate.
    h.onVote(3, 1, vote(3))
    expect(certs).toHaveLength(1)
  })

  it('refuses a vote over another change, of another epoch, or from outside the committee, and keeps votes that came early', () => {
    const { h, certs } = relay0()
    // Relay 1 voted before this relay reached the boundary: it waits.
    h.onVote(1, 1, vote(1))
    h.begin(change)
    expect(h.signers).toBe(2)
    // Relay 2 signed another committee: refused, and not heard again on this change.
    h.onVote(2, 1, vote(2, { ...change, next: old }))
    h.onVote(2, 1, vote(2))
    h.onVote(3, 2, vote(3))
    h.onVote(7, 1, vote(3))
    expect(certs).toEqual([])
    expect(h.signers).toBe(2)
    h.onVote(3, 1, vote(3))
    expect(certs).toHaveLength(1)
  })

  it('answers a peer whose vote is new to it with its own: a relay that restarted at the boundary hears it again', () => {
    const { h, said } = relay0()
    h.begin(change)
    said.length = 0
    h.onVote(2, 1, vote(2))
    expect(said).toEqual([{ to: 2, m: { kind: 'epoch-vote', epoch: 1, sig: vote(0) } }])
    h.onVote(2, 1, vote(2))
    expect(said).toHaveLength(1)
  })
})
