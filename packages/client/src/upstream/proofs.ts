import { SteadError, causalOrder, type CertifiedClock, type ClockCertificate, type CommitResult, type Signed } from '@stead/core'

/**
 * The proof of one update's clock: its signed envelope and the certificate
 * (f+1 relays' signatures over the attestation saying its clock is
 * verified). Anyone holding the cluster's relay keys checks it with
 * `verifyClockCertificate` from `@stead/core`, trusting no single relay.
 */
export interface ClockProof {
  /** The update's envelope id (hex); `verifyClockCertificate` recomputes it from the bytes, so it is not trusted. */
  readonly id: string
  /** The stable index it committed at, as the certificate's attestation says (not trusted either: verifying returns it). */
  readonly index: number
  /** The envelope's signed bytes and its author's signature. */
  readonly envelope: Signed
  /** The relays' signatures over the attestation that committed it. */
  readonly certificate: ClockCertificate
}

/** What `space.compare` answers: how two updates relate causally, with each one's clock proof. */
export interface CausalComparison {
  /** `before`: the first happened before the second (its author had seen it); `after`: the reverse; `concurrent`: neither; `equal`: the same update. */
  readonly order: 'before' | 'after' | 'concurrent' | 'equal'
  /** The first update's clock proof. */
  readonly a: ClockProof
  /** The second update's clock proof. */
  readonly b: ClockProof
}

interface Held {
  readonly certified: CertifiedClock
  readonly proof: ClockProof
}

/**
 * Clock certificates of the latest committed envelopes, gathered from the
 * signatures the client collected to apply each commit (no extra round
 * trip). Bounded: the oldest go first.
 */
export class ClockProofs {
  private readonly held = new Map<string, Held>()
  /** Stable index → envelope id (hex), for the same envelopes as `held`. */
  private readonly atIndex = new Map<number, string>()
  private readonly limit: number
  constructor(limit = 10_000) {
    this.limit = limit
  }

  /** A commit was applied: `signatures` are the relays' over `attestation`, f+1 of them at least. */
  add(decisions: CommitResult['decisions'], attestation: Uint8Array, signatures: ReadonlyMap<number, Uint8Array>): void {
    const certificate: ClockCertificate = { attestation, signatures: [...signatures].map(([relay, sig]) => ({ relay, sig })) }
    for (const d of decisions) {
      if (d.kind !== 'committed' || !d.clockVerified) continue
      this.held.set(d.env.idHex, { certified: { env: d.env, index: d.index, rejected: d.units.flatMap((u) => (u.status === 'rejected' ? [u.unit] : [])) }, proof: { id: d.env.idHex, index: d.index, envelope: d.env.signed, certificate } })
      this.atIndex.set(d.index, d.env.idHex)
      if (this.held.size > this.limit) {
        const oldest = this.held.entries().next().value as [string, Held]
        this.held.delete(oldest[0])
        this.atIndex.delete(oldest[1].certified.index)
      }
    }
  }

  /**
   * How update `a` relates to update `b`, with both proofs.
   *
   * @throws SteadError `unsupported` for an update this client holds no certificate for.
   */
  compare(a: string, b: string): CausalComparison {
    const x = this.get(a)
    const y = this.get(b)
    return { order: causalOrder(x.certified, y.certified), a: x.proof, b: y.proof }
  }

  /**
   * The clock proof of one committed update: by envelope id (hex), or by the stable index it took.
   *
   * @throws SteadError `unsupported` for an update this client holds no certificate for.
   */
  proof(update: string | number): ClockProof {
    return this.get(update).proof
  }

  private get(update: string | number): Held {
    const h = this.held.get(typeof update === 'number' ? (this.atIndex.get(update) ?? '') : update)
    if (!h) {
      const what = typeof update === 'number' ? `the update at stable index ${update}` : `update ${update}`
      throw new SteadError(
        'unsupported',
        `no clock certificate for ${what} here: it is not committed yet, it committed with a clock the audit could not verify, or it is older than the ${this.limit} latest updates whose proofs this client keeps`,
      )
    }
    return h
  }
}
