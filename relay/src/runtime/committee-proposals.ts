import { SteadError, committeeFields, committeeFromFields, decode, encode, expect, toHex, type EpochCommittee, type RelayCommittee, type Validation } from '@stead/core'

/**
 * Committee changes as ordered requests (issue 49). The requests live in
 * one reserved space, `$committee`: each relay of the current committee
 * has one register there, `backs/<its author id>`, which only its own key
 * may write, holding the committee it backs for the next epoch (an
 * operator proposes by writing a committee, the others approve by writing
 * the same one). The space is ordered and audited like any other, so every
 * correct relay reads the same registers after the same commit, and the
 * commit after which 2f+1 of the current committee back one committee
 * decides the change, alike everywhere. A member backs one committee at a
 * time (its register holds one value): two proposals never both reach
 * 2f+1, and a member that changes its mind withdraws its earlier backing.
 */

/** The reserved space the committee's change requests are ordered in. */
export const COMMITTEE_SPACE = '$committee'

/** The register a relay (by its author id) backs a committee in. */
export function backingKey(authorId: string): string {
  return `backs/${authorId}`
}

/** What a relay's register holds: the committee it backs for epoch `epoch`. */
export interface CommitteeRequest {
  /** The epoch the change would start: the current one + 1 (a register for another epoch backs nothing). */
  readonly epoch: number
  readonly next: RelayCommittee
}

/** A proposal and who backs it. */
export interface OpenProposal {
  readonly id: string
  readonly next: RelayCommittee
  /** Ids of the current members that back it, in committee order. */
  readonly backers: readonly string[]
}

/** The change 2f+1 of the current committee back. */
export interface DecidedChange {
  readonly id: string
  readonly epoch: number
  readonly next: RelayCommittee
}

export const COMMITTEE_REQUEST_TAG = 'stead/committee-request/v1'

/** Bytes of one request at most (a committee of MAX_COMMITTEE members with long addresses fits). */
export const MAX_REQUEST_BYTES = 512 * 1024

/** The bytes of a request (what a relay's register holds). */
export function encodeCommitteeRequest(r: CommitteeRequest): Uint8Array {
  return encode([COMMITTEE_REQUEST_TAG, r.epoch, ...committeeFields(r.next)])
}

/** @throws SteadError `malformed` (or `too-large`) for bytes that are not a request for a sound committee. */
export function decodeCommitteeRequest(bytes: Uint8Array): CommitteeRequest {
  if (bytes.length > MAX_REQUEST_BYTES) throw new SteadError('too-large', `a committee request of ${bytes.length} bytes; at most ${MAX_REQUEST_BYTES}`)
  const v = expect.array(decode(bytes), 'committee request', 4)
  if (v.length !== 4 || v[0] !== COMMITTEE_REQUEST_TAG) throw new SteadError('malformed', `not a ${COMMITTEE_REQUEST_TAG}`)
  // An unsound committee is no request: refused at every door and by every audit alike.
  return { epoch: expect.uint(v[1], 'epoch'), next: committeeFromFields(v[2], v[3], 'the proposed committee') }
}

/** A proposal's id: the hex sha256 of the committee it proposes (its f and members, in order). */
export function proposalId(sha256: (bytes: Uint8Array) => Uint8Array, next: RelayCommittee): string {
  return toHex(sha256(encode(committeeFields(next))))
}

/**
 * Who may write what in `$committee`, as the door and the audit check it:
 * a relay of the committee (`members`: author ids), its own register only,
 * a register write of a request's bytes.
 */
export function committeeWriteProblem(members: ReadonlySet<string>, author: string, key: string, decl: { readonly type: string }, op: unknown): Validation {
  const refuse = (detail: string): Validation => ({ ok: false, reason: 'unauthorized', detail })
  if (!members.has(author)) return refuse(`${author} is no relay of this epoch's committee: only they write ${COMMITTEE_SPACE}`)
  if (key !== backingKey(author)) return refuse(`a relay writes its own register of ${COMMITTEE_SPACE} (${backingKey(author)}), not ${key}`)
  if (decl.type !== 'register' || !Array.isArray(op) || op[0] !== 's' || !(op[1] instanceof Uint8Array)) return refuse(`${COMMITTEE_SPACE} holds registers of committee requests`)
  try {
    decodeCommitteeRequest(op[1])
  } catch (err) {
    return refuse(`not a committee request: ${(err as Error).message}`)
  }
  return { ok: true }
}

/**
 * What `$committee`'s registers say for the committee that rules
 * `current`: the proposals for the next epoch with their backers, and the
 * one 2f+1 members back, if any. `backing` reads a member's register (its
 * stable value) by the member's author id. A function of the registers,
 * f and the members' keys only.
 */
export function tallyCommittee(current: EpochCommittee, backing: (authorId: string) => unknown, authorIdOf: (publicKey: Uint8Array) => string, sha256: (bytes: Uint8Array) => Uint8Array): { open: OpenProposal[]; decided: DecidedChange | undefined } {
  const { epoch, committee } = current
  const proposals = new Map<string, { next: RelayCommittee; backers: string[] }>()
  for (const m of committee.members) {
    const value = backing(authorIdOf(m.publicKey))
    if (!(value instanceof Uint8Array)) continue
    let request: CommitteeRequest
    try {
      request = decodeCommitteeRequest(value)
    } catch {
      continue
    }
    if (request.epoch !== epoch + 1) continue
    // Only f and the members' keys of the current committee count here (its ids and addresses come from
    // each relay's own cluster file in epoch 0, which may differ): a proposal of the same committee is
    // decided like any other, and starts an epoch that changes nothing.
    const id = proposalId(sha256, request.next)
    let p = proposals.get(id)
    if (!p) proposals.set(id, (p = { next: request.next, backers: [] }))
    p.backers.push(m.id)
  }
  const open = [...proposals].map(([id, p]) => ({ id, next: p.next, backers: p.backers }))
  const won = open.find((p) => p.backers.length >= 2 * committee.f + 1)
  return { open, decided: won && { id: won.id, epoch: epoch + 1, next: won.next } }
}
