/** Envelopes followed at once, at most: past it the oldest are forgotten (their steps go unmeasured). */
const MAX_FOLLOWED = 20_000

/** Where one envelope's wait for its order went, as `EnvelopeSteps` reports it (`safe`: it carries safe updates, which a client waits on). */
export interface StepSink {
  /** Seconds from this relay's accepting a client's envelope to its own block that carries it. */
  proposed(seconds: number, safe: boolean): void
  /** Seconds from that block to the commit that orders the envelope, and the rounds between them. */
  ordered(seconds: number, rounds: number, safe: boolean): void
}

/**
 * Follows the envelopes clients submit to this relay through its own
 * blocks to their commit, and reports how long each step took (metrics:
 * where a safe update's wait goes under load). An envelope another relay's
 * block ordered first is simply forgotten at its commit. Memory: at most
 * MAX_FOLLOWED envelopes, oldest dropped first.
 */
export class EnvelopeSteps {
  /** Envelope id → when it was accepted here, until a block of ours carries it. */
  private readonly accepted = new Map<string, { readonly at: number; readonly safe: boolean }>()
  /** Envelope id → when and in which round our block carried it, until its commit. */
  private readonly proposed = new Map<string, { readonly at: number; readonly round: number; readonly safe: boolean }>()
  private readonly now: () => number
  private readonly sink: StepSink

  constructor(now: () => number, sink: StepSink) {
    this.now = now
    this.sink = sink
  }

  /** A client's envelope was accepted here for ordering. */
  submitted(idHex: string, safe: boolean): void {
    if (this.accepted.has(idHex) || this.proposed.has(idHex)) return
    this.accepted.set(idHex, { at: this.now(), safe })
    bound(this.accepted)
  }

  /** Our block of `round` carries these envelopes. */
  inOwnBlock(round: number, payloadIds: readonly string[]): void {
    const at = this.now()
    for (const id of payloadIds) {
      const since = this.accepted.get(id)
      if (since === undefined) continue
      this.accepted.delete(id)
      this.sink.proposed((at - since.at) / 1000, since.safe)
      this.proposed.set(id, { at, round, safe: since.safe })
    }
    bound(this.proposed)
  }

  /** The commit anchored at `anchorRound` ordered these envelopes. */
  committed(anchorRound: number, payloadIds: readonly string[]): void {
    const at = this.now()
    for (const id of payloadIds) {
      const p = this.proposed.get(id)
      // Ordered from another relay's block before ours carried it: nothing of ours to time.
      if (p === undefined) {
        this.accepted.delete(id)
        continue
      }
      this.proposed.delete(id)
      this.sink.ordered((at - p.at) / 1000, anchorRound - p.round, p.safe)
    }
  }

  /** Forgets every envelope (the relay starts over from a checkpoint). */
  clear(): void {
    this.accepted.clear()
    this.proposed.clear()
  }
}

function bound(m: Map<string, unknown>): void {
  while (m.size > MAX_FOLLOWED) m.delete(m.keys().next().value as string)
}
