import { open, type Database, type Key, type RootDatabase, type Transaction } from 'lmdb'
import { toBufferKey, type Key as OrderedKey } from 'ordered-binary'

/**
 * The ordered key-value store under RelayStore: named tables of binary
 * values under ordered keys (numbers, strings and arrays of them, ordered as
 * LMDB orders them), atomic writes that resolve once durable, and
 * consistent reads. LMDB backs a relay; the simulator backs its relays with
 * MemoryKv and decides when each write reaches the disk.
 */
/** A key: a number, a string, or an array of keys (ordered element by element). */
export type KvKey = number | string | KvKey[]

export interface Kv {
  table<K extends KvKey>(name: string): KvTable<K>
  /** Runs `fn`'s puts and removes as one atomic write; resolves once it is durable. Writes become durable in the order issued. */
  write(fn: () => void): Promise<void>
  /** Runs `fn`'s reads against one consistent view of the store. */
  read<T>(fn: () => T): T
  close(): Promise<void>
}

/** A range of keys: from `start` (inclusive) to `end` (exclusive); with `reverse`, from `start` down to `end`. */
export interface KeyRange<K> {
  readonly start?: K
  readonly end?: K
  readonly reverse?: boolean
  readonly limit?: number
}

export interface KvTable<K extends KvKey> {
  get(key: K): Uint8Array | undefined
  getRange(range?: KeyRange<K>): Iterable<{ key: K; value: Uint8Array }>
  getKeys(range?: KeyRange<K>): Iterable<K>
  /** Only inside Kv.write. */
  put(key: K, value: Uint8Array): void
  /** Only inside Kv.write. */
  remove(key: K): void
}

/** LMDB as a Kv: one environment in a directory, a named database per table. */
export class LmdbKv implements Kv {
  private readonly root: RootDatabase<Uint8Array, Key>
  /** The read transaction of the `read` call running now, if any. */
  private reading: Transaction | undefined

  constructor(path: string) {
    // overlappingSync (lmdb-js's default on Linux, which lets the next commit start while the
    // last one is still being flushed) is off: with it, writing multi-MiB batches while pruning
    // older ones failed about one commit run in five with MDB_BAD_TXN ("reserved freelist had
    // a data entry with zero-size") in lmdb 3.5.6, and a relay that cannot commit stops.
    // Without it: 0 failures in 20 runs of the same test (relay/test/hardening.test.ts).
    this.root = open<Uint8Array, Key>({ path, encoding: 'binary', maxDbs: 16, overlappingSync: false })
  }

  table<K extends KvKey>(name: string): KvTable<K> {
    const db = this.root.openDB<Uint8Array, K & Key>({ name, encoding: 'binary' }) as Database<Uint8Array, K & Key>
    const options = () => (this.reading ? { transaction: this.reading } : undefined)
    return {
      get: (key) => db.get(key as K & Key, options()),
      getRange: (range = {}) => db.getRange({ ...(range as KeyRange<K & Key>), ...options() }),
      getKeys: (range = {}) => db.getKeys({ ...(range as KeyRange<K & Key>), ...options() }),
      put: (key, value) => void db.putSync(key as K & Key, value),
      remove: (key) => void db.removeSync(key as K & Key),
    }
  }

  async write(fn: () => void): Promise<void> {
    await this.root.transaction(fn)
  }

  read<T>(fn: () => T): T {
    if (this.reading) return fn()
    this.reading = this.root.useReadTransaction()
    try {
      return fn()
    } finally {
      this.reading.done()
      this.reading = undefined
    }
  }

  async close(): Promise<void> {
    await this.root.close()
  }
}

interface Entry {
  readonly order: Buffer
  readonly key: KvKey
  value: Uint8Array
}

/** A key's bytes in LMDB's order. */
const order = (key: KvKey): Buffer => toBufferKey(key as OrderedKey)

/** One write not yet durable: how to undo it, and who waits for it. */
interface PendingWrite {
  readonly undo: Array<() => void>
  durable: boolean
  readonly resolve: () => void
}

/**
 * A Kv in memory with a disk the owner drives: each write applies at once
 * (reads see it) and resolves when `persist` says it reached the disk, in
 * the order issued; `crash()` undoes every write not yet durable, as a
 * process killed mid-write loses them. Without `persist`, writes are
 * durable at once.
 */
