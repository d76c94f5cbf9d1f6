import type { CommitResult } from '@stead/core'

/**
 * What the attested commits of the run's space lead to, as the checker
 * replica replays them: the stable index and state hash after each commit
 * (by round), the author of the envelope committed at each stable index,
 * and the authors the order refused an envelope of (wholly, or a safe unit
 * of it). The SDK clients' checkers hold the clients to these.
 */
export class AttestedOrder {
  private readonly afterRound = new Map<number, { readonly index: number; readonly hash: string }>()
  private readonly authorAt = new Map<number, string>()
  private readonly refused = new Set<string>()

  /** The commit of `round` took the stable index from `fromIndex` to `toIndex` with these decisions, leaving state `hash`; false if its committed envelopes do not add up to that. */
  record(round: number, fromIndex: number, toIndex: number, hash: string, decisions: CommitResult['decisions']): boolean {
    let index = fromIndex
    for (const d of decisions) {
      if (d.kind === 'committed') this.authorAt.set(++index, d.env.authorId)
      if (d.kind !== 'committed' || d.units.some((u) => u.status === 'rejected')) this.refused.add(d.env.authorId)
    }
    this.afterRound.set(round, { index: toIndex, hash })
    return index === toIndex
  }

  /** The stable index and state hash (hex) after the commit of `round`, if one was attested there. */
  after(round: number): { readonly index: number; readonly hash: string } | undefined {
    return this.afterRound.get(round)
  }

  /** The author of the envelope committed at stable index `index`. */
  committedAuthor(index: number): string | undefined {
    return this.authorAt.get(index)
  }

  /** Whether the order refused an envelope (or a safe unit) of `authorId`. */
  refusedAny(authorId: string): boolean {
    return this.refused.has(authorId)
  }
}
