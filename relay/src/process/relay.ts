import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { createApi, type ApiLimits } from '../api/server.ts'
import { startClientPeers, type ClientPeers } from '../api/client-peers.ts'
import { ClientFacingLiar, type ClientLie } from '../faults/client-lies.ts'
import { type ClusterConfig, ConfigError, committeeOf } from './config.ts'
import { decodeEpochChange, epochChainFromJson, followEpochs, toHex, type EpochCertificate, type EpochCommittee } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { adoptEpochChain, epochCommitteeOf, storedEpoch, type StoredEpoch } from '../runtime/epochs.ts'
import { LmdbKv } from '../store/kv.ts'
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
  /**
   * Keys this relay may be given by a committee change (a key rotation:
   * the operator proposes the committee with one of these keys in place of
   * the relay's, see relay/README.md): each epoch runs with whichever of
   * `secretKey` and these its committee lists.
   */
  readonly nextKeys?: readonly Uint8Array[]
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
  /** The relay failed and must stop (an event loop failure, or no way into the next epoch); default: exit the process with 1. */
  readonly onFatal?: (err: unknown) => void
  /** An epoch change left this relay out of the committee: it stopped and unlocked its data dir. */
  readonly onLeft?: () => void
  /**
   * The API (http://host:port) of a relay of the cluster, for a relay
   * joining it in a later epoch than the cluster file's: the certificates
   * of the epochs since come from there (checked from the file's committee).
   */
  readonly join?: string
  /** How often a running relay asks its peers whether they are in a later epoch (default 10 s). */
  readonly epochPollMs?: number
  /**
   * How long a relay the next committee leaves out goes on serving once the
   * epoch ended (its certificate at GET /v1/epochs, the old epoch's reads)
   * before it stops: a peer that missed its vote takes the certificate from
   * it. Default 1.5 times epochPollMs.
   */
  readonly leaveGraceMs?: number
}

export interface RunningRelay {
  /** The relay of the epoch it is in now (a new one after each epoch change). */
  readonly node: RelayNode
  readonly api: FastifyInstance
  readonly url: string
  /** Closes the client API, the mesh and the store, and unlocks the data dir; says what it closed. */
  stop(): Promise<{ readonly closed: readonly string[] }>
}

/** One epoch's relay: its node, mesh, peer port and client API, on the data dir the process holds. */
interface EpochRun {
  readonly node: RelayNode
  readonly api: FastifyInstance
  readonly url: string
  stop(): Promise<string[]>
}

/**
 * Starts one relay: store, mesh, consensus and the client API, as the
 * committee of the epoch its store is in (the cluster file's until a
 * committee change, see committee-proposals.ts). At an epoch's end it
 * stops them and starts again as the next epoch's relay on the same data
 * dir (another address, other peers); a relay the new committee does not
 * list stops. A problem an operator must fix (cluster file, data dir, a
 * port in use) is a ConfigError whose message says what to do.
 */
