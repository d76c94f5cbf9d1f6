import { bytesEqual } from './bytes.ts'
import type { Clock } from './clock.ts'
import { encode, type Signed } from './codec.ts'
import type { Crypto } from './crypto/types.ts'
import { openEnvelope, type Envelope } from './envelope.ts'
import { SteadError } from './errors.ts'
import { decodeAttestation } from './protocol.ts'

/**
 * Chrono's validators and proofs, as Stead runs them.
 *
 * Chrono has three validators: `update` (the clock follows from its
 * inputs), `monotonicity` (no counter reused or going back) and
 * `application` (the app's own rule). For envelopes the update validator
 * is `judgeClock` (causal.ts), monotonicity is the per-author sequence rule
 * (an author's own entry is its seq, one seq per author) and the
 * application validator is the space's write permission plus any rule the
 * relays' operators plug in for the space.
 *
 * A clock is certified twice, by two backends (Chrono's QC backend, with
 * the relays as its validator nodes):
 *
 * - **Before any order** (`kind: 'validators'`). A relay runs all three
 *   validators on an envelope as soon as it holds it and its inputs, and
 *   signs `encodeClockVote(space, id, weight)`, the weight being the sum
 *   of the full clock (`clockWeight`: every correct relay computes the
 *   same, so a certificate vouches for it; ordering by it extends the
 *   causal order to a total one). Monotonicity is stateful (a relay
 *   remembers the envelope it signed for each author and seq), so a
 *   certificate takes ceil((N+f+1)/2) relays' signatures (`clockQuorum`):
 *   any two such quorums share a correct relay, which signed one envelope
 *   per author and seq, so no author holds two certified clocks with one
 *   counter. Its stable index is not known yet.
 * - **In the order** (`kind: 'commit'`, the default). The audit runs the
 *   same update validator over the stable order every correct relay
 *   agrees on, deterministically, so f+1 relays' signatures over the
 *   attestation of the commit that decided the envelope suffice (one of
 *   them is correct and ran the same audit). It also gives the stable
 *   index the envelope took.
 */

/** A validator's verdict. */
export type Validation =
  | {
      /** Accepted. */
      ok: true
    }
  | {
      /** Refused. */
      ok: false
      /** Why, as an `ErrorReason`. */
      reason: 'bad-clock' | 'conflict' | 'duplicate' | 'unauthorized'
      /** A sentence for logs. */
      detail: string
    }

const VALID: Validation = Object.freeze({ ok: true })

/** Application validator: the app's own rule (permissions, quotas), pluggable and pure. */
export type ApplicationValidator<T> = (author: string, clock: Clock, content: T) => Validation

/** Allows only the listed authors; the usual application validator for restricted spaces. */
export function allowAuthors<T>(allowed: ReadonlySet<string>): ApplicationValidator<T> {
  return (author) => (allowed.has(author) ? VALID : { ok: false, reason: 'unauthorized', detail: `${author} may not write here` })
}

/** A relay cluster as clocks see it: N = keys.length relays, at most f faulty. */
export interface Cluster {
  /** How many relays may be faulty. */
  readonly f: number
  /** Each relay's Ed25519 public key; certificates name relays by index here. */
  readonly relayKeys: readonly Uint8Array[]
}

/** What is wrong with a cluster (f not a non-negative integer, fewer than 3f+1 relays), or null. */
export function checkCluster(c: Cluster): string | null {
  if (!Number.isSafeInteger(c.f) || c.f < 0) return 'f must be a non-negative integer'
  if (c.relayKeys.length < 3 * c.f + 1) return `N = ${c.relayKeys.length} relays cannot tolerate f = ${c.f} (need N >= 3f+1)`
  return null
}

/** One relay's signature in a certificate. */
export interface RelaySignature {
  /** The signing relay's index in the cluster. */
  readonly relay: number
  /** Its Ed25519 signature. */
  readonly sig: Uint8Array
}

