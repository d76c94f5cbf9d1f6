import { DEFAULT_LIMITS, MAX_PRESENCE_BODY_BYTES, SteadError, decode, encode, type Signed } from '@stead/core'

/** The tag every peer message starts with: a peer of another protocol version is refused as faulty. */
export const PEER_TAG = 'stead/peer/v3'
/** Most ids in one `have`, `want` or `news`: a space's undecided envelopes beyond it are exchanged as they arrive. */
export const MAX_PEER_IDS = 4096
/** Most frames in one `env` message, and commits in one `commits` message. */
export const MAX_FRAMES_PER_MESSAGE = 256
/** Most relay signatures one attested commit carries (a cluster of 3f+1 needs f+1 of them). */
export const MAX_CERTIFICATE_SIGNATURES = 64

/** A client's presence as its author signed it (see presence.ts in @stead/core), passed between peers as relays pass it. */
export interface SignedPresenceOf {
  /** The author's Ed25519 public key. */
  readonly author: Uint8Array
  readonly signed: Signed
}

/** Relays' signatures over one attestation's bytes, by relay index: f+1 of them are what a client believes. */
export type RelaySignatures = ReadonlyArray<readonly [relay: number, sig: Uint8Array]>

/** An attestation's bytes and the signatures of f+1 (or more) relays over them: what a client believes, whoever carries it. */
export interface Certified {
  readonly attestation: Uint8Array
  readonly signatures: RelaySignatures
}

/** A commit as relays attested it, with the envelope frames its batch binds. */
export interface AttestedCommit extends Certified {
  readonly frames: readonly Uint8Array[]
}

/** A space's audit state after the commit its attestation describes (whose state hash binds the state). */
export interface AttestedState extends Certified {
  /** encodeAuditState of the state. */
  readonly state: Uint8Array
}

export type PeerMessage =
  | { kind: 'have'; space: string; ids: Uint8Array[]; ask: boolean }
  | { kind: 'want'; space: string; ids: Uint8Array[] }
  | { kind: 'news'; space: string; ids: Uint8Array[] }
  | { kind: 'links'; space: string; links: number }
  | { kind: 'env'; space: string; frames: Uint8Array[] }
  | { kind: 'presence'; space: string; presence: SignedPresenceOf }
  | { kind: 'sync'; space: string; stableIndex: number; lastRound: number }
  | { kind: 'commits'; space: string; commits: AttestedCommit[] }
  | { kind: 'snapshot'; space: string; snapshot: AttestedState }

/** Relay signatures as msgpack takes them (also how a client stores them). */
export const encodeRelaySignatures = (s: RelaySignatures): unknown[] => s.map(([relay, sig]) => [relay, sig])

export function encodePeerMessage(m: PeerMessage): Uint8Array {
  switch (m.kind) {
    case 'have':
      return encode([PEER_TAG, m.kind, m.space, m.ids, m.ask])
    case 'presence':
      return encode([PEER_TAG, m.kind, m.space, [m.presence.author, m.presence.signed.bytes, m.presence.signed.sig]])
    case 'env':
      return encode([PEER_TAG, m.kind, m.space, m.frames])
    case 'sync':
      return encode([PEER_TAG, m.kind, m.space, [m.stableIndex, m.lastRound]])
    case 'links':
      return encode([PEER_TAG, m.kind, m.space, m.links])
    case 'commits':
      return encode([PEER_TAG, m.kind, m.space, m.commits.map((c) => [c.attestation, encodeRelaySignatures(c.signatures), c.frames])])
    case 'snapshot':
      return encode([PEER_TAG, m.kind, m.space, [m.snapshot.attestation, encodeRelaySignatures(m.snapshot.signatures), m.snapshot.state]])
    default:
      return encode([PEER_TAG, m.kind, m.space, m.ids])
  }
}

function malformed(why: string): never {
  throw new SteadError('malformed', why)
}

const isBytes = (x: unknown): x is Uint8Array => x instanceof Uint8Array
const isIndex = (x: unknown): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0

function bytesList(list: unknown, what: string): Uint8Array[] {
  if (!Array.isArray(list) || !list.every(isBytes)) malformed(`${what} is a list of byte strings`)
  return list
}

/**
 * Reads relay signatures ([relay index, 64-byte signature], 1 to
 * MAX_CERTIFICATE_SIGNATURES of them).
 *
 * @throws SteadError `malformed`, with the reason.
 */
