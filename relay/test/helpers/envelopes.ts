import { clockInit, encodeEnvelope, sealEnvelope, toHex, type EnvelopeDraft } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'

export type Identity = { readonly secretKey: Uint8Array; readonly publicKey: Uint8Array }

/** A client key made from one byte, so a test's keys are the same every run. */
export const identity = (n: number): Identity => ({ secretKey: new Uint8Array(32).fill(n), publicKey: publicKeyOfSync(new Uint8Array(32).fill(n)) })

/**
 * Signed envelopes with each author's next sequence number in each space,
 * as a client numbers them: `envelope(who, space, parts)` gives the frame.
 */
export function envelopes(): (who: Identity, space: string, parts: Partial<EnvelopeDraft>) => Promise<Uint8Array> {
  const seqs = new Map<string, number>()
  return async (who, space, parts) => {
    const k = `${toHex(who.publicKey)}/${space}`
    const seq = (seqs.get(k) ?? 0) + 1
    seqs.set(k, seq)
    return encodeEnvelope(await sealEnvelope(nodeCrypto, who, { space, seq, clock: clockInit(), deps: [], updates: [], safe: [], ...parts }))
  }
}

/** The `p` quantile of `xs` (Infinity for none). */
export function pct(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b)
  return s.length ? (s[Math.min(s.length - 1, Math.floor(s.length * p))] as number) : Infinity
}
