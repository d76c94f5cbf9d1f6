import { decodeAttestation, encodeCommitFrame, encodeRelayMessage } from '@stead/core'
import type { FeedPosition, RelayStore, StoredCommitHead } from './store.ts'

/**
 * One subscriber's read cursor over a space's attested commits in the
 * store. It holds a position, not data: a subscriber that does not read
 * costs nothing here, whatever the history's size. Each `next()` reads one
 * frame's worth (a commit with its first envelope chunk, or a further
 * chunk), so frames stay below the client's limit however large a commit,
 * and builds it around the chunk's stored bytes (nothing decoded again).
 */
export class CommitFeed {
  private position: FeedPosition
  /** The commit being sent in several frames, and its next chunk. */
  private current: { head: StoredCommitHead; next: number } | undefined
  /** The last commit sent whole (its first frame, for a commit of several). */
  private sent: StoredCommitHead | undefined
  /** Told `pruned`: the commits it needed next are gone. */
  private stalled = false

  private readonly store: Pick<RelayStore, 'commitAt' | 'commitChunk'>
  readonly space: string
  /** Whether commits carry their envelope frames and attestation bytes; false: compact attestations only (the client has a frame source elsewhere). */
  readonly frames: boolean
  /** What the subscriber makes of a stored chunk of envelope frames before it is sent (see Session.refer): by default the chunk as stored. */
  private readonly chunkFor: (chunk: Uint8Array) => Uint8Array
  constructor(store: Pick<RelayStore, 'commitAt' | 'commitChunk'>, space: string, fromIndex: number, frames = true, chunkFor: (chunk: Uint8Array) => Uint8Array = (chunk) => chunk) {
    this.store = store
    this.space = space
    this.position = [fromIndex, 0]
    this.frames = frames
    this.chunkFor = chunkFor
  }

  /**
   * The stable index a subscriber of this feed stands at: the end of the
   * last commit it got whole (a commit half sent is dropped by the client
   * with the subscription, and sent again whole from here).
   */
  get resumeIndex(): number {
    if (this.current) return this.current.head.position[0]
    return this.sent ? decodeAttestation(this.sent.attestation.bytes).toIndex : this.position[0]
  }

  /** Whether the feed is in the middle of a commit (its remaining chunks must follow before anything else of the session's commit stream). */
  get midCommit(): boolean {
    return this.current !== undefined
  }

  /** The next frame (encoded `commit` or `commit-more`) for this subscriber, or undefined when it has everything stored so far. */
  next(): Uint8Array | undefined {
    const space = this.space
    if (this.current) {
      const { head } = this.current
      const k = this.current.next++
      const more = k + 1 < head.chunks
      if (!more) {
        this.sent = head
        this.current = undefined
      }
      return encodeCommitFrame(space, undefined, this.chunkFor(this.store.commitChunk(space, head.position, k)), more)
    }
    if (this.stalled) return undefined
    const head = this.store.commitAt(space, this.position)
    if (!head) return undefined
    if (this.frames && head.position[0] > this.resumeIndex) {
      // The commits after the subscriber's were pruned while it read (it fell behind the relay's
      // retention): as a subscribe from below them, it starts again from a verified snapshot and
      // subscribes again from there. Nothing more is sent here until then.
      this.stalled = true
      return encodeRelayMessage({ type: 'pruned', space, from: head.position[0] })
    }
    this.position = [head.position[0], head.position[1] + 1]
    // Without frames, a compact attestation: the client checks the signature against the bytes its frame source sent.
    if (!this.frames) {
      this.sent = head
      return encodeRelayMessage({ type: 'attest', space, round: head.position[1], sig: head.attestation.sig })
    }
    const more = head.chunks > 1
    if (more) this.current = { head, next: 1 }
    else this.sent = head
    return encodeCommitFrame(space, head.attestation, this.chunkFor(this.store.commitChunk(space, head.position, 0)), more)
  }
}
