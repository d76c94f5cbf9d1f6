import { openDB, type IDBPDatabase, type IDBPObjectStore, type IDBPTransaction } from 'idb'
import { SteadError } from '@stead/core'
import { StorageError, type StorageFailure } from './errors.ts'
import { checkChanges, checkKey, checkPrefix } from './keys.ts'
import { lifecycle } from './lifecycle.ts'
import type { ClientStorage, StorageEntry, StorageKey } from './types.ts'

const STORE = 'kv'
const SCHEMA_VERSION = 1

/**
 * Browser storage: one object store in the IndexedDB database `name`, keyed
 * by the storage keys themselves (IndexedDB array keys), whose native order
 * is `compareStorageKeys`, so prefix ranges are plain key ranges.
 */
export function indexedDbStorage(name = 'stead'): Promise<ClientStorage> {
  return openIndexedDbStorage(name, SCHEMA_VERSION)
}

/**
 * `indexedDbStorage` at an explicit schema version. Exported for tests: only
 * an upgrade can be blocked, and version 1 never upgrades an open database.
 */
export async function openIndexedDbStorage(name: string, version: number): Promise<ClientStorage> {
  const factory = (globalThis as { indexedDB?: IDBFactory }).indexedDB
  if (!factory) throw new StorageError('unavailable', 'IndexedDB is not available in this environment')
  const release = await holdExclusively(name)
  try {
    return await openHeld(name, version, release)
  } catch (err) {
    release()
    throw err
  }
}

/**
 * One tab at a time per database: two clients writing one storage would
 * reuse sequence numbers and overwrite each other's records, losing updates.
 * Tabs share the default storage through a leader tab (tabs.ts), and only
 * the leader opens it; a second tab opening it directly is refused with a
 * clear error (after waiting a moment, so a reload's new page, or the next
 * leader, gets the lock the old one is releasing). Where Web Locks are
 * missing (Node, old browsers), nothing is checked.
 */
async function holdExclusively(name: string, waitMs = 3000): Promise<() => void> {
  type Locks = { request(name: string, options: { signal: AbortSignal }, callback: () => Promise<void>): Promise<void> }
  const locks = (globalThis as { navigator?: { locks?: Locks } }).navigator?.locks
  if (!locks) return () => undefined
  let release: () => void = () => undefined
  const held = new Promise<void>((done) => (release = done))
  await new Promise<void>((acquired, refused) => {
    locks
      .request(`stead-storage:${name}`, { signal: AbortSignal.timeout(waitMs) }, () => {
        acquired()
        return held
      })
      .catch(() =>
        refused(
          new StorageError(
            'blocked',
            `IndexedDB "${name}" is in use by another tab or window of this app; a storage passed to createClient is not shared between tabs: use createClient({ database: "${name}" }) instead, and tabs share one client`,
          ),
        ),
      )
  })
  return release
}

