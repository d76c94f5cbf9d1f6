/**
 * `stead-relay dev`: a whole cluster on loopback for development, one
 * `stead-relay start` process per relay, with their logs made readable.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { toHex } from '@stead/core'
import { ConfigError, clusterToJson, fileProblem, generateIdentity, loadIdentity, parseCluster, writeIdentity } from './config.ts'
import { describeLockOwner, lockHolder } from './datadir.ts'
import { UsageError } from './cli-options.ts'
import { faultsTolerated, MESH_PORT_OFFSET, PEERS_PORT_OFFSET } from './init.ts'
import { prettyLogLines, type LogLevel } from './logging.ts'
import { ListenError, probePort } from './ports.ts'

export interface DevOptions {
  readonly relays: number
  readonly basePort: number
  /** How many relays (the last ones) run `byzantineMode`. */
  readonly byzantine: number
  /** As for `start --byzantine`: modes towards relays and clients, comma-separated. */
  readonly byzantineMode: string
  readonly dir: string
  readonly fresh: boolean
  readonly leaderTimeoutMs?: number
  readonly paceMs?: number
  readonly logLevel: LogLevel
}

const here = dirname(fileURLToPath(import.meta.url))
/** Relays are started through the same bin as this process, from src/ or dist/ alike. */
const BIN = resolve(here, '../../bin/stead-relay.mjs')
/** How long relays get to close their stores after SIGTERM before they are killed. */
const STOP_GRACE_MS = 3000

