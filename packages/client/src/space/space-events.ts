import type { SteadError } from '@stead/core'
import { Listeners } from '../listeners.ts'
import type { ClientStatus, SettledUpdate } from '../types.ts'

/**
 * Who hears what of a space: each key's subscribers (handles, hooks), the
 * app's `onStatus`, `onError` and `onSettled` callbacks, and the waits
 * (flush, settled, safe updates) that look again whenever something
 * progressed. A callback that throws breaks nothing: it is reported.
 */
export class SpaceEvents {
  readonly status: Listeners<ClientStatus>
  readonly errors = new Listeners<SteadError>()
  readonly settled: Listeners<SettledUpdate>
  private readonly byKey = new Map<string, Set<(local: boolean) => void>>()
  /** Who hears every change of the space, with the keys it touched. */
  readonly anyChange: Listeners<{ readonly keys: ReadonlySet<string>; readonly local: boolean }>
  private readonly waiters = new Set<() => void>()
  private readonly subscriberFailed: (key: string, err: unknown) => void

  constructor(listenerFailed: (which: 'onStatus' | 'onSettled' | 'onChange', err: unknown) => void, subscriberFailed: (key: string, err: unknown) => void) {
    this.status = new Listeners<ClientStatus>((err) => listenerFailed('onStatus', err))
    this.settled = new Listeners<SettledUpdate>((err) => listenerFailed('onSettled', err))
    this.anyChange = new Listeners((err) => listenerFailed('onChange', err))
    this.subscriberFailed = subscriberFailed
  }

  /** Calls `listener` whenever `key`'s value may have changed (`local`: by this client's own edit). */
  subscribe(key: string, listener: (local: boolean) => void): () => void {
    let set = this.byKey.get(key)
    if (!set) this.byKey.set(key, (set = new Set()))
    set.add(listener)
    return () => set.delete(listener)
  }

  /** Keys someone subscribed to. */
  subscribedKeys(): IterableIterator<string> {
    return this.byKey.keys()
  }

  /** Tells `key`'s subscribers. */
  changed(key: string, local: boolean): void {
    for (const l of this.byKey.get(key) ?? []) {
      try {
        l(local)
      } catch (err) {
        this.subscriberFailed(key, err)
      }
    }
  }

  /** Runs `check` at every progress until the returned function is called. */
  onProgress(check: () => void): () => void {
    this.waiters.add(check)
    return () => this.waiters.delete(check)
  }

  /** Something a wait may wait for happened: every wait looks again. */
  progress(): void {
    for (const w of [...this.waiters]) w()
  }
}
