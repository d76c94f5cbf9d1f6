/**
 * A storage key: a path of string components, e.g. `['envelope', space, idHex]`.
 * Keys are ordered by {@link compareStorageKeys} in every adapter.
 */
export type StorageKey = readonly string[]

/** One change of an atomic `write`: `value: undefined` deletes the key. */
export interface StorageChange {
  /** The key to write or delete. */
  readonly key: StorageKey
  /** The new bytes, or undefined to delete the key. */
  readonly value: Uint8Array | undefined
}

/** One stored key and its bytes, as `loadRange` returns them. */
export interface StorageEntry {
  /** The key. */
  readonly key: StorageKey
  /** Its bytes (a copy: the caller's to keep). */
  readonly value: Uint8Array
}

/**
 * Where a client keeps everything it needs to resume. Deliberately small (in
 * the spirit of automerge-repo's StorageAdapter): bytes in, bytes out, ranges
 * by key prefix, and atomic batches. The client encodes its own values.
 *
 * Every adapter behaves the same:
 * - keys are non-empty arrays of strings whose encoding fits `MAX_KEY_BYTES`;
 *   prefixes may be empty (meaning every key);
 * - a key "starts with" a prefix when its first components equal the
 *   prefix's components, so `['a']` matches `['a']` and `['a', 'x']`, never `['ab']`;
 * - returned bytes are the caller's to keep: mutating them, or the bytes
 *   passed to `write`, never changes what is stored;
 * - bad input is a `SteadError` (`malformed`, `too-large`) and platform
 *   failures are a `StorageError`; nothing is ever half-written.
 */
export interface ClientStorage {
  /** The bytes stored under `key` (a copy), or undefined. */
  load(key: StorageKey): Promise<Uint8Array | undefined>
  /** Every entry whose key starts with `prefix`, in key order. */
  loadRange(prefix: StorageKey): Promise<StorageEntry[]>
  /** Atomic: either every change in the batch is durable when the promise resolves, or none is. Later changes to the same key win. */
  write(changes: ReadonlyArray<StorageChange>): Promise<void>
  /** Deletes every entry whose key starts with `prefix`, atomically. */
  removeRange(prefix: StorageKey): Promise<void>
  /** Waits for operations already started, then releases the store. Idempotent; later calls of the other methods fail with `StorageError` `closed`. */
  close(): Promise<void>
}
