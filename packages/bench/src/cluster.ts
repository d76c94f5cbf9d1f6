import { spawn, type ChildProcess } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { fromHex, toHex } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { generateIdentity, writeIdentity } from '@stead/relay'
import { freePort, sleep, stopRelays, waitHealthy } from '@stead/relay/testing'

const RELAY_BIN = resolve(import.meta.dirname, '../../../relay/bin/stead-relay.mjs')
/** The compiled relay, as the npm package runs it (`npm run build` first). */
export const RELAY_DIST = resolve(import.meta.dirname, '../../../relay/dist/process/cli.js')
const PLAIN_BIN = resolve(import.meta.dirname, '../bin/plain-relay.mjs')
const PROFILED_RELAY_BIN = resolve(import.meta.dirname, '../bin/profiled-relay.mjs')

/** Which relays run: Stead's (consensus + audit) or the plain forward-and-merge baseline. */
export type RelayKind = 'stead' | 'plain'

export interface ClusterSpec {
  readonly kind: RelayKind
  readonly n: number
  /** The last `count` relays run `--byzantine mode` (Stead relays only). */
  readonly byzantine?: { readonly count: number; readonly mode: string }
  /** The relays' LOG_LEVEL (default warn); their log tail is kept in BenchRelay.log. */
  readonly logLevel?: string
  /** Run relay 0 with a CPU profiler that profileWindow() switches on and off (Stead relays only). */
  readonly profile?: boolean
  /** Run the compiled relay (RELAY_DIST) instead of the sources: start-up as installed from npm. */
  readonly dist?: boolean
  /** The relays' `--pace-ms` (Stead relays only; absent: the relay's default). */
  readonly paceMs?: number
}

/** The cluster descriptor clients pin: what /v1/cluster serves. */
export interface ClusterDescriptor {
  readonly f: number
  readonly relays: ReadonlyArray<{ readonly id: string; readonly publicKey: string; readonly api: string }>
}

/** What the Chrono examples trust: the cluster's relay keys (with Node's crypto to check them). */
export function relayTrust(d: ClusterDescriptor): { crypto: typeof nodeCrypto; cluster: { f: number; relayKeys: Uint8Array[] } } {
  return { crypto: nodeCrypto, cluster: { f: d.f, relayKeys: d.relays.map((r) => fromHex(r.publicKey)) } }
}

export interface BenchRelay {
  readonly id: string
  readonly api: string
  readonly data: string
  process: ChildProcess | null
  log: string
  byzantine: string | null
}

export { freePort, sleep }

/** Real relay processes on loopback, one per relay, as operators run them (`stead-relay start`). */
export class BenchCluster {
  readonly dir = mkdtempSync(join(tmpdir(), 'stead-bench-'))
  readonly relays: BenchRelay[] = []
  readonly clusterPath = join(this.dir, 'cluster.json')
  descriptor!: ClusterDescriptor
  private crashed = new Set<number>()

  readonly spec: ClusterSpec
  private constructor(spec: ClusterSpec) {
    this.spec = spec
  }

  static async start(spec: ClusterSpec): Promise<BenchCluster> {
    const c = new BenchCluster(spec)
    const entries = []
    // A port just closed may be handed out again: never give two relays (or mesh and API) the same one.
    const taken = new Set<number>()
    const port = async (): Promise<number> => {
      for (;;) {
        const p = await freePort()
        if (!taken.has(p)) {
          taken.add(p)
          return p
        }
      }
    }
    for (let i = 0; i < spec.n; i++) {
      const id = `r${i + 1}`
      const data = join(c.dir, id)
      mkdirSync(data, { recursive: true })
      const key = generateIdentity()
      writeIdentity(join(data, 'key.json'), key)
      const api = `127.0.0.1:${await port()}`
      entries.push({ id, publicKey: toHex(key.publicKey), mesh: `/ip4/127.0.0.1/tcp/${await port()}`, api })
      const byz = spec.byzantine && i >= spec.n - spec.byzantine.count ? spec.byzantine.mode : null
      c.relays.push({ id, api, data, process: null, log: '', byzantine: byz })
    }
    const f = Math.floor((spec.n - 1) / 3)
    writeFileSync(c.clusterPath, JSON.stringify({ f, relays: entries, openSpaces: true }, null, 2))
    c.descriptor = { f, relays: entries.map(({ id, publicKey, api }) => ({ id, publicKey, api })) }
    c.relays.forEach((_, i) => c.spawn(i))
    try {
      await Promise.all(c.relays.map((_, i) => c.waitHealthy(i)))
    } catch (err) {
      await c.stop()
      throw err
    }
    return c
  }

