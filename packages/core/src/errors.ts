/**
 * Every rejection in Stead names its reason. Callers switch on `reason`,
 * never on message text.
 *
 * - `malformed`: bytes that do not decode into the expected shape
 * - `too-large`: a size limit was exceeded
 * - `bad-signature`: the signature does not verify against the claimed key
 * - `unauthorized`: a valid author that may not write here
 * - `conflict`: same (author, seq) or (id, counter) with different content
 * - `duplicate`: already seen: harmless, but not new
 * - `invariant`: applying the update would break a declared invariant
 * - `bad-clock`: a logical clock that does not follow the update rules
 * - `type-mismatch`: an object opened or updated as another type
 * - `gap`: a sequence number skipped ahead of what is known
 * - `unsupported`: a feature the running platform cannot provide
 * - `rate-limited`: too many requests or bytes, or the relay is at its memory budget; slow down and retry
 * - `too-many-sessions`: this key or address already holds as many sessions as a relay allows
 * - `slow-consumer`: the session did not read what the relay sent in time and was closed; reconnect and resume
 * - `timeout`: a wait ran out of time; what it waited for may still happen
 * - `aborted`: the caller's AbortSignal fired; what it waited for may still happen
 * - `unauthenticated`: the session has not proven its key yet
 * - `closed`: the object was closed and cannot be used any more
 * - `untrusted`: a peer or relay could not be trusted: unknown key, disagreeing cluster descriptors, diverging attestations
 * - `pruned`: the relays no longer keep the history asked for (older than their retention window); what it decided is in the stable state
 * - `clock-ahead`: a timestamp further ahead of the relay's clock than it allows (a device clock running fast): the relay refuses the envelope
 * - `quota`: the user already holds as many live spaces as the cluster allows (its `spacesPerUser`): delete one, or ask the operator for more
 * - `clock-skew`: a warning, not a refusal: this device's clock differs from the relays' by more than a few seconds; the client orders its writes by the relays' time instead
 */
export const ERROR_REASONS = [
  'malformed',
  'too-large',
  'bad-signature',
  'unauthorized',
  'conflict',
  'duplicate',
  'invariant',
  'bad-clock',
  'type-mismatch',
  'gap',
  'unsupported',
  'rate-limited',
  'too-many-sessions',
  'slow-consumer',
  'timeout',
  'aborted',
  'unauthenticated',
  'closed',
  'untrusted',
  'pruned',
  'clock-ahead',
  'quota',
  'clock-skew',
] as const

/** Why something was refused or failed: one of {@link ERROR_REASONS}, each explained there. */
export type ErrorReason = (typeof ERROR_REASONS)[number]

/**
 * The one error type of Stead: every failure, refusal and typed wait end
 * (in core, the SDK and the relays' replies) is a SteadError or a subclass,
 * with a `reason` to switch on; the message is for people. Subclasses in
 * `@stead/client` (ClosedError, RejectedError, TrustError, StorageError)
 * say where it came from.
 *
 * @example
 * ```ts
 * try {
 *   await space.flush({ timeoutMs: 5000 })
 * } catch (err) {
 *   if (isSteadError(err, 'timeout')) showOffline()
 *   else throw err
 * }
 * ```
 */
export class SteadError extends Error {
  /** What went wrong, for code to switch on (see {@link ERROR_REASONS}). */
  readonly reason: ErrorReason
  /** 'SteadError' (subclasses keep it, so logs and `instanceof` agree). */
  override readonly name = 'SteadError'

  constructor(reason: ErrorReason, message: string, options?: { cause?: unknown }) {
    super(`${reason}: ${message}`, options)
    this.reason = reason
  }
}

/** Whether `err` is a {@link SteadError}, with the given `reason` if one is given. */
export function isSteadError(err: unknown, reason?: ErrorReason): err is SteadError {
  return err instanceof SteadError && (reason === undefined || err.reason === reason)
}
