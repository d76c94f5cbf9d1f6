import { nodeCrypto } from '@stead/core/node'
import { createClientWith, type SteadClient } from '../../src/client.ts'
import { memoryStorage } from '../../src/storage/memory.ts'
import type { ClientStorage } from '../../src/storage/types.ts'
import type { LockManagerLike, TabPlatform } from '../../src/upstream/tabs.ts'
import type { ClientOptions } from '../../src/types.ts'

/**
 * Web Locks as the browser grants them, for one "origin": exclusive locks
 * granted in request order, `ifAvailable` answered with null, a waiting
 * request given up on abort, a lock released when its callback's promise
 * settles.
 */
export class FakeLocks implements LockManagerLike {
  private readonly held = new Set<string>()
  private readonly waiting = new Map<string, Array<() => void>>()

  request(name: string, options: { ifAvailable?: boolean; signal?: AbortSignal }, callback: (lock: unknown) => Promise<void>): Promise<void> {
    const run = async (): Promise<void> => {
      try {
        await callback({ name })
      } finally {
        this.held.delete(name)
        this.waiting.get(name)?.shift()?.()
      }
    }
    if (!this.held.has(name)) {
      this.held.add(name)
      return run()
    }
    if (options.ifAvailable) return callback(null)
    return new Promise<void>((resolve, reject) => {
      const grant = (): void => {
        options.signal?.removeEventListener('abort', abort)
        this.held.add(name)
        run().then(resolve, reject)
      }
      const abort = (): void => {
        const queue = this.waiting.get(name) ?? []
        if (queue.includes(grant)) queue.splice(queue.indexOf(grant), 1)
        reject(new DOMException('aborted', 'AbortError'))
      }
      if (options.signal?.aborted) return abort()
      options.signal?.addEventListener('abort', abort, { once: true })
      let queue = this.waiting.get(name)
      if (!queue) this.waiting.set(name, (queue = []))
      queue.push(grant)
    })
  }
}

/**
 * One browser origin's shared pieces: an IndexedDB stand-in that outlives
 * the tabs that open and close it, the origin's locks, and a channel name
 * no other test uses (Node's BroadcastChannel reaches every instance of a
 * name in the process, as tabs of one origin reach each other).
 */
export class FakeOrigin {
  readonly locks = new FakeLocks()
  private readonly data = memoryStorage()
  private readonly name = `origin-${Math.random().toString(36).slice(2)}`
  readonly clients: SteadClient[] = []

  /** A handle on the shared data: closing it closes the handle, not the data. */
  storage(): ClientStorage {
    let closed = false
    const guard = <T>(f: () => Promise<T>): Promise<T> => (closed ? Promise.reject(new Error('this storage handle is closed')) : f())
    return {
      load: (k) => guard(() => this.data.load(k)),
      loadRange: (p) => guard(() => this.data.loadRange(p)),
      write: (c) => guard(() => this.data.write(c)),
      removeRange: (p) => guard(() => this.data.removeRange(p)),
      close: async () => {
        closed = true
      },
    }
  }

  get platform(): TabPlatform {
    return { name: this.name, locks: this.locks, channel: (n) => new BroadcastChannel(n) as never, storage: async () => this.storage() }
  }

  /** A new tab's client. `options` must not name a storage (tabs share the default one). */
  async tab(options: ClientOptions): Promise<SteadClient> {
    const { storage: _ignored, ...rest } = options
    const client = await createClientWith(rest, { storage: () => this.storage(), crypto: async () => nodeCrypto, connect: undefined, fetch: undefined, tabs: this.platform })
    this.clients.push(client)
    return client
  }
}
