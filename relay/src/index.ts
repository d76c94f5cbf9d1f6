export { runRelay, type RunRelayOptions, type RunningRelay } from './relay.ts'
export { RelayNode, type RelayNodeOptions } from './node.ts'
export { loadCluster, parseCluster, clusterToJson, generateIdentity, loadIdentity, writeIdentity, ConfigError, type ClusterConfig } from './config.ts'
export { createApi } from './api.ts'
