import { batchDigest, bytesEqual, decode, openEnvelopeSync, type Attestation, type Crypto, type Envelope, type Signed } from '@stead/core'

/**
 * Opens an envelope without checking its signature again: for frames this
 * client stored after verifying them, frames bound by f+1 relays'
 * attestations (whose batch digest covers exactly these payload bytes), and
 * frames the leader tab verified.
 */
export function openTrusted(crypto: Crypto, frame: Uint8Array | Signed): Envelope {
  return openEnvelopeSync({ sha256: (b) => crypto.sha256(b), verify: () => true }, frame instanceof Uint8Array ? decode(frame) : frame)
}

/** The envelopes of `frames` when they are exactly the batch attestation `a` binds, in order; undefined when they are not (or do not open). */
export function openBatch(crypto: Crypto, a: Attestation, frames: readonly Uint8Array[]): Envelope[] | undefined {
  try {
    const opened = frames.map((f) => openTrusted(crypto, f))
    return bytesEqual(batchDigest((b) => crypto.sha256(b), opened.map((e) => e.id)), a.batch) ? opened : undefined
  } catch {
    return undefined
  }
}
