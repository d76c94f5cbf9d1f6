import { checkChanges, checkKey, checkPrefix, compareStorageKeys, keyStartsWith } from './keys.ts'
import { lifecycle } from './lifecycle.ts'
import type { ClientStorage, StorageEntry, StorageKey } from './types.ts'

/**
 * Storage that lives as long as the object: for tests and for apps that do
 * not want to persist. Bytes are copied in and out, so it is as isolated from
 * its callers as a real database, and it validates exactly like the others.
 */
export function memoryStorage(): ClientStorage {
  // JSON of a string array is injective, so it can stand in for the key.
  const entries = new Map<string, { key: readonly string[]; value: Uint8Array }>()
  const life = lifecycle('memory storage')

  return {
    load: (key: StorageKey) =>
      life.run(() => {
        const entry = entries.get(JSON.stringify(checkKey(key)))
        return entry && new Uint8Array(entry.value)
      }),

    loadRange: (prefix: StorageKey) =>
      life.run(() => {
        const p = checkPrefix(prefix)
        const found: StorageEntry[] = []
        for (const entry of entries.values()) {
          if (keyStartsWith(entry.key, p)) found.push({ key: [...entry.key], value: new Uint8Array(entry.value) })
        }
        return found.sort((a, b) => compareStorageKeys(a.key, b.key))
      }),

    write: (changes) =>
      life.run(() => {
        // checkChanges validates everything and copies the values before the first change lands
        for (const { key, value } of checkChanges(changes)) {
          const id = JSON.stringify(key)
          if (value === undefined) entries.delete(id)
          else entries.set(id, { key, value })
        }
      }),

    removeRange: (prefix: StorageKey) =>
      life.run(() => {
        const p = checkPrefix(prefix)
        for (const [id, entry] of entries) if (keyStartsWith(entry.key, p)) entries.delete(id)
      }),

    close: () => life.close(() => entries.clear()),
  }
}