export class MemoryKv implements Kv {
  private readonly tables = new Map<string, Entry[]>()
  private readonly pending: PendingWrite[] = []
  private undo: Array<() => void> | undefined
  private readonly persist: (done: () => void) => void

  /** `persist(done)` is called once per write; calling `done` puts that write on the disk. */
  constructor(persist: (done: () => void) => void = (done) => done()) {
    this.persist = persist
  }

  table<K extends KvKey>(name: string): KvTable<K> {
    let entries = this.tables.get(name)
    if (!entries) this.tables.set(name, (entries = []))
    const table = entries
    const find = (order: Buffer): { at: number; found: boolean } => {
      let lo = 0
      let hi = table.length
      while (lo < hi) {
        const mid = (lo + hi) >> 1
        if (Buffer.compare((table[mid] as Entry).order, order) < 0) lo = mid + 1
        else hi = mid
      }
      return { at: lo, found: lo < table.length && Buffer.compare((table[lo] as Entry).order, order) === 0 }
    }
    const range = (r: KeyRange<K>): Entry[] => {
      const out: Entry[] = []
      const limit = r.limit ?? Infinity
      if (!r.reverse) {
        let i = r.start === undefined ? 0 : find(order(r.start)).at
        const end = r.end === undefined ? undefined : order(r.end)
        for (; i < table.length && out.length < limit; i++) {
          const e = table[i] as Entry
          if (end && Buffer.compare(e.order, end) >= 0) break
          out.push(e)
        }
      } else {
        let i = table.length - 1
        if (r.start !== undefined) {
          const { at, found } = find(order(r.start))
          i = found ? at : at - 1
        }
        const end = r.end === undefined ? undefined : order(r.end)
        for (; i >= 0 && out.length < limit; i--) {
          const e = table[i] as Entry
          if (end && Buffer.compare(e.order, end) <= 0) break
          out.push(e)
        }
      }
      return out
    }
    const writing = (): Array<() => void> => {
      if (!this.undo) throw new Error(`MemoryKv: a put or remove on table ${name} outside write()`)
      return this.undo
    }
    return {
      get: (key) => {
        const { at, found } = find(order(key))
        return found ? (table[at] as Entry).value : undefined
      },
      getRange: (r = {}) => range(r).map((e) => ({ key: e.key as K, value: e.value })),
      getKeys: (r = {}) => range(r).map((e) => e.key as K),
      put: (key, value) => {
        const undo = writing()
        const bytes = order(key)
        const { at, found } = find(bytes)
        if (found) {
          const e = table[at] as Entry
          const before = e.value
          e.value = value
          undo.push(() => void (e.value = before))
        } else {
          const e: Entry = { order: bytes, key, value }
          table.splice(at, 0, e)
          undo.push(() => void table.splice(table.indexOf(e), 1))
        }
      },
      remove: (key) => {
        const undo = writing()
        const { at, found } = find(order(key))
        if (!found) return
        const [e] = table.splice(at, 1) as [Entry]
        undo.push(() => void table.splice(find(e.order).at, 0, e))
      },
    }
  }

  write(fn: () => void): Promise<void> {
    const undo: Array<() => void> = []
    this.undo = undo
    try {
      fn()
    } catch (err) {
      for (const u of undo.reverse()) u()
      return Promise.reject(err)
    } finally {
      this.undo = undefined
    }
    return new Promise((resolve) => {
      const w: PendingWrite = { undo, durable: false, resolve }
      this.pending.push(w)
      this.persist(() => {
        w.durable = true
        // The disk keeps the order writes were issued in: a write is durable once every earlier one is.
        while (this.pending[0]?.durable) (this.pending.shift() as PendingWrite).resolve()
      })
    })
  }

  read<T>(fn: () => T): T {
    return fn()
  }

  /** Writes issued and not yet durable. */
  get unwritten(): number {
    return this.pending.length
  }

  /** Loses every write not yet durable, newest first; their promises never resolve. */
  crash(): void {
    for (const w of this.pending.splice(0).reverse()) for (const u of w.undo.reverse()) u()
  }

  async close(): Promise<void> {}
}
