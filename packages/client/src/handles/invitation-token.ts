import { SECRET_KEY_BYTES, SteadError, decode, encode, fromBase64Url, isWellFormed, toBase64Url } from '@stead/core'

/** What every invitation token starts with. */
export const INVITATION_PREFIX = 'stead-invite:'

/** The longest token taken (a 128-character space name of 4-byte characters and its key fit well within). */
const MAX_TOKEN_CHARS = 1024

/** What an invitation token carries: the space, and the invitation's secret key. */
export interface InvitationSecret {
  /** The space the invitation opens. */
  readonly space: string
  /** The invitation's Ed25519 secret key (32 bytes): whoever holds it may redeem the invitation. */
  readonly secret: Uint8Array
}

/** What is wrong with a space name, or null: 1 to 128 characters, no unpaired surrogate (it would reach the relays as another name). */
export function spaceNameProblem(name: unknown): string | null {
  if (typeof name !== 'string' || name.length === 0 || name.length > 128) return `a space name is 1 to 128 characters, got ${JSON.stringify(name)}`
  return isWellFormed(name) ? null : `space name ${JSON.stringify(name)} has an unpaired surrogate (it would reach the relays as another name)`
}

function secretProblem(secret: unknown): string | null {
  return secret instanceof Uint8Array && secret.length === SECRET_KEY_BYTES ? null : `its secret is not ${SECRET_KEY_BYTES} bytes`
}

/**
 * An invitation token: `stead-invite:` followed by the base64url (no
 * padding) of the msgpack array `[space, secret]`, the space's name (any
 * characters) and the invitation's 32-byte Ed25519 secret key. URL-safe as
 * it is; a secret like a password.
 *
 * @throws SteadError `malformed` for a bad space name or secret.
 */
export function encodeInvitation(space: string, secret: Uint8Array): string {
  const problem = spaceNameProblem(space) ?? secretProblem(secret)
  if (problem) throw new SteadError('malformed', `an invitation token cannot be made: ${problem}`)
  return INVITATION_PREFIX + toBase64Url(encode([space, secret]))
}

/**
 * The space and secret an invitation token carries (see
 * {@link encodeInvitation}). Whitespace around the token is ignored (a
 * pasted link).
 *
 * @throws SteadError `malformed` for anything that is not such a token.
 */
export function decodeInvitation(token: string): InvitationSecret {
  const bad = (why: string): SteadError => new SteadError('malformed', `not an invitation token (${INVITATION_PREFIX}…): ${why}`)
  const value = tokenValue(token, INVITATION_PREFIX, MAX_TOKEN_CHARS, bad)
  if (!Array.isArray(value) || value.length !== 2) throw bad('it does not hold [space, secret]')
  const [space, secret] = value as [unknown, unknown]
  const problem = spaceNameProblem(space) ?? secretProblem(secret)
  if (problem) throw bad(problem)
  return { space: space as string, secret: secret as Uint8Array }
}

/**
 * The msgpack value a token (`prefix` and base64url, at most `maxChars`,
 * whitespace around it ignored) carries; `bad(why)` makes the error thrown.
 */
export function tokenValue(token: unknown, prefix: string, maxChars: number, bad: (why: string) => SteadError): unknown {
  if (typeof token !== 'string') throw bad(`got ${token === null ? 'null' : typeof token}`)
  const text = token.trim()
  if (!text.startsWith(prefix)) throw bad(`it does not start with ${prefix}`)
  if (text.length > maxChars) throw bad(`it is longer than ${maxChars} characters`)
  try {
    return decode(fromBase64Url(text.slice(prefix.length)))
  } catch (err) {
    throw bad(`${(err as Error).message} (was it cut short when copied?)`)
  }
}

/**
 * The space an invitation token opens, to show before joining it ("Join
 * board:42?"); `client.join(token)` joins it.
 *
 * @throws SteadError `malformed` for anything that is not an invitation token.
 */
export function invitationSpace(token: string): string {
  return decodeInvitation(token).space
}
