/** A rate: messages and bytes per second, and how many of each may come at once. */
export interface Rate {
  readonly perSecond: number
  readonly burst: number
  readonly bytesPerSecond: number
  readonly burstBytes: number
}

/** A token bucket over messages and bytes. Time is injected for tests (default: Date.now). */
export class Bucket {
  private messages: number
  private bytes: number
  private last: number

  private readonly rate: Rate
  private readonly now: () => number
  constructor(rate: Rate, now: () => number = Date.now) {
    this.rate = rate
    this.now = now
    this.messages = rate.burst
    this.bytes = rate.burstBytes
    this.last = now()
  }

  /** How many ms until one message of `size` bytes fits (0: now). */
  wait(size: number): number {
    const now = this.now()
    const dt = (now - this.last) / 1000
    this.last = now
    this.messages = Math.min(this.rate.burst, this.messages + dt * this.rate.perSecond)
    this.bytes = Math.min(this.rate.burstBytes, this.bytes + dt * this.rate.bytesPerSecond)
    // A message larger than the byte burst would never fit: it waits for a full bucket instead.
    const need = Math.min(size, this.rate.burstBytes)
    if (this.messages >= 1 && this.bytes >= need) return 0
    const waitMessages = this.messages >= 1 ? 0 : ((1 - this.messages) / this.rate.perSecond) * 1000
    const waitBytes = this.bytes >= need ? 0 : ((need - this.bytes) / this.rate.bytesPerSecond) * 1000
    return Math.max(1, Math.ceil(Math.max(waitMessages, waitBytes)))
  }

  /** Takes one message of `size` bytes (after `wait` said 0). */
  take(size: number): void {
    this.messages -= 1
    this.bytes -= Math.min(size, this.rate.burstBytes)
  }

  /** What fits now: whole messages and bytes (after refilling). */
  available(): { blocks: number; bytes: number } {
    this.wait(0)
    return { blocks: Math.max(0, Math.floor(this.messages)), bytes: Math.max(0, Math.floor(this.bytes)) }
  }

  /** Takes `count` messages of `size` bytes in all if they fit now; false (and nothing taken) if not. */
  tryTakeMany(count: number, size: number): boolean {
    this.wait(0)
    const need = Math.min(size, this.rate.burstBytes)
    if (this.messages < Math.min(count, this.rate.burst) || this.bytes < need) return false
    this.messages -= count
    this.bytes -= need
    return true
  }

  /** Takes one message of `size` bytes if it fits now; false (and nothing taken) if not. */
  tryTake(size: number): boolean {
    if (this.wait(size) > 0) return false
    this.take(size)
    return true
  }
}
