/**
 * Time as a relay's shell sees it: the system clock in a relay process,
 * simulated time in the simulator, so the same RelayNode runs in both.
 */
export interface Clock {
  /** Milliseconds since the epoch (simulated: since the run began). */
  now(): number
  /** Calls `fn` once after `ms`; the returned handle cancels it. */
  setTimer(ms: number, fn: () => void): Timer
}

export interface Timer {
  cancel(): void
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    const t = setTimeout(fn, ms)
    return { cancel: () => clearTimeout(t) }
  },
}
