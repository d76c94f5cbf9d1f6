import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { SteadError, toHex } from '@stead/core'
import { ConfigError, clusterToJson, generateIdentity, loadCluster, loadIdentity, parseCluster, writeIdentity } from './config.ts'
import { BYZANTINE_STRATEGIES, type ByzantineStrategy } from './consensus/index.ts'
import { DEFAULT_LIMITS, type ApiLimits } from './api.ts'
import { runRelay } from './relay.ts'

const USAGE = `stead-relay: a Stead relay server

  stead-relay keygen [--out key.json]
      Writes a new Ed25519 key (mode 0600) and prints its public key.

  stead-relay start --config cluster.json --id r1 --data ./data/r1
                    [--key ./data/r1/key.json] [--byzantine MODE]
                    [--tls-cert cert.pem --tls-key key.pem]
                    [--idle-block-delay-ms 100] [--leader-timeout-ms 500]
                    [--memory-budget-mb 512] [--limit name=value ...]
      Runs one relay of the cluster. The key defaults to <data>/key.json.
      --memory-budget-mb bounds what it holds for clients (queued envelopes,
      send buffers, verification cache); --limit sets one client API limit,
      e.g. --limit maxSessionsPerKey=8 (names and defaults: relay/README.md).
      The data dir (mode 0700, files 0600) is locked while the relay runs and
      bound to the cluster's committee: another cluster file is refused.
      A relay with nothing to order waits --idle-block-delay-ms before its
      next block (lower: faster first commit after a quiet spell, more idle
      CPU and store growth); it waits up to --leader-timeout-ms for a round's
      leader.

  stead-relay dev [--relays 4] [--base-port 7401] [--byzantine 0|1] [--byzantine-mode equivocate]
                  [--dir .stead/dev] [--fresh] [--idle-block-delay-ms N] [--leader-timeout-ms N]
      Generates a local cluster (keys, cluster.json, LMDB data dirs under
      --dir), runs every relay as its own process and prints the URLs.
      Relay i serves HTTP and WebSocket at 127.0.0.1:<base-port + i - 1>.
      Its cluster file has "openSpaces": true (any space may be created).

Byzantine modes (for demos and tests): ${BYZANTINE_STRATEGIES.join(', ')}`

const here = dirname(fileURLToPath(import.meta.url))

function die(message: string): never {
  console.error(`stead-relay: ${message}`)
  process.exit(2)
}

/** Every command takes --help / -h. */
const HELP_FLAG = { help: { type: 'boolean', short: 'h' } } as const

/** Runs parseArgs; a bad command line gets one line and the usage (exit 2), --help the usage (exit 0). */
function parse<T extends { values: { help?: boolean | undefined } }>(run: () => T): T {
  let parsed: T
  try {
    parsed = run()
  } catch (err) {
    const code = (err as { code?: unknown }).code
    if (typeof code !== 'string' || !code.startsWith('ERR_PARSE_ARGS')) throw err
    const message = (err as Error).message
    const quoted = /'([^']+)'/.exec(message)?.[1] ?? ''
    const problem =
      code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION'
        ? `unknown option ${quoted}`
        : code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL'
          ? `unexpected argument ${quoted}`
          : code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && /argument missing/.test(message)
            ? `option ${quoted.split(' ')[0] ?? ''} needs a value`
            : (message.split('\n')[0] ?? message)
    die(`${problem}\n\n${USAGE}`)
  }
  if (parsed.values.help) {
    console.log(USAGE)
    process.exit(0)
  }
  return parsed
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

/**
 * `--limit name=value` flags: any of the client API limits, by the names
 * relay/README.md lists; the rate limits' fields as `rateLimit.perSecond`.
 */
function apiLimits(flags: readonly string[]): Partial<ApiLimits> {
  const out: Record<string, number | Record<string, number>> = {}
  const names = Object.entries(DEFAULT_LIMITS).flatMap(([k, v]) => (typeof v === 'number' ? [k] : Object.keys(v as object).map((f) => `${k}.${f}`)))
  for (const flag of flags) {
    const [name = '', value] = flag.split('=')
    if (!names.includes(name)) die(`--limit ${flag}: unknown limit ${name} (limits: ${names.join(', ')})`)
    const n = Number(value)
    if (value === undefined || !Number.isSafeInteger(n) || n < 1) die(`--limit ${flag}: the value must be a positive whole number`)
    const [top, field] = name.split('.') as [keyof ApiLimits, string | undefined]
    if (field === undefined) out[top] = n
    else out[top] = { ...(DEFAULT_LIMITS[top] as unknown as Record<string, number>), ...(out[top] as Record<string, number> | undefined), [field]: n }
  }
  return out as Partial<ApiLimits>
}

function megabytes(flag: string, v: string): number {
  const n = Number(v)
  if (!Number.isInteger(n) || n < 16 || n > 1024 * 1024) die(`${flag} must be a whole number of MiB from 16 up, got ${v}`)
  return n * 1024 * 1024
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
      const { values } = parse(() => parseArgs({ args: rest, options: { out: { type: 'string', default: 'key.json' }, ...HELP_FLAG } }))
      const out = values.out as string
      if (existsSync(out)) die(`${out} exists; refusing to overwrite a key`)
      const id = generateIdentity()
      writeIdentity(out, id)
      console.log(`wrote ${out}\npublicKey ${toHex(id.publicKey)}`)
      return
    }
    case 'start': {
      // Whatever the relay writes (store, lock, metadata) is its owner's alone.
      process.umask(0o077)
      const { values } = parse(() =>
        parseArgs({
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
            limit: { type: 'string', multiple: true },
            'memory-budget-mb': { type: 'string' },
            ...HELP_FLAG,
          },
        }),
      )
      if (!values.config || !values.id || !values.data) die(`start needs --config, --id and --data\n\n${USAGE}`)
      if (Boolean(values['tls-cert']) !== Boolean(values['tls-key'])) die('--tls-cert and --tls-key go together')
      // Refuse bad flags before touching any file.
      const limits = apiLimits(values.limit ?? [])
      const memoryBudget = values['memory-budget-mb'] === undefined ? {} : { memoryBudgetBytes: megabytes('--memory-budget-mb', values['memory-budget-mb']) }
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
        limits,
        ...memoryBudget,
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
  const { values } = parse(() =>
    parseArgs({
      args,
      options: {
        relays: { type: 'string', default: '4' },
        'base-port': { type: 'string', default: '7401' },
        byzantine: { type: 'string', default: '0' },
        'byzantine-mode': { type: 'string', default: 'equivocate' },
        dir: { type: 'string', default: '.stead/dev' },
        fresh: { type: 'boolean', default: false },
        ...TIMING_FLAGS,
        ...HELP_FLAG,
      },
    }),
  )
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
  // A dev cluster serves any space (`start` on a cluster file defaults to the listed ones only).
  const cluster = parseCluster({ f, relays: relays.map(({ data: _data, ...r }) => r), openSpaces: true }, clusterPath)
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
