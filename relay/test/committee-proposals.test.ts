import { authorIdOf, encode, type RelayCommittee } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { backingKey, committeeWriteProblem, decodeCommitteeRequest, encodeCommitteeRequest, proposalId, tallyCommittee, type CommitteeRequest } from '../src/runtime/committee-proposals.ts'

const sha256 = (b: Uint8Array): Uint8Array => nodeCrypto.sha256(b)
const key = (i: number): Uint8Array => publicKeyOfSync(new Uint8Array(32).fill(i + 1))
const idOf = (k: Uint8Array): string => authorIdOf(nodeCrypto, k)
const member = (i: number) => ({ id: `r${i + 1}`, publicKey: key(i), api: `127.0.0.1:${7400 + i}`, mesh: `/ip4/127.0.0.1/tcp/${7500 + i}` })
const committeeOf = (ids: number[], f: number): RelayCommittee => ({ f, members: ids.map(member) })
const current = committeeOf([0, 1, 2, 3], 1)
const replaceR1 = committeeOf([4, 1, 2, 3], 1)
const grow = committeeOf([0, 1, 2, 3, 4, 5, 6], 2)

/** `$committee`'s registers as the audit leaves them: member index → the request it holds (or any other value). */
function tally(epoch: number, registers: ReadonlyMap<number, unknown>) {
  const byAuthor = new Map([...registers].map(([i, v]) => [idOf(key(i)), v]))
  return tallyCommittee({ epoch, committee: current }, (author) => byAuthor.get(author), idOf, sha256)
}
const request = (epoch: number, next: RelayCommittee): Uint8Array => encodeCommitteeRequest({ epoch, next })

describe('committee change requests', () => {
  it('decides the committee 2f+1 of the current members back for the next epoch, and not before', () => {
    const id = proposalId(sha256, replaceR1)
    const two = new Map([
      [1, request(1, replaceR1)],
      [2, request(1, replaceR1)],
    ])
    expect(tally(0, two)).toEqual({ open: [{ id, next: replaceR1, backers: ['r2', 'r3'] }], decided: undefined })
    const three = new Map([...two, [0, request(1, replaceR1)]])
    expect(tally(0, three)).toEqual({ open: [{ id, next: replaceR1, backers: ['r1', 'r2', 'r3'] }], decided: { id, epoch: 1, next: replaceR1 } })
  })

  it('counts only backings for the very next epoch that decode; the current committee is a proposal like any other', () => {
    const registers = new Map<number, unknown>([
      [0, request(2, replaceR1)],
      [1, request(1, current)],
      [2, new Uint8Array([0xc1])],
      [3, 'not bytes'],
    ])
    // Backing the same committee decides an epoch that changes nothing: only f and the keys of the current
    // committee count (its addresses come from each relay's own file in epoch 0).
    expect(tally(0, registers)).toEqual({ open: [{ id: proposalId(sha256, current), next: current, backers: ['r2'] }], decided: undefined })
    // In epoch 1 the request for epoch 2 counts.
    expect(tally(1, registers).open).toEqual([{ id: proposalId(sha256, replaceR1), next: replaceR1, backers: ['r1'] }])
  })

  it('gives each member one backing: two committees split the members and neither is decided', () => {
    const registers = new Map([
      [0, request(1, replaceR1)],
      [1, request(1, grow)],
      [2, request(1, grow)],
      [3, request(1, replaceR1)],
    ])
    const t = tally(0, registers)
    expect(t.decided).toBeUndefined()
    expect(t.open.map((o) => [o.id, o.backers])).toEqual([
      [proposalId(sha256, replaceR1), ['r1', 'r4']],
      [proposalId(sha256, grow), ['r2', 'r3']],
    ])
  })

  it('lets a member of the committee write its own register only, and only a request', () => {
    const members = new Set(current.members.map((m) => idOf(m.publicKey)))
    const [me, other] = [idOf(key(0)), idOf(key(1))]
    const op = (value: unknown) => ['s', value, 1]
    const register = { type: 'register' }
    expect(committeeWriteProblem(members, me, backingKey(me), register, op(request(1, replaceR1)))).toEqual({ ok: true })
    const refusals = [
      // A relay of the proposed committee that is not in the current one decides nothing.
      committeeWriteProblem(members, idOf(key(4)), backingKey(idOf(key(4))), register, op(request(1, replaceR1))),
      committeeWriteProblem(members, me, backingKey(other), register, op(request(1, replaceR1))),
      committeeWriteProblem(members, me, backingKey(me), { type: 'counter' }, [1]),
      committeeWriteProblem(members, me, backingKey(me), register, op('a committee')),
      committeeWriteProblem(members, me, backingKey(me), register, op(encode(['stead/committee-request/v1', 1, 1, []]))),
    ]
    for (const r of refusals) expect(r).toMatchObject({ ok: false, reason: 'unauthorized' })
  })

  it('round-trips requests, and refuses junk and unsound committees with a typed error', () => {
    const r: CommitteeRequest = { epoch: 4, next: { f: 1, members: replaceR1.members.map((m, i) => (i ? m : { ...m, peers: '/ip4/127.0.0.1/tcp/7600/ws' })) } }
    expect(decodeCommitteeRequest(encodeCommitteeRequest(r))).toEqual(r)
    const members = current.members.map((m) => [m.id, m.publicKey, m.api, m.mesh, null])
    expect(() => decodeCommitteeRequest(encode(['stead/committee-request/v1', 1, 1, [...members, members[0]]]))).toThrow(/exactly 3f\+1|distinct/)
    expect(() => decodeCommitteeRequest(encode(['stead/committee-request/v2', 1, 1, members]))).toThrow(/not a stead/)
    expect(() => decodeCommitteeRequest(new Uint8Array(600_000))).toThrow(expect.objectContaining({ reason: 'too-large' }))
    expect(() => decodeCommitteeRequest(new Uint8Array([0xc1]))).toThrow()
  })
})
