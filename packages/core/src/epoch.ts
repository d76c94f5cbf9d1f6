import { fromBase64Url, toBase64Url, toHex } from './bytes.ts'
import { checkCluster, countSigners, type Cluster, type RelaySignature } from './chrono.ts'
import { decode, encode, expect } from './codec.ts'
import type { Crypto } from './crypto/types.ts'
import { SteadError } from './errors.ts'

/**
 * Epochs: the relay committee changes only at their boundaries, as in Sui
 * and IOTA (Mysticeti per epoch). Within an epoch the committee is fixed;
 * the old committee's last act is to sign an **epoch change** naming the
 * epoch that starts, the round it starts at, the digest of the state it
 * starts from (the boundary checkpoint's manifest) and the new committee.
 * 2f+1 of the old committee's signatures make an **epoch certificate**:
 * whoever trusts the old committee (a client that pinned it, a relay that
 * joins) trusts the new one by checking the certificate, and follows a
 * chain of them from the committee it pinned (`followEpochs`). At most f
 * of the old committee are faulty, so f+1 correct relays signed the change,
 * and a correct relay signs one change per epoch: no two certificates for
 * one epoch name different committees.
 */

/** A relay of a committee, as the epoch change names it: what relays dial (mesh) and clients connect to (api). */
export interface CommitteeMember {
  /** The operator's name for it, e.g. "r5". */
  readonly id: string
  /** Its Ed25519 public key: blocks, votes and attestations are checked against it. */
  readonly publicKey: Uint8Array
  /** host:port of its client API (HTTP and WebSocket). */
  readonly api: string
  /** libp2p multiaddr of its relay mesh. */
  readonly mesh: string
  /** libp2p WebSocket multiaddr of its peer service, if it offers one. */
  readonly peers?: string
}

/** A committee: its members in committee order (a relay's index is its place here), tolerating f faulty. */
export interface RelayCommittee {
  /** How many of its members may be faulty: it has exactly 3f+1. */
  readonly f: number
  /** Its relays, in committee order. */
  readonly members: readonly CommitteeMember[]
}

/** What the old committee signs at an epoch's end. */
export interface EpochChange {
  /** The epoch that starts (the first change starts epoch 1; the cluster file's committee is epoch 0). */
  readonly epoch: number
  /** The first consensus round of the new epoch: rounds keep counting across epochs. */
  readonly startRound: number
  /** Digest of the state the new epoch starts from (the boundary checkpoint's manifest), 32 bytes. */
  readonly stateDigest: Uint8Array
  /** The committee of the new epoch. */
  readonly next: RelayCommittee
}

/** 2f+1 of the old committee's signatures over an encoded epoch change (`encodeEpochChange`). */
export interface EpochCertificate {
  /** The signed statement: `encodeEpochChange`'s bytes. */
  readonly change: Uint8Array
  /** By the signing relay's index in the old committee. */
  readonly signatures: ReadonlyArray<RelaySignature>
}

/** A committee and the epoch it rules: what a client pins and moves along the chain of certificates. */
export interface EpochCommittee {
  /** The epoch: 0 for the cluster file's committee, one more at each change. */
  readonly epoch: number
  /** The relays that rule it. */
  readonly committee: RelayCommittee
}

/** Where following a chain of certificates ends: the latest committee, and the round its epoch started after. */
export interface FollowedEpoch extends EpochCommittee {
  /** The round the epoch started after (its genesis round; 0 when no certificate was followed). */
  readonly startRound: number
}

/** Tag of the statement relays sign at an epoch's end. */
export const EPOCH_CHANGE_TAG = 'stead/epoch-change/v1'

/** Members of one committee at most. */
export const MAX_COMMITTEE = 256

/** Certificates `followEpochs` takes in one call at most (a client years behind follows in several calls). */
export const MAX_EPOCHS_FOLLOWED = 1024

const MAX_ADDRESS_CHARS = 512

/** A copy as a plain Uint8Array (the decoder may hand out views of its input, or Node Buffers). */
const plain = (b: Uint8Array): Uint8Array => new Uint8Array(b)

/** The cluster a committee makes for checking signatures: f and the members' keys. */
export function clusterOf(c: RelayCommittee): Cluster {
  return { f: c.f, relayKeys: c.members.map((m) => m.publicKey) }
}

/** How many of a committee's signatures a certificate of its takes: 2f+1. */
export function epochQuorum(c: RelayCommittee): number {
  return 2 * c.f + 1
}

/**
 * What is wrong with a committee (N other than 3f+1, more than MAX_COMMITTEE
 * members, keys or ids not distinct, a key not 32 bytes, an empty id or
 * address), or null.
 */
