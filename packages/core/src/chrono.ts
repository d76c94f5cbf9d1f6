import type { Clock } from './clock.ts'
import type { Crypto } from './crypto/types.ts'
import { encode } from './codec.ts'
import { bytesEqual } from './bytes.ts'

/**
 * Chrono's validators and proofs for logical clocks. Each validator is a
 * pure function (the monotonicity one over an explicit state value) so
 * relays, clients and the simulator run the same checks.
 */

/**
 * Chrono's three clock validators: `update` (stateless: the clock follows
 * from its inputs), `monotonicity` (stateful: no counter reused or going
 * back) and `application` (the app's own rule). For envelopes, the update
 * validator is `judgeClock` (causal.ts), run by the audit and at relays'
 * doors; monotonicity is the per-author sequence rule (an author's own
 * entry is its seq, and one seq commits once).
 */
export type ValidatorKind = 'update' | 'monotonicity' | 'application'

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

/**
 * Signatures needed for a certificate of this kind. A stateless check gives
 * the same answer at every correct relay, so f+1 signers include a correct
 * one. A stateful check depends on what each relay saw, so two quorums must
 * intersect in a correct relay: ceil((N+f+1)/2).
 */
export function quorumThreshold(kind: ValidatorKind, n: number, f: number): number {
  return kind === 'update' ? f + 1 : Math.ceil((n + f + 1) / 2)
}

/** Relay signatures saying that validator `kind` accepted the update with id `subject`. */
export interface QuorumCertificate {
  /** Which validator accepted it. */
  readonly kind: ValidatorKind
  /** What was validated: the hash of the signed bytes that carry the clock. */
  readonly subject: Uint8Array
  /** The relays' signatures over `attestationBytes(kind, subject)`. */
  readonly signatures: ReadonlyArray<{
    /** The signing relay's index in the cluster. */
    readonly relay: number
    /** Its signature. */
    readonly sig: Uint8Array
  }>
}

/** The exact bytes a relay signs to attest a validation; tagged so they can never pass for anything else. */
export function attestationBytes(kind: ValidatorKind, subject: Uint8Array): Uint8Array {
  return encode(['stead/clock-attestation/v1', kind, subject])
}

/** Counts distinct relays whose signature verifies; true when the kind's threshold is met. */
export async function verifyQuorumCertificate(crypto: Crypto, cluster: Cluster, qc: QuorumCertificate): Promise<boolean> {
  if (checkCluster(cluster)) return false
  const message = attestationBytes(qc.kind, qc.subject)
  const seen = new Set<number>()
  const checks: Array<Promise<boolean>> = []
  for (const { relay, sig } of qc.signatures) {
    const key = cluster.relayKeys[relay]
    if (!key || seen.has(relay)) continue
    seen.add(relay)
    checks.push(crypto.verify(key, message, sig))
  }
  const valid = (await Promise.all(checks)).filter(Boolean).length
  return valid >= quorumThreshold(qc.kind, cluster.relayKeys.length, cluster.f)
}

/**
 * Proof of a clock: the author's signature over the bytes that carry it
 * (for Stead, the envelope) and any relay quorum certificates for it.
 */
export interface ClockProof {
  /** The author's Ed25519 public key. */
  readonly authorKey: Uint8Array
  /** The bytes that carry the clock, with the author's signature. */
  readonly signed: {
    /** The signed bytes; their SHA-256 is the proof's subject. */
    readonly bytes: Uint8Array
    /** The author's signature over `bytes`. */
    readonly sig: Uint8Array
  }
  /** Certificates of the validators that accepted the clock. */
  readonly certificates: readonly QuorumCertificate[]
}

/**
 * Verifies a clock's proof: the author signed the bytes, the bytes hash to
 * `subject`, and each required validator kind has a valid certificate for
 * that subject.
 */
export async function verifyClockProof(
  crypto: Crypto,
  cluster: Cluster,
  subject: Uint8Array,
  proof: ClockProof,
  required: readonly ValidatorKind[] = ['update', 'monotonicity'],
): Promise<
  | {
      /** The proof holds. */
      ok: true
    }
  | {
      /** The proof fails. */
      ok: false
      /** What failed, for logs. */
      detail: string
    }
> {
  if (!bytesEqual(crypto.sha256(proof.signed.bytes), subject)) return { ok: false, detail: 'signed bytes do not hash to the subject' }
  if (!(await crypto.verify(proof.authorKey, proof.signed.bytes, proof.signed.sig))) return { ok: false, detail: 'author signature does not verify' }
  for (const kind of required) {
    const qc = proof.certificates.find((c) => c.kind === kind && bytesEqual(c.subject, subject))
    if (!qc) return { ok: false, detail: `no ${kind} certificate` }
    if (!(await verifyQuorumCertificate(crypto, cluster, qc))) return { ok: false, detail: `${kind} certificate lacks a quorum of valid relay signatures` }
  }
  return { ok: true }
}

/** A relay's signature for one validation, to be gathered into a certificate. */
export async function attest(crypto: Crypto, relaySecretKey: Uint8Array, kind: ValidatorKind, subject: Uint8Array): Promise<Uint8Array> {
  return crypto.sign(relaySecretKey, attestationBytes(kind, subject))
}
