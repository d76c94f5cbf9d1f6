import type { HostClock, HostTimer } from '@stead/core'

/**
 * When a space seals its open draft batch into an envelope: at most one
 * envelope per interval, and none later than needed. After a quiet spell
 * the first request seals at the end of the current task (latency of one
 * signature, not of the interval); while requests keep coming they wait for
 * the interval since the last seal, which bounds the envelopes (and relay
 * work) a busy client makes.
 */
export class SealSchedule {
  private timer: HostTimer | undefined
  /** A seal is queued for the end of the current task (a synchronous burst of operations becomes one envelope). */
  private queued = false
  private lastAt = Number.NEGATIVE_INFINITY
  private readonly intervalMs: number
  private readonly clock: HostClock
  private readonly seal: () => void

  /** `seal` is called when a requested seal is due (it should call `sealed`). */
  constructor(intervalMs: number, clock: HostClock, seal: () => void) {
    this.intervalMs = intervalMs
    this.clock = clock
    this.seal = seal
  }

  /** Asks for a seal in time; nothing more if one is already due. */
  request(): void {
    if (this.timer || this.queued) return
    const wait = this.lastAt + this.intervalMs - this.clock.now()
    if (wait > 0) {
      this.timer = this.clock.setTimer(wait, () => this.seal())
      return
    }
    this.queued = true
    queueMicrotask(() => {
      this.queued = false
      this.seal()
    })
  }

  /** A seal happens now (requested or not): the next one waits an interval from here. */
  sealed(): void {
    this.cancel()
    this.lastAt = this.clock.now()
  }

  /** Drops a seal waiting for its interval. */
  cancel(): void {
    this.timer?.cancel()
    this.timer = undefined
  }
}

/** One timer for the earliest of a changing set of deadlines (armed again with each new earliest one). */
export class DeadlineTimer {
  private timer: HostTimer | undefined
  private at = Number.POSITIVE_INFINITY
  private readonly clock: HostClock
  private readonly fire: () => void

  /** `fire` runs when the deadline armed last is reached. */
  constructor(clock: HostClock, fire: () => void) {
    this.clock = clock
    this.fire = fire
  }

  /** Fires at `deadline` (a time of `now`), or never with undefined; the same deadline again changes nothing. */
  arm(deadline: number | undefined): void {
    if ((deadline ?? Number.POSITIVE_INFINITY) === this.at) return
    this.cancel()
    if (deadline === undefined) return
    this.at = deadline
    this.timer = this.clock.setTimer(Math.max(0, deadline - this.clock.now()), () => {
      this.timer = undefined
      this.at = Number.POSITIVE_INFINITY
      this.fire()
    })
  }

  cancel(): void {
    this.timer?.cancel()
    this.timer = undefined
    this.at = Number.POSITIVE_INFINITY
  }
}
