import { encode, type RelayCommittee } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { CommitteeProposals, decodeCommitteeRequest, encodeCommitteeRequest, proposalId, type CommitteeRequest } from '../src/runtime/committee-proposals.ts'

const sha256 = (b: Uint8Array): Uint8Array => nodeCrypto.sha256(b)
const key = (i: number): Uint8Array => publicKeyOfSync(new Uint8Array(32).fill(i + 1))
const member = (i: number) => ({ id: `r${i + 1}`, publicKey: key(i), api: `127.0.0.1:${7400 + i}`, mesh: `/ip4/127.0.0.1/tcp/${7500 + i}` })
const committeeOf = (ids: number[], f: number): RelayCommittee => ({ f, members: ids.map(member) })
const current = committeeOf([0, 1, 2, 3], 1)
const replaceR1 = committeeOf([4, 1, 2, 3], 1)
const grow = committeeOf([0, 1, 2, 3, 4, 5, 6], 2)

describe('committee change requests', () => {
  it('decides a proposal once 2f+1 of the current committee back it, at the round of the last backing', () => {
    const p = new CommitteeProposals({ epoch: 0, committee: current }, sha256)
    const id = proposalId(sha256, replaceR1)
    expect(p.take(key(1), { kind: 'propose', epoch: 1, next: replaceR1 }, 10)).toEqual({ ok: true, decided: false })
    expect(p.take(key(2), { kind: 'approve', epoch: 1, proposal: id }, 12)).toEqual({ ok: true, decided: false })
    // The same member twice still counts once: 2 of 4 back it.
    expect(p.take(key(2), { kind: 'approve', epoch: 1, proposal: id }, 13)).toEqual({ ok: true, decided: false })
    expect(p.open).toEqual([{ id, next: replaceR1, backers: ['r2', 'r3'] }])
    expect(p.decided).toBeUndefined()
    expect(p.take(key(0), { kind: 'approve', epoch: 1, proposal: id }, 15)).toEqual({ ok: true, decided: true })
    expect(p.decided).toEqual({ id, epoch: 1, next: replaceR1, round: 15 })
    expect(p.open).toEqual([])
    // Decided: nothing else is taken in this epoch.
    expect(p.take(key(3), { kind: 'propose', epoch: 1, next: grow }, 16)).toMatchObject({ ok: false, reason: 'conflict', detail: expect.stringContaining('decided') })
  })

  it('refuses strangers, the new relays themselves, other epochs, unknown proposals and no-change proposals', () => {
    const p = new CommitteeProposals({ epoch: 2, committee: current }, sha256)
    // Relay r5 of the proposed committee is not (yet) one of the committee that decides.
    expect(p.take(key(4), { kind: 'propose', epoch: 3, next: replaceR1 }, 1)).toMatchObject({ ok: false, reason: 'unauthorized' })
    expect(p.take(key(0), { kind: 'propose', epoch: 2, next: replaceR1 }, 1)).toMatchObject({ ok: false, reason: 'conflict', detail: expect.stringContaining('the next epoch is 3') })
    expect(p.take(key(0), { kind: 'approve', epoch: 3, proposal: 'ab'.repeat(32) }, 1)).toMatchObject({ ok: false, reason: 'conflict', detail: expect.stringContaining('no open proposal') })
    expect(p.take(key(0), { kind: 'propose', epoch: 3, next: current }, 1)).toMatchObject({ ok: false, reason: 'conflict', detail: expect.stringContaining('current one') })
    expect(p.take(key(0), { kind: 'propose', epoch: 3, next: { f: 1, members: grow.members } }, 1)).toMatchObject({ ok: false, reason: 'malformed' })
    expect(p.open).toEqual([])
  })

  it('lets a member back one proposal at a time: two proposals never both reach 2f+1, and one nobody backs goes', () => {
    const p = new CommitteeProposals({ epoch: 0, committee: current }, sha256)
    const [a, b] = [proposalId(sha256, replaceR1), proposalId(sha256, grow)]
    p.take(key(0), { kind: 'propose', epoch: 1, next: replaceR1 }, 1)
    p.take(key(1), { kind: 'propose', epoch: 1, next: grow }, 2)
    p.take(key(2), { kind: 'approve', epoch: 1, proposal: a }, 3)
    // r1 changes its mind: it backs b now, and a keeps only r3.
    p.take(key(0), { kind: 'approve', epoch: 1, proposal: b }, 4)
    expect(p.open.map((o) => [o.id, o.backers])).toEqual([
      [a, ['r3']],
      [b, ['r1', 'r2']],
    ])
    // r3 proposes a third committee instead: a has no backer left and goes.
    const third = committeeOf([0, 1, 2, 5], 1)
    p.take(key(2), { kind: 'propose', epoch: 1, next: third }, 5)
    expect(p.open.map((o) => [o.id, o.backers])).toEqual([
      [b, ['r1', 'r2']],
      [proposalId(sha256, third), ['r3']],
    ])
    // r4 backs b: three of four, decided.
    expect(p.take(key(3), { kind: 'approve', epoch: 1, proposal: b }, 6)).toEqual({ ok: true, decided: true })
    expect(p.decided).toMatchObject({ id: b, next: grow, round: 6 })
  })

  it('round-trips requests, and refuses junk and unsound committees with a typed error', () => {
    const requests: CommitteeRequest[] = [
      { kind: 'propose', epoch: 4, next: { f: 1, members: replaceR1.members.map((m, i) => (i ? m : { ...m, peers: '/ip4/127.0.0.1/tcp/7600/ws' })) } },
      { kind: 'approve', epoch: 4, proposal: proposalId(sha256, grow) },
    ]
    for (const r of requests) expect(decodeCommitteeRequest(encodeCommitteeRequest(r))).toEqual(r)
    const members = current.members.map((m) => [m.id, m.publicKey, m.api, m.mesh, null])
    expect(() => decodeCommitteeRequest(encode(['stead/committee-request/v1', 'propose', 1, 1, [...members, members[0]]]))).toThrow(/exactly 3f\+1|distinct/)
    expect(() => decodeCommitteeRequest(encode(['stead/committee-request/v1', 'approve', 1, 'XYZ'.repeat(21) + 'a']))).toThrow(/64 hex/)
    expect(() => decodeCommitteeRequest(encode(['stead/committee-request/v1', 'retire', 1]))).toThrow(/proposes or approves/)
    expect(() => decodeCommitteeRequest(new Uint8Array([0xc1]))).toThrow()
  })
})
