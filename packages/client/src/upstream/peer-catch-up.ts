import { decodeAttestation, type Attestation, type Crypto } from '@stead/core'
import type { AttestedCommit, Certified, RelaySignatures } from '../peers/peer-messages.ts'
import type { ClusterDescriptor } from '../transport/cluster.ts'
import type { ChainPosition } from './quorum.ts'

/** An attestation with the signatures of f+1 or more relays over its bytes: what a client believes, whoever carried it. */
export interface Certificate {
  readonly bytes: Uint8Array
  readonly attestation: Attestation
  readonly signatures: ReadonlyMap<number, Uint8Array>
}

/**
 * Checks what a peer carries as relays' word: the attestation is of
 * `space`, and its signatures, in order, are distinct relays' of `cluster`
 * that verify, until f+1 of them do (the rest are neither checked nor
 * kept). A peer passes on only what it checked, so a bad signature is the
 * peer's fault (the returned problem).
 */
export async function checkCertificate(crypto: Crypto, cluster: ClusterDescriptor, space: string, bytes: Uint8Array, signatures: RelaySignatures): Promise<Certificate | { problem: string }> {
  let attestation: Attestation
  try {
    attestation = decodeAttestation(bytes)
  } catch (err) {
    return { problem: `sent a malformed attestation: ${(err as Error).message}` }
  }
  if (attestation.space !== space) return { problem: `sent an attestation of space ${attestation.space} for ${space}` }
  const valid = new Map<number, Uint8Array>()
  for (const [relay, sig] of signatures) {
    if (valid.size > cluster.f) break
    const key = cluster.relays[relay]?.publicKey
    if (!key || valid.has(relay)) return { problem: `sent a signature of relay ${relay} ${key ? 'twice' : 'that the cluster does not have'}` }
    if (!(await crypto.verify(key, bytes, sig))) return { problem: `sent relay ${relay}'s signature over an attestation of round ${attestation.round} that it did not sign` }
    valid.set(relay, sig)
  }
  if (valid.size <= cluster.f) return { problem: `sent an attestation of round ${attestation.round} signed by ${valid.size} relays; a client believes f+1 = ${cluster.f + 1}` }
  return { bytes, attestation, signatures: valid }
}

/** The most bytes of recent commits a space keeps to hand peers that are behind. */
export const RECENT_COMMIT_BYTES = 8 * 1024 * 1024

interface Kept {
  readonly attestation: Attestation
  readonly commit: AttestedCommit
  readonly bytes: number
}

const sizeOf = (c: AttestedCommit): number => c.attestation.length + c.frames.reduce((n, f) => n + f.length, 0) + 80 * c.signatures.length

/**
 * The latest commits a space applied, each with the relay signatures that
 * made the client believe it (the oldest go past {@link RECENT_COMMIT_BYTES}),
 * and the certificate of the position the space stands at: what it hands a
 * peer that is behind, as commits or, further back, as its state (and the
 * one state a peer offered that it would not take).
 */
export class CertifiedCommits {
  private kept: Kept[] = []
  private bytes = 0
  /** The certificate of the commit the space's stable state is at, when it has one (a jump by an unsigned delta has none). */
  latest: Certified | undefined
  /** The attestation of the latest state a peer offered that the space would not adopt (it decides one of its own envelopes): not checked again. */
  refused: Uint8Array | undefined
  /** The stable state as peers get it (undefined: too large for a peer message), with the round of the commit it is at. */
  private encoded: { readonly round: number; readonly bytes: Uint8Array | undefined } | undefined
  private readonly maxBytes: number

  constructor(maxBytes = RECENT_COMMIT_BYTES) {
    this.maxBytes = maxBytes
  }

  /** The space applied this commit, believing these signatures. */
  add(attestation: Attestation, commit: AttestedCommit, maxMessageBytes: number): void {
    const bytes = sizeOf(commit)
    this.latest = { attestation: commit.attestation, signatures: commit.signatures }
    // One commit past what a peer message holds cannot be handed out: peers behind it get the state instead.
    if (bytes > maxMessageBytes) {
      this.kept = []
      this.bytes = 0
      return
    }
    this.kept.push({ attestation, commit, bytes })
    this.bytes += bytes
    while (this.bytes > this.maxBytes && this.kept.length > 1) this.bytes -= (this.kept.shift() as Kept).bytes
  }

  /**
   * The stable state after the commit of `round`, encoded once (`encode`)
   * however many peers ask for it there; undefined when it is over
   * `maxBytes` (only that is remembered, not the bytes).
   */
  state(round: number, maxBytes: number, encode: () => Uint8Array): Uint8Array | undefined {
    if (this.encoded?.round !== round) {
      const bytes = encode()
      this.encoded = { round, bytes: bytes.length > maxBytes ? undefined : bytes }
    }
    return this.encoded.bytes
  }

  /** The space's state jumped past commits it never applied: the chain kept no longer leads to it. */
  jumped(latest?: Certified): void {
    this.kept = []
    this.bytes = 0
    this.encoded = undefined
    this.latest = latest && { attestation: latest.attestation, signatures: latest.signatures }
  }

  /** The round the latest certificate is of (0: none). */
  get round(): number {
    return this.kept.at(-1)?.attestation.round ?? (this.latest ? decodeAttestation(this.latest.attestation).round : 0)
  }

  /**
   * The commits that follow `at`, oldest first, within about `maxBytes`
   * (at least one); none when nothing follows; 'gap' when `at` is before
   * what is kept.
   */
  after(at: ChainPosition, maxBytes: number): AttestedCommit[] | 'gap' {
    const last = this.kept.at(-1)?.attestation
    if (!last || at.lastRound >= last.round) return this.latest && at.lastRound < this.round ? 'gap' : []
    const from = this.kept.findIndex((k) => k.attestation.prevRound === at.lastRound && k.attestation.fromIndex === at.stableIndex)
    if (from < 0) return 'gap'
    const out: AttestedCommit[] = []
    let bytes = 0
    for (const k of this.kept.slice(from)) {
      if (out.length > 0 && bytes + k.bytes > maxBytes) break
      out.push(k.commit)
      bytes += k.bytes
    }
    return out
  }
}
