/**
 * @stead/client: the Stead SDK. Local-first objects (counters, sets,
 * registers, bounded counters) whose updates show at once (the prospective
 * value) and settle into a stable value that a Byzantine-fault-tolerant
 * relay cluster orders and audits, without ever breaking a declared
 * invariant. Start with {@link createClient}, then
 * {@link SteadClient.space}; the package README walks through the whole API.
 *
 * This entry is isomorphic (browsers and anything with WebSocket, fetch and
 * IndexedDB). Node resolves the package to index.node.ts, documented as
 * {@link "@stead/client/node" | @stead/client/node}: the same API plus
 * {@link "@stead/client/node"!lmdbStorage | lmdbStorage}, with Node
 * defaults for `createClient` (`ws` and LMDB).
 *
 * @module @stead/client
 */
import { defaultCrypto } from '@stead/core'
import { createClientWith, type SteadClient } from './client.ts'
import { indexedDbStorage } from './storage/indexeddb.ts'
import type { Fetch } from './transport/cluster.ts'
import type { SocketLike } from './transport/transport.ts'
import type { ClientOptions } from './types.ts'
import type { ChannelLike, LockManagerLike } from './upstream/tabs.ts'

export { SteadClient, Space, type SettledUpdate } from './client.ts'
export type { BoundedCounterOptions, FreshnessOptions, PendingUpdate } from './space/space.ts'
export type { CausalComparison, ClockProof, ProofKind } from './upstream/proofs.ts'
export type { Transaction } from './space/transaction.ts'
export type { Presence, PresenceChange, PresencePeer } from './space/presence.ts'
export { CounterHandle, SetHandle, RegisterHandle } from './handles/handles.ts'
export type { UndecidedUpdate } from './handles/handles.ts'
export { BoundedCounterHandle, type RightsHolder, type SpendOptions, type TransferOptions } from './handles/bounded-counter-handle.ts'
export { TextHandle } from './handles/text-handle.ts'
export { MapHandle, type FieldKind } from './handles/map-handle.ts'
export { ListHandle } from './handles/list-handle.ts'
export { MembersHandle, type Everyone, type InviteOptions, type OpenInvitation, type PolicyValue, type Retention, type Role, type SpacePolicyInit } from './handles/members-handle.ts'
export { invitationSpace } from './handles/invitation-token.ts'
export type { AnchorOptions } from './handles/anchors.ts'
export type { FieldChange, ListChange, ListDelta, MapChange, TextChange, TextDelta } from './handles/changes.ts'
export { UndoManager, StackItem, type StackClearedEvent, type StackItemEvent, type StackItemPoppedEvent, type UndoManagerEvents, type UndoManagerOptions, type UndoOutcome, type UndoScope } from './undo/undo-manager.ts'
export { ClosedError, RejectedError, TrustError } from './errors.ts'
export { parseClusterDescriptor, type ClusterDescriptor } from './transport/cluster.ts'
export type { SocketLike, SocketFactory } from './transport/transport.ts'
export type { PeerEvents, PeerLink, PeerNetwork, PeerStats } from './peers/peers.ts'
export type { ClientOptions, ClientStatus, ObjectOptions, RelayStatus, SafeResult, SessionsStatus, UpdateOptions, UpdateResult, WaitOptions } from './types.ts'
export { POOL, SteadError, isSteadError, type Assoc, type ErrorReason, type MarkExpand, type MarkSpec, type MarkValue, type RegisterValue, type SetElement, type TextSpan } from '@stead/core'
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
 * WebSocket and fetch. In Node the package's Node entry supplies LMDB under
 * `./.stead/<database>` (default `./.stead/client`), node:crypto and Node's
 * WebSocket (or `ws`).
 *
 * Make one client per user and device and keep it: it holds the identity
 * (an Ed25519 key made once and kept in storage, unless `options.identity`
 * gives one), the pinned cluster and one session per relay, which all its
 * spaces share. It resolves before any relay answers: the app works offline
 * at once, and `status` says when it is online.
 *
 * @param options `relays` is required; see {@link ClientOptions} for the rest.
 * @returns The client, once its storage is open (or, in a tab that follows another, once the leading tab answered).
 * @throws SteadError `malformed` for any option given wrong (no relays, a relay URL without a ws(s):// or http(s):// scheme or listed twice, a bad `cluster`, a number out of range, an unknown option, ...): the message names the option, what is wrong and the fix; {@link StorageError} if the storage cannot be opened; SteadError `conflict` if `options.identity` differs from the identity the tabs sharing this storage use.
 * @example
 * ```ts
 * import { createClient } from '@stead/client'
 *
 * const client = await createClient({
 *   relays: ['wss://r1.example.com', 'wss://r2.example.com', 'wss://r3.example.com', 'wss://r4.example.com'],
 * })
 * const bank = await client.space('bank')
 * const alice = bank.counter('acct:alice', { min: 0 })
 * await alice.increment(100)
 * client.onStatus((s) => console.log(s.online ? 'online' : s.problem))
 * ```
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
