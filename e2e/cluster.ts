/**
 * A real local relay cluster for one spec file: `stead-relay dev` (one
 * process per relay) in a fresh temporary directory on its own ports, so
 * specs never share state with each other or with `npm run dev`.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'

const root = resolve(import.meta.dirname, '..')
const relayBin = join(root, 'relay/bin/stead-relay.mjs')

export interface ClusterOptions {
  readonly basePort: number
  readonly relays?: number
  /** Run the last relay in this Byzantine mode (see `stead-relay --help`). */
  readonly byzantine?: string
}

export interface RelayReport {
  /** Its name in the cluster file, e.g. "r1". */
  relay: string
  round: number
  committedRound: number
  commits: number
  /** Connected to a quorum, caught up, and committing whatever waits (see the relay's /ready). */
  ready: boolean
  spaces: number
  byzantine: string | null
}

export class Cluster {
  private output = ''

  private process: ChildProcess
  private readonly args: readonly string[]
  readonly dir: string
  readonly basePort: number
  readonly size: number
  private constructor(
    args: readonly string[],
    dir: string,
    basePort: number,
    size: number,
  ) {
    this.args = args
    this.dir = dir
    this.basePort = basePort
    this.size = size
    this.process = this.spawn(args)
  }

  private spawn(args: readonly string[]): ChildProcess {
    const child = spawn(process.execPath, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
    const keep = (chunk: Buffer) => {
      this.output = (this.output + chunk.toString()).slice(-200_000)
    }
    child.stdout?.on('data', keep)
    child.stderr?.on('data', keep)
    return child
  }

  static async start(options: ClusterOptions): Promise<Cluster> {
    const n = options.relays ?? 4
    await assertPortsFree(options.basePort, n)
    const dir = mkdtempSync(join(tmpdir(), 'stead-e2e-'))
    const args = [relayBin, 'dev', '--relays', String(n), '--base-port', String(options.basePort), '--dir', dir, '--fresh']
    if (options.byzantine) args.push('--byzantine', '1', '--byzantine-mode', options.byzantine)
    const cluster = new Cluster(args, dir, options.basePort, n)
    try {
      await cluster.waitUntilReady(60_000)
    } catch (err) {
      await cluster.stop()
      throw err
    }
    return cluster
  }

  /** Base URLs the demo (and the SDK) take: ws://127.0.0.1:<port>. */
  get urls(): string[] {
    return Array.from({ length: this.size }, (_, i) => `ws://127.0.0.1:${this.basePort + i}`)
  }

  httpUrl(i: number): string {
    return `http://127.0.0.1:${this.basePort + i}`
  }

  async status(i: number): Promise<RelayReport | null> {
    try {
      const res = await fetch(`${this.httpUrl(i)}/v1/status`, { signal: AbortSignal.timeout(1000) })
      return res.ok ? ((await res.json()) as RelayReport) : null
    } catch {
      return null
    }
  }

  /** A space's stable index at relay i (its signed head), or null when it does not answer. */
  async stableIndex(i: number, space: string): Promise<number | null> {
    try {
      const res = await fetch(`${this.httpUrl(i)}/v1/spaces/${encodeURIComponent(space)}/head`, { signal: AbortSignal.timeout(1000) })
      return res.ok ? ((await res.json()) as { index: number }).index : null
    } catch {
      return null
    }
  }

  /**
   * Resolves once every relay answers and is ready. (An idle cluster makes
   * no rounds, so "has committed something" is not a sign of life.)
   */
  async waitUntilReady(timeoutMs: number, relays: number[] = [...Array(this.size).keys()]): Promise<void> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      if (this.process.exitCode !== null) throw new Error(`stead-relay dev exited (${this.process.exitCode}):\n${this.tail()}`)
      const reports = await Promise.all(relays.map((i) => this.status(i)))
      if (reports.every((r) => r !== null && r.ready)) return
      if (Date.now() > deadline) throw new Error(`the cluster on ports ${this.basePort}+ was not ready in ${timeoutMs} ms:\n${this.tail()}`)
      await new Promise((r) => setTimeout(r, 250))
    }
  }

  /** The pid of relay `r<i+1>`, a child process of `stead-relay dev`. */
  relayPid(i: number): number {
    const id = `r${i + 1}`
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
        if (ppid !== this.process.pid) continue
        const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0')
        const at = argv.indexOf('--id')
        if (at >= 0 && argv[at + 1] === id) return Number(entry)
      } catch {
        // the process went away while we looked
      }
    }
    throw new Error(`relay ${id} of the cluster on ports ${this.basePort}+ is not running`)
  }

  /** SIGKILLs one relay (0-based), like a crash. */
  killRelay(i: number): void {
    process.kill(this.relayPid(i), 'SIGKILL')
  }

  tail(lines = 40): string {
    return this.output.split('\n').slice(-lines).join('\n')
  }

  /** Stops every relay (they keep their keys and data) until {@link restart}. */
  async stopRelays(): Promise<void> {
    await this.halt()
  }

  /** Starts the relays again on their own data, and waits until they are ready. */
  async restart(): Promise<void> {
    await this.halt()
    this.process = this.spawn(this.args.filter((a) => a !== '--fresh'))
    await this.waitUntilReady(60_000)
  }

  async stop(): Promise<void> {
    await this.halt()
    rmSync(this.dir, { recursive: true, force: true })
  }

  private async halt(): Promise<void> {
    if (this.process.exitCode === null && this.process.signalCode === null) {
      const exited = new Promise<void>((r) => this.process.once('exit', () => r()))
      this.process.kill('SIGTERM')
      // `dev` stops its relays and SIGKILLs any that hang after 3 s.
      await Promise.race([exited, new Promise((r) => setTimeout(r, 6000))])
      if (this.process.exitCode === null && this.process.signalCode === null) this.process.kill('SIGKILL')
    }
  }
}

/** Refuses to start on ports where something already answers (e.g. a cluster left over from an interrupted run). */
async function assertPortsFree(basePort: number, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const port = basePort + i
    const answered = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(500) }).then(
      () => true,
      () => false,
    )
    if (answered) throw new Error(`e2e: port ${port} is already in use (a relay left over from an interrupted run?); find it with: ss -ltnp 'sport = :${port}'`)
  }
}
