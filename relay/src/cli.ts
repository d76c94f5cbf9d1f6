import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { SteadError, toHex } from '@stead/core'
import { ConfigError, clusterToJson, generateIdentity, loadCluster, loadIdentity, parseCluster, writeIdentity } from './config.ts'
import { BYZANTINE_STRATEGIES, type ByzantineStrategy } from './consensus/index.ts'
import { runRelay } from './relay.ts'

const USAGE = `stead-relay: a Stead relay server

  stead-relay keygen [--out key.json]
      Writes a new Ed25519 key (mode 0600) and prints its public key.

  stead-relay start --config cluster.json --id r1 --data ./data/r1
                    [--key ./data/r1/key.json] [--byzantine MODE]
                    [--tls-cert cert.pem --tls-key key.pem]
                    [--idle-block-delay-ms 100] [--leader-timeout-ms 500]
      Runs one relay of the cluster. The key defaults to <data>/key.json.
      A relay with nothing to order waits --idle-block-delay-ms before its
      next block (lower: faster first commit after a quiet spell, more idle
      CPU and store growth); it waits up to --leader-timeout-ms for a round's
      leader.

  stead-relay dev [--relays 4] [--base-port 7401] [--byzantine 0|1] [--byzantine-mode equivocate]
                  [--dir .stead/dev] [--fresh] [--idle-block-delay-ms N] [--leader-timeout-ms N]
      Generates a local cluster (keys, cluster.json, LMDB data dirs under
      --dir), runs every relay as its own process and prints the URLs.
      Relay i serves HTTP and WebSocket at 127.0.0.1:<base-port + i - 1>.

Byzantine modes (for demos and tests): ${BYZANTINE_STRATEGIES.join(', ')}`

const here = dirname(fileURLToPath(import.meta.url))

function die(message: string): never {
  console.error(`stead-relay: ${message}`)
  process.exit(2)
}

/** Consensus timing flags shared by `start` and `dev`. */
const TIMING_FLAGS = { 'idle-block-delay-ms': { type: 'string' }, 'leader-timeout-ms': { type: 'string' } } as const

function timings(values: { 'idle-block-delay-ms'?: string | undefined; 'leader-timeout-ms'?: string | undefined }): { idleBlockDelayMs?: number; leaderTimeoutMs?: number } {
  const out: { idleBlockDelayMs?: number; leaderTimeoutMs?: number } = {}
  for (const [flag, field] of [
    ['idle-block-delay-ms', 'idleBlockDelayMs'],
    ['leader-timeout-ms', 'leaderTimeoutMs'],
  ] as const) {
    const v = values[flag]
    if (v === undefined) continue
    const n = Number(v)
    if (!Number.isInteger(n) || n < 1 || n > 60_000) die(`--${flag} must be a whole number of milliseconds from 1 to 60000, got ${v}`)
    out[field] = n
  }
  return out
}

function strategy(v: string | undefined): ByzantineStrategy | undefined {
  if (v === undefined) return undefined
  if (!BYZANTINE_STRATEGIES.includes(v as ByzantineStrategy)) die(`unknown Byzantine mode ${v} (modes: ${BYZANTINE_STRATEGIES.join(', ')})`)
  return v as ByzantineStrategy
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv
  switch (command) {
    case 'keygen': {
      const { values } = parseArgs({ args: rest, options: { out: { type: 'string', default: 'key.json' } } })
      const out = values.out as string
      if (existsSync(out)) die(`${out} exists; refusing to overwrite a key`)
      const id = generateIdentity()
      writeIdentity(out, id)
      console.log(`wrote ${out}\npublicKey ${toHex(id.publicKey)}`)
      return
    }
    case 'start': {
      const { values } = parseArgs({
        args: rest,
        options: {
          config: { type: 'string' },
          id: { type: 'string' },
          data: { type: 'string' },
          key: { type: 'string' },
          byzantine: { type: 'string' },
          'tls-cert': { type: 'string' },
          'tls-key': { type: 'string' },
          ...TIMING_FLAGS,
        },
      })
      if (!values.config || !values.id || !values.data) die(`start needs --config, --id and --data\n\n${USAGE}`)
      if (Boolean(values['tls-cert']) !== Boolean(values['tls-key'])) die('--tls-cert and --tls-key go together')
      const cluster = loadCluster(values.config)
      const identity = loadIdentity(values.key ?? join(values.data, 'key.json'))
      const entry = cluster.relays.find((r) => r.id === values.id)
      if (entry && toHex(entry.publicKey) !== toHex(identity.publicKey)) {
        die(`the key does not match relay ${values.id}'s publicKey in ${values.config}`)
      }
      const byzantine = strategy(values.byzantine)
      const relay = await runRelay({
        cluster,
        id: values.id,
        secretKey: identity.secretKey,
        dataDir: values.data,
        ...(byzantine ? { byzantine } : {}),
        consensus: timings(values),
        ...(values['tls-cert'] ? { tls: { cert: readFileSync(values['tls-cert']), key: readFileSync(values['tls-key'] as string) } } : {}),
      })
      const shutdown = () => void relay.stop().then(() => process.exit(0))
      process.once('SIGINT', shutdown)
      process.once('SIGTERM', shutdown)
      // Started by `dev`: go down with it, even if it was killed with SIGKILL.
      if (process.channel) process.once('disconnect', shutdown)
      return
    }
    case 'dev':
      return dev(rest)
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      console.log(USAGE)
      return
    default:
      die(`unknown command ${command}\n\n${USAGE}`)
  }
}

