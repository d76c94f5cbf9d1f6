/**
 * The client's targets measured in a real browser: the system Chromium
 * (see e2e/chromium.ts), the SDK's browser build (Vite), the page's real
 * IndexedDB and WebCrypto.
 *
 *   npm run bench:browser -w @stead/client
 */
import { mkdtempSync, readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium } from '@playwright/test'
import { SimCluster } from '@stead/sim'
import { build } from 'vite'
import { CHROMIUM_ARGS, ensureChromium } from '../../../e2e/chromium.ts'
import { createClient, memoryStorage, type ClientStorage } from '../src/index.node.ts'
import { fillCommitted } from './fill.ts'

/** A client's stored records after `updates` committed counter updates in envelopes of `perEnvelope`. */
async function storedRecords(c: SimCluster, updates: number, perEnvelope: number, keys: string[], crash: boolean): Promise<{ entries: Array<[string[], string]>; values: number[] }> {
  const disk = memoryStorage()
  let dead = false
  // With `crash`, the checkpoint close() writes never lands: the next open replays every stored commit.
  const keep: ClientStorage = { load: (k) => disk.load(k), loadRange: (p) => disk.loadRange(p), write: async (ch) => (dead ? undefined : disk.write(ch)), removeRange: (p) => disk.removeRange(p), close: async () => undefined }
  const clientOwner = await createClient(c.clientOptions({ storage: keep, batchIntervalMs: 1_000_000, maxBatchOps: perEnvelope }))
  const client = await clientOwner.space('bench')
  const values = await fillCommitted(client, c, keys, updates, perEnvelope)
  dead = crash
  await clientOwner.close()
  const entries = (await disk.loadRange([])).map((e): [string[], string] => [[...e.key], Buffer.from(e.value).toString('base64')])
  return { entries, values }
}

const out = mkdtempSync(join(tmpdir(), 'stead-browser-bench-'))
await build({
  logLevel: 'silent',
  configFile: false,
  resolve: { conditions: ['browser', 'import', 'default'] },
  build: { outDir: out, minify: true, lib: { entry: fileURLToPath(new URL('./browser-entry.ts', import.meta.url)), formats: ['es'], fileName: () => 'bench.js' } },
})
const page = `<!doctype html><meta charset="utf-8"><script type="module">import('/bench.js').then(() => { document.title = 'ready' })</script>`
const server = createServer((req, res) => {
  if (req.url === '/bench.js') res.writeHead(200, { 'content-type': 'text/javascript' }).end(readFileSync(join(out, 'bench.js')))
  else res.writeHead(200, { 'content-type': 'text/html' }).end(page)
}).listen(0, '127.0.0.1')
await new Promise((r) => server.once('listening', r))
const port = (server.address() as { port: number }).port

const browser = await chromium.launch({ executablePath: ensureChromium(), args: CHROMIUM_ARGS })
try {
  const tab = await browser.newPage()
  await tab.goto(`http://127.0.0.1:${port}/`)
  await tab.waitForFunction(() => document.title === 'ready')
  const keys = Array.from({ length: 100 }, (_, i) => `acct:${i}`)
  // Unreachable relays: opening must not wait for the network.
  const offline = (c: SimCluster) => ({ relays: ['ws://127.0.0.1:9'], cluster: c.descriptor })
  const version = browser.version()
  for (const [perEnvelope, crash] of [[100, false], [1, false], [100, true], [1, true]] as const) {
    const c = await SimCluster.start()
    // A crash leaves at most `checkpointEvery` (1,000) envelopes past the last checkpoint: store 950 past one.
    const updates = crash ? 10_000 + 950 * perEnvelope : 10_000
    const { entries, values } = await storedRecords(c, updates, perEnvelope, keys, crash)
    const name = `bench-${perEnvelope}-${crash}`
    const runs: number[] = []
    let crypto = ''
    for (let i = 0; i < 5; i++) {
      // The same stored records every time (an open that closes writes a checkpoint), in a fresh page.
      await tab.evaluate(([n, e]) => (globalThis as unknown as { steadBench: { load(n: string, e: unknown): Promise<void> } }).steadBench.load(n, e), [name, entries] as const)
      await tab.reload()
      await tab.waitForFunction(() => document.title === 'ready')
      const r = await tab.evaluate(
        ([n, o, k]) => (globalThis as unknown as { steadBench: { open(n: string, o: unknown, k: string[]): Promise<{ ms: number; values: number[]; crypto: string }> } }).steadBench.open(n, o, k),
        [name, offline(c), keys] as const,
      )
      if (JSON.stringify(r.values) !== JSON.stringify(values)) throw new Error('the browser client opened with other values')
      runs.push(r.ms)
      crypto = r.crypto
    }
    await c.close()
    runs.sort((a, b) => a - b)
    console.log(JSON.stringify({ bench: 'open a client from IndexedDB in Chromium', chromium: version, crypto, updates, envelopes: updates / perEnvelope, closed: crash ? 'crashed (no final checkpoint)' : 'cleanly', records: entries.length, medianMs: +(runs[2] as number).toFixed(1), runsMs: runs.map((x) => +x.toFixed(1)) }))
  }
  const c = await SimCluster.start()
  await c.close()
  const vis = await tab.evaluate(([o]) => (globalThis as unknown as { steadBench: { visibility(o: unknown, n: number): Promise<unknown> } }).steadBench.visibility(o, 20_000), [offline(c)] as const)
  console.log(JSON.stringify({ bench: 'update visible in value and to subscribers in Chromium (ms)', chromium: version, ...(vis as object) }))
} finally {
  await browser.close()
  server.close()
}