export async function runRelay(o: RunRelayOptions): Promise<RunningRelay> {
  const logger = o.logger ?? relayLogger(o.id)
  // A relay is its keys: the one it runs with, and those a rotation may give it.
  const myKeys = new Set([o.secretKey, ...(o.nextKeys ?? [])].map((k) => toHex(publicKeyOfSync(k))))
  // Locked, 0700, and checked against this cluster before the store opens.
  const dataDir = openDataDir(o.dataDir, committeeOf(o.cluster), policyFingerprint(o.cluster))
  let current: EpochRun | undefined
  let last: EpochRun
  let switching: Promise<void> = Promise.resolve()
  let stopped = false
  /** Ends a leaving relay's grace period at once (stop). */
  let stopWaiting: (() => void) | undefined
  const fatal = (err: unknown): void => {
    clearInterval(poll)
    logger.fatal({ err }, 'could not start the next epoch; stopping')
    // Its supervisor starts it again, in the epoch its store is in; an operator's problem (exit 2) waits for the operator.
    ;(o.onFatal ?? ((e: unknown) => process.exit(e instanceof ConfigError ? 2 : 1)))(err)
  }
  const next = (): void => {
    // Once per change: the relay's own certificate and its peers' (see followPeers) may both end the epoch.
    const ending = current
    if (!ending || stopped) return
    current = undefined
    switching = (async () => {
      // Left out of the next committee: the certificate may be in no other running relay's hands yet
      // (a peer missed this relay's vote, another is down), so it stays up serving it for a while.
      const certs = ending.node.epochCertificates()
      const latest = certs[certs.length - 1]
      const nextMembers = latest ? decodeEpochChange(latest.change).next.members : []
      if (latest && !nextMembers.some((m) => myKeys.has(toHex(m.publicKey)))) {
        const graceMs = o.leaveGraceMs ?? 1.5 * (o.epochPollMs ?? EPOCH_POLL_MS)
        logger.info({ epoch: certs.length, graceMs }, `the next committee does not list this relay: ${o.id} serves the certificate for ${Math.round(graceMs / 1000)} s, then stops`)
        await new Promise<void>((done) => {
          const t = setTimeout(done, graceMs)
          stopWaiting = () => (clearTimeout(t), done())
        })
        stopWaiting = undefined
      }
      await ending.stop()
      if (stopped) return
      const stored = await readStoredEpoch(o, logger)
      const named = stored.cluster.relays.find((r) => r.id === o.id)
      if (named && !myKeys.has(toHex(named.publicKey))) {
        // Its key rotated without --next-key, or another machine took its name: the operator says which.
        throw new ConfigError(`epoch ${stored.epoch?.epoch ?? 0}'s committee lists ${o.id} with key ${toHex(named.publicKey)}, which this relay was not given: if its key was rotated, start it with --key <that key's file>; if another machine took over ${o.id}, this one has left the cluster: disable it`)
      }
      if (!stored.cluster.relays.some((r) => myKeys.has(toHex(r.publicKey)))) {
        logger.info({ epoch: stored.epoch?.epoch }, `the committee of the new epoch does not list this relay's key: ${o.id} left the cluster and stops`)
        stopped = true
        clearInterval(poll)
        dataDir.release()
        o.onLeft?.()
        return
      }
      current = last = await startEpoch(o, logger, stored, next)
    })().catch(fatal)
  }
  // A relay cut off while its peers ended an epoch cannot finish it alone (they no longer serve its
  // blocks): it asks them now and then whether they moved on, and follows their certificates.
  // (Through the running relay's own store: a second LMDB handle on the data dir while the relay writes
  // to it stalled its writes under load.)
  const followPeers = async (): Promise<void> => {
    const run = current
    if (!run || stopped) return
    const from = run.node.epochCommittee
    const chain = await longestValidChain(o, from, run.node.clusterDescriptor().relays.map((r) => r.api), logger)
    if (!chain || stopped || current !== run) return
    const epoch = await run.node.adoptEpochs(chain)
    if (epoch <= from.epoch || current !== run) return
    logger.info({ epoch: from.epoch, peersEpoch: epoch }, 'the other relays moved on to a later epoch: following them')
    next()
  }
  const poll = setInterval(() => void followPeers().catch((err: unknown) => logger.warn({ err }, "could not check the peers' epochs")), o.epochPollMs ?? EPOCH_POLL_MS)
  poll.unref()
  try {
    current = last = await startEpoch(o, logger, await readStoredEpoch(o, logger, o.join), next)
  } catch (err) {
    clearInterval(poll)
    dataDir.release()
    throw err
  }
  return {
    get node() {
      return last.node
    },
    get api() {
      return last.api
    },
    get url() {
      return last.url
    },
    async stop() {
      const wasStopped = stopped
      stopped = true
      clearInterval(poll)
      stopWaiting?.()
      // A switch under way finishes first (it starts nothing once stopped); then whatever runs stops, once.
      await switching
      const run = current
      current = undefined
      const closed = (await run?.stop()) ?? []
      if (!wasStopped) dataDir.release()
      return { closed: [...closed, 'data dir lock'] }
    },
  }
}

