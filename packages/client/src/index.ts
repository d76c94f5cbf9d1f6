/**
 * @stead/client: the Stead SDK for browsers and Node. Isomorphic: nothing
 * here may import a Node built-in; Node-only pieces live in
 * `@stead/client/node`.
 */
export type { ClientStorage, StorageChange, StorageEntry, StorageKey } from './storage/types.ts'
export { StorageError, isStorageError, type StorageFailure } from './storage/errors.ts'
export { compareStorageKeys, MAX_KEY_BYTES } from './storage/keys.ts'
export { memoryStorage } from './storage/memory.ts'
export { indexedDbStorage } from './storage/indexeddb.ts'
