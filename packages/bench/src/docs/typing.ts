#!/usr/bin/env node
/**
 * `npm run bench:typing`: two users typing into one text at human speed
 * (`--keys-per-second` each, default 10, for `--seconds`, default 20)
 * through a real 4-relay cluster on loopback, and the same through Yjs +
 * y-websocket on the same machine: per keystroke, the time until it shows
 * at the other user, and the WebSocket bytes each side sent and received.
 * Alice types letters at the start of the text, Bob digits at its end, so
 * each side counts the other's keys in what it shows. A report, never a test.
 */
import { WebsocketProvider } from 'y-websocket'
import * as Y from 'yjs'
import { reportArgs } from '../args.ts'
import { BenchCluster, freePort } from '../cluster.ts'
import { openSdkSpace } from '../load/sdk.ts'
import { countingSocket, startYjsServer, type YjsServer } from '../yjs.ts'

const values = reportArgs('usage: npm run bench:typing -- [--keys-per-second 10] [--seconds 20] [--batch-ms 10]', {
  'keys-per-second': { type: 'string', default: '10' },
  seconds: { type: 'string', default: '20' },
  'batch-ms': { type: 'string', default: '10' },
})
const keysPerSecond = Number(values['keys-per-second'])
const seconds = Number(values.seconds)
const batchIntervalMs = Number(values['batch-ms'])
if (!(keysPerSecond > 0) || !(seconds > 0)) throw new Error('--keys-per-second and --seconds take positive numbers')

/** One user's text, whatever the system: type a key at a place, read the text, hear changes, count bytes. */
interface Typist {
  type(at: 'start' | 'end', ch: string): void
  text(): string
  subscribe(listener: () => void): () => void
  bytes(): { in: number; out: number }
  close(): Promise<void> | void
}

const LETTERS = 'abcdefghij'
const DIGITS = '0123456789'
const count = (s: string, alphabet: string): number => [...s].filter((c) => alphabet.includes(c)).length

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN
}

/** Both type at once for the run; returns per-keystroke visibility at the other user and bytes per keystroke. */
async function run(name: string, alice: Typist, bob: Typist): Promise<void> {
  const keys = Math.round(keysPerSecond * seconds)
  const typedAt: Array<{ by: 'alice' | 'bob'; n: number; at: number }> = []
  const visible: number[] = []
  const seen = { alice: 0, bob: 0 }
  // Bob shows Alice's letters, Alice Bob's digits: a key is visible when the other side holds that many.
  const watch = (reader: Typist, alphabet: string, by: 'alice' | 'bob') =>
    reader.subscribe(() => {
      const now = performance.now()
      const have = count(reader.text(), alphabet)
      for (const t of typedAt) if (t.by === by && t.n > seen[by] && t.n <= have) visible.push(now - t.at)
      seen[by] = Math.max(seen[by], have)
    })
  const stops = [watch(bob, LETTERS, 'alice'), watch(alice, DIGITS, 'bob')]
  const before = { a: alice.bytes(), b: bob.bytes() }
  const gap = 1000 / keysPerSecond
  const t0 = performance.now()
  for (let i = 0; i < keys; i++) {
    // Each user keeps human pace; the two are half a key apart.
    await new Promise((r) => setTimeout(r, Math.max(0, t0 + i * gap - performance.now())))
    typedAt.push({ by: 'alice', n: i + 1, at: performance.now() })
    alice.type('start', LETTERS[i % 10] as string)
    await new Promise((r) => setTimeout(r, gap / 2))
    typedAt.push({ by: 'bob', n: i + 1, at: performance.now() })
    bob.type('end', DIGITS[i % 10] as string)
  }
  const deadline = performance.now() + 30_000
  while ((seen.alice < keys || seen.bob < keys) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  for (const s of stops) s()
  const same = alice.text() === bob.text()
  const up = (alice.bytes().out - before.a.out + bob.bytes().out - before.b.out) / (2 * keys)
  const down = (alice.bytes().in - before.a.in + bob.bytes().in - before.b.in) / (2 * keys)
  console.log(
    `${name}: ${2 * keys} keys at ${keysPerSecond}/s per user; visible at the other user p50 ${quantile(visible, 0.5).toFixed(1)} ms, p90 ${quantile(visible, 0.9).toFixed(1)} ms, max ${Math.max(...visible).toFixed(1)} ms (${visible.length} seen); per key ${up.toFixed(0)} B up, ${down.toFixed(0)} B down; texts ${same ? 'equal' : 'DIFFER'}`,
  )
}

async function steadTypist(cluster: BenchCluster, name: string): Promise<Typist> {
  const counts = { in: 0, out: 0 }
  const relays = cluster.descriptor.relays.map((r) => `http://${r.api}`)
  const connect = (url: string) => countingSocket(url, counts) as never
  const { owner, space } = await openSdkSpace({ relays, cluster: cluster.descriptor, seed: `stead-bench-typing-${name}`, space: 'typing', options: { batchIntervalMs, connect } })
  const text = space.text('doc')
  return {
    type: (at, ch) => void text.insert(at === 'start' ? 0 : text.length, ch),
    text: () => text.value,
    subscribe: (l) => text.subscribe(l),
    bytes: () => ({ ...counts }),
    close: () => owner.close(),
  }
}

async function yjsTypist(server: YjsServer, name: string): Promise<Typist> {
  const doc = new Y.Doc()
  const counts = { in: 0, out: 0 }
  class CountingWebSocket {
    constructor(url: string) {
      return countingSocket(url, counts)
    }
  }
  const provider = new WebsocketProvider(server.url, 'typing', doc, { WebSocketPolyfill: CountingWebSocket as unknown as typeof globalThis.WebSocket, disableBc: true })
  await new Promise<void>((resolve) => (provider.synced ? resolve() : provider.once('sync', (ok: boolean) => ok && resolve())))
  const text = doc.getText('doc')
  void name
  return {
    type: (at, ch) => text.insert(at === 'start' ? 0 : text.length, ch),
    text: () => text.toString(),
    subscribe: (l) => {
      text.observe(l)
      return () => text.unobserve(l)
    },
    bytes: () => ({ ...counts }),
    close: () => {
      provider.destroy()
      doc.destroy()
    },
  }
}

const cluster = await BenchCluster.start({ kind: 'stead', n: 4 })
const yjs = await startYjsServer(await freePort())
try {
  const [sa, sb] = [await steadTypist(cluster, 'alice'), await steadTypist(cluster, 'bob')]
  await run('stead (4 relays)', sa, sb)
  await sa.close()
  await sb.close()
  const [ya, yb] = [await yjsTypist(yjs, 'alice'), await yjsTypist(yjs, 'bob')]
  await run('yjs + y-websocket', ya, yb)
  ya.close()
  yb.close()
} finally {
  await yjs.stop()
  await cluster.stop()
}
