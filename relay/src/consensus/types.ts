import type { CommitRule } from './committer.ts'
import type { Ref } from './dag.ts'
import type { Block, Committee, Message, SyncCrypto } from './messages.ts'
import type { InspectPayload } from './payload.ts'

export interface ConsensusConfig {
  readonly committee: Committee
  readonly me: number
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  readonly inspect: InspectPayload
  /** Blocks more than this many rounds ahead of our clock are ignored (flood guard). */
  readonly maxRoundsAhead?: number
  /** Rounds kept behind the last committed leader; older blocks can never be ordered. */
  readonly gcDepth?: number
  /** Envelopes in one block. */
  readonly maxBlockEnvelopes?: number
  /** Payload bytes in one block (one envelope may exceed it alone); keeps blocks far below the mesh frame limit. */
  readonly maxBlockBytes?: number
  /** Envelopes waiting for a block; more are refused with 'rate-limited'. */
  readonly maxQueuedEnvelopes?: number
  /** How long to wait for the previous round's leader before proposing without it. */
  readonly leaderTimeoutMs?: number
  /**
   * Rounds with no urgent work (no safe update waits for them) start at
   * most one per this many ms, as Sui's min_round_delay paces its
   * proposals: regular updates made in between ride in the same blocks
   * instead of each paying three rounds. Safe updates are proposed at once.
   * 0 turns pacing off.
   */
  readonly paceMs?: number
  /** While something is missing or work is stuck: how often to ask peers again. */
  readonly syncIntervalMs?: number
  /** Blocks waiting for missing ancestors. */
  readonly maxSuspended?: number
  /**
   * At start a relay asks its peers for the latest block of its own they
   * hold (its store may have lost some: a new data dir, a lost disk, a power
   * loss before the disk sync) and proposes nothing until 2f of them
   * answered or this many ms passed, then only above the highest round they
   * named (Sui's fetch of its own last block after an amnesia start; the
   * timeout puts liveness first). 0 or absent: no asking (tests that wire
   * cores directly).
   */
  readonly ownLastTimeoutMs?: number
}

/** One committed leader and the causal history it orders. */
export interface Commit {
  /** The leader's round: strictly increasing from one commit to the next. */
  readonly anchorRound: number
  readonly leader: number
  /** Blocks newly ordered by this leader, in order. */
  readonly blocks: readonly Ref[]
  /** Envelope frames in commit order, each id once (its first place). */
  readonly payload: readonly Uint8Array[]
  /** Envelope ids matching `payload`. */
  readonly payloadIds: readonly string[]
}

/** Facts that must be durable before the messages that follow them are sent. */
export type PersistRecord =
  /** Our own block: the proof, after a crash, that this round is taken (we never sign another); `payloadIds`, when we just made it, the ids of the envelopes it carries. */
  | { readonly kind: 'own-block'; readonly block: Block; readonly payloadIds?: readonly string[] }
  /** A peer's block accepted into the DAG: written no later than our block that references it. */
  | { readonly kind: 'block'; readonly block: Block }
  | { readonly kind: 'commit'; readonly anchorRound: number; readonly ordered: readonly string[]; readonly payloadIds: readonly string[] }

export type Output =
  | { readonly type: 'persist'; readonly record: PersistRecord }
  | { readonly type: 'send'; readonly to: number; readonly message: Message }
  | { readonly type: 'broadcast'; readonly message: Message }
  | { readonly type: 'timer'; readonly name: TimerName; readonly round: number; readonly afterMs: number }
  | { readonly type: 'commit'; readonly commit: Commit }
  /** A peer's block entered the DAG: its envelopes can go to subscribers (prospective state needs no order). */
  | { readonly type: 'accepted'; readonly block: Block }
  /**
   * A block fell below the GC round without being ordered (its author
   * equivocated, or it was cut off for gcDepth rounds): it never will be.
   * Its envelopes not ordered elsewhere are listed; whoever applied them
   * prospectively reverses them (their authors resubmit).
   */
  | { readonly type: 'expired'; readonly block: Ref; readonly payloadIds: readonly string[] }
  /** Blocks older than memory holds were asked for: the shell answers from its store. */
  | { readonly type: 'archive-request'; readonly to: number; readonly query: ArchiveQuery }
  /**
   * f+1 peers (so at least one correct one) pruned the rounds this relay
   * needs next: fetching blocks cannot catch it up. Output once each time it
   * becomes so; `historyPrunedPast` says whether it still is.
   */
  | { readonly type: 'history-pruned'; readonly keptFrom: number; readonly needed: number }
  | { readonly type: 'rejected'; readonly from: number; readonly reason: string; readonly detail: string }

export type TimerName = 'leader' | 'sync' | 'pace' | 'own-last'

/** Blocks a peer asked for that memory no longer holds: by round range, or by digest. */
export type ArchiveQuery = { readonly fromRound: number; readonly toRound: number } | { readonly digests: readonly string[] }

/** What a restarted relay reads back from its store. */
export interface RecoveredState {
  readonly ownBlocks: readonly Block[]
  /** Peers' blocks above the horizon. */
  readonly blocks: readonly Block[]
  readonly commits: ReadonlyArray<{ readonly anchorRound: number; readonly ordered: readonly string[]; readonly payloadIds: readonly string[] }>
}

/** Who a core is among whom, and its settings: fixed for its life. */
export interface CoreContext {
  readonly committee: Committee
  readonly n: number
  readonly crypto: SyncCrypto
  readonly secretKey: Uint8Array
  readonly inspect: InspectPayload
  readonly rule: CommitRule
  readonly maxRoundsAhead: number
  readonly gcDepth: number
  readonly leaderTimeoutMs: number
  readonly paceMs: number
  readonly syncIntervalMs: number
  readonly ownLastTimeoutMs: number
}

