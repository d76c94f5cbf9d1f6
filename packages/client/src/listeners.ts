/**
 * Callbacks an app registers (`onStatus`, `onError`, …): `add` returns the
 * unsubscribe function. A callback that throws never breaks the client or
 * the other callbacks: its error goes to `report` (or is dropped).
 */
export class Listeners<T> {
  private readonly set = new Set<(value: T) => void>()

  private readonly report?: (err: unknown) => void
  constructor(report?: (err: unknown) => void) {
    this.report = report
  }

  add(listener: (value: T) => void): () => void {
    this.set.add(listener)
    return () => this.set.delete(listener)
  }

  /** Calls every listener with `make()`, computed only if anyone listens. */
  emit(make: () => T): void {
    if (this.set.size === 0) return
    const value = make()
    for (const l of this.set) {
      try {
        l(value)
      } catch (err) {
        this.report?.(err)
      }
    }
  }
}
