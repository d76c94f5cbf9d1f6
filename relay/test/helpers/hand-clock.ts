import type { HostClock, HostTimer } from '@stead/core'

/** A clock the test moves by hand: timers fire in order as it passes them. */
export class HandClock implements HostClock {
  t = 0
  fired = 0
  private timers: Array<{ at: number; fn: () => void; live: boolean }> = []
  now(): number {
    return this.t
  }
  setTimer(ms: number, fn: () => void): HostTimer {
    const timer = { at: this.t + ms, fn, live: true }
    this.timers.push(timer)
    return { cancel: () => void (timer.live = false) }
  }
  /** Moves to `to`, firing every timer due on the way (and letting the promises they start settle). */
  async advance(to: number): Promise<void> {
    for (;;) {
      const next = this.timers.filter((x) => x.live && x.at <= to).sort((a, b) => a.at - b.at)[0]
      if (!next) break
      next.live = false
      this.fired++
      this.t = next.at
      next.fn()
      for (let i = 0; i < 5; i++) await Promise.resolve()
    }
    this.t = to
  }
}
