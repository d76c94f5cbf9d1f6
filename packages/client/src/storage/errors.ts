import { SteadError, type ErrorReason } from '@stead/core'

/**
 * Why the platform's store failed, as opposed to bad input (which is a plain
 * `SteadError` `malformed` / `too-large`).
 * - `unavailable`: no usable store here (no IndexedDB, disabled storage, a
 *   database written by a newer schema, a path LMDB cannot open)
 * - `quota`: the browser's quota or the disk is full
 * - `blocked`: other connections keep the database at an older version open
 * - `closed`: used after `close()`, or another tab upgraded or deleted the
 *   database, or the browser terminated the connection
 * - `io`: any other failure of the underlying store
 */
export type StorageFailure = 'unavailable' | 'quota' | 'blocked' | 'closed' | 'io'

// Core's ErrorReason has no storage-specific reasons, so each failure maps to
// the nearest one; `failure` carries the precise kind.
const reasonOf: Record<StorageFailure, ErrorReason> = {
  unavailable: 'unsupported',
  quota: 'too-large',
  blocked: 'conflict',
  closed: 'closed',
  io: 'unsupported',
}

/**
 * The platform's store failed (see {@link StorageFailure}); bad input to a
 * storage call is a plain `SteadError` instead. Its `reason` is the nearest
 * `ErrorReason` (`unavailable` and `io` → `unsupported`, `quota` →
 * `too-large`, `blocked` → `conflict`, `closed` → `closed`); match on
 * `failure`, or use {@link isStorageError}. An update whose batch could
 * not be stored rejects with it (and is undone); the client reports other
 * storage failures through `onError` and `status.problem`.
 */
export class StorageError extends SteadError {
  /** What failed: the precise kind (`reason` is only the nearest general one). */
  readonly failure: StorageFailure

  constructor(failure: StorageFailure, message: string, options?: { cause?: unknown }) {
    super(reasonOf[failure], `storage ${failure}: ${message}`, options)
    this.failure = failure
  }
}

/** Whether `err` is a {@link StorageError}, with the given `failure` if one is given. */
export function isStorageError(err: unknown, failure?: StorageFailure): err is StorageError {
  return err instanceof StorageError && (failure === undefined || err.failure === failure)
}
