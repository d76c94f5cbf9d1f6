import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { toHex } from '@stead/core'
import { generateIdentity, writeIdentity } from '../../src/process/config.ts'

/** For tests elsewhere (the simulator's) that weaken a relay's clock validator to show it is caught. */
export { ClockVotes } from '../../src/runtime/clock-votes.ts'

const BIN = resolve(import.meta.dirname, '../../bin/stead-relay.mjs')

/** Ports this process handed out: each once. */
const given = new Set<number>()

/**
 * A free port for a relay to bind later, below the kernel's ephemeral range
 * (32768 and up on Linux and macOS): a port the kernel picked for us would
 * be in that range, where the outgoing connections of relays dialling each
 * other and of clients take ports too, and one did take a relay's port
 * between this check and the relay's bind. Random in 20000-32767, checked by
 * binding it.
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_768)
    if (given.has(port) || !(await bindable(port))) continue
    given.add(port)
    return port
  }
}

function bindable(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const srv = createServer()
    srv.once('error', () => ok(false))
    srv.listen(port, '127.0.0.1', () => srv.close(() => ok(true)))
  })
}

export interface TestRelay {
  readonly id: string
  readonly api: string
  readonly data: string
  process: ChildProcess | null
  log: string
}

/** Real relay processes on loopback, each with its own LMDB dir: the way operators run them. */
export class TestCluster {
  readonly dir = mkdtempSync(join(tmpdir(), 'stead-it-'))
  readonly relays: TestRelay[] = []
  readonly clusterPath = join(this.dir, 'cluster.json')

  static async create(n: number, extra: Record<string, unknown> = {}): Promise<TestCluster> {
    const c = new TestCluster()
    const entries = []
    for (let i = 0; i < n; i++) {
      const id = `r${i + 1}`
      const data = join(c.dir, id)
      mkdirSync(data, { recursive: true })
      const key = generateIdentity()
      writeIdentity(join(data, 'key.json'), key)
      const api = `127.0.0.1:${await freePort()}`
      entries.push({ id, publicKey: toHex(key.publicKey), mesh: `/ip4/127.0.0.1/tcp/${await freePort()}`, api })
      c.relays.push({ id, api, data, process: null, log: '' })
    }
    // Open spaces unless the test says otherwise: most tests write to spaces of their own naming.
    writeFileSync(c.clusterPath, JSON.stringify({ f: Math.floor((n - 1) / 3), relays: entries, openSpaces: true, ...extra }, null, 2))
    return c
  }

  /**
   * A cluster on the data dirs and cluster file a release left, packed in
   * the tarball `fixture` (`r1/`, `r2/`, ... and `cluster.json`), unpacked
   * here and put on free ports: the same keys and data, other addresses.
   */
  static async fromFixture(fixture: string): Promise<TestCluster> {
    const c = new TestCluster()
    const untar = spawnSync('tar', ['-xzf', fixture, '-C', c.dir])
    if (untar.status !== 0) throw new Error(`tar -xzf ${fixture}: ${untar.stderr.toString()}`)
    const file = JSON.parse(readFileSync(c.clusterPath, 'utf8')) as { relays: Array<{ id: string; api: string; mesh: string }> }
    for (const entry of file.relays) {
      const data = join(c.dir, entry.id)
      entry.api = `127.0.0.1:${await freePort()}`
      entry.mesh = `/ip4/127.0.0.1/tcp/${await freePort()}`
      c.relays.push({ id: entry.id, api: entry.api, data, process: null, log: '' })
    }
    writeFileSync(c.clusterPath, JSON.stringify(file, null, 2))
    return c
  }

  start(i: number, args: string[] = []): void {
    const r = this.relays[i] as TestRelay
    const child = spawn(process.execPath, [BIN, 'start', '--config', this.clusterPath, '--id', r.id, '--data', r.data, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    r.log = ''
    child.stdout?.on('data', (d: Buffer) => (r.log += d.toString()))
    child.stderr?.on('data', (d: Buffer) => (r.log += d.toString()))
    r.process = child
  }

  async startAll(args: (i: number) => string[] = () => []): Promise<void> {
    this.relays.forEach((_, i) => this.start(i, args(i)))
    await Promise.all(this.relays.map((_, i) => this.waitHealthy(i)))
  }

  /** kill -9: no shutdown hook runs, whatever was in flight is lost. */
  kill(i: number): void {
    const r = this.relays[i] as TestRelay
    r.process?.kill('SIGKILL')
    r.process = null
  }

  async waitHealthy(i: number, timeoutMs = 60_000): Promise<void> {
    await waitHealthy(this.relays[i] as TestRelay, timeoutMs)
  }

  async json<T = Record<string, unknown>>(i: number, path: string): Promise<T> {
    const r = this.relays[i] as TestRelay
    try {
      const res = await fetch(`http://${r.api}${path}`)
      return (await res.json()) as T
    } catch (err) {
      // A relay that died says why: its own last words, not just ECONNREFUSED.
      if (r.process && r.process.exitCode !== null) throw new Error(`relay ${r.id} exited (${r.process.exitCode}):\n${r.log.slice(-4000)}`)
      throw err
    }
  }

  async stopAll(): Promise<void> {
    await stopRelays(this.relays, 5000)
  }
}

/** A relay process a test or benchmark started, with what it printed. */
export interface RelayProcess {
  readonly id: string
  readonly api: string
  process: ChildProcess | null
  log: string
}

/** Polls GET /health until the relay answers; fails with its log if it exits or takes longer than `timeoutMs`. */
export async function waitHealthy(r: RelayProcess, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`http://${r.api}/health`)
      if (res.ok) return
    } catch {
      // not up yet
    }
    if (r.process && r.process.exitCode !== null) throw new Error(`relay ${r.id} exited:\n${r.log}`)
    await sleep(100)
  }
  throw new Error(`relay ${r.id} not healthy after ${timeoutMs} ms:\n${r.log.slice(-3000)}`)
}

/** SIGTERM to every running relay, SIGKILL to any still up after `graceMs`; resolves when all have exited. */
export async function stopRelays(relays: readonly RelayProcess[], graceMs: number): Promise<void> {
  await Promise.all(
    relays.map(
      (r) =>
        new Promise<void>((done) => {
          if (!r.process || r.process.exitCode !== null || r.process.signalCode !== null) return done()
          r.process.once('exit', () => done())
          r.process.kill('SIGTERM')
          setTimeout(() => r.process?.kill('SIGKILL'), graceMs).unref()
        }),
    ),
  )
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}

/** Polls `probe` every `everyMs` until it gives a value (not undefined or false; a throw counts as not yet), for at most `timeoutMs`. */
export async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 30_000, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  while (Date.now() < deadline) {
    try {
      const v = await probe()
      if (v !== undefined && v !== false) return v
    } catch (err) {
      last = err
    }
    await sleep(everyMs)
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`)
}