  private spawn(i: number, nodeArgs: readonly string[] = []): void {
    const r = this.relays[i] as BenchRelay
    const bin = this.spec.profile && i === 0 ? PROFILED_RELAY_BIN : this.spec.dist ? RELAY_DIST : RELAY_BIN
    const args =
      this.spec.kind === 'stead'
        ? [bin, 'start', '--config', this.clusterPath, '--id', r.id, '--data', r.data, ...(r.byzantine ? ['--byzantine', r.byzantine] : []), ...(this.spec.paceMs === undefined ? [] : ['--pace-ms', String(this.spec.paceMs)])]
        : [PLAIN_BIN, '--config', this.clusterPath, '--id', r.id, '--key', join(r.data, 'key.json')]
    // Relays log JSON lines at info level; keep the tail for error reports only.
    const child = spawn(process.execPath, [...nodeArgs, ...args], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], env: { ...process.env, LOG_LEVEL: this.spec.logLevel ?? 'warn' } })
    const keep = (d: Buffer) => {
      r.log = (r.log + d.toString()).slice(-20_000)
    }
    child.stdout?.on('data', keep)
    child.stderr?.on('data', keep)
    r.process = child
  }

  /** Each relay's data dir, in relay order. */
  dataDirs(): string[] {
    return this.relays.map((r) => r.data)
  }

  /** Relays that are up (not crashed on purpose). */
  live(): number[] {
    return this.relays.map((_, i) => i).filter((i) => !this.crashed.has(i))
  }

  /** Relays that are up and honest: where load clients connect. */
  honest(): number[] {
    return this.live().filter((i) => !(this.relays[i] as BenchRelay).byzantine)
  }

  pids(): Array<{ label: string; pid: number }> {
    return this.relays.flatMap((r, i) => (r.process?.pid && !this.crashed.has(i) ? [{ label: `${this.spec.kind}-${r.id}${r.byzantine ? `(byz:${r.byzantine})` : ''}`, pid: r.process.pid }] : []))
  }

  /** kill -9, as a crash: nothing is flushed. */
  crash(i: number): void {
    const r = this.relays[i] as BenchRelay
    r.process?.kill('SIGKILL')
    this.crashed.add(i)
  }

  /** Starts a crashed relay again on its data dir (it recovers from its store), with these Node flags; resolves once it serves HTTP. */
  async restart(i: number, nodeArgs: readonly string[] = []): Promise<void> {
    this.crashed.delete(i)
    this.spawn(i, nodeArgs)
    await this.waitHealthy(i)
  }

  async waitHealthy(i: number, timeoutMs = 60_000): Promise<void> {
    await waitHealthy(this.relays[i] as BenchRelay, timeoutMs)
  }

  /** Starts relay 0's profiler (cluster started with `profile`). */
  profileStart(): void {
    this.relays[0]?.process?.send({ prof: 'start' })
  }

  /** Stops relay 0's profiler and writes the .cpuprofile to `file`. */
  async profileStop(file: string): Promise<void> {
    const child = this.relays[0]?.process
    if (!child) return
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 20_000)
      child.on('message', (m: { prof?: string }) => {
        if (m?.prof === 'written') {
          clearTimeout(t)
          resolve()
        }
      })
      child.send({ prof: 'stop', file })
    })
  }

  async status(i: number): Promise<Record<string, unknown>> {
    const res = await fetch(`http://${(this.relays[i] as BenchRelay).api}/v1/status`)
    return (await res.json()) as Record<string, unknown>
  }

  async stop(): Promise<void> {
    await stopRelays(this.relays, 8000)
    rmSync(this.dir, { recursive: true, force: true })
  }
}
