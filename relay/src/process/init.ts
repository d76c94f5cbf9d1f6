/**
 * `stead-relay init`: the files a new cluster needs, one key per relay and
 * the cluster file every relay shares, written so `stead-relay start` takes
 * them as they are.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { isIPv4 } from 'node:net'
import { join } from 'node:path'
import { toHex } from '@stead/core'
import { type ClusterConfig, ConfigError, clusterToJson, DEFAULT_SPACES_PER_USER, fileProblem, generateIdentity, parseCluster, writeIdentity } from './config.ts'
import { UsageError } from './cli-options.ts'

export interface InitOptions {
  readonly relays: number
  /** One address for every relay, or one per relay (repeats share a machine). */
  readonly hosts: readonly string[]
  /** The first HTTP port; the mesh uses base + 100. Relays sharing a host take consecutive ports. */
  readonly basePort: number
  readonly out: string
  /** Spaces the cluster serves (each open to every signed client until the file lists writers or readers). */
  readonly spaces?: readonly string[]
  /** Let clients create any space (metered per key). Default false: only listed spaces exist. */
  readonly openSpaces?: boolean
  /**
   * Give every relay a `peers` address (HTTP port + 200, WebSocket), where it
   * helps browsers sync peer to peer (circuit relay, WebRTC signalling).
   * Default false: the relays offer none.
   */
  readonly peers?: boolean
}

export interface InitRelay {
  readonly id: string
  readonly host: string
  readonly api: string
  readonly mesh: string
  /** Where it helps clients sync peer to peer (with InitOptions.peers). */
  readonly peers?: string
  readonly publicKey: string
  /** Its data dir, holding its key.json (0600). */
  readonly dir: string
  readonly keyPath: string
}

export interface InitResult {
  readonly clusterPath: string
  readonly cluster: ClusterConfig
  readonly relays: readonly InitRelay[]
}

/** The offset of the mesh port from the HTTP port, as in `stead-relay dev`. */
export const MESH_PORT_OFFSET = 100
/** The offset of the port for clients' peer-to-peer sync (circuit relay, WebRTC signalling) from the HTTP port, in `stead-relay dev`. */
export const PEERS_PORT_OFFSET = 200

/**
 * The f that `n` relays tolerate. Every consensus threshold assumes N = 3f+1
 * exactly (see validateCommittee), so other counts are refused here, before
 * any key is made or relay started.
 */
export function faultsTolerated(n: number): number {
  if (!Number.isInteger(n) || n < 4) throw new UsageError('--relays must be at least 4 (N = 3f+1 with f >= 1)')
  if ((n - 1) % 3 !== 0) throw new UsageError(`--relays must be 3f+1 (4, 7, 10, ...), got ${n}`)
  return (n - 1) / 3
}

