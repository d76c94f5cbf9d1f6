import { toHex, type Attestation } from '@stead/core'

/** Where a client's replica stands in a space's chain of attested commits. */
export interface ChainPosition {
  readonly stableIndex: number
  /** Round of the last applied commit; 0 before the first. */
  readonly lastRound: number
}

export interface CommitCandidate {
  readonly attestation: Attestation
  readonly bytes: Uint8Array
  /** Relays that sent these exact bytes with a valid signature. */
  readonly relays: ReadonlySet<number>
  /** The envelope frames each of those relays sent beside it (only one set needs to match the batch digest). */
  readonly frames: ReadonlyMap<number, readonly Uint8Array[]>
  /** Each of those relays' signature over `bytes`: f+1 of them are the certificate of what it decided. */
  readonly signatures: ReadonlyMap<number, Uint8Array>
}

interface Entry {
  attestation: Attestation
  bytes: Uint8Array
  relays: Set<number>
  frames: Map<number, readonly Uint8Array[]>
  signatures: Map<number, Uint8Array>
}

/**
 * Collects signed attestations from relays and says which commit comes next.
 * Pure bookkeeping: the caller verifies signatures before `offer`.
 *
 * A commit is believed once f+1 distinct relays sent identical bytes (at
 * least one of them is correct, and correct relays sign identical bytes);
 * it is next when it starts at the replica's stable index and links to the
 * last applied round (`prevRound`), so a commit that only parked envelopes
 * is never skipped. A relay that signed other bytes for a round the quorum
 * settled is faulty.
 */
export class CommitQuorum {
  /** round → attestation bytes (hex) → entry */
  private readonly rounds = new Map<number, Map<string, Entry>>()
  /** round → relay → the bytes (hex) it signed for that round */
  private readonly signedBy = new Map<number, Map<number, string>>()

  /** Attestations held per relay: a Byzantine relay cannot grow this without bound with far-future rounds. */
  private readonly held = new Map<number, number>()

  private readonly f: number
  private readonly maxPerRelay: number
  constructor(
    f: number,
    maxPerRelay = 10_000,
  ) {
    this.f = f
    this.maxPerRelay = maxPerRelay
  }

  /** Whether an attestation is already behind `at` (applied or superseded): no need to verify it. */
  static stale(a: Pick<Attestation, 'fromIndex' | 'round'>, at: ChainPosition): boolean {
    return a.fromIndex < at.stableIndex || a.round <= at.lastRound
  }

  offer(relay: number, attestation: Attestation, bytes: Uint8Array, sig: Uint8Array, frames: readonly Uint8Array[]): void {
    const key = toHex(bytes)
    let byRelay = this.signedBy.get(attestation.round)
    if (!byRelay) this.signedBy.set(attestation.round, (byRelay = new Map()))
    // A relay's first word for a round is its word: a second, different one is equivocation.
    const earlier = byRelay.get(relay)
    if (earlier !== undefined && earlier !== key) return
    if (earlier === undefined) {
      const held = this.held.get(relay) ?? 0
      if (held >= this.maxPerRelay) return
      this.held.set(relay, held + 1)
    }
    byRelay.set(relay, key)
    let entries = this.rounds.get(attestation.round)
    if (!entries) this.rounds.set(attestation.round, (entries = new Map()))
    let entry = entries.get(key)
    if (!entry) entries.set(key, (entry = { attestation, bytes, relays: new Set(), frames: new Map(), signatures: new Map() }))
    entry.relays.add(relay)
    entry.frames.set(relay, frames)
    entry.signatures.set(relay, sig)
  }

  /** The commit that follows `at`, once f+1 relays attest it. */
  next(at: ChainPosition): CommitCandidate | undefined {
    for (const [round, entries] of this.rounds) {
      if (round <= at.lastRound) continue
      for (const e of entries.values()) {
        if (e.relays.size < this.f + 1) continue
        if (e.attestation.prevRound === at.lastRound && e.attestation.fromIndex === at.stableIndex) return e
      }
    }
    return undefined
  }

  /** The attestations offered for `round` so far (several only when relays disagree). */
  candidates(round: number): CommitCandidate[] {
    return [...(this.rounds.get(round)?.values() ?? [])]
  }

  /** Relays that signed something other than `settled` for its round. */
  dissenters(settled: CommitCandidate): number[] {
    const key = toHex(settled.bytes)
    const out: number[] = []
    for (const [relay, k] of this.signedBy.get(settled.attestation.round) ?? []) if (k !== key) out.push(relay)
    return out
  }

  /** Forgets everything at or below `at` (applied, or never to be applied). */
  prune(at: ChainPosition): void {
    for (const round of this.rounds.keys()) if (round <= at.lastRound) this.rounds.delete(round)
    for (const [round, byRelay] of this.signedBy) {
      if (round > at.lastRound) continue
      for (const relay of byRelay.keys()) this.held.set(relay, (this.held.get(relay) ?? 1) - 1)
      this.signedBy.delete(round)
    }
  }

  /** Attestations held (for bounds and tests). */
  get size(): number {
    let n = 0
    for (const e of this.rounds.values()) n += e.size
    return n
  }
}
