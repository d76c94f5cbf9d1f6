/**
 * How far the relays' clocks are from this device's, as a client measures
 * it: each relay's `pong` carries its clock, read halfway through the ping's
 * round trip. Register writes are stamped with the device clock plus this
 * offset, so last-writer-wins follows the relays' time, not whichever
 * device clock runs fastest.
 *
 * Pure bookkeeping (the caller measures): one sample per relay, the latest.
 * f relays may lie, so the estimate is what the honest ones bound:
 * with 2f+1 samples or more, the median of those left once the f highest
 * and the f lowest are set aside (always between two honest samples); with
 * fewer, the smallest correction every sample agrees on (0 when they
 * disagree on its sign), so a liar can only make the correction smaller,
 * never push it past what every relay heard supports.
 */
export class ClockOffset {
  private readonly samples = new Map<number, number>()
  private readonly f: () => number

  /** `f`: how many relays may lie (read at each estimate: the cluster may be trusted later). */
  constructor(f: () => number) {
    this.f = f
  }

  /**
   * A relay's clock read `relayTime` while this device read between
   * `sentAt` and `receivedAt` (its ping and the pong). Returns the sample's
   * offset, or undefined for a reading refused: a round trip that went
   * backwards, or an offset past {@link MAX_CLOCK_OFFSET_MS} (a liar, or a
   * device clock too broken to correct).
   */
  sample(relay: number, relayTime: number, sentAt: number, receivedAt: number): number | undefined {
    if (!Number.isFinite(relayTime) || receivedAt < sentAt) return undefined
    const offset = Math.round(relayTime - (sentAt + receivedAt) / 2)
    if (Math.abs(offset) > MAX_CLOCK_OFFSET_MS) return undefined
    this.samples.set(relay, offset)
    return offset
  }

  /** How many relays gave a sample. */
  get size(): number {
    return this.samples.size
  }

  /** The offset to add to the device clock (0 before any sample). */
  offset(): number {
    return robustOffset([...this.samples.values()], this.f())
  }
}

/**
 * The offset f liars cannot move past the honest samples (see
 * {@link ClockOffset}). Exported for its tests.
 */
export function robustOffset(samples: readonly number[], f: number): number {
  if (samples.length === 0) return 0
  const sorted = [...samples].sort((a, b) => a - b)
  if (sorted.length >= 2 * f + 1) {
    const kept = sorted.slice(f, sorted.length - f)
    return kept[Math.floor((kept.length - 1) / 2)] as number
  }
  const low = sorted[0] as number
  const high = sorted[sorted.length - 1] as number
  if (low > 0) return low
  if (high < 0) return high
  return 0
}

/** Largest offset a client applies: a device clock a month off is broken, and no relay is believed to say otherwise. */
export const MAX_CLOCK_OFFSET_MS = 30 * 24 * 3_600_000

/** Past this difference from the relays' time, a client tells the app once (`clock-skew`). */
export const CLOCK_SKEW_WARNING_MS = 5_000
