import { bytesEqual } from './bytes.ts'
import type { Clock } from './clock.ts'
import type { Signed } from './codec.ts'
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
 * is `judgeClock` (causal.ts), and monotonicity is the per-author sequence
 * rule (an author's own entry is its seq, and one seq commits once); both
 * run inside the audit, over the stable order every correct relay agrees
 * on. So both are deterministic, and f+1 relays' signatures suffice for
 * either: one of them is correct and ran the same audit. (Chrono asks
 * ceil((N+f+1)/2) for a monotonicity validator whose state differs between
 * validators; here it cannot.) A clock's certificate is then f+1 relays'
 * signatures over the attestation of the commit that decided the envelope,
 * which states whether its clock is verified (`verifyClockCertificate`).
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

/** A clock's certificate: f+1 relays' signatures over the attestation of the commit that decided its envelope. */
export interface ClockCertificate {
  /** The attestation's bytes (`encodeAttestation`), which every signature covers. */
  readonly attestation: Uint8Array
  /** The relays' signatures, by their index in the cluster. */
  readonly signatures: ReadonlyArray<{
    /** The signing relay's index in the cluster. */
    readonly relay: number
    /** Its Ed25519 signature over `attestation`. */
    readonly sig: Uint8Array
  }>
}

/** An envelope whose clock a certificate vouches for, and the stable index it took. */
export interface CertifiedClock {
  /** The envelope (its author's signature checked). */
  readonly env: Envelope
  /** The stable index it committed at. */
  readonly index: number
  /**
   * Its units (`envelopeUnits`) the audit rejected: they never took effect,
   * though the envelope committed. Who reads what an update did skips them.
   */
  readonly rejected: readonly number[]
}

/**
 * Checks a clock's certificate without trusting any one relay: the
 * envelope is signed by its author, at least f+1 distinct relays of the
 * cluster signed the attestation, and the attestation says the envelope
 * committed with a verified clock.
 *
 * @throws SteadError `bad-signature` (the envelope's or too few relays'),
 * `bad-clock` (committed unverified, or not committed), `malformed`.
 */
export async function verifyClockCertificate(crypto: Crypto, cluster: Cluster, envelope: Signed, cert: ClockCertificate): Promise<CertifiedClock> {
  const problem = checkCluster(cluster)
  if (problem) throw new SteadError('malformed', problem)
  const env = await openEnvelope(crypto, envelope)
  const seen = new Set<number>()
  const checks: Array<Promise<boolean>> = []
  for (const { relay, sig } of cert.signatures) {
    const key = cluster.relayKeys[relay]
    if (!key || seen.has(relay)) continue
    seen.add(relay)
    checks.push(crypto.verify(key, cert.attestation, sig))
  }
  const valid = (await Promise.all(checks)).filter(Boolean).length
  if (valid < cluster.f + 1) throw new SteadError('bad-signature', `${valid} valid relay signatures on the attestation; a certificate needs f+1 = ${cluster.f + 1}`)
  const a = decodeAttestation(cert.attestation)
  if (a.space !== env.space) throw new SteadError('malformed', `the attestation is for space ${a.space}, the envelope for ${env.space}`)
  const d = a.decisions.find((x) => bytesEqual(x[0], env.id))
  if (!d) throw new SteadError('malformed', `the attestation does not decide envelope ${env.idHex}`)
  if (d[1] !== 'committed') throw new SteadError('bad-clock', `envelope ${env.idHex} was not committed (${d[1]})`)
  if (!d[4]) throw new SteadError('bad-clock', `envelope ${env.idHex} committed with a clock the audit could not verify`)
  return { env, index: d[2], rejected: d[3].map(([unit]) => unit) }
}

/**
 * How two committed envelopes relate causally, from their clocks and the
 * stable indices they took: `a` happened before `b` when `b`'s full clock
 * counts `a`'s author up to `a`'s seq (Fidge and Mattern). `b`'s full clock
 * counts everything committed up to its base, so that holds when `a`
 * committed at or below `b`'s base, when `b` lists `a`'s author at `a`'s
 * seq or beyond, or when both have one author and `a` the lower seq.
 */
export function causalOrder(a: CertifiedClock, b: CertifiedClock): 'before' | 'after' | 'concurrent' | 'equal' {
  if (bytesEqual(a.env.id, b.env.id)) return 'equal'
  const follows = (x: CertifiedClock, y: CertifiedClock): boolean =>
    x.env.authorId === y.env.authorId ? x.env.seq < y.env.seq : x.index <= y.env.base || (y.env.clock.get(x.env.authorId) ?? 0) >= x.env.seq
  if (follows(a, b)) return 'before'
  if (follows(b, a)) return 'after'
  return 'concurrent'
}
