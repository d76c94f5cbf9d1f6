import { SteadError, type ErrorReason } from '@stead/core'

/** The client was closed: nothing more can be written or read through it. */
export class ClosedError extends SteadError {
  constructor(what = 'this client') {
    super('closed', `${what} is closed`)
  }
}

/**
 * The relays refused an update for good (`unauthorized`, `malformed`,
 * `too-large`, `bad-signature`, `conflict`, ...): it will never commit.
 * Safe updates report this in their result; regular updates, whose promise
 * resolved when they were stored locally, report it through `client.onError`.
 */
export class RejectedError extends SteadError {
  constructor(
    reason: ErrorReason,
    message: string,
    /** Keys of the objects the refused update touched. */
    readonly keys: readonly string[] = [],
  ) {
    super(reason, message)
  }
}

/**
 * The cluster could not be trusted: relays serving different descriptors, a
 * relay whose key is not the pinned one, or f+1 relays attesting a commit
 * this client's own replay disagrees with.
 */
export class TrustError extends SteadError {
  constructor(message: string) {
    super('untrusted', message)
  }
}
