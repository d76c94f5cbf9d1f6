import { clockQuorum, encodeClockVote, toHex } from '@stead/core'
import type { Committee, SyncCrypto } from '@stead/relay/consensus'
import { Violation } from './violation.ts'

/**
 * Chrono's stateful validator, checked over a whole run: every clock vote
 * any relay sends (the Byzantine ones' too) is recorded once its signature
 * checks. A correct relay never votes for two envelopes of one (author,
 * seq) slot, nor for one envelope with two weights; and while at most f
 * relays are faulty, no slot gets two certified envelopes and no envelope
 * two certified weights (ceil((N+f+1)/2) votes each), whatever the faulty
 * ones sign.
 */
export class ClockVoteCheck {
  private readonly committee: Committee
  private readonly crypto: SyncCrypto
  private readonly quorum: number
  /** The slot (author:seq) of an envelope the run made, by id. */
  private readonly slotOf: (idHex: string) => string | undefined
  /** Whether a relay's votes are held to the rules: correct and still holding the store it voted from. */
  private readonly bound: (relay: number) => boolean
  /** id → weight → relays that signed it. */
  private readonly votes = new Map<string, Map<number, Set<number>>>()
  /** slot → its certified envelope. */
  private readonly certified = new Map<string, string>()
  /** relay|slot → the envelope it voted for; relay|id → the weight it signed. */
  private readonly cast = new Map<string, string | number>()
  /** What the run showed: valid votes, and envelopes certified. */
  readonly counts = { votes: 0, certified: 0 }

  constructor(committee: Committee, crypto: SyncCrypto, slotOf: (idHex: string) => string | undefined, bound: (relay: number) => boolean) {
    this.committee = committee
    this.crypto = crypto
    this.quorum = clockQuorum({ f: committee.f, relayKeys: committee.keys })
    this.slotOf = slotOf
    this.bound = bound
  }

  /** Votes relay `from` sent; a violation if they break a rule. */
  record(from: number, votes: ReadonlyArray<readonly [string, Uint8Array, number, Uint8Array]>): Violation | undefined {
    const key = this.committee.keys[from]
    if (!key) return undefined
    for (const [space, id, weight, sig] of votes) {
      if (!this.crypto.verify(key, encodeClockVote(space, id, weight), sig)) continue
      const idHex = toHex(id)
      const slot = this.slotOf(idHex)
      if (this.bound(from)) {
        const broken = this.keep(`${from}|${idHex}`, weight, `relay ${from} voted for ${idHex.slice(0, 8)} with weights`) ?? (slot === undefined ? undefined : this.keep(`${from}|${slot}`, idHex, `relay ${from} voted for two envelopes of ${slot}:`))
        if (broken) return broken
      }
      let byWeight = this.votes.get(idHex)
      if (!byWeight) this.votes.set(idHex, (byWeight = new Map()))
      const signers = byWeight.get(weight) ?? new Set<number>()
      byWeight.set(weight, signers)
      if (signers.has(from)) continue
      signers.add(from)
      this.counts.votes++
      if (signers.size !== this.quorum) continue
      this.counts.certified++
      const weights = [...byWeight].filter(([, s]) => s.size >= this.quorum).map(([w]) => w)
      if (weights.length > 1 && this.withinF()) return new Violation(`envelope ${idHex.slice(0, 8)} has certified weights ${weights.join(' and ')}`)
      if (slot === undefined) continue
      const other = this.certified.get(slot)
      if (other === undefined) this.certified.set(slot, idHex)
      else if (other !== idHex && this.withinF()) return new Violation(`two envelopes of slot ${slot} have clock certificates: ${other.slice(0, 8)} and ${idHex.slice(0, 8)}`)
    }
    return undefined
  }

  /** Records what a rule-bound relay signed under `k`; a violation if it signed something else there before. */
  private keep(k: string, value: string | number, what: string): Violation | undefined {
    const before = this.cast.get(k)
    if (before === undefined) this.cast.set(k, value)
    else if (before !== value) return new Violation(`${what} ${String(before).slice(0, 8)} and ${String(value).slice(0, 8)}`)
    return undefined
  }

  /** Whether the relays not bound by the rules are at most f: only then do the quorums promise anything. */
  private withinF(): boolean {
    return this.committee.keys.filter((_, i) => !this.bound(i)).length <= this.committee.f
  }
}
