/**
 * @stead/client: the Stead SDK. This entry is isomorphic (browsers and
 * anything with WebSocket, fetch and IndexedDB); Node resolves the package
 * to index.node.ts, which swaps in `ws` and LMDB.
 */
import { defaultCrypto } from '@stead/core'
import { createClientWith, type SteadClient } from './client.ts'
import { indexedDbStorage } from './storage/indexeddb.ts'
import type { Fetch } from './cluster.ts'
import type { SocketLike } from './transport.ts'
import type { ClientOptions } from './types.ts'

export { SteadClient, Space, type SettledUpdate } from './client.ts'
export type { Transaction } from './transaction.ts'
export { CounterHandle, SetHandle, RegisterHandle, BoundedCounterHandle } from './handles.ts'
export { ClosedError, RejectedError, TrustError } from './errors.ts'
export { parseClusterDescriptor, type ClusterDescriptor } from './cluster.ts'
export type { SocketLike, SocketFactory } from './transport.ts'
export type { ClientOptions, ClientStatus, RelayStatus, SafeResult, SessionsStatus, UpdateOptions, UpdateResult, WaitOptions } from './types.ts'
export { SteadError, isSteadError, type ErrorReason, type RegisterValue, type SetElement } from '@stead/core'
export type { ClientStorage, StorageChange, StorageEntry, StorageKey } from './storage/types.ts'
export { StorageError, isStorageError, type StorageFailure } from './storage/errors.ts'
export { compareStorageKeys, MAX_KEY_BYTES } from './storage/keys.ts'
export { memoryStorage } from './storage/memory.ts'
export { indexedDbStorage } from './storage/indexeddb.ts'

/**
 * Opens a client of one space: restores its state from storage (so values
 * are readable at once, offline too), then connects to the relays in the
 * background. Defaults here: IndexedDB database `stead-<space>`, WebCrypto
 * Ed25519 (or @noble/curves where it is missing), the global WebSocket and fetch.
 */
export function createClient(options: ClientOptions): Promise<SteadClient> {
  const WS = (globalThis as { WebSocket?: new (url: string) => SocketLike }).WebSocket
  const fetchFn = (globalThis as { fetch?: Fetch }).fetch
  return createClientWith(options, {
    storage: () => indexedDbStorage('stead'),
    crypto: defaultCrypto,
    connect: WS ? (url) => new WS(url) : undefined,
    fetch: fetchFn ? (url, init) => fetchFn(url, init) : undefined,
  })
}
