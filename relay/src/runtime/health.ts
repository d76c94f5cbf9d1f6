/**
 * Readiness: whether a relay is worth sending clients to right now. A pure
 * function of a few numbers every DAG-based consensus has (rounds, a last
 * commit time, work waiting), so it survives a change of protocol.
 */

/** What the relay knows about itself and the cluster at one instant. */
export interface HealthNumbers {
  /** Faults tolerated: the cluster has 3f+1 relays or more. */
  readonly f: number
  /** Other relays in the cluster. */
  readonly peers: number
  /** Other relays this one has a working connection to. */
  readonly peersConnected: number
  /** This relay's consensus round. */
  readonly round: number
  /** The (f+1)-th highest round relays signed blocks for, as received: one a correct relay reached (never below `round`). */
  readonly clusterRound: number
  /** Client envelopes accepted here and not yet in a block. */
  readonly pendingEnvelopes: number
  /**
   * Whether envelopes already in blocks (this relay's or its peers') wait
   * for an order: a relay whose queue is empty still stalls if its commits
   * stopped with such blocks in its DAG.
   */
  readonly unorderedWork: boolean
  /** When work started waiting (ms since the epoch), null when nothing waits. */
  readonly pendingSince: number | null
  /** When this relay last committed (ms since the epoch), null before its first commit. */
  readonly lastCommitAt: number | null
  /**
   * The round from which f+1 peers still keep blocks, when this relay needs
   * older ones: it cannot catch up by fetching (see ConsensusCore.historyPrunedPast).
   */
  readonly historyPrunedPast?: number | null
  readonly now: number
}

export interface ReadinessBounds {
  /** How far behind the cluster's round a relay may be and still count as caught up. */
  readonly maxRoundsBehind: number
  /** How long work may wait with no commit at all before the relay counts as stalled. */
  readonly maxCommitWaitMs: number
}

/**
 * A healthy relay is within a round or two of the others (an idle cluster
 * makes no rounds at all); ten rounds is a relay still replaying or fetching
 * what it missed. A commit normally follows work within a few message delays,
 * or a leader timeout or two (250 ms each); ten seconds without one is a
 * stall, not a slow leader.
 */
export const DEFAULT_READINESS: ReadinessBounds = { maxRoundsBehind: 10, maxCommitWaitMs: 10_000 }

export type NotReadyReason = 'peers' | 'behind' | 'not-committing'

export interface Readiness {
  readonly ready: boolean
  /** Why not, one entry per failed condition, in the order peers, behind, not-committing. */
  readonly reasons: ReadonlyArray<{ readonly reason: NotReadyReason; readonly detail: string }>
  /** Peers needed for a quorum with this relay: 2f. */
  readonly peersNeeded: number
  readonly roundsBehind: number
  /** How long work has waited with no commit (0 when nothing waits). */
  readonly commitWaitMs: number
}

export function roundsBehind(h: Pick<HealthNumbers, 'round' | 'clusterRound'>): number {
  return Math.max(0, h.clusterRound - h.round)
}

/** How long the oldest waiting work has gone without any commit; 0 when nothing waits. */
export function commitWaitMs(h: Pick<HealthNumbers, 'pendingEnvelopes' | 'unorderedWork' | 'pendingSince' | 'lastCommitAt' | 'now'>): number {
  if (h.pendingEnvelopes === 0 && !h.unorderedWork) return 0
  // A commit after the work arrived shows the pipeline moves, even if this batch is not through yet.
  const since = Math.max(h.pendingSince ?? h.now, h.lastCommitAt ?? 0)
  return Math.max(0, h.now - since)
}

/**
 * Ready means: connected to at least 2f peers (with itself a quorum of
 * 2f+1), caught up (its round within `maxRoundsBehind` of the round the
 * cluster reached), and committing (work that waits sees a commit
 * within `maxCommitWaitMs`; an idle relay with nothing waiting is fine).
 */
export function readiness(h: HealthNumbers, bounds: ReadinessBounds = DEFAULT_READINESS): Readiness {
  const reasons: Array<{ reason: NotReadyReason; detail: string }> = []
  const peersNeeded = 2 * h.f
  if (h.peersConnected < peersNeeded) {
    reasons.push({ reason: 'peers', detail: `connected to ${h.peersConnected} of ${h.peers} peers; a quorum needs ${peersNeeded} (2f, f = ${h.f})` })
  }
  const behind = roundsBehind(h)
  if (h.historyPrunedPast != null) {
    reasons.push({
      reason: 'behind',
      detail: `at round ${h.round}; f+1 peers keep blocks only from round ${h.historyPrunedPast} on (their retention window): it cannot catch up by fetching blocks`,
    })
  } else if (behind > bounds.maxRoundsBehind) {
    reasons.push({ reason: 'behind', detail: `at round ${h.round}, ${behind} rounds behind the cluster's ${h.clusterRound} (at most ${bounds.maxRoundsBehind}); catching up` })
  }
  const waited = commitWaitMs(h)
  if (waited > bounds.maxCommitWaitMs) {
    reasons.push({
      reason: 'not-committing',
      detail: `${h.pendingEnvelopes} envelopes waiting for a block${h.unorderedWork ? ', blocks waiting for an order,' : ''} and no commit for ${(waited / 1000).toFixed(1)} s (at most ${bounds.maxCommitWaitMs / 1000} s)`,
    })
  }
  return { ready: reasons.length === 0, reasons, peersNeeded, roundsBehind: behind, commitWaitMs: waited }
}
