/**
 * Adapts a Stead handle (anything with `subscribe(cb) → unsubscribe`) to
 * React's `useSyncExternalStore`, which needs a `getSnapshot` that returns
 * the same value until something changed. Snapshots are recomputed on every
 * call and the previous one is kept when it is structurally equal, so a
 * component re-renders only when what it reads changed.
 */

/** Anything a hook can follow: every Stead handle, or your own store. */
export interface Subscribable {
  /** Calls `listener` after each change; returns the unsubscribe function. */
  subscribe(listener: () => void): () => void
}

/** Structural equality for the plain data Stead handles expose (numbers, strings, arrays, plain objects). */
export function sameValue(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false
  if (Array.isArray(a) !== Array.isArray(b)) return false
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((x, i) => sameValue(x, b[i]))
  }
  if (a instanceof Uint8Array || b instanceof Uint8Array) {
    return a instanceof Uint8Array && b instanceof Uint8Array && a.length === b.length && a.every((x, i) => x === b[i])
  }
  const ka = Object.keys(a)
  const kb = Object.keys(b)
  if (ka.length !== kb.length) return false
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
}

/**
 * A memoising snapshot reader: `read()` returns the previous snapshot
 * object whenever the fresh one is structurally equal to it. Use it as the
 * `getSnapshot` of your own `useSyncExternalStore` over Stead data (React
 * requires an unchanged store to return the identical value).
 */
export function memoSnapshot<T>(compute: () => T): () => T {
  let last: { value: T } | undefined
  return () => {
    const next = compute()
    if (last && sameValue(last.value, next)) return last.value
    last = { value: next }
    return next
  }
}
