// `npm run dev` at the repo root: a local 4-relay cluster (`stead-relay dev`)
// plus the demo app's Vite dev server, wired to each other. Arguments are
// passed to `stead-relay dev` (e.g. `npm run dev -- --fresh --byzantine 1`).
// Ctrl-C stops both.
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createWriteStream, existsSync, mkdirSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import type { ViteDevServer } from 'vite'

const demoDir = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const root = resolve(demoDir, '../..')
const relayArgs = process.argv.slice(2)

if (relayArgs.includes('--help') || relayArgs.includes('-h')) {
  console.log(`npm run dev [-- <stead-relay dev options>]

Starts a local Stead cluster with \`stead-relay dev --relays 4\` and serves the
demo app with Vite. Options go to stead-relay dev, for example:
  --fresh           start the cluster over with new keys and data
  --byzantine 1     run the last relay in a Byzantine mode (--byzantine-mode MODE)
  --base-port 7401  first relay port
  --dir .stead/dev  where the cluster's keys and data live; a second cluster
                    running at the same time needs its own --dir (and --base-port)
Relay logs go to <dir>/relays.log (default .stead/dev/relays.log).`)
  process.exit(0)
}

const { values } = parseArgs({
  args: relayArgs,
  strict: false,
  options: { relays: { type: 'string' }, 'base-port': { type: 'string' }, dir: { type: 'string' } },
})
const n = Number(values.relays ?? 4)
const basePort = Number(values['base-port'] ?? 7401)
const clusterDir = resolve(root, typeof values.dir === 'string' ? values.dir : '.stead/dev')
const relayUrls = Array.from({ length: n }, (_, i) => `ws://127.0.0.1:${basePort + i}`)

mkdirSync(clusterDir, { recursive: true })
const logPath = join(clusterDir, 'relays.log')
const log = createWriteStream(logPath, { flags: 'a' })

const relayBin = join(root, 'relay/bin/stead-relay.mjs')
const relays = spawn(process.execPath, [relayBin, 'dev', '--relays', String(n), ...relayArgs.filter((a, i, all) => !(a === '--relays' || all[i - 1] === '--relays'))], {
  cwd: root,
  stdio: ['ignore', 'pipe', 'pipe'],
})
let stopping = false
let vite: ViteDevServer | null = null

// The cluster's own summary lines and anything alarming go to the terminal; every relay log line goes to the file.
function forward(stream: NodeJS.ReadableStream): void {
  let buffered = ''
  stream.on('data', (chunk: Buffer) => {
    log.write(chunk)
    buffered += chunk.toString()
    const lines = buffered.split('\n')
    buffered = lines.pop() ?? ''
    for (const line of lines) {
      const fromRelay = /^\[r\d+/.test(line)
      // A relay's refusal to start ("[r1] stead-relay: data dir … is in use …") says what to do: show it.
      if (!fromRelay || /\b(WARN|ERROR|exited)\b|Error:|\] stead-relay: /.test(line)) process.stdout.write(`[relays] ${line}\n`)
    }
  })
}
forward(relays.stdout)
forward(relays.stderr)
relays.on('exit', (code, signal) => {
  if (stopping) return
  // Its reason is the `stead-relay…:` line above (exit 2: something to fix, which that line names).
  console.error(`[relays] stead-relay dev exited (${signal ?? code}): the reason is in the lines above${code === 2 ? '' : `; all relay logs: ${logPath}`}`)
  void stop(code === 2 ? 2 : 1)
})

async function waitForRelays(timeoutMs: number): Promise<string[]> {
  const deadline = Date.now() + timeoutMs
  const pending = new Set(relayUrls.map((u) => u.replace(/^ws/, 'http')))
  while (pending.size && Date.now() < deadline) {
    await Promise.all(
      [...pending].map(async (url) => {
        try {
          const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(500) })
          if (res.ok) pending.delete(url)
        } catch {
          /* not up yet */
        }
      }),
    )
    if (pending.size) await new Promise((r) => setTimeout(r, 250))
  }
  return [...pending]
}

/**
 * The dev cluster's descriptor (f, relay ids and keys), which the demo pins
 * instead of trusting the relays on first use, and a short fingerprint of it:
 * the demo keeps one IndexedDB database per cluster.
 */
function clusterDescriptor(): { descriptor: string; tag: string } {
  const file = join(clusterDir, 'cluster.json')
  if (!existsSync(file)) return { descriptor: '', tag: '' }
  const cluster = JSON.parse(readFileSync(file, 'utf8')) as { f?: number; relays?: Array<{ id: string; publicKey: string; api?: string }> }
  const relays = (cluster.relays ?? []).map(({ id, publicKey, api }) => ({ id, publicKey, ...(api ? { api } : {}) }))
  const keys = relays.map((r) => r.publicKey).join(',')
  return { descriptor: JSON.stringify({ f: cluster.f, relays }), tag: createHash('sha256').update(keys).digest('hex').slice(0, 8) }
}

async function stop(code = 0): Promise<void> {
  if (stopping) return
  stopping = true
  await vite?.close().catch(() => {})
  if (relays.exitCode === null && relays.signalCode === null) {
    relays.kill('SIGTERM')
    await new Promise<void>((r) => {
      relays.once('exit', () => r())
      setTimeout(() => r(), 5000).unref()
    })
  }
  log.end()
  process.exit(code)
}
process.once('SIGINT', () => void stop(0))
process.once('SIGTERM', () => void stop(0))

async function main(): Promise<void> {
  const notUp = await waitForRelays(30_000)
  if (stopping) return
  if (notUp.length) console.warn(`[relays] not answering yet: ${notUp.join(', ')} (the demo works offline and connects when they are up)`)

  process.env.VITE_STEAD_RELAYS = relayUrls.join(',')
  const { descriptor, tag } = clusterDescriptor()
  process.env.VITE_STEAD_CLUSTER = descriptor
  process.env.VITE_STEAD_CLUSTER_TAG = tag
  const { createServer } = await import('vite')
  vite = await createServer({ root: demoDir, configFile: join(demoDir, 'vite.config.ts'), server: { strictPort: false } })
  await vite.listen()
  const url = vite.resolvedUrls?.local[0] ?? `http://127.0.0.1:${vite.config.server.port}/`
  console.log(`
    Stead demo: ${url}
    Open it as two users side by side:
      ${url}?user=Alice
      ${url}?user=Bob
    Relays: ${relayUrls.join(' ')}   (logs: ${logPath})
    Ctrl-C stops the demo and the cluster.
  `)
}

await main()