export function committeeProblem(c: RelayCommittee): string | null {
  const cluster = checkCluster(clusterOf(c))
  if (cluster) return cluster
  // The relays' quorums of 2f+1 assume N = 3f+1 exactly: a committee of another size would stop its consensus.
  if (c.members.length !== 3 * c.f + 1) return `${c.members.length} relays with f = ${c.f}: a committee has exactly 3f+1 (4, 7, 10, ...)`
  if (c.members.length > MAX_COMMITTEE) return `${c.members.length} members; a committee has at most ${MAX_COMMITTEE}`
  if (c.members.some((m) => m.publicKey.length !== 32)) return 'a member key is not 32 bytes'
  if (new Set(c.members.map((m) => toHex(m.publicKey))).size !== c.members.length) return 'member keys must be distinct'
  if (new Set(c.members.map((m) => m.id)).size !== c.members.length) return 'member ids must be distinct'
  if (c.members.some((m) => !m.id || !m.api || !m.mesh)) return 'every member needs an id, an api address and a mesh address'
  return null
}

/** A committee as plain values for the codec: [f, [[id, publicKey, api, mesh, peers | null], ...]]. */
export function committeeFields(c: RelayCommittee): [number, Array<[string, Uint8Array, string, string, string | null]>] {
  return [c.f, c.members.map((m) => [m.id, m.publicKey, m.api, m.mesh, m.peers ?? null])]
}

/** Reads `committeeFields` back. @throws SteadError `malformed` (or `too-large`) for values that are not a sound committee (see `committeeProblem`). */
export function committeeFromFields(f: unknown, rawMembers: unknown, field = 'committee'): RelayCommittee {
  const members = expect.array(rawMembers, `${field}.members`, MAX_COMMITTEE).map((raw, i): CommitteeMember => {
    const m = expect.array(raw, `${field}.members[${i}]`, 5)
    if (m.length !== 5) throw new SteadError('malformed', `${field}.members[${i}] must have 5 fields`)
    const peers = m[4] === null ? undefined : expect.string(m[4], `${field}.members[${i}].peers`, MAX_ADDRESS_CHARS, 1)
    return {
      id: expect.string(m[0], `${field}.members[${i}].id`, 64, 1),
      publicKey: plain(expect.bytes(m[1], `${field}.members[${i}].publicKey`, 32)),
      api: expect.string(m[2], `${field}.members[${i}].api`, MAX_ADDRESS_CHARS, 1),
      mesh: expect.string(m[3], `${field}.members[${i}].mesh`, MAX_ADDRESS_CHARS, 1),
      ...(peers === undefined ? {} : { peers }),
    }
  })
  const committee = { f: expect.uint(f, `${field}.f`), members }
  const problem = committeeProblem(committee)
  if (problem) throw new SteadError('malformed', `${field}: ${problem}`)
  return committee
}

/** The bytes relays sign for an epoch change. @throws SteadError `malformed` for a committee with a problem (see `committeeProblem`) or a bad field. */
export function encodeEpochChange(c: EpochChange): Uint8Array {
  const problem = committeeProblem(c.next)
  if (problem) throw new SteadError('malformed', `epoch ${c.epoch}'s committee: ${problem}`)
  expect.uint(c.epoch, 'epoch')
  expect.uint(c.startRound, 'startRound')
  expect.bytes(c.stateDigest, 'stateDigest', 32)
  return encode([EPOCH_CHANGE_TAG, c.epoch, c.startRound, c.stateDigest, ...committeeFields(c.next)])
}

/** @throws SteadError `malformed` (or `too-large`) for bytes that are not an epoch change with a sound committee. */
export function decodeEpochChange(bytes: Uint8Array): EpochChange {
  const v = expect.array(decode(bytes), 'epoch change', 6)
  if (v.length !== 6 || v[0] !== EPOCH_CHANGE_TAG) throw new SteadError('malformed', `not a ${EPOCH_CHANGE_TAG}`)
  const epoch = expect.uint(v[1], 'epoch')
  return {
    epoch,
    startRound: expect.uint(v[2], 'startRound'),
    stateDigest: plain(expect.bytes(v[3], 'stateDigest', 32)),
    next: committeeFromFields(v[4], v[5], `epoch ${epoch}'s committee`),
  }
}

/** Signs an epoch change as one relay of the old committee: its signature for a certificate. */
export async function signEpochChange(crypto: Crypto, secretKey: Uint8Array, relay: number, change: Uint8Array): Promise<RelaySignature> {
  return { relay, sig: await crypto.sign(secretKey, change) }
}

/**
 * Checks a certificate against the committee of the epoch it ends: it
 * names the very next epoch, a sound committee, and at least 2f+1
 * distinct relays of `from` signed it. Returns what it certifies.
 *
 * @throws SteadError `malformed` (not an epoch change, another epoch than the next, an unsound committee, a start round before `after`), `bad-signature` (fewer than 2f+1 valid signatures of `from`'s members).
 */
export async function verifyEpochCertificate(crypto: Crypto, from: EpochCommittee, cert: EpochCertificate, after = 0): Promise<EpochChange> {
  const change = decodeEpochChange(cert.change)
  if (change.epoch !== from.epoch + 1) throw new SteadError('malformed', `a certificate for epoch ${change.epoch} does not follow epoch ${from.epoch}`)
  if (change.startRound < after) throw new SteadError('malformed', `epoch ${change.epoch} starts at round ${change.startRound}, before round ${after} where epoch ${from.epoch} started`)
  const valid = await countSigners(crypto, clusterOf(from.committee), cert.change, cert.signatures)
  const quorum = epochQuorum(from.committee)
  if (valid < quorum) throw new SteadError('bad-signature', `${valid} valid signatures of epoch ${from.epoch}'s committee on the change to epoch ${change.epoch}; a certificate needs 2f+1 = ${quorum}`)
  return change
}