/** How often a running relay asks its peers whether they are in a later epoch. */
const EPOCH_POLL_MS = 10_000
/** How long one relay has to answer GET /v1/epochs. */
const EPOCHS_TIMEOUT_MS = 5_000
/** The largest answer to GET /v1/epochs read (a thousand certificates of large committees fit). */
const MAX_EPOCHS_BYTES = 16 * 1024 * 1024

/**
 * The epoch the data dir's store is in, read before the relay that opens
 * the store is built. First the certificates of the epochs since the
 * store's, if its committee's relays (or `join`, a relay's API) serve
 * any: a new machine joins the committee of a later epoch, a relay down
 * for a change catches up.
 */
async function readStoredEpoch(o: RunRelayOptions, logger: Logger, join?: string): Promise<StoredEpoch> {
  const kv = new LmdbKv(o.dataDir)
  try {
    const at = storedEpoch(kv, o.cluster)
    const chain = await longestValidChain(o, epochCommitteeOf(at), join ? [join] : at.cluster.relays.map((r) => r.api), logger)
    if (chain) {
      const followed = await adoptEpochChain(kv, o.cluster, chain)
      logger.info({ epoch: followed.epoch }, "took the certificates of the epochs since its store's from its peers")
    } else if (join && !at.epoch) {
      throw new ConfigError(`--join ${join}: no relay there served epoch certificates past the cluster file's epoch that check out from its committee; give the http://host:port of a running relay of the cluster, once the change that adds this relay is decided`)
    }
    return storedEpoch(kv, o.cluster)
  } finally {
    await kv.close()
  }
}

/**
 * Of the chains of epoch certificates the relays at `apis` serve, the one
 * that leads furthest past the epoch `from`, checked from its committee
 * (each certificate signed by 2f+1 of the committee before it): a relay
 * that serves a longer chain it made up is passed over, not believed.
 */
async function longestValidChain(o: RunRelayOptions, from: EpochCommittee, apis: readonly string[], logger: Logger): Promise<EpochCertificate[] | undefined> {
  const scheme = o.tls ? 'https' : 'http'
  const answers = await Promise.all(
    apis.map(async (api): Promise<{ chain: EpochCertificate[]; epoch: number } | undefined> => {
      const url = /^https?:\/\//.test(api) ? api : `${scheme}://${api}`
      try {
        const res = await fetch(`${url.replace(/\/$/, '')}/v1/epochs`, { signal: AbortSignal.timeout(EPOCHS_TIMEOUT_MS) })
        if (!res.ok || Number(res.headers.get('content-length') ?? 0) > MAX_EPOCHS_BYTES) return undefined
        const text = await res.text()
        if (text.length > MAX_EPOCHS_BYTES) return undefined
        const chain = epochChainFromJson(JSON.parse(text))
        if (chain.length <= from.epoch) return undefined
        return { chain, epoch: (await followEpochs(nodeCrypto, from, chain)).epoch }
      } catch (err) {
        logger.debug({ api, err: (err as Error).message }, 'no usable epoch certificates from a peer')
        return undefined
      }
    }),
  )
  let best: { chain: EpochCertificate[]; epoch: number } | undefined
  for (const a of answers) if (a && a.epoch > (best?.epoch ?? from.epoch)) best = a
  return best?.chain
}

