#!/usr/bin/env node
/**
 * Peer-to-peer report (a report, never a test), after the IM-CRDT paper's
 * evaluation (Merkle-CRDTs over IPFS/libp2p): `n` Node SDK clients with
 * `libp2pPeers()` on loopback find each other through a real 4-relay
 * cluster (a full mesh of direct connections), then every relay is killed
 * and the clients only have each other. Updates are set adds of unique strings (the paper's
 * workload); `--updaters` clients (1: the paper's sequential case) each add
 * `--updates` elements, one per `--interval` ms. For every update the
 * report takes the paper's "maximum latency" (from the add at its author
 * to the last other client that shows it) and the bytes peers sent for it.
 *
 *   npm run bench:peers -- [--peers 2,4,8,16,32] [--updaters 1,4] [--updates 10] [--interval 100] [--out FILE]
 */
import { writeFileSync } from 'node:fs'
import { createClient, memoryStorage, type SteadClient } from '@stead/client'
import { TestCluster } from '@stead/relay/testing'
import { libp2pPeers, type Libp2pPeers } from '@stead/client/peers'
import { reportArgs } from './args.ts'
import { median } from './stats.ts'

const values = reportArgs(`usage: npm run bench:peers -- [--peers 2,4,8,16,32] [--updaters 1,4] [--updates 10] [--interval 100] [--out FILE]`, {
  peers: { type: 'string', default: '2,4,8,16,32' },
  updaters: { type: 'string', default: '1,4' },
  updates: { type: 'string', default: '10' },
  interval: { type: 'string', default: '100' },
  out: { type: 'string' },
})
const list = (s: string, what: string): number[] =>
  s.split(',').map((x) => {
    const v = Number(x)
    if (!Number.isSafeInteger(v) || v < 1) throw new Error(`--${what} takes whole numbers of at least 1, got ${x}`)
    return v
  })
const sizes = list(values.peers, 'peers')
const updaterCounts = list(values.updaters, 'updaters')
const [updates, interval] = [Number(values.updates), Number(values.interval)]

const SPACE = 'imcrdt'

interface Point {
  peers: number
  updaters: number
  updates: number
  /** Per update: time from its add to the last other client showing it (ms). */
  maxLatencyMs: { p50: number; max: number; mean: number }
  /** Bytes all clients sent to peers, per update (protocol messages, before noise and yamux). */
  bytesPerUpdate: number
  /** ...and per update and receiving client. */
  bytesPerUpdatePerPeer: number
  /** Envelope copies sent per update (n - 1 when each peer gets one copy). */
  framesPerUpdate: number
  /** How long the full mesh took to form through the relays. */
  connectMs: number
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

async function until(what: string, check: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

async function point(n: number, updaters: number): Promise<Point> {
  const clients: Array<{ client: SteadClient; peers: Libp2pPeers; seen: Map<string, number> }> = []
  const cluster = await TestCluster.create(4)
  await cluster.startAll()
  const relays = cluster.relays.map((r) => `ws://${r.api}`)
  const started = Date.now()
  try {
    for (let i = 0; i < n; i++) {
      const peers = libp2pPeers()
      const client = await createClient({ relays, storage: memoryStorage(), peers, batchIntervalMs: 1 })
      const space = await client.space(SPACE)
      const seen = new Map<string, number>()
      const set = space.set<string>('s')
      set.subscribe(() => {
        const now = performance.now()
        for (const e of set.value) if (!seen.has(e)) seen.set(e, now)
      })
      clients.push({ client, peers, seen })
    }
    // Every pair vouched for by the relays and linked; then the relays go.
    await until('a full mesh', () => clients.every((c) => (c.client.peers?.exchanging ?? 0) >= n - 1), 120_000)
    for (let i = 0; i < cluster.relays.length; i++) cluster.kill(i)
    const connectMs = Date.now() - started
    const sentBefore = clients.reduce((a, c) => a + (c.client.peers?.bytesSent ?? 0), 0)
    const framesBefore = clients.reduce((a, c) => a + (c.client.peers?.framesSent ?? 0), 0)
    const issued = new Map<string, { at: number; by: number }>()
    // Each updater adds one unique element per interval; updaters start together.
    await Promise.all(
      clients.slice(0, updaters).map(async (c, u) => {
        const set = (await c.client.space(SPACE)).set<string>('s')
        for (let k = 0; k < updates; k++) {
          const element = `${u}:${k}`
          issued.set(element, { at: performance.now(), by: u })
          await set.add(element)
          await sleep(interval)
        }
      }),
    )
    const total = updaters * updates
    await until('every client shows every update', () => clients.every((c) => c.seen.size >= total), 60_000)
    const latencies = [...issued].map(([element, { at, by }]) => Math.max(...clients.filter((_, i) => i !== by).map((c) => (c.seen.get(element) as number) - at)))
    const sent = clients.reduce((a, c) => a + (c.client.peers?.bytesSent ?? 0), 0) - sentBefore
    const frames = clients.reduce((a, c) => a + (c.client.peers?.framesSent ?? 0), 0) - framesBefore
    return {
      peers: n,
      updaters,
      updates: total,
      maxLatencyMs: { p50: round(median(latencies)), max: round(Math.max(...latencies)), mean: round(latencies.reduce((a, b) => a + b, 0) / latencies.length) },
      bytesPerUpdate: Math.round(sent / total),
      framesPerUpdate: round(frames / total),
      bytesPerUpdatePerPeer: Math.round(sent / total / (n - 1)),
      connectMs,
    }
  } finally {
    await Promise.all(clients.map((c) => c.client.close()))
    await cluster.stopAll()
  }
}

const round = (x: number): number => Math.round(x * 10) / 10

const results: Point[] = []
for (const n of sizes) {
  for (const u of updaterCounts) {
    if (u > n) continue
    const p = await point(n, u)
    results.push(p)
    console.log(`peers=${n} updaters=${u} updates=${p.updates}: max latency p50 ${p.maxLatencyMs.p50} ms (max ${p.maxLatencyMs.max}), ${p.bytesPerUpdate} B sent per update (${p.bytesPerUpdatePerPeer} per receiving peer, ${p.framesPerUpdate} envelope copies), mesh in ${p.connectMs} ms`)
  }
}
console.log('\n| peers | updaters | updates | max latency p50 (ms) | max latency, worst (ms) | bytes sent per update | per receiving peer |\n| --- | --- | --- | --- | --- | --- | --- |')
for (const p of results) console.log(`| ${p.peers} | ${p.updaters} | ${p.updates} | ${p.maxLatencyMs.p50} | ${p.maxLatencyMs.max} | ${p.bytesPerUpdate} | ${p.bytesPerUpdatePerPeer} |`)
if (values.out) writeFileSync(values.out, JSON.stringify({ updates, interval, results }, null, 2) + '\n')
process.exit(0)
