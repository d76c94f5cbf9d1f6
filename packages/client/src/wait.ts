import { SteadError, type HostClock, type HostTimer } from '@stead/core'
import type { WaitOptions } from './types.ts'

import { MAX_TIMER_MS } from './options.ts'

/** Throws SteadError('malformed') unless `timeoutMs` is absent, milliseconds from 0 to the longest timer, or Infinity. */
export function checkTimeout(timeoutMs: unknown, what = 'timeoutMs'): void {
  if (timeoutMs === undefined || timeoutMs === Number.POSITIVE_INFINITY) return
  if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs) || timeoutMs < 0 || timeoutMs > MAX_TIMER_MS) {
    throw new SteadError('malformed', `${what} must be milliseconds from 0 to ${MAX_TIMER_MS}, or Infinity to wait for ever; got ${String(timeoutMs)}`)
  }
}

/**
 * `p`, or a typed rejection once `options.timeoutMs` passes on `clock` (`timeout`) or
 * `options.signal` aborts (`aborted`). `timeoutMs: Infinity` waits for ever.
 * Only the caller's wait ends: `p` itself goes on. No timer or listener
 * outlives the wait. `why`, when given, says at the moment of a timeout what
 * the wait was missing; it goes into the error's message.
 */
export function bounded<T>(clock: HostClock, p: Promise<T>, options: WaitOptions | undefined, what: string, why?: () => string | undefined): Promise<T> {
  const { signal } = options ?? {}
  const timeoutMs = options?.timeoutMs === Number.POSITIVE_INFINITY ? undefined : options?.timeoutMs
  // The caller stops listening to `p` in the early returns: its outcome must not surface as unhandled.
  try {
    checkTimeout(options?.timeoutMs)
  } catch (err) {
    p.catch(() => undefined)
    return Promise.reject(err as Error)
  }
  if (signal === undefined && timeoutMs === undefined) return p
  if (signal?.aborted) {
    p.catch(() => undefined)
    return Promise.reject(abortedError(what))
  }
  return new Promise<T>((resolve, reject) => {
    let timer: HostTimer | undefined
    const onAbort = (): void => finish(() => reject(abortedError(what)))
    const finish = (settle: () => void): void => {
      timer?.cancel()
      signal?.removeEventListener('abort', onAbort)
      settle()
    }
    const timedOut = (): SteadError => {
      let reason: string | undefined
      try {
        reason = why?.()
      } catch {
        reason = undefined
      }
      return new SteadError('timeout', `timed out after ${timeoutMs} ms waiting for ${what}${reason ? `: ${reason}` : ''}`)
    }
    if (timeoutMs !== undefined) timer = clock.setTimer(timeoutMs, () => finish(() => reject(timedOut())))
    signal?.addEventListener('abort', onAbort, { once: true })
    p.then(
      (v) => finish(() => resolve(v)),
      (e: unknown) => finish(() => reject(e)),
    )
  })
}

function abortedError(what: string): SteadError {
  return new SteadError('aborted', `the wait for ${what} was aborted`)
}