/** A clock's certificate from the order: f+1 relays' signatures over the attestation of the commit that decided its envelope. */
export interface CommitCertificate {
  /** Absent on certificates from before validator certificates existed: they are all of this kind. */
  readonly kind?: 'commit'
  /** The attestation's bytes (`encodeAttestation`), which every signature covers. */
  readonly attestation: Uint8Array
  /** The relays' signatures over `attestation`, by their index in the cluster. */
  readonly signatures: ReadonlyArray<RelaySignature>
}

/** A clock's certificate before any order: ceil((N+f+1)/2) relays' signatures over `encodeClockVote(space, id, weight)`. */
export interface ValidatorCertificate {
  /** Says which kind of certificate this is. */
  readonly kind: 'validators'
  /** The sum of the envelope's full clock, as the relays computed it (see `clockWeight`). */
  readonly weight: number
  /** The relays' signatures over the vote, by their index in the cluster. */
  readonly signatures: ReadonlyArray<RelaySignature>
}

/** A clock's certificate: from the relays' validators before order, or from the commit that decided it. */
export type ClockCertificate = CommitCertificate | ValidatorCertificate

/** Tag of the statement a relay signs when an envelope passed its three validators. */
export const CLOCK_VOTE_TAG = 'stead/clock-vote/v1'

/** The bytes a relay signs to say the envelope `id` of `space` passed its update, monotonicity and application validators, and its full clock sums to `weight`. */
export function encodeClockVote(space: string, id: Uint8Array, weight: number): Uint8Array {
  return encode([CLOCK_VOTE_TAG, space, id, weight])
}

/** How many relays' votes make a validator certificate: ceil((N+f+1)/2), Chrono's quorum for a stateful validator (2f+1 when N = 3f+1). */
export function clockQuorum(cluster: Cluster): number {
  return Math.ceil((cluster.relayKeys.length + cluster.f + 1) / 2)
}

/** An envelope whose clock a certificate vouches for, and the stable index it took when that is known. */
export interface CertifiedClock {
  /** The envelope (its author's signature checked). */
  readonly env: Envelope
  /** The stable index it committed at; undefined for a validator certificate (the order may not exist yet). */
  readonly index: number | undefined
  /** The sum of its full clock (see `clockWeight`), as a validator certificate states it; undefined for a commit's. */
  readonly weight?: number
  /**
   * Its units (`envelopeUnits`) the audit rejected: they never took effect,
   * though the envelope committed. Who reads what an update did skips them.
   */
  readonly rejected: readonly number[]
}

/**
 * Checks a clock's certificate without trusting any one relay: the
 * envelope is signed by its author, and either ceil((N+f+1)/2) distinct
 * relays of the cluster signed its clock vote (a validator certificate),
 * or at least f+1 signed the attestation of the commit that decided it
 * and that attestation says it committed with a verified clock.
 *
 * @throws SteadError `bad-signature` (the envelope's or too few relays'),
 * `bad-clock` (committed unverified, or not committed), `malformed`.
 */
export async function verifyClockCertificate(crypto: Crypto, cluster: Cluster, envelope: Signed, cert: ClockCertificate): Promise<CertifiedClock> {
  const problem = checkCluster(cluster)
  if (problem) throw new SteadError('malformed', problem)
  const env = await openEnvelope(crypto, envelope)
  if (cert.kind === 'validators') {
    const quorum = clockQuorum(cluster)
    if (!Number.isSafeInteger(cert.weight) || cert.weight < env.seq) throw new SteadError('malformed', `a clock weight is a whole number of at least the envelope's seq, not ${cert.weight}`)
    const valid = await countSigners(crypto, cluster, encodeClockVote(env.space, env.id, cert.weight), cert.signatures)
    if (valid < quorum) throw new SteadError('bad-signature', `${valid} valid relay votes on the clock; a validator certificate needs ceil((N+f+1)/2) = ${quorum}`)
    return { env, index: undefined, weight: cert.weight, rejected: [] }
  }
  const valid = await countSigners(crypto, cluster, cert.attestation, cert.signatures)
  if (valid < cluster.f + 1) throw new SteadError('bad-signature', `${valid} valid relay signatures on the attestation; a certificate needs f+1 = ${cluster.f + 1}`)
  const a = decodeAttestation(cert.attestation)
  if (a.space !== env.space) throw new SteadError('malformed', `the attestation is for space ${a.space}, the envelope for ${env.space}`)
  const d = a.decisions.find((x) => bytesEqual(x[0], env.id))
  if (!d) throw new SteadError('malformed', `the attestation does not decide envelope ${env.idHex}`)
  if (d[1] !== 'committed') throw new SteadError('bad-clock', `envelope ${env.idHex} was not committed (${d[1]})`)
  if (!d[4]) throw new SteadError('bad-clock', `envelope ${env.idHex} committed with a clock the audit could not verify`)
  return { env, index: d[2], rejected: d[3].map(([unit]) => unit) }
}

