/**
 * Time as a host sees it: the system clock in a relay process or an app,
 * simulated time in the simulator, so the same relay and the same SDK run
 * in both. Cores (consensus, audit, clocks, CRDTs) never read time
 * themselves: their hosts pass it in.
 */
export interface HostClock {
  /** Milliseconds since the epoch (simulated: since the run began). */
  now(): number
  /** Calls `fn` once after `ms`; the returned handle cancels it. */
  setTimer(ms: number, fn: () => void): HostTimer
}

/** A timer `HostClock.setTimer` armed. */
export interface HostTimer {
  /** Stops the timer; nothing happens if it already fired. */
  cancel(): void
  /** Lets a Node process exit while this timer waits (background work such as a heartbeat); absent where that means nothing. */
  unref?(): void
}

/** The system's clock: Date.now and setTimeout. */
export const systemClock: HostClock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    const t = setTimeout(fn, ms)
    return {
      cancel: () => clearTimeout(t),
      unref: () => void (t as { unref?: () => void }).unref?.(),
    }
  },
}