async function dev(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      relays: { type: 'string', default: '4' },
      'base-port': { type: 'string', default: '7401' },
      byzantine: { type: 'string', default: '0' },
      'byzantine-mode': { type: 'string', default: 'equivocate' },
      dir: { type: 'string', default: '.stead/dev' },
      fresh: { type: 'boolean', default: false },
      ...TIMING_FLAGS,
    },
  })
  timings(values) // refuse bad values before starting anything
  const passTimings = (['idle-block-delay-ms', 'leader-timeout-ms'] as const).flatMap((f) => (values[f] === undefined ? [] : [`--${f}`, values[f] as string]))
  const n = Number(values.relays)
  const basePort = Number(values['base-port'])
  const byzantine = Number(values.byzantine)
  if (!Number.isInteger(n) || n < 4) die('--relays must be at least 4 (N = 3f+1 with f >= 1)')
  if (!Number.isInteger(basePort) || basePort < 1 || basePort + n + 100 > 65535) die('--base-port must leave room for the relays')
  const f = Math.floor((n - 1) / 3)
  if (!Number.isInteger(byzantine) || byzantine < 0 || byzantine > f) die(`--byzantine must be between 0 and f = ${f}`)
  const mode = strategy(values['byzantine-mode'] as string) as ByzantineStrategy
  const dir = resolve(values.dir as string)
  const clusterPath = join(dir, 'cluster.json')
  mkdirSync(dir, { recursive: true })

  // Keys and data survive between runs, so a dev cluster keeps its state; --fresh starts over.
  const ids = Array.from({ length: n }, (_, i) => `r${i + 1}`)
  const relays = ids.map((id, i) => {
    const data = join(dir, id)
    if (values.fresh) rmSync(data, { recursive: true, force: true })
    mkdirSync(data, { recursive: true })
    const keyPath = join(data, 'key.json')
    if (!existsSync(keyPath)) writeIdentity(keyPath, generateIdentity())
    const key = loadIdentity(keyPath)
    return { id, publicKey: toHex(key.publicKey), mesh: `/ip4/127.0.0.1/tcp/${basePort + 100 + i}`, api: `127.0.0.1:${basePort + i}`, data }
  })
  const cluster = parseCluster({ f, relays: relays.map(({ data: _data, ...r }) => r) }, clusterPath)
  writeFileSync(clusterPath, JSON.stringify(clusterToJson(cluster), null, 2) + '\n')

  const bin = resolve(here, '../bin/stead-relay.mjs')
  const children: ChildProcess[] = []
  relays.forEach((r, i) => {
    const extra = i >= n - byzantine ? ['--byzantine', mode] : []
    // The IPC channel carries nothing; it closes when this process dies, however it dies.
    const child = spawn(process.execPath, [bin, 'start', '--config', clusterPath, '--id', r.id, '--data', r.data, ...extra, ...passTimings], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] })
    const prefix = `[${r.id}${extra.length ? ` byzantine:${mode}` : ''}] `
    for (const stream of [child.stdout, child.stderr]) {
      let buffered = ''
      stream?.on('data', (chunk: Buffer) => {
        buffered += chunk.toString()
        const lines = buffered.split('\n')
        buffered = lines.pop() ?? ''
        for (const line of lines) if (line.trim()) process.stdout.write(prefix + summarize(line) + '\n')
      })
    }
    child.on('exit', (code, signal) => process.stdout.write(`${prefix}exited (${signal ?? code})\n`))
    children.push(child)
  })
  console.log(`Stead dev cluster: ${n} relays, f = ${f}${byzantine ? `, ${byzantine} Byzantine (${mode})` : ''}`)
  console.log(`cluster file: ${clusterPath}`)
  for (const r of relays) console.log(`  ${r.id}  http://${r.api}  ws://${r.api}/v1/ws  data ${r.data}`)
  console.log('try: curl http://' + relays[0]?.api + '/v1/status')
  const stop = () => {
    for (const c of children) c.kill('SIGTERM')
    // Relays flush and close their store on SIGTERM; one that hangs is killed.
    setTimeout(() => {
      for (const c of children) if (c.exitCode === null) c.kill('SIGKILL')
      process.exit(0)
    }, 3000).unref()
  }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
}

/** Pino's JSON lines, shortened to level, message and a few fields for a readable terminal. */
function summarize(line: string): string {
  try {
    const o = JSON.parse(line) as Record<string, unknown>
    const { level, msg, time: _t, pid: _p, hostname: _h, name: _n, ...fields } = o
    const lvl = typeof level === 'number' ? (level >= 50 ? 'ERROR' : level >= 40 ? 'WARN' : 'info') : String(level)
    const extra = Object.entries(fields)
      .filter(([, v]) => v !== undefined && typeof v !== 'object')
      .map(([k, v]) => `${k}=${String(v)}`)
      .join(' ')
    return `${lvl} ${String(msg ?? '')} ${extra}`.trim()
  } catch {
    return line
  }
}


main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof ConfigError) die(err.message)
  // Typed errors explain themselves; a stack trace would bury the reason.
  if (err instanceof SteadError) die(err.message)
  console.error(err)
  process.exit(1)
})
