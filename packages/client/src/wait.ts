import { SteadError } from '@stead/core'
import type { WaitOptions } from './types.ts'

/**
 * `p`, or a typed rejection once `options.timeoutMs` passes (`timeout`) or
 * `options.signal` aborts (`aborted`). Only the caller's wait ends: `p`
 * itself goes on. No timer or listener outlives the wait.
 */
export function bounded<T>(p: Promise<T>, options: WaitOptions | undefined, what: string): Promise<T> {
  const { signal, timeoutMs } = options ?? {}
  if (signal === undefined && timeoutMs === undefined) return p
  // The caller stops listening to `p` in the early returns: its outcome must not surface as unhandled.
  if (timeoutMs !== undefined && (!Number.isFinite(timeoutMs) || timeoutMs < 0)) {
    p.catch(() => undefined)
    return Promise.reject(new SteadError('malformed', `timeoutMs must be a non-negative number, got ${timeoutMs}`))
  }
  if (signal?.aborted) {
    p.catch(() => undefined)
    return Promise.reject(abortedError(what))
  }
  return new Promise<T>((resolve, reject) => {
    let timer: ReturnType<typeof setTimeout> | undefined
    const onAbort = (): void => finish(() => reject(abortedError(what)))
    const finish = (settle: () => void): void => {
      if (timer !== undefined) clearTimeout(timer)
      signal?.removeEventListener('abort', onAbort)
      settle()
    }
    if (timeoutMs !== undefined) timer = setTimeout(() => finish(() => reject(new SteadError('timeout', `timed out after ${timeoutMs} ms waiting for ${what}`))), timeoutMs)
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