/** How many distinct relays of the cluster validly signed `bytes` (a relay counted once, unknown ones not at all): what every certificate check counts. */
export async function countSigners(crypto: Crypto, cluster: Cluster, bytes: Uint8Array, signatures: ReadonlyArray<RelaySignature>): Promise<number> {
  const seen = new Set<number>()
  const checks: Array<Promise<boolean>> = []
  for (const { relay, sig } of signatures) {
    const key = cluster.relayKeys[relay]
    if (!key || seen.has(relay)) continue
    seen.add(relay)
    checks.push(crypto.verify(key, bytes, sig))
  }
  return (await Promise.all(checks)).filter(Boolean).length
}

/**
 * A total order on clocks with validator certificates that extends the
 * causal one (Chrono's ≺ for Lamport's mutual exclusion): by weight, then
 * author, then seq. Negative when `a` comes first. Both need a weight.
 *
 * @throws SteadError `unsupported` for a clock certified by its commit only (no weight).
 */
export function clockRank(a: CertifiedClock, b: CertifiedClock): number {
  if (a.weight === undefined || b.weight === undefined) throw new SteadError('unsupported', 'ranking clocks takes their weights, which only validator certificates state')
  if (a.weight !== b.weight) return a.weight - b.weight
  if (a.env.authorId !== b.env.authorId) return a.env.authorId < b.env.authorId ? -1 : 1
  return a.env.seq - b.env.seq
}

/**
 * How two certified envelopes relate causally, from their clocks and,
 * where known, the stable indices they took: `a` happened before `b` when
 * `b`'s full clock counts `a`'s author up to `a`'s seq (Fidge and
 * Mattern). `b`'s full clock counts everything committed up to its base,
 * so that holds when `a` committed at or below `b`'s base, when `b` lists
 * `a`'s author at `a`'s seq or beyond, or when both have one author and
 * `a` the lower seq (the monotonicity validator or the audit's sequence
 * rule vouch that one seq is one envelope).
 *
 * Undefined when the answer hangs on a stable index not known yet: `b`
 * does not list `a`, and `a` (certified before order) may still have
 * committed at or below `b`'s base. It cannot when `a`'s own base is at
 * least `b`'s, since an envelope commits above its base.
 */
export function causalOrder(a: CertifiedClock, b: CertifiedClock): 'before' | 'after' | 'concurrent' | 'equal' | undefined {
  if (bytesEqual(a.env.id, b.env.id)) return 'equal'
  const follows = (x: CertifiedClock, y: CertifiedClock): boolean | undefined => {
    if (x.env.authorId === y.env.authorId) return x.env.seq < y.env.seq
    if ((y.env.clock.get(x.env.authorId) ?? 0) >= x.env.seq) return true
    if (x.index !== undefined) return x.index <= y.env.base
    return x.env.base >= y.env.base ? false : undefined
  }
  const ab = follows(a, b)
  if (ab) return 'before'
  const ba = follows(b, a)
  if (ba) return 'after'
  return ab === false && ba === false ? 'concurrent' : undefined
}