/** The relay of the epoch the data dir's store is in. */
async function startEpoch(o: RunRelayOptions, logger: Logger, stored: StoredEpoch, ended: () => void): Promise<EpochRun> {
  const cluster = stored.cluster
  const epoch = stored.epoch?.epoch ?? 0
  // A relay is its key (the committee may name it otherwise than --id does): the one its epoch's committee lists.
  const secretKey = [o.secretKey, ...(o.nextKeys ?? [])].find((k) => cluster.relays.some((r) => toHex(r.publicKey) === toHex(publicKeyOfSync(k))))
  const me = secretKey ? cluster.relays.findIndex((r) => toHex(r.publicKey) === toHex(publicKeyOfSync(secretKey))) : -1
  if (!secretKey || me < 0) {
    const named = cluster.relays.find((r) => r.id === o.id)
    throw new ConfigError(
      named
        ? `relay ${o.id}'s key in ${epoch ? `epoch ${epoch}'s committee` : 'the cluster file'} is ${toHex(named.publicKey)}, not a key this relay was given: start it with that key (--key, or --next-key before a rotation)`
        : `this relay's key is not in ${epoch ? `epoch ${epoch}'s committee, the one its data dir is in` : 'the cluster file'} (relays: ${cluster.relays.map((r) => r.id).join(', ')})${epoch ? ': it left the cluster' : ''}`,
    )
  }
  const entry = cluster.relays[me] as (typeof cluster.relays)[number]
  if (entry.id !== o.id) logger.warn({ id: o.id, committee: entry.id }, `epoch ${epoch}'s committee names this relay ${entry.id}`)
  if (secretKey !== o.secretKey) logger.info({ epoch, publicKey: toHex(entry.publicKey) }, 'runs with the rotated key (--next-key) the committee lists for it: give it as --key from now on')
  const libp2pMesh = createLibp2pMesh({
    me,
    secretKey,
    peers: cluster.relays.map((r, index) => ({ index, publicKey: r.publicKey, multiaddr: r.mesh, name: r.id })),
    listen: entry.mesh,
    logger: logger.child({ component: 'mesh' }),
    ...(o.peerQueueFrames ? { maxQueueFrames: o.peerQueueFrames } : {}),
  })
  // A Byzantine relay is an honest relay behind a mesh that rewrites what it sends.
  const mesh = o.byzantine ? byzantineMesh(libp2pMesh, o.byzantine, { me, committee: committeeOf(cluster, stored.epoch), secretKey, crypto: relayCrypto }) : libp2pMesh
  const node = new RelayNode({
    cluster,
    ...(stored.epoch ? { epoch: stored.epoch } : {}),
    // Out of the event loop: the next epoch's relay starts once this one has stopped.
    onEpochEnd: () => setImmediate(ended),
    me,
    secretKey,
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
    ...(o.onFatal ? { onFatal: o.onFatal } : {}),
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
    if (entry.peers) peers = await startClientPeers({ secretKey, listen: entry.peers, logger: logger.child({ component: 'peers' }) })
    binding = listeners.api
    // A relay that lies to clients is an honest relay behind an API that rewrites what it answers.
    const liar = o.clientLies?.length ? new ClientFacingLiar(o.clientLies, { secretKey, relayKeys: cluster.relays.map((r) => r.publicKey) }) : undefined
    const peerAddresses = peers?.addresses
    api = await createApi(node, { ...o.limits, host, port, logger: logger.child({ component: 'api' }), ...(o.tls ? { tls: o.tls } : {}), ...(liar ? { liar } : {}), ...(peerAddresses ? { peerAddresses } : {}) })
  } catch (err) {
    // A relay that could not start leaves its data dir as it found it (the caller unlocks it).
    await peers?.stop().catch(() => undefined)
    await node.stop().catch(() => undefined)
    // libp2p and Node say "EADDRINUSE" in a stack trace; an operator needs the port and what to do.
    const explained = binding && isListenFailure(err) ? await explainListenFailure(binding) : undefined
    throw explained ?? err
  }
  const url = `${o.tls ? 'https' : 'http'}://${entry.api}`
  logger.info({ url, ws: url.replace(/^http/, 'ws') + '/v1/ws', mesh: entry.mesh, epoch, byzantine: o.byzantine ?? null, clientLies: o.clientLies ?? [] }, 'relay started')
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
      return [`client API on ${entry.api} (${sessions} session${sessions === 1 ? '' : 's'})`, ...(entry.peers ? [`peer port on ${entry.peers}`] : []), `mesh on ${entry.mesh}`, `store in ${o.dataDir}`]
    },
  }
}