/**
 * Follows a chain of epoch certificates from a committee one trusts
 * (pinned at first use, or the cluster file's) to the latest: each must
 * be certified by the committee before it. Certificates for epochs at or
 * before `from`'s are skipped (a relay may send the whole chain).
 *
 * @throws SteadError as `verifyEpochCertificate` for the first that fails (nothing after it is believed), `too-large` for more than MAX_EPOCHS_FOLLOWED.
 */
export async function followEpochs(crypto: Crypto, from: EpochCommittee, certs: readonly EpochCertificate[]): Promise<FollowedEpoch> {
  if (certs.length > MAX_EPOCHS_FOLLOWED) throw new SteadError('too-large', `${certs.length} epoch certificates; at most ${MAX_EPOCHS_FOLLOWED} at once`)
  let at: FollowedEpoch = { ...from, startRound: 0 }
  for (const cert of certs) {
    const { epoch } = decodeEpochChange(cert.change)
    if (epoch <= at.epoch) continue
    const change = await verifyEpochCertificate(crypto, at, cert, at.startRound)
    at = { epoch: change.epoch, committee: change.next, startRound: change.startRound }
  }
  return at
}

/** A certificate as plain values for the codec (what relays and clients store): [change, [[relay, sig], ...]]. */
export function epochCertificateFields(cert: EpochCertificate): [Uint8Array, Array<[number, Uint8Array]>] {
  return [cert.change, cert.signatures.map((s) => [s.relay, s.sig])]
}

/**
 * A certificate from `epochCertificateFields`' values (not checked: see `followEpochs`).
 *
 * @throws SteadError `malformed` for values of another shape, `too-large` past MAX_COMMITTEE signatures.
 */
export function epochCertificateFromFields(v: unknown, field = 'certificate'): EpochCertificate {
  const [change, signatures] = expect.array(v, field, 2)
  return {
    change: plain(expect.bytes(change, `${field}.change`)),
    signatures: expect.array(signatures, `${field}.signatures`, MAX_COMMITTEE).map((s, j) => {
      const [relay, sig] = expect.array(s, `${field}.signatures[${j}]`, 2)
      return { relay: expect.uint(relay, `${field}.signatures[${j}].relay`), sig: plain(expect.bytes(sig, `${field}.signatures[${j}].sig`, 64)) }
    }),
  }
}

/** A chain of epoch certificates as `GET /v1/epochs` serves it in JSON: `change` and each signature base64url. */
export interface EpochChainJson {
  /** The epoch the serving relay is in. */
  readonly epoch: number
  /** The certificates, oldest first (from the epoch asked for). */
  readonly certificates: ReadonlyArray<{
    /** The signed `encodeEpochChange` bytes, base64url. */
    readonly change: string
    /** [relay index in the committee before, its signature base64url]. */
    readonly signatures: ReadonlyArray<readonly [relay: number, sig: string]>
  }>
}

/** A relay's chain of certificates (epochs 1 to `certs.length`) in its JSON form, leaving out the first `from`. */
export function epochChainToJson(certs: readonly EpochCertificate[], from = 0): EpochChainJson {
  return { epoch: certs.length, certificates: certs.slice(from).map((c) => ({ change: toBase64Url(c.change), signatures: c.signatures.map((s) => [s.relay, toBase64Url(s.sig)] as const) })) }
}

/**
 * Certificates from what `GET /v1/epochs` answered (not checked: see
 * `followEpochs`).
 *
 * @throws SteadError `malformed` for an answer of another shape, `too-large` past MAX_EPOCHS_FOLLOWED certificates or MAX_COMMITTEE signatures each.
 */
export function epochChainFromJson(body: unknown): EpochCertificate[] {
  const certs = expect.array((body as { certificates?: unknown } | null)?.certificates, 'certificates', MAX_EPOCHS_FOLLOWED)
  return certs.map((raw, i) => {
    const c = (raw ?? {}) as { change?: unknown; signatures?: unknown }
    if (typeof c.change !== 'string') throw new SteadError('malformed', `certificates[${i}].change must be base64url text`)
    return {
      change: fromBase64Url(c.change),
      signatures: expect.array(c.signatures, `certificates[${i}].signatures`, MAX_COMMITTEE).map((s, j) => {
        const [relay, sig] = expect.array(s, `certificates[${i}].signatures[${j}]`, 2)
        if (typeof sig !== 'string') throw new SteadError('malformed', `certificates[${i}].signatures[${j}] must be [relay, base64url signature]`)
        return { relay: expect.uint(relay, `certificates[${i}].signatures[${j}].relay`), sig: fromBase64Url(sig) }
      }),
    }
  })
}
