import type * as Lmdb from 'lmdb'
import { SteadError } from '@stead/core'
import { StorageError } from './errors.ts'
import { checkChanges, checkKey, checkPrefix, decodeKey, encodeKey, prefixByteRange } from './keys.ts'
import { lifecycle } from './lifecycle.ts'
import type { ClientStorage, StorageEntry, StorageKey } from './types.ts'

// `lmdb` is an optional peer dependency (browser apps never install a native
// module). It is loaded with this module, so that `lmdbStorage` stays a plain
// function; a Node app that brings its own storage need not install it.
const lmdb: typeof Lmdb | Error = await import('lmdb').catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))))

/**
 * Node storage in an LMDB environment at `path` (a directory, created if
 * missing). Node-only: reachable from the package's Node entry, never from the
 * browser one. Needs the `lmdb` package (an optional peer dependency, so that
 * browser apps never install a native module): `npm install lmdb`; without it
 * this throws a `StorageError` 'unavailable' saying so.
 *
 * Keys are stored as `encodeKey` bytes rather than lmdb's own array keys:
 * those order strings by UTF-8, not by UTF-16 units like IndexedDB, and they
 * return a one-component key as a bare string.
 */
export function lmdbStorage(path: string): ClientStorage {
  const lmdb = loadLmdb()
  let db: Lmdb.RootDatabase<Uint8Array, Uint8Array>
  try {
    // 'binary' on both sides: values are bytes the client encoded itself, so
    // lmdb's bundled msgpackr must not touch them.
    // overlappingSync off, as in the relay's store: in lmdb 3.5.6 it let commits that free
    // large values fail with MDB_BAD_TXN (see relay/src/store/store.ts).
    db = lmdb.open<Uint8Array, Uint8Array>({ path, encoding: 'binary', keyEncoding: 'binary', overlappingSync: false })
  } catch (cause) {
    throw new StorageError('unavailable', `cannot open LMDB at ${path}: ${messageOf(cause)}`, { cause })
  }
  const life = lifecycle(`LMDB storage at ${path}`)

  // `transaction` runs its callback inside a batch shared with other queued
  // writes and keeps whatever the callback wrote before it threw; a child
  // transaction is rolled back on its own. The commit promise resolves before
  // the fsync when overlappingSync is on (lmdb's default off Windows), so
  // durability needs `flushed` as well.
  async function commit(body: () => void): Promise<void> {
    try {
      await db.childTransaction(body)
      await db.flushed
    } catch (cause) {
      throw wrap(cause, 'write')
    }
  }

  function wrap(cause: unknown, op: string): SteadError {
    if (cause instanceof SteadError) return cause
    const text = messageOf(cause)
    const failure = /ENOSPC|MDB_MAP_FULL|No space left/i.test(text) ? 'quota' : 'io'
    return new StorageError(failure, `LMDB ${op} failed at ${path}: ${text}`, { cause })
  }

  function read<T>(op: string, body: () => T): T {
    try {
      return body()
    } catch (cause) {
      throw wrap(cause, op)
    }
  }

  return {
    load: (key: StorageKey) =>
      life.run(() => {
        const bytes = encodeKey(checkKey(key))
        const value = read('load', () => db.get(bytes))
        // lmdb hands out Buffers; callers get a plain Uint8Array of their own
        return value === undefined ? undefined : new Uint8Array(value)
      }),

    loadRange: (prefix: StorageKey) =>
      life.run(() => {
        const range = prefixByteRange(checkPrefix(prefix))
        return read('loadRange', () => {
          const found: StorageEntry[] = []
          for (const { key, value } of db.getRange(range ?? {})) {
            found.push({ key: decodeKey(key), value: new Uint8Array(value) })
          }
          return found
        })
      }),

    write: (changes) =>
      life.run(async () => {
        const checked = checkChanges(changes).map(({ key, value }) => ({ key: encodeKey(key), value }))
        if (checked.length === 0) return
        await commit(() => {
          for (const { key, value } of checked) {
            if (value === undefined) db.removeSync(key)
            else db.putSync(key, value)
          }
        })
      }),

    removeRange: (prefix: StorageKey) =>
      life.run(async () => {
        const range = prefixByteRange(checkPrefix(prefix))
        await commit(() => {
          // collect first: deleting under an open cursor is not safe
          const keys = [...db.getKeys(range ?? {})]
          for (const key of keys) db.removeSync(key)
        })
      }),

    close: () =>
      life.close(async () => {
        try {
          await db.close()
        } catch (cause) {
          throw wrap(cause, 'close')
        }
      }),
  }
}

function loadLmdb(): typeof Lmdb {
  if (!(lmdb instanceof Error)) return lmdb
  const cause = lmdb
  if ((cause as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw new StorageError('unavailable', `the lmdb package failed to load: ${messageOf(cause)}`, { cause })
  throw new StorageError('unavailable', 'Node storage needs the lmdb package, an optional peer dependency of @stead/client: npm install lmdb (or pass your own `storage`)', { cause })
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
