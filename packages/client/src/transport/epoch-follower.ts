import { SteadError, decode, decodeEpochChange, encode, epochCertificateFields, epochCertificateFromFields, epochChainFromJson, expect, followEpochs, type Crypto, type EpochCertificate, type FollowedEpoch, type HostClock, type HostTimer } from '@stead/core'
import { descriptorOf, epochCommitteeOf, getJson, httpBaseOf, type ClusterDescriptor, type Fetch } from './cluster.ts'
import { browserOffline } from './transport.ts'

/** A later committee the client followed certificates to, and the whole chain it keeps (from the epoch it first pinned). */
export interface FollowedCluster {
  readonly cluster: ClusterDescriptor
  readonly certificates: readonly EpochCertificate[]
}

export interface EpochFollowerOptions {
  readonly crypto: Crypto
  readonly clock: HostClock
  readonly fetch: Fetch | undefined
  /** Between two asks, ms. */
  readonly everyMs: number
  /** The certificates followed before (stored). */
  readonly certificates: readonly EpochCertificate[]
  /** The committee trusted now (undefined until trusted on first use). */
  cluster(): ClusterDescriptor | undefined
  /** The relays to ask. */
  urls(): readonly string[]
  /** A relay served a certificate chain that does not verify from the trusted committee. */
  lied(url: string, why: string): void
  /** Certificates took the client to a later committee. */
  moved(to: FollowedCluster): Promise<void>
}

/** The largest certificate chain read from a relay (a thousand epochs of 256-member committees). */
const MAX_CHAIN_BYTES = 16 * 1024 * 1024
const ASK_TIMEOUT_MS = 5_000

/**
 * Follows the relays' committee changes as light clients follow Sui's
 * epochs: asks every relay for the epoch certificates after the trusted
 * committee's (`GET /v1/epochs?from=`), checks each chain from that
 * committee (2f+1 of its signatures on the change to the next, and so on),
 * and moves to the latest committee a chain proves. One relay cannot make
 * the client follow a committee of its own: it would need 2f+1 signatures of
 * the trusted committee. A relay whose chain does not verify is a liar.
 */
export class EpochFollower {
  private chain: EpochCertificate[]
  private timer: HostTimer | undefined
  private asking: Promise<void> | undefined
  private stopped = false
  private readonly o: EpochFollowerOptions

  constructor(o: EpochFollowerOptions) {
    this.o = o
    this.chain = [...o.certificates]
  }

  /** Asks now and then every `everyMs` until stopped. */
  start(): void {
    if (!this.o.fetch) return
    const again = (): void => {
      if (this.stopped) return
      this.timer = this.o.clock.setTimer(this.o.everyMs, () => void this.check().finally(again))
      this.timer.unref?.()
    }
    void this.check().finally(again)
  }

  stop(): void {
    this.stopped = true
    this.timer?.cancel()
  }

  /** Asks the relays now (once at a time: a caller during an ask waits for it); resolves once any move is done. */
  check(): Promise<void> {
    this.asking ??= this.ask().finally(() => (this.asking = undefined))
    return this.asking
  }

  private async ask(): Promise<void> {
    const cluster = this.o.cluster()
    const fetchFn = this.o.fetch
    // A browser that knows it has no network is not asked to fetch (each refused request is a console error); the next ask is soon enough.
    if (!cluster || !fetchFn || this.stopped || browserOffline()) return
    const from = epochCommitteeOf(cluster)
    const answers = await Promise.all(
      this.o.urls().map(async (url) => {
        let certs: EpochCertificate[]
        try {
          const body = await getJson(fetchFn, `${httpBaseOf(url)}/v1/epochs?from=${from.epoch}`, { maxBytes: MAX_CHAIN_BYTES, timeoutMs: ASK_TIMEOUT_MS })
          if (body === undefined) return undefined
          certs = epochChainFromJson(body)
        } catch (err) {
          // Down, slow, or not a relay of this version: no answer. A chain of another shape is a lie.
          if (err instanceof SteadError) this.o.lied(url, `served epoch certificates of no valid shape: ${err.message}`)
          return undefined
        }
        try {
          return { certs, followed: await followEpochs(this.o.crypto, from, certs) }
        } catch (err) {
          this.o.lied(url, `served an epoch certificate that does not verify from epoch ${from.epoch}'s committee: ${(err as Error).message}`)
          return undefined
        }
      }),
    )
    let best: { certs: EpochCertificate[]; followed: FollowedEpoch } | undefined
    for (const a of answers) if (a && a.followed.epoch > (best?.followed.epoch ?? from.epoch)) best = a
    if (!best || this.stopped || this.o.cluster() !== cluster) return
    // The certificates followEpochs took, one per epoch (a relay may send others beside them).
    const taken: EpochCertificate[] = []
    for (const c of best.certs) if (decodeEpochChange(c.change).epoch === from.epoch + taken.length + 1) taken.push(c)
    this.chain = [...this.chain, ...taken]
    await this.o.moved({ cluster: descriptorOf(best.followed.epoch, best.followed.committee, best.followed.startRound), certificates: this.chain })
  }
}

/** Certificates as the client stores them: a list of core's `epochCertificateFields`. */
export function encodeCertificates(certs: readonly EpochCertificate[]): Uint8Array {
  return encode(certs.map(epochCertificateFields))
}

export function decodeCertificates(bytes: Uint8Array): EpochCertificate[] {
  return expect.array(decode(bytes), 'epochs', 1_000_000).map((v, i) => epochCertificateFromFields(v, `epochs[${i}]`))
}