/** Plans the cluster and writes it; refuses before writing anything if a file it would write exists. */
export function initCluster(o: InitOptions): InitResult {
  const n = o.relays
  faultsTolerated(n)
  if (o.hosts.length !== 1 && o.hosts.length !== n) {
    throw new UsageError(`--host takes one address for every relay or one per relay (${n}), got ${o.hosts.length}: ${o.hosts.join(',')}`)
  }
  for (const host of o.hosts) {
    // The cluster file holds /ip4 multiaddrs and host:port pairs: names and IPv6 do not fit it yet.
    if (!isIPv4(host)) throw new UsageError(`--host ${host}: give the IPv4 address peers and clients reach that relay at (host names and IPv6 are not supported in the cluster file yet)`)
    if (host === '0.0.0.0') throw new UsageError('--host 0.0.0.0: give the address peers reach the relay at; 0.0.0.0 cannot be dialed from another machine')
  }
  const hostOf = (i: number): string => (o.hosts.length === 1 ? (o.hosts[0] as string) : (o.hosts[i] as string))
  const used = new Map<string, number>()
  const plan = Array.from({ length: n }, (_, i) => {
    const host = hostOf(i)
    const slot = used.get(host) ?? 0
    used.set(host, slot + 1)
    const port = o.basePort + slot
    const top = o.peers ? PEERS_PORT_OFFSET : MESH_PORT_OFFSET
    if (port + top > 65_535) throw new UsageError(`--base-port ${o.basePort} leaves no room for ${slot + 1} relays on ${host} (HTTP ports from ${o.basePort}, mesh ports ${MESH_PORT_OFFSET} above${o.peers ? `, peer ports ${PEERS_PORT_OFFSET} above` : ''})`)
    const id = `r${i + 1}`
    const dir = join(o.out, id)
    return { id, host, api: `${host}:${port}`, mesh: `/ip4/${host}/tcp/${port + MESH_PORT_OFFSET}`, ...(o.peers ? { peers: `/ip4/${host}/tcp/${port + PEERS_PORT_OFFSET}/ws` } : {}), dir, keyPath: join(dir, 'key.json') }
  })
  const clusterPath = join(o.out, 'cluster.json')
  const existing = [clusterPath, ...plan.map((r) => r.keyPath)].filter((p) => existsSync(p))
  if (existing.length) throw new UsageError(`refusing to overwrite ${existing.join(', ')}: keys and cluster files are made once; choose another --out`)
  const spaces = [...new Set(o.spaces ?? [])]

  let relays: InitRelay[]
  try {
    mkdirSync(o.out, { recursive: true, mode: 0o700 })
    relays = plan.map((r) => {
      mkdirSync(r.dir, { recursive: true, mode: 0o700 })
      const identity = generateIdentity()
      writeIdentity(r.keyPath, identity)
      return { ...r, publicKey: toHex(identity.publicKey) }
    })
  } catch (err) {
    const code = (err as NodeJS.ErrnoException | null)?.code
    const fix = 'give --out a directory this user can write (it is created if missing)'
    const problem = code === 'EEXIST' || code === 'ENOTDIR' ? `--out ${o.out}: it or a part of its path is a file, not a directory; ${fix}` : fileProblem(err, '--out', o.out, fix)
    throw problem ? new ConfigError(problem) : err
  }
  const cluster = parseCluster(
    {
      relays: relays.map((r) => ({ id: r.id, publicKey: r.publicKey, mesh: r.mesh, api: r.api, ...(r.peers ? { peers: r.peers } : {}) })),
      spaces: Object.fromEntries(spaces.map((s) => [s, {}])),
      openSpaces: o.openSpaces ?? false,
      // Counted from the cluster's first commit: set now, or never without new data dirs.
      spacesPerUser: DEFAULT_SPACES_PER_USER,
    },
    clusterPath,
  )
  writeFileSync(clusterPath, JSON.stringify(clusterToJson(cluster), null, 2) + '\n', { mode: 0o644 })
  return { clusterPath, cluster, relays }
}

/** What `init` prints: the files, the policy to settle before the first start, and how to start each relay. */
export function describeInit(r: InitResult): string {
  const c = r.cluster
  const spaces = [...c.spaces.keys()]
  const lines = [
    `wrote ${r.clusterPath}: ${c.relays.length} relays, f = ${c.f}, openSpaces ${c.openSpaces}, spaces: ${spaces.length ? spaces.join(', ') : 'none listed'}`,
    ...r.relays.map((x) => `wrote ${x.keyPath} (mode 0600): ${x.id} at ${x.api} (mesh ${x.mesh}${x.peers ? `, peers ${x.peers}` : ''}), publicKey ${x.publicKey}`),
    '',
  ]
  if (!c.openSpaces && spaces.length === 0) {
    lines.push('No space exists yet, so clients can write nothing: list spaces in "spaces" (e.g. "spaces": { "bank": {} }, or --space bank)')
    lines.push('or set "openSpaces": true to let any client create spaces (metered by newSpacesPerKeyPerHour).')
  }
  lines.push(
    'Settle "spaces" (writers, readers), "openSpaces" and "spacesPerUser" before the first start: each relay binds its data dir to',
    'these policies and refuses a changed file later. Every relay must run the same cluster.json.',
    '',
  )
  const hosts = new Set(r.relays.map((x) => x.host))
  if (hosts.size > 1) lines.push(`Copy ${r.clusterPath} and each relay's directory (its key) to its machine, then run there:`)
  else lines.push('Start each relay:')
  for (const x of r.relays) lines.push(`  stead-relay start --config ${r.clusterPath} --id ${x.id} --data ${x.dir}${hosts.size > 1 ? `    # on ${x.host}` : ''}`)
  lines.push('', `Then GET http://${r.relays[0]?.api}/ready answers 200 once the relay has 2f peers, is caught up and commits.`)
  return lines.join('\n')
}
