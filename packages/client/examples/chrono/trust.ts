/**
 * What the Chrono examples trust and how they read a proven update: the
 * relays' keys, and the value an update's signed envelope wrote to a key.
 */
import { SteadError, envelopeUnits, verifyClockCertificate, type CertifiedClock, type Crypto, type RegisterOp, type Signed, type ClockCertificate } from '@stead/core'

/** The relays' keys (the cluster file's), and nothing else, vouch for clock proofs. */
export interface ClusterKeys {
  readonly f: number
  readonly relayKeys: readonly Uint8Array[]
}

/** What checks clock proofs: a crypto (`nodeCrypto`, or `webCrypto()` in browsers) and the relays' keys. */
export interface Trust {
  readonly crypto: Crypto
  readonly cluster: ClusterKeys
}

/** Keeps the latest `max` of a map or set (both keep insertion order): how the examples bound what they remember. */
export function forgetOldest<K>(m: Map<K, unknown> | Set<K>, max: number): void {
  for (const k of m.keys()) {
    if (m.size <= max) return
    m.delete(k)
  }
}

/** A certified clock with the stable index its update took: what a commit's proof gives. */
export type CommittedClock = CertifiedClock & { readonly index: number }

/**
 * Checks a clock proof (see `verifyClockCertificate`) and that it is the
 * proof of a commit, which states the stable index the update took (the
 * causal store's proof that a dependency is within a write's base).
 *
 * @throws SteadError as `verifyClockCertificate`, and `unsupported` for a proof from before the commit.
 */
export async function verifyCommitted(trust: Trust, proof: { readonly envelope: Signed; readonly certificate: ClockCertificate }): Promise<CommittedClock> {
  const certified = await verifyClockCertificate(trust.crypto, trust.cluster, proof.envelope, proof.certificate)
  if (certified.index === undefined) throw new SteadError('unsupported', `update ${certified.env.idHex} is proven by the relays' clock votes, not by its commit: no stable index yet`)
  return certified as CommittedClock
}

/** A clock its relays' votes certified, with the weight they signed: what `clockRank` orders. */
export type VotedClock = CertifiedClock & { readonly weight: number }

/**
 * Checks a clock proof and that it is the relays' clock votes
 * (ceil((N+f+1)/2) of them, for one weight), not a commit's: the mutual
 * exclusion example orders messages by `clockRank`, before any total
 * order, and a commit's proof states no weight.
 *
 * @throws SteadError as `verifyClockCertificate`, and `unsupported` for a commit's proof.
 */
export async function verifyVoted(trust: Trust, proof: { readonly envelope: Signed; readonly certificate: ClockCertificate }): Promise<VotedClock> {
  const certified = await verifyClockCertificate(trust.crypto, trust.cluster, proof.envelope, proof.certificate)
  if (certified.weight === undefined) throw new SteadError('unsupported', `update ${certified.env.idHex} is proven by its commit, which states no clock weight: ask for the relays' votes (clockProof(id, { kind: 'validators' }))`)
  return certified as VotedClock
}

/**
 * The value of the one regular register write a signed update made to
 * `key`, and nothing else to it; undefined otherwise. It is the author's
 * word, signed, whatever the order later makes of it (the mutual
 * exclusion's messages and the causal store's puts need no more).
 */
export function regularWriteIn(certified: CertifiedClock, key: string): unknown {
  const touching = envelopeUnits(certified.env).filter((u) => (u.kind === 'op' ? u.key === key : u.items.some((i) => i.key === key)))
  const [only] = touching
  if (touching.length !== 1 || only?.kind !== 'op') return undefined
  const op = only.op as RegisterOp
  return Array.isArray(op) && op[0] === 's' ? op[1] : undefined
}
