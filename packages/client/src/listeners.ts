/** Callbacks an app registers (`onStatus`, `onError`, …): `add` returns the unsubscribe function. */
export class Listeners<T> {
  private readonly set = new Set<(value: T) => void>()

  add(listener: (value: T) => void): () => void {
    this.set.add(listener)
    return () => this.set.delete(listener)
  }

  /** Calls every listener with `make()`, computed only if anyone listens. */
  emit(make: () => T): void {
    if (this.set.size === 0) return
    const value = make()
    for (const l of this.set) l(value)
  }
}
