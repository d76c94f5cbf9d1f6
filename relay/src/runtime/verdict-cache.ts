/**
 * Verdicts kept by a key, bounded in entries and in bytes (each entry is
 * charged what the caller says it holds); the oldest go first. For what can
 * always be computed again from its key: an envelope's verdict depends only
 * on its bytes, so a relay keeps the verdicts of the last few seconds'
 * envelopes (seen at submit, in blocks and at commit) and no more.
 */
export class VerdictCache<V> {
  private readonly entries = new Map<string, { readonly verdict: V; readonly bytes: number }>()
  private held = 0
  private readonly maxEntries: number

  constructor(maxEntries: number) {
    this.maxEntries = maxEntries
  }

  /** Bytes charged for what the cache holds. */
  get bytes(): number {
    return this.held
  }

  get(key: string): V | undefined {
    return this.entries.get(key)?.verdict
  }

  /** Keeps `verdict`, charged `bytes`, making room first: within `maxEntries`, and within `maxBytes` if given. */
  set(key: string, verdict: V, bytes: number, maxBytes = Number.POSITIVE_INFINITY): void {
    if (this.entries.size >= this.maxEntries) this.evict(1)
    if (this.held + bytes > maxBytes) this.evict(this.held + bytes - maxBytes)
    this.entries.set(key, { verdict, bytes })
    this.held += bytes
  }

  /** Drops the oldest verdicts until `bytes` are freed or nothing is left. */
  evict(bytes: number): void {
    let freed = 0
    while (this.entries.size > 0 && freed < bytes) {
      const [oldest, entry] = this.entries.entries().next().value as [string, { bytes: number }]
      this.entries.delete(oldest)
      this.held -= entry.bytes
      freed += entry.bytes
    }
  }

  /** What it holds, oldest first. */
  values(): V[] {
    return [...this.entries.values()].map((e) => e.verdict)
  }
}
