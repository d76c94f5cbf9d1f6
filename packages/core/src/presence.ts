import { SteadError } from './errors.ts'
import { DEFAULT_LIMITS, decode, encode, expect, type Signed } from './codec.ts'
import { validateRegisterValue, type RegisterValue } from './crdt/register.ts'

/**
 * Presence (awareness): who is in a space now and what they show others (a
 * name, a colour, a cursor). It is ephemeral: never ordered, never stored,
 * never part of a stable state or a history. Each client signs its own
 * state with its key, so a relay can drop or delay presence but not forge
 * it; a per-author sequence number makes a replayed older state lose to the
 * newer one a receiver has.
 *
 * What an author signs is the encoded {@link PresenceBody}, bound to this
 * module's domain and to the space, so a signature made for one space or
 * for anything else never passes as presence of another.
 */
export interface PresenceBody {
  /** The space the author is present in (a signature covers it: it cannot be moved to another). */
  readonly space: string
  /**
   * Grows with each state the author publishes: a receiver keeps the
   * highest it saw. Clients take it from their clock (milliseconds), kept
   * above the last one, so a client that restarts still supersedes what it
   * published before.
   */
  readonly seq: number
  /** How long receivers keep the state after hearing it last; the author renews it well before (at half of it). */
  readonly ttlMs: number
  /** The state the author shows; null when it left the space. */
  readonly state: RegisterValue | null
  /**
   * Set on a leave signed ahead (the next seq, no state): what a relay sends
   * for its author when the author's session with it closes. It says only
   * that the author left that relay; receivers drop the author once every
   * relay that brought its state said so (or its own explicit leave came).
   */
  readonly ahead?: true
}

const DOMAIN = 'stead-presence-1'

/** The default budget of one presence state, encoded: a relay refuses larger ones with `too-large`. */
export const MAX_PRESENCE_STATE_BYTES = 4096
/** Shortest time a presence state may ask to be kept without renewal. */
export const MIN_PRESENCE_TTL_MS = 1000
/** Longest time a presence state may ask to be kept without renewal. */
export const MAX_PRESENCE_TTL_MS = 10 * 60_000
/** The largest encoded body (state and framing) any relay or client decodes. */
export const MAX_PRESENCE_BODY_BYTES = 64 * 1024

/** The bytes an author signs for `body`. */
export function encodePresence(body: PresenceBody): Uint8Array {
  return encode(body.ahead ? [DOMAIN, body.space, body.seq, body.ttlMs, null, 1] : [DOMAIN, body.space, body.seq, body.ttlMs, body.state])
}

/**
 * Reads a presence body (untrusted input: check its signature first).
 *
 * @throws SteadError `malformed` for anything but a well-formed body of this domain, `too-large` past `maxBytes`.
 */
export function decodePresence(bytes: Uint8Array, maxBytes: number = MAX_PRESENCE_BODY_BYTES): PresenceBody {
  if (bytes.length > maxBytes) throw new SteadError('too-large', `a presence state of ${bytes.length} bytes, more than ${maxBytes}`)
  const v = expect.array(decode(bytes, maxBytes), 'presence', 6)
  if ((v.length !== 5 && v.length !== 6) || v[0] !== DOMAIN) throw new SteadError('malformed', 'not a presence body')
  const ahead = v.length === 6
  if (ahead && (v[5] !== 1 || v[4] !== null)) throw new SteadError('malformed', 'a leave signed ahead carries no state')
  const space = expect.string(v[1], 'presence.space', DEFAULT_LIMITS.maxSpaceChars, 1)
  const seq = expect.uint(v[2], 'presence.seq')
  const ttlMs = expect.uint(v[3], 'presence.ttlMs')
  if (ttlMs < MIN_PRESENCE_TTL_MS || ttlMs > MAX_PRESENCE_TTL_MS) throw new SteadError('malformed', `presence ttl ${ttlMs} ms is outside ${MIN_PRESENCE_TTL_MS} to ${MAX_PRESENCE_TTL_MS}`)
  const state = v[4] as RegisterValue | null
  const problem = validateRegisterValue(state)
  if (problem) throw new SteadError('malformed', `presence state: ${problem}`)
  return { space, seq, ttlMs, state, ...(ahead ? { ahead: true as const } : {}) }
}

/** A signed presence body as it travels: the author's bytes and signature. */
export type SignedPresence = Signed
