import { SteadError, type ErrorReason } from '@stead/core'

/**
 * Reason `closed`: the client or the space was closed, so nothing more can
 * be written or awaited through it. Calls after `close()` throw or reject
 * with it, and so do safe updates still waiting when their space closes
 * (they stay stored and are sent again by the next client on the storage;
 * see `pendingUpdates()`). Handles opened before stay readable.
 */
export class ClosedError extends SteadError {
  constructor(what = 'this client') {
    super('closed', `${what} is closed`)
  }
}

/**
 * The relays refused an update for good, or the stable order rejected it
 * (`reason`: `unauthorized`, `malformed`, `too-large`, `bad-signature`,
 * `conflict`, `invariant`, ...): it will never commit, and it is undone in
 * the prospective values. Safe updates report this in their
 * {@link SafeResult}; regular updates, whose promise resolved when they were
 * stored locally, report it as this error through the space's `onError`.
 */
export class RejectedError extends SteadError {
  /** Keys of the objects the refused update touched. */
  readonly keys: readonly string[]
  constructor(reason: ErrorReason, message: string, keys: readonly string[] = []) {
    super(reason, message)
    this.keys = keys
  }
}

/**
 * Reason `untrusted`: the cluster could not be trusted: relays serving
 * different descriptors, a relay whose key is not the pinned one, or f+1
 * relays attesting a commit this client's own replay disagrees with.
 * Reported through `onError` and `status.problem`; a relay found lying is
 * marked `faulty` in `status.relays` and never used again.
 */
export class TrustError extends SteadError {
  constructor(message: string) {
    super('untrusted', message)
  }
}