async function openHeld(name: string, version: number, release: () => void): Promise<ClientStorage> {

  // Set when the connection goes away without our close(); every later call reports it.
  let lost: StorageError | undefined
  const db = await new Promise<IDBPDatabase>((resolve, reject) => {
    let gaveUp = false
    let opening: Promise<IDBPDatabase>
    try {
      opening = openDB(name, version, {
        upgrade(upgrading) {
          if (!upgrading.objectStoreNames.contains(STORE)) upgrading.createObjectStore(STORE)
        },
        blocked(current) {
          // The request stays queued until the other connections close; a
          // client must not hang on that, so fail now and drop the
          // connection if it opens later.
          gaveUp = true
          reject(
            new StorageError(
              'blocked',
              `IndexedDB "${name}" is held open at version ${current} by another connection (another tab?); close it and retry`,
            ),
          )
        },
        blocking(_current, _wanted, event) {
          // Another tab wants to upgrade or delete the database. Holding on
          // would block it forever, so let go and fail our later calls.
          lost = new StorageError('closed', `IndexedDB "${name}" was closed because another connection upgrades or deletes it`)
          const connection = event.target as IDBDatabase
          connection.close()
        },
        terminated() {
          lost = new StorageError('closed', `the browser closed IndexedDB "${name}" unexpectedly`)
        },
      })
    } catch (cause) {
      reject(openError(name, cause))
      return
    }
    opening.then(
      (opened) => {
        if (gaveUp) opened.close()
        else resolve(opened)
      },
      (cause: unknown) => reject(openError(name, cause)),
    )
  })

  if (!db.objectStoreNames.contains(STORE)) {
    db.close()
    throw new StorageError('unavailable', `IndexedDB "${name}" exists but was not created by Stead (no "${STORE}" store)`)
  }
  const life = lifecycle(`IndexedDB storage "${name}"`)

  function fail(cause: unknown): SteadError {
    if (cause instanceof SteadError) return cause
    if (lost) return lost
    const errName = (cause as { name?: unknown } | null)?.name
    if (errName === 'DataError') return new SteadError('malformed', `IndexedDB rejected a key or value: ${messageOf(cause)}`, { cause })
    const failure: StorageFailure =
      errName === 'QuotaExceededError'
        ? 'quota'
        : errName === 'InvalidStateError' || errName === 'TransactionInactiveError'
          ? 'closed'
          : 'io'
    return new StorageError(failure, `IndexedDB "${name}": ${messageOf(cause)}`, { cause })
  }

  // Runs one transaction. On any failure it is aborted, so nothing of it
  // lands, and every request is awaited, so no rejection goes unhandled.
  // `body` is iterated lazily because a request can throw synchronously
  // (DataCloneError, a closing connection) after others were issued.
  async function inTransaction<Mode extends 'readonly' | 'readwrite'>(
    mode: Mode,
    body: (store: IDBPObjectStore<unknown, [typeof STORE], typeof STORE, Mode>) => Iterable<Promise<unknown>>,
  ): Promise<unknown[]> {
    if (lost) throw lost
    let tx: IDBPTransaction<unknown, [typeof STORE], Mode>
    try {
      // 'strict' makes Chromium flush before `complete` (its default is
      // 'relaxed'), which is what "durable when the promise resolves" means.
      tx = db.transaction(STORE, mode, { durability: mode === 'readwrite' ? 'strict' : 'default' })
    } catch (cause) {
      throw fail(cause)
    }
    const pending: Array<Promise<unknown>> = [tx.done]
    try {
      // one by one, so that requests issued before a synchronous throw are still awaited below
      for (const request of body(tx.store)) pending.push(request)
    } catch (cause) {
      try {
        tx.abort()
      } catch {
        // the browser aborted it already (a closing connection): nothing of it lands either way
      }
      await Promise.allSettled(pending)
      throw fail(cause)
    }
    const results = await Promise.allSettled(pending)
    const rejected = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
    // the transaction's own error (a quota hit at commit, the failed request) says more than a generic AbortError
    if (rejected) throw fail(tx.error ?? rejected.reason)
    return results.slice(1).map((r) => (r as PromiseFulfilledResult<unknown>).value)
  }

  return {
    load: (key: StorageKey) =>
      life.run(async () => {
        const k = checkKey(key)
        const [value] = await inTransaction('readonly', (store) => [store.get(k)])
        return value === undefined ? undefined : asBytes(value, name)
      }),

    loadRange: (prefix: StorageKey) =>
      life.run(async () => {
        const range = prefixRange(checkPrefix(prefix))
        // One readonly transaction, so keys and values come from the same snapshot, in the same order.
        const [keys, values] = (await inTransaction('readonly', (store) => [store.getAllKeys(range), store.getAll(range)])) as [
          IDBValidKey[],
          unknown[],
        ]
        return keys.map((key, i): StorageEntry => ({ key: asKey(key, name), value: asBytes(values[i], name) }))
      }),

    write: (changes) =>
      life.run(async () => {
        const checked = checkChanges(changes)
        if (checked.length === 0) return
        await inTransaction('readwrite', function* (store) {
          for (const { key, value } of checked) yield value === undefined ? store.delete(key) : store.put(value, key)
        })
      }),

    removeRange: (prefix: StorageKey) =>
      life.run(async () => {
        const range = prefixRange(checkPrefix(prefix))
        await inTransaction('readwrite', (store) => [store.delete(range)])
      }),

    close: () =>
      life.close(() => {
        db.close()
        release()
      }),
  }
}

/**
 * Keys starting with `prefix`: from the prefix itself up to, excluding,
 * `[...prefix, []]`. IndexedDB sorts an array component above every string,
 * and our keys hold only strings, so that bound is above every extension.
 */
function prefixRange(prefix: string[]): IDBKeyRange {
  return IDBKeyRange.bound(prefix, [...prefix, []], false, true)
}

function asBytes(value: unknown, name: string): Uint8Array {
  if (value instanceof Uint8Array) return value
  throw new SteadError('malformed', `IndexedDB "${name}" holds a value that is not bytes`)
}

function asKey(key: IDBValidKey, name: string): string[] {
  if (Array.isArray(key) && key.every((part) => typeof part === 'string')) return key as string[]
  throw new SteadError('malformed', `IndexedDB "${name}" holds a key that is not an array of strings`)
}

function openError(name: string, cause: unknown): SteadError {
  if (cause instanceof SteadError) return cause
  const errName = (cause as { name?: unknown } | null)?.name
  if (errName === 'QuotaExceededError') return new StorageError('quota', `cannot open IndexedDB "${name}": ${messageOf(cause)}`, { cause })
  const why = errName === 'VersionError' ? ' (it was written by a newer version of Stead)' : ''
  // SecurityError, InvalidStateError, UnknownError: storage disabled or broken (private modes, opaque origins)
  return new StorageError('unavailable', `cannot open IndexedDB "${name}"${why}: ${messageOf(cause)}`, { cause })
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