export function decodeRelaySignatures(v: unknown): RelaySignatures {
  if (!Array.isArray(v) || v.length === 0 || v.length > MAX_CERTIFICATE_SIGNATURES) malformed(`an attested commit carries 1 to ${MAX_CERTIFICATE_SIGNATURES} relay signatures`)
  return v.map((pair: unknown) => {
    if (!Array.isArray(pair) || pair.length !== 2 || !isIndex(pair[0]) || !isBytes(pair[1]) || pair[1].length !== 64) malformed('a relay signature is [relay index, 64-byte signature]')
    return [pair[0], pair[1]] as const
  })
}

/**
 * Reads one peer message, refusing anything but the exact shapes above
 * within their budgets (the whole message at most DEFAULT_LIMITS.maxFrameBytes).
 *
 * @throws SteadError `malformed` or `too-large`, with the reason.
 */
export function decodePeerMessage(bytes: Uint8Array): PeerMessage {
  const v = decode(bytes, DEFAULT_LIMITS.maxFrameBytes)
  if (!Array.isArray(v) || v[0] !== PEER_TAG) malformed(`not a ${PEER_TAG} message`)
  const [, kind, space, body, ask] = v as unknown[]
  if (typeof space !== 'string' || space.length === 0 || space.length > 128) malformed('a peer message names a space of 1 to 128 characters')
  const fields = kind === 'have' ? 5 : 4
  if (v.length !== fields) malformed(`a ${String(kind)} message has ${fields} fields`)
  switch (kind) {
    case 'have':
    case 'want':
    case 'news': {
      const ids = bytesList(body, `a ${kind} message's body`)
      if (ids.length > MAX_PEER_IDS) throw new SteadError('too-large', `${ids.length} ids in one ${kind} message; at most ${MAX_PEER_IDS}`)
      if (!ids.every((id) => id.length === 32)) malformed('an envelope id is 32 bytes')
      if (kind === 'have') return typeof ask === 'boolean' ? { kind, space, ids, ask } : malformed('a have message says whether to answer')
      return { kind, space, ids }
    }
    case 'presence': {
      const [author, signed, sig] = bytesList(body, 'a presence')
      if ((body as unknown[]).length !== 3 || author?.length !== 32 || sig?.length !== 64 || !signed) malformed('a presence message carries [author key, body, signature]')
      if (signed.length > MAX_PRESENCE_BODY_BYTES) throw new SteadError('too-large', `a presence body of ${signed.length} bytes; at most ${MAX_PRESENCE_BODY_BYTES}`)
      return { kind, space, presence: { author, signed: { bytes: signed, sig } } }
    }
    case 'env': {
      const frames = bytesList(body, 'an env message')
      if (frames.length > MAX_FRAMES_PER_MESSAGE) throw new SteadError('too-large', `${frames.length} frames in one env message; at most ${MAX_FRAMES_PER_MESSAGE}`)
      return { kind, space, frames }
    }
    case 'links':
      return isIndex(body) ? { kind, space, links: body } : malformed('a links message carries a count')
    case 'sync': {
      if (!Array.isArray(body) || body.length !== 2 || !isIndex(body[0]) || !isIndex(body[1])) malformed('a sync message carries [stable index, last round]')
      return { kind, space, stableIndex: body[0], lastRound: body[1] }
    }
    case 'commits': {
      if (!Array.isArray(body) || body.length > MAX_FRAMES_PER_MESSAGE) malformed(`a commits message carries at most ${MAX_FRAMES_PER_MESSAGE} commits`)
      const commits = body.map((c: unknown): AttestedCommit => {
        if (!Array.isArray(c) || c.length !== 3 || !isBytes(c[0])) malformed('an attested commit is [attestation, signatures, frames]')
        return { attestation: c[0], signatures: decodeRelaySignatures(c[1]), frames: bytesList(c[2], "a commit's frames") }
      })
      return { kind, space, commits }
    }
    case 'snapshot': {
      if (!Array.isArray(body) || body.length !== 3 || !isBytes(body[0]) || !isBytes(body[2])) malformed('a snapshot message carries [attestation, signatures, state]')
      return { kind, space, snapshot: { attestation: body[0], signatures: decodeRelaySignatures(body[1]), state: body[2] } }
    }
    default:
      return malformed(`unknown peer message ${JSON.stringify(kind)}`)
  }
}
