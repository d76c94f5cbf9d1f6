/**
 * @stead/relay's programmatic entry: start a relay inside your own process
 * ({@link runRelay}, which wires a {@link RelayNode} to the client API of
 * {@link createApi}) instead of with the `stead-relay` CLI, and read, check
 * and write cluster files and relay keys. Most operators use the CLI; see
 * the package README for running a cluster, its HTTP API and its security
 * model.
 *
 * @module @stead/relay
 */
export { runRelay, type RunRelayOptions, type RunningRelay } from './process/relay.ts'
export { RelayNode, DEFAULT_RETENTION, type RelayNodeOptions, type Retention } from './runtime/node.ts'
export { adoptEpochChain, storedEpoch, type StoredEpoch } from './runtime/epochs.ts'
export { COMMITTEE_SPACE, backingKey, encodeCommitteeRequest, proposalId, type CommitteeRequest } from './runtime/committee-proposals.ts'
export { loadCluster, parseCluster, clusterInEpoch, committeeOf, relayCommitteeOf, clusterToJson, generateIdentity, loadIdentity, writeIdentity, ConfigError, type ClusterConfig, type SpacePolicy } from './process/config.ts'
export { buildApi, createApi } from './api/server.ts'
export { systemClock, type HostClock, type HostTimer } from '@stead/core'
export { LmdbKv, MemoryKv, type Kv, type KvKey, type KvTable, type KeyRange } from './store/kv.ts'
export { FileJournal, MemoryJournal, type Journal } from './store/journal.ts'
export { STORE_TABLES, storeRecords, storedChain, type StoreBacking } from './store/store.ts'
export { DEFAULT_LIMITS as DEFAULT_API_LIMITS, type ApiLimits } from './api/server.ts'
export { ClientSessions, type SessionSocket } from './api/sessions.ts'
export { CLIENT_LIES, ClientFacingLiar, type ClientLie } from './faults/client-lies.ts'
