import type { Decision, Envelope, ReliableReplica, SteadError } from '@stead/core'
import type { DraftIds } from './draft-ids.ts'
import type { Presence } from './presence.ts'
import type { DraftBatch, DraftItem } from './drafts.ts'
import type { ChainPosition } from '../upstream/quorum.ts'
import type { ClientStatus, SafeResult } from '../types.ts'
import type { SettledUpdate } from './space.ts'

/**
 * What a space's upstreams (the relay intake, the outbox, a following
 * tab's link to its leader) may do with the space: read its replica, chain
 * position and drafts, move the position on (`advance`, the one writer of
 * it besides `adopt`), and tell the space what happened. The rest of
 * `Space` (handles, views, listeners) is not theirs.
 */
export interface SpacePort {
  /** The space's name. */
  readonly space: string
  /** This client's author id. */
  readonly authorId: string
  /** The replica this tab reads: upstreams feed it envelopes and commits. */
  readonly replica: ReliableReplica
  /** Where the replica's commit chain stands (moved by `advance`). */
  readonly position: ChainPosition
  /** Drafts not yet signed, oldest first; the last one is open. */
  readonly drafts: readonly DraftBatch[]
  /** The ids of unsigned drafts. */
  readonly draftIds: DraftIds
  /** The space's presence: the relay upstream tells it what others show, and republishes through it. */
  readonly presence: Presence
  /** The replica took a commit (or a snapshot or delta): the chain stands at `position` now. */
  advance(position: ChainPosition): void
  /** Takes a replica rebuilt elsewhere (a tab taking over the lead). */
  /** The stable state jumped to `position`; `changed`: the keys it changed, when `replica` is the one the space holds (else every key may have). */
  adopt(replica: ReliableReplica, position: ChainPosition, changed?: ReadonlySet<string>): void
  /** Updates another tab made, joining the open draft (this tab leads). */
  queueForwarded(request: string, regular: readonly DraftItem[], safe: ReadonlyArray<readonly DraftItem[]>): Array<Promise<SafeResult>>
  /** A draft batch became a stored envelope (or cancelled out). */
  batchSigned(batch: DraftBatch, env: Envelope | undefined): void
  /** The replica's audit decided envelopes (a commit): the space's undo managers learn what became of this client's edits. */
  decided(decisions: readonly Decision[]): void
  /** A draft batch could not be stored. */
  batchFailed(batch: DraftBatch, err: unknown): void
  /** Subscribers of `keys` are told (their views dropped with `stale`). */
  notify(keys: Iterable<string>, stale?: boolean, local?: boolean): void
  /** Something waits may be waiting for happened. */
  progress(): void
  /** A relay accepted one of this client's envelopes `ms` after it was sent. */
  observeAccepted(ms: number): void
  emitStatus(): void
  emitError(err: SteadError): void
  emitSettled(update: SettledUpdate): void
  /** The space's status (its `problem` among it). */
  readonly status: ClientStatus
  /** Why the space is not online, or undefined. */
  setProblem(p: string | undefined): void
  storageFailed(err: unknown): void
  storageWorks(): void
}
