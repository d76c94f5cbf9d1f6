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

/**
 * Records in the store were written, and size-checked, by this relay: they
 * are read back with a limit above anything a write can produce (a chunk,
 * or a maximal block), never with the wire limits.
 */
export const RECORD_LIMIT = 64 * 1024 * 1024

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
    this.root = open<Uint8Array, Key>({ path, encoding: 'binary', maxDbs: 32, overlappingSync: false })
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
  readonly value: Uint8Array
}

/** A key's bytes in LMDB's order. */
const order = (key: KvKey): Buffer => toBufferKey(key as OrderedKey)

/** One put (with its value) or remove (without) of a write. */
interface Op {
  readonly table: string
  readonly order: Buffer
  readonly key: KvKey
  readonly value?: Uint8Array
}

/** One write not yet durable: what it does, and who waits for it. */
interface PendingWrite {
  readonly ops: readonly Op[]
  durable: boolean
  readonly resolve: () => void
}

/** Where `order` is in sorted `entries`, or where it would go. */
function find(entries: readonly Entry[], key: Buffer): { at: number; found: boolean } {
  let lo = 0
  let hi = entries.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (Buffer.compare((entries[mid] as Entry).order, key) < 0) lo = mid + 1
    else hi = mid
  }
  return { at: lo, found: lo < entries.length && Buffer.compare((entries[lo] as Entry).order, key) === 0 }
}

function apply(entries: Entry[], op: Op): void {
  const { at, found } = find(entries, op.order)
  if (op.value === undefined) {
    if (found) entries.splice(at, 1)
  } else if (found) entries[at] = { order: op.order, key: op.key, value: op.value }
  else entries.splice(at, 0, { order: op.order, key: op.key, value: op.value })
}

function range(entries: readonly Entry[], r: KeyRange<KvKey>): Entry[] {
  const out: Entry[] = []
  const limit = r.limit ?? Infinity
  const end = r.end === undefined ? undefined : order(r.end)
  if (!r.reverse) {
    for (let i = r.start === undefined ? 0 : find(entries, order(r.start)).at; i < entries.length && out.length < limit; i++) {
      const e = entries[i] as Entry
      if (end && Buffer.compare(e.order, end) >= 0) break
      out.push(e)
    }
    return out
  }
  let i = entries.length - 1
  if (r.start !== undefined) {
    const { at, found } = find(entries, order(r.start))
    i = found ? at : at - 1
  }
  for (; i >= 0 && out.length < limit; i--) {
    const e = entries[i] as Entry
    if (end && Buffer.compare(e.order, end) <= 0) break
    out.push(e)
  }
  return out
}

/**
 * A Kv in memory with a disk the owner drives. Each write resolves when
 * `persist` says it reached the disk, in the order issued; `crash()` loses
 * every write not yet durable, as a process killed mid-write does. As in
 * LMDB, a write sees every write issued before it, and a read outside a
 * write sees only what is durable. Without `persist`, writes are durable at
 * once.
 */
export class MemoryKv implements Kv {
  /** Every write issued, durable or not: what a write sees. */
  private live = new Map<string, Entry[]>()
  /** What the disk holds: what a read outside a write sees. */
  private readonly durable = new Map<string, Entry[]>()
  private readonly pending: PendingWrite[] = []
  /** The ops of the write running now (undefined outside `write`). */
  private ops: Op[] | undefined
  private readonly persist: (done: () => void) => void

  /** `persist(done)` is called once per write; calling `done` puts that write on the disk. */
  constructor(persist: (done: () => void) => void = (done) => done()) {
    this.persist = persist
  }

  private entries(view: Map<string, Entry[]>, name: string): Entry[] {
    let entries = view.get(name)
    if (!entries) view.set(name, (entries = []))
    return entries
  }

  table<K extends KvKey>(name: string): KvTable<K> {
    const view = (): Entry[] => this.entries(this.ops ? this.live : this.durable, name)
    const change = (key: K, value?: Uint8Array): void => {
      if (!this.ops) throw new Error(`MemoryKv: a put or remove on table ${name} outside write()`)
      const op: Op = value === undefined ? { table: name, order: order(key), key } : { table: name, order: order(key), key, value }
      this.ops.push(op)
      apply(this.entries(this.live, name), op)
    }
    return {
      get: (key) => {
        const entries = view()
        const { at, found } = find(entries, order(key))
        return found ? (entries[at] as Entry).value : undefined
      },
      getRange: (r = {}) => range(view(), r).map((e) => ({ key: e.key as K, value: e.value })),
      getKeys: (r = {}) => range(view(), r).map((e) => e.key as K),
      put: (key, value) => change(key, value),
      remove: (key) => change(key),
    }
  }

  write(fn: () => void): Promise<void> {
    const ops: Op[] = []
    this.ops = ops
    try {
      fn()
    } catch (err) {
      // Aborted: nothing of it stays.
      this.rebuildLive()
      return Promise.reject(err)
    } finally {
      this.ops = undefined
    }
    return new Promise((resolve) => {
      const w: PendingWrite = { ops, durable: false, resolve }
      this.pending.push(w)
      this.persist(() => {
        w.durable = true
        this.settle()
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

  /** Loses every write not yet durable; their promises never resolve. */
  crash(): void {
    this.pending.splice(0)
    this.rebuildLive()
  }

  /** The disk catches up: every write issued is durable now. */
  flush(): void {
    for (const w of this.pending) w.durable = true
    this.settle()
  }

  /** The disk keeps the order writes were issued in: a write is durable once it and every earlier one are. */
  private settle(): void {
    while (this.pending[0]?.durable) {
      const done = this.pending.shift() as PendingWrite
      for (const op of done.ops) apply(this.entries(this.durable, op.table), op)
      done.resolve()
    }
  }

  /** What writes see: the disk, then every write still pending on it. */
  private rebuildLive(): void {
    this.live = new Map([...this.durable].map(([name, entries]) => [name, [...entries]]))
    for (const w of this.pending) for (const op of w.ops) apply(this.entries(this.live, op.table), op)
  }

  async close(): Promise<void> {}
}
