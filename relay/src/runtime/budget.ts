/**
 * A relay's memory budget in bytes, shared by everything that holds data
 * on behalf of clients: envelopes queued for a block, per-session send
 * buffers, and the verification cache. Each part reports what it holds;
 * before taking more, a part asks `admits`. Parts that are only caches
 * (they can drop entries and recompute them) give memory back when another
 * part needs it.
 */
export class MemoryBudget {
  private readonly parts = new Map<string, { usage: () => number; reclaim?: (bytes: number) => void }>()

  readonly totalBytes: number
  constructor(totalBytes: number) {
    this.totalBytes = totalBytes
    if (!Number.isSafeInteger(totalBytes) || totalBytes <= 0) throw new RangeError(`memory budget must be a positive number of bytes, got ${totalBytes}`)
  }

  /** Registers a part; `reclaim` (for caches) frees at least the bytes asked if it can. */
  track(name: string, usage: () => number, reclaim?: (bytes: number) => void): void {
    this.parts.set(name, reclaim ? { usage, reclaim } : { usage })
  }

  used(): number {
    let n = 0
    for (const p of this.parts.values()) n += p.usage()
    return n
  }

  /** Bytes held per part, for /metrics and /v1/status. */
  usage(): Record<string, number> {
    return Object.fromEntries([...this.parts].map(([name, p]) => [name, p.usage()]))
  }

  /**
   * Whether `bytes` more fit within the budget, after asking the caches to
   * give memory back if they do not; a part that gets false answers with a
   * typed error or waits.
   */
  admits(bytes: number): boolean {
    let over = this.used() + bytes - this.totalBytes
    if (over <= 0) return true
    for (const p of this.parts.values()) {
      if (!p.reclaim) continue
      p.reclaim(over)
      over = this.used() + bytes - this.totalBytes
      if (over <= 0) return true
    }
    return false
  }
}
