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
import type { ChannelLike, LockManagerLike } from './tabs.ts'

export { SteadClient, Space, type SettledUpdate } from './client.ts'
export type { PendingUpdate } from './space.ts'
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
 * Opens a client: restores its identity from storage, then connects to the
 * relays in the background; `client.space(name)` opens spaces. Defaults
 * here: IndexedDB database `stead` (`options.database`) shared by the tabs
 * of this origin through a leader tab (Web Locks and BroadcastChannel),
 * WebCrypto Ed25519 (or @noble/curves where it is missing), the global
 * WebSocket and fetch.
 */
export function createClient(options: ClientOptions): Promise<SteadClient> {
  const g = globalThis as {
    WebSocket?: new (url: string) => SocketLike
    fetch?: Fetch
    navigator?: { locks?: LockManagerLike }
    BroadcastChannel?: new (name: string) => ChannelLike
  }
  const WS = g.WebSocket
  const fetchFn = g.fetch
  const name = options?.database ?? 'stead'
  const locks = g.navigator?.locks
  const Channel = g.BroadcastChannel
  return createClientWith(options, {
    storage: () => indexedDbStorage(name),
    crypto: defaultCrypto,
    connect: WS ? (url) => new WS(url) : undefined,
    fetch: fetchFn ? (url, init) => fetchFn(url, init) : undefined,
    ...(locks && Channel ? { tabs: { name, locks, channel: (n: string) => new Channel(n), storage: () => indexedDbStorage(name) } } : {}),
  })
}
