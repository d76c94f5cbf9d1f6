/**
 * When a relay snapshots its spaces' audit state: every so many batches,
 * once the batches since weigh as much as the last snapshot (what a restart
 * would replay besides it), or a while after the last one, whichever comes
 * first.
 */
export class SnapshotPace {
  private batches = 0
  /** Envelope bytes of those batches, and the size of the last snapshot written. */
  private bytes = 0
  private lastBytes = 0
  private lastAt: number
  private readonly everyBatches: number
  private readonly minReplayBytes: number
  private readonly intervalMs: number

  constructor(o: { readonly everyBatches: number; readonly minReplayBytes: number; readonly intervalMs: number; readonly now: number }) {
    this.everyBatches = o.everyBatches
    this.minReplayBytes = o.minReplayBytes
    this.intervalMs = o.intervalMs
    this.lastAt = o.now
  }

  /** The audit took batches of `bytes` envelope bytes (a restart's replay counts too). */
  took(batches: number, bytes: number): void {
    this.batches += batches
    this.bytes += bytes
  }

  /** Whether a snapshot is due at `now`. */
  due(now: number): boolean {
    return this.batches >= this.everyBatches || this.bytes >= Math.max(this.minReplayBytes, this.lastBytes) || now - this.lastAt >= this.intervalMs
  }

  /** A snapshot of `bytes` was taken at `now`: counting starts over. */
  taken(now: number, bytes: number): void {
    this.batches = 0
    this.bytes = 0
    this.lastBytes = bytes
    this.lastAt = now
  }
}