export async function runDev(o: DevOptions): Promise<void> {
  const n = o.relays
  const f = faultsTolerated(n)
  if (o.basePort + n - 1 + PEERS_PORT_OFFSET > 65_535) throw new UsageError(`--base-port ${o.basePort} must leave room for the relays (HTTP ports ${o.basePort}+, mesh ports ${MESH_PORT_OFFSET} above, peer ports ${PEERS_PORT_OFFSET} above)`)
  if (o.byzantine > f) throw new UsageError(`--byzantine must be between 0 and f = ${f}`)
  const ids = Array.from({ length: n }, (_, i) => `r${i + 1}`)
  const dir = resolve(o.dir)
  // Another dev cluster on this dir: its relays hold the data dirs. Starting ours would only
  // see each relay refuse its dir (and rewrite the other's cluster file): say so first.
  for (const id of ids) {
    const holder = lockHolder(join(dir, id))
    if (holder) {
      throw new ConfigError(
        `--dir ${o.dir} is in use by another stead-relay dev (its relay ${id} runs as ${describeLockOwner(holder)}): stop that one, or give this one its own --dir, e.g. --dir ${o.dir.replace(/\/+$/, '')}-${o.basePort}`,
      )
    }
  }
  // A port in use would make one relay exit while the others wait for it: say so before starting any.
  for (const [i, id] of ids.entries()) {
    for (const [what, port] of [
      [`the HTTP API of ${id}`, o.basePort + i],
      [`the mesh of ${id}`, o.basePort + i + MESH_PORT_OFFSET],
      [`the peer port of ${id}`, o.basePort + i + PEERS_PORT_OFFSET],
    ] as const) {
      const state = await probePort('127.0.0.1', port)
      if (state !== 'free') throw new ListenError({ what, host: '127.0.0.1', port, setting: '--base-port (or stop the other stead-relay dev)' }, state)
    }
  }

  const clusterPath = join(dir, 'cluster.json')
  // Keys and data survive between runs, so a dev cluster keeps its state; --fresh starts over.
  const relays = ids.map((id, i) => {
    const data = join(dir, id)
    const keyPath = join(data, 'key.json')
    let key: ReturnType<typeof loadIdentity>
    try {
      if (o.fresh) rmSync(data, { recursive: true, force: true })
      mkdirSync(data, { recursive: true })
      if (!existsSync(keyPath)) writeIdentity(keyPath, generateIdentity())
      key = loadIdentity(keyPath)
    } catch (err) {
      if (err instanceof ConfigError) throw new ConfigError(`${err.message.replace(/;.*$/s, '')}; start the dev cluster over with --fresh, or use another --dir`)
      const code = (err as NodeJS.ErrnoException | null)?.code
      const fix = 'give --dir a directory this user can write (it is created if missing)'
      const problem = code === 'EEXIST' || code === 'ENOTDIR' ? `--dir ${o.dir}: it or a part of its path is a file, not a directory; ${fix}` : fileProblem(err, '--dir', o.dir, fix)
      throw problem ? new ConfigError(problem) : err
    }
    return { id, publicKey: toHex(key.publicKey), mesh: `/ip4/127.0.0.1/tcp/${o.basePort + MESH_PORT_OFFSET + i}`, api: `127.0.0.1:${o.basePort + i}`, peers: `/ip4/127.0.0.1/tcp/${o.basePort + PEERS_PORT_OFFSET + i}/ws`, data }
  })
  // A dev cluster serves any space (`start` on a cluster file defaults to the listed ones only).
  const cluster = parseCluster({ f, relays: relays.map(({ data: _data, ...r }) => r), openSpaces: true }, clusterPath)
  writeFileSync(clusterPath, JSON.stringify(clusterToJson(cluster), null, 2) + '\n')

  const pass = [
    '--log-level',
    o.logLevel,
    ...(o.leaderTimeoutMs === undefined ? [] : ['--leader-timeout-ms', String(o.leaderTimeoutMs)]),
    ...(o.paceMs === undefined ? [] : ['--pace-ms', String(o.paceMs)]),
  ]
  const pretty = prettyLogLines(Boolean(process.stdout.isTTY))
  const children: ChildProcess[] = []
  let stopping = false
  relays.forEach((r, i) => {
    const extra = i >= n - o.byzantine ? ['--byzantine', o.byzantineMode] : []
    // The IPC channel carries nothing; it closes when this process dies, however it dies.
    const child = spawn(process.execPath, [BIN, 'start', '--config', clusterPath, '--id', r.id, '--data', r.data, ...extra, ...pass], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] })
    const prefix = `[${r.id}${extra.length ? ` byzantine:${o.byzantineMode}` : ''}] `
    for (const stream of [child.stdout, child.stderr]) {
      let buffered = ''
      stream?.on('data', (chunk: Buffer) => {
        buffered += chunk.toString()
        const lines = buffered.split('\n')
        buffered = lines.pop() ?? ''
        for (const line of lines) {
          if (!line.trim()) continue
          for (const shown of pretty(line).split('\n')) process.stdout.write(prefix + shown + '\n')
        }
      })
    }
    // 'close', not 'exit': the relay's last lines are out by then.
    child.on('close', (code, signal) => {
      process.stdout.write(`${prefix}exited (${signal ?? code})\n`)
      // Some relays may be killed on purpose (tests do); when none is left, neither is the cluster.
      if (!stopping && children.every((c) => c.exitCode !== null || c.signalCode !== null)) {
        console.error('stead-relay dev: every relay exited; see their last lines above')
        process.exit(1)
      }
    })
    children.push(child)
  })
  console.log(`Stead dev cluster: ${n} relays, f = ${f}${o.byzantine ? `, ${o.byzantine} Byzantine (${o.byzantineMode})` : ''}, log level ${o.logLevel}`)
  console.log(`cluster file: ${clusterPath}`)
  for (const r of relays) console.log(`  ${r.id}  http://${r.api}  ws://${r.api}/v1/ws  data ${r.data}`)
  console.log(`try: curl http://${relays[0]?.api}/ready   (or /v1/status, /metrics)`)

  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) return
    stopping = true
    const running = children.filter((c) => c.exitCode === null && c.signalCode === null)
    console.log(`stead-relay dev: ${signal}, stopping ${running.length} relays`)
    // Relays flush and close their store on SIGTERM; one that hangs is killed.
    for (const c of running) c.kill('SIGTERM')
    const killer = setTimeout(() => {
      for (const c of running) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
    }, STOP_GRACE_MS)
    void Promise.all(running.map((c) => new Promise((done) => (c.exitCode !== null || c.signalCode !== null ? done(null) : c.once('close', done))))).then(() => {
      clearTimeout(killer)
      console.log('stead-relay dev: stopped')
      process.exit(0)
    })
  }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
}
