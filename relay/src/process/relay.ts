import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { createApi, type ApiLimits } from '../api/server.ts'
import { startClientPeers, type ClientPeers } from '../api/client-peers.ts'
import { ClientFacingLiar, type ClientLie } from '../faults/client-lies.ts'
import { type ClusterConfig, ConfigError, committeeOf } from './config.ts'
import { byzantineMesh, type ByzantineStrategy } from '../consensus/index.ts'
import { openDataDir, policyFingerprint } from './datadir.ts'
import { relayLogger } from './logging.ts'
import type { MeshLimits } from '../mesh/budget.ts'
import { createLibp2pMesh } from '../mesh/libp2p.ts'
import { RelayNode, relayCrypto, type RelayNodeOptions, type Retention } from '../runtime/node.ts'
import { apiHostPort, explainListenFailure, isListenFailure, meshHostPort, type Listener } from './ports.ts'

export interface RunRelayOptions {
  readonly cluster: ClusterConfig
  /** The relay's id in the cluster file, e.g. "r1". */
  readonly id: string
  readonly secretKey: Uint8Array
  readonly dataDir: string
  readonly byzantine?: ByzantineStrategy
  /** Lies to tell clients (see faults/client-lies.ts); with `byzantine`, a relay may lie both ways. */
  readonly clientLies?: readonly ClientLie[]
  readonly tls?: { readonly key: Buffer; readonly cert: Buffer }
  /** Default: JSON lines on stdout at info, each with `relay: <id>`. */
  readonly logger?: Logger
  /** Consensus timings (defaults: leader timeout 250 ms, sync interval 500 ms, pace 50 ms; see RelayNodeOptions). */
  readonly consensus?: { readonly leaderTimeoutMs?: number; readonly syncIntervalMs?: number; readonly paceMs?: number }
  /** Client API limits (see DEFAULT_LIMITS in api/server.ts and the README's security model). */
  readonly limits?: Partial<ApiLimits>
  /** Bytes this relay may hold for clients (queued envelopes, send buffers, verification cache); default 512 MiB. */
  readonly memoryBudgetBytes?: number
  /** The per-peer mesh budget's numbers (see RelayNodeOptions.meshLimits). */
  readonly meshLimits?: Partial<MeshLimits>
  /** Committed batches between snapshots of the spaces' audit state (default 1,000; see RelayNodeOptions). */
  readonly snapshotEveryBatches?: number
  /** History kept past the latest snapshot (see RelayNodeOptions.retention). */
  readonly retention?: Retention
  /**
   * Frames the mesh holds for a peer it cannot reach, sent once it is back
   * (oldest dropped past it; default 100,000, and 64 MiB whatever the
   * count). A peer that missed more catches up by asking for blocks, or
   * from a checkpoint once the others pruned them.
   */
  readonly peerQueueFrames?: number
  /** Chrono's application validator per space (see RelayNodeOptions.clockValidator). */
  readonly clockValidator?: RelayNodeOptions['clockValidator']
}

export interface RunningRelay {
  readonly node: RelayNode
  readonly api: FastifyInstance
  readonly url: string
  /** Closes the client API, the mesh and the store, and unlocks the data dir; says what it closed. */
  stop(): Promise<{ readonly closed: readonly string[] }>
}

/**
 * Starts one relay: store, mesh, consensus and the client API. A problem an
 * operator must fix (cluster file, data dir, a port in use) is a ConfigError
 * whose message says what to do.
 */
