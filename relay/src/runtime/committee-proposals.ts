import { SteadError, committeeFields, committeeProblem, committeeFromFields, decode, encode, expect, toHex, type EpochCommittee, type RelayCommittee } from '@stead/core'

/**
 * Committee changes as ordered requests (issue 49): an operator of a
 * current relay proposes the next committee, the others approve it, and
 * once 2f+1 of the current committee back one proposal it is decided, at
 * the commit that brought the last backing. Every correct relay takes the
 * same requests in the same committed order, so every one decides the
 * same change at the same round; the change then waits for the epoch's
 * boundary. Pure: requests in, verdicts out.
 *
 * Each member backs at most one proposal (its latest proposal or
 * approval): two proposals cannot both gather 2f+1 backers, and a member
 * that changes its mind withdraws its earlier backing.
 */

/** What an operator's request says. */
export type CommitteeRequest =
  | {
      readonly kind: 'propose'
      /** The epoch the change would start: the current one + 1. */
      readonly epoch: number
      readonly next: RelayCommittee
    }
  | {
      readonly kind: 'approve'
      readonly epoch: number
      /** The proposal's id (`proposalId`). */
      readonly proposal: string
    }

/** What a request did: taken (and whether it decided the change), or refused with a reason every relay gives alike. */
export type ProposalVerdict = { readonly ok: true; readonly decided: boolean } | { readonly ok: false; readonly reason: 'unauthorized' | 'conflict' | 'malformed'; readonly detail: string }

/** A proposal and who backs it. */
export interface OpenProposal {
  readonly id: string
  readonly next: RelayCommittee
  /** Ids of the current members that back it, in committee order. */
  readonly backers: readonly string[]
}

/** The change 2f+1 backed: the next committee, and the round of the commit that decided it. */
export interface DecidedChange {
  readonly id: string
  readonly epoch: number
  readonly next: RelayCommittee
  readonly round: number
}

export const COMMITTEE_REQUEST_TAG = 'stead/committee-request/v1'

/** The bytes of a request (what an operator's envelope carries). */
export function encodeCommitteeRequest(r: CommitteeRequest): Uint8Array {
  if (r.kind === 'approve') return encode([COMMITTEE_REQUEST_TAG, 'approve', r.epoch, r.proposal])
  return encode([COMMITTEE_REQUEST_TAG, 'propose', r.epoch, ...committeeFields(r.next)])
}

/** @throws SteadError `malformed` (or `too-large`) for bytes that are not a request. */
export function decodeCommitteeRequest(bytes: Uint8Array): CommitteeRequest {
  const v = expect.array(decode(bytes), 'committee request', 5)
  if (v[0] !== COMMITTEE_REQUEST_TAG) throw new SteadError('malformed', `not a ${COMMITTEE_REQUEST_TAG}`)
  const epoch = expect.uint(v[2], 'epoch')
  if (v[1] === 'approve' && v.length === 4) {
    const proposal = expect.string(v[3], 'proposal', 64, 64)
    if (!/^[0-9a-f]{64}$/.test(proposal)) throw new SteadError('malformed', 'a proposal id is 64 hex digits')
    return { kind: 'approve', epoch, proposal }
  }
  if (v[1] !== 'propose' || v.length !== 5) throw new SteadError('malformed', 'a committee request proposes or approves')
  // An unsound committee is no proposal: refused here, by every relay alike.
  return { kind: 'propose', epoch, next: committeeFromFields(v[3], v[4], 'the proposed committee') }
}

/** A proposal's id: the hex sha256 of the committee it proposes (its f and members, in order). */
export function proposalId(sha256: (bytes: Uint8Array) => Uint8Array, next: RelayCommittee): string {
  return toHex(sha256(encode(committeeFields(next))))
}

export class CommitteeProposals {
  private readonly current: EpochCommittee
  private readonly sha256: (bytes: Uint8Array) => Uint8Array
  /** Open proposals by id. */
  private readonly proposals = new Map<string, RelayCommittee>()
  /** Member index → the proposal it backs. */
  private readonly backing = new Map<number, string>()
  private change: DecidedChange | undefined

  constructor(current: EpochCommittee, sha256: (bytes: Uint8Array) => Uint8Array) {
    this.current = current
    this.sha256 = sha256
  }

  /** The change decided, waiting for the boundary; undefined while none is. */
  get decided(): DecidedChange | undefined {
    return this.change
  }

  /** Open proposals with their backers, for status pages. */
  get open(): OpenProposal[] {
    return [...this.proposals].map(([id, next]) => ({ id, next, backers: this.backersOf(id).map((i) => (this.current.committee.members[i] as { id: string }).id) }))
  }

  /**
   * Takes one request, in the committed order, from the author of its
   * envelope (`author`: a public key), in the commit at `round`.
   */
  take(author: Uint8Array, request: CommitteeRequest, round: number): ProposalVerdict {
    const { epoch, committee } = this.current
    const member = committee.members.findIndex((m) => toHex(m.publicKey) === toHex(author))
    if (member < 0) return refuse('unauthorized', `${toHex(author)} is no relay of epoch ${epoch}'s committee`)
    if (request.epoch !== epoch + 1) return refuse('conflict', `a request for epoch ${request.epoch}; the next epoch is ${epoch + 1}`)
    if (this.change) return refuse('conflict', `the change to epoch ${this.change.epoch} is decided (proposal ${this.change.id}) and waits for the epoch's end`)
    let id: string
    if (request.kind === 'propose') {
      const problem = committeeProblem(request.next)
      if (problem) return refuse('malformed', `the proposed committee: ${problem}`)
      id = proposalId(this.sha256, request.next)
      // The same relays, keys and addresses hash alike: a proposal of the current committee changes nothing.
      if (id === proposalId(this.sha256, committee)) return refuse('conflict', 'the proposed committee is the current one')
      this.proposals.set(id, request.next)
    } else {
      id = request.proposal
      if (!this.proposals.has(id)) return refuse('conflict', `no open proposal ${id}`)
    }
    this.backing.set(member, id)
    // A proposal nobody backs any more goes.
    for (const open of [...this.proposals.keys()]) if (!this.backersOf(open).length) this.proposals.delete(open)
    if (this.backersOf(id).length < 2 * committee.f + 1) return { ok: true, decided: false }
    this.change = { id, epoch: epoch + 1, next: this.proposals.get(id) as RelayCommittee, round }
    this.proposals.clear()
    this.backing.clear()
    return { ok: true, decided: true }
  }

  private backersOf(id: string): number[] {
    return [...this.backing].filter(([, backs]) => backs === id).map(([member]) => member).sort((a, b) => a - b)
  }
}

function refuse(reason: 'unauthorized' | 'conflict' | 'malformed', detail: string): ProposalVerdict {
  return { ok: false, reason, detail }
}