export async function runRelay(o: RunRelayOptions): Promise<RunningRelay> {
  const me = o.cluster.relays.findIndex((r) => r.id === o.id)
  if (me < 0) throw new ConfigError(`relay id ${o.id} is not in the cluster file (ids: ${o.cluster.relays.map((r) => r.id).join(', ')})`)
  const entry = o.cluster.relays[me] as (typeof o.cluster.relays)[number]
  const logger = o.logger ?? relayLogger(o.id)
  // Locked, 0700, and checked against this cluster before the store opens.
  const dataDir = openDataDir(o.dataDir, committeeOf(o.cluster), policyFingerprint(o.cluster))
  const libp2pMesh = createLibp2pMesh({
    me,
    secretKey: o.secretKey,
    peers: o.cluster.relays.map((r, index) => ({ index, publicKey: r.publicKey, multiaddr: r.mesh, name: r.id })),
    listen: entry.mesh,
    logger: logger.child({ component: 'mesh' }),
    ...(o.peerQueueFrames ? { maxQueueFrames: o.peerQueueFrames } : {}),
  })
  // A Byzantine relay is an honest relay behind a mesh that rewrites what it sends.
  const mesh = o.byzantine ? byzantineMesh(libp2pMesh, o.byzantine, { me, committee: committeeOf(o.cluster), secretKey: o.secretKey, crypto: relayCrypto }) : libp2pMesh
  const node = new RelayNode({
    cluster: o.cluster,
    me,
    secretKey: o.secretKey,
    dataDir: o.dataDir,
    mesh,
    logger,
    ...o.consensus,
    ...(o.byzantine ? { byzantine: o.byzantine } : {}),
    ...(o.memoryBudgetBytes ? { memoryBudgetBytes: o.memoryBudgetBytes } : {}),
    ...(o.meshLimits ? { meshLimits: o.meshLimits } : {}),
    ...(o.snapshotEveryBatches ? { snapshotEveryBatches: o.snapshotEveryBatches } : {}),
    ...(o.retention ? { retention: o.retention } : {}),
    ...(o.clockValidator ? { clockValidator: o.clockValidator } : {}),
  })
  const { host, port } = apiHostPort(entry.api)
  const listeners: { mesh?: Listener; peers?: Listener; api: Listener } = {
    api: { what: `the HTTP API of ${o.id}`, host, port, setting: `${o.id}'s "api" in the cluster file (on every relay)` },
  }
  const meshAt = meshHostPort(entry.mesh)
  if (meshAt) listeners.mesh = { what: `the mesh of ${o.id}`, ...meshAt, setting: `${o.id}'s "mesh" in the cluster file (on every relay)` }
  const peersAt = entry.peers ? meshHostPort(entry.peers.replace(/\/ws$/, '')) : undefined
  if (peersAt) listeners.peers = { what: `the peer port of ${o.id}`, ...peersAt, setting: `${o.id}'s "peers" in the cluster file` }
  let api: FastifyInstance
  let peers: ClientPeers | undefined
  let binding: Listener | undefined = listeners.mesh
  try {
    await node.start()
    binding = listeners.peers
    if (entry.peers) peers = await startClientPeers({ secretKey: o.secretKey, listen: entry.peers, logger: logger.child({ component: 'peers' }) })
    binding = listeners.api
    // A relay that lies to clients is an honest relay behind an API that rewrites what it answers.
    const liar = o.clientLies?.length ? new ClientFacingLiar(o.clientLies, { secretKey: o.secretKey, relayKeys: o.cluster.relays.map((r) => r.publicKey) }) : undefined
    const peerAddresses = peers?.addresses
    api = await createApi(node, { ...o.limits, host, port, logger: logger.child({ component: 'api' }), ...(o.tls ? { tls: o.tls } : {}), ...(liar ? { liar } : {}), ...(peerAddresses ? { peerAddresses } : {}) })
  } catch (err) {
    // A relay that could not start leaves its data dir as it found it, unlocked.
    await peers?.stop().catch(() => undefined)
    await node.stop().catch(() => undefined)
    dataDir.release()
    // libp2p and Node say "EADDRINUSE" in a stack trace; an operator needs the port and what to do.
    const explained = binding && isListenFailure(err) ? await explainListenFailure(binding) : undefined
    throw explained ?? err
  }
  const url = `${o.tls ? 'https' : 'http'}://${entry.api}`
  logger.info({ url, ws: url.replace(/^http/, 'ws') + '/v1/ws', mesh: entry.mesh, byzantine: o.byzantine ?? null, clientLies: o.clientLies ?? [] }, 'relay started')
  return {
    node,
    api,
    url,
    async stop() {
      const sessions = node.sessions.open
      logger.debug('stop: closing the client API')
      await api.close()
      if (peers) logger.debug('stop: closing the peer port')
      await peers?.stop()
      await node.stop()
      dataDir.release()
      return { closed: [`client API on ${entry.api} (${sessions} session${sessions === 1 ? '' : 's'})`, ...(entry.peers ? [`peer port on ${entry.peers}`] : []), `mesh on ${entry.mesh}`, `store in ${o.dataDir}`, 'data dir lock'] }
    },
  }
}
