#!/usr/bin/env node
/**
 * Peer-to-peer report (a report, never a test), after the IM-CRDT paper's
 * evaluation (Merkle-CRDTs over IPFS/libp2p, its §4): `n` Node SDK clients
 * with `libp2pPeers()` on loopback find each other through a real 4-relay
 * cluster (a full mesh of direct connections), then every relay is killed
 * and the clients only have each other. Updates are set adds of unique
 * strings (the paper's workload); `--updaters` clients (1: the paper's
 * sequential case) each add `--updates` elements, one per `--interval` ms.
 * For every update the report takes the paper's "maximum latency" (from
 * the add at its author to the last other client that shows it), the
 * bytes peers sent for it, and the paper's breakdown (its Figure 6), from
 * the peer messages each client sent and got (timed as the hub sees them):
 *
 * - add: from the app's call to the envelope leaving its author (sealed,
 *   signed, stored, sent);
 * - announce: from there to a receiver first hearing of it (its frame, or
 *   its id in `news` or `have`);
 * - retrieve: from hearing of it to holding its frame (0 when the frame
 *   came first, as from its author);
 * - compute: from the frame to the set showing it (checks, causal
 *   delivery, apply, notify).
 *
 * `--delay MS` holds every peer message that long before it is delivered
 * (one-way latency, injected in the process: this kernel has no netem).
 *
 *   npm run bench:peers -- [--peers 2,5,10,20,50] [--updaters 1,5] [--updates 10] [--interval 1000] [--delay 0] [--out FILE]
 */
import { writeFileSync } from 'node:fs'
import { decode, openEnvelopeSync, type Envelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { createClient, memoryStorage, type PeerEvents, type PeerLink, type PeerNetwork, type SteadClient } from '@stead/client'
import { TestCluster } from '@stead/relay/testing'
import { libp2pPeers, type Libp2pPeers } from '@stead/client/peers'
import { reportArgs } from './args.ts'
import { median } from './stats.ts'

const values = reportArgs(`usage: npm run bench:peers -- [--peers 2,5,10,20,50] [--updaters 1,5] [--updates 10] [--interval 1000] [--delay 0] [--out FILE]`, {
  peers: { type: 'string', default: '2,5,10,20,50' },
  updaters: { type: 'string', default: '1,5' },
  updates: { type: 'string', default: '10' },
  interval: { type: 'string', default: '1000' },
  delay: { type: 'string', default: '0' },
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
const [updates, interval, delayMs] = [Number(values.updates), Number(values.interval), Number(values.delay)]
if (!Number.isFinite(delayMs) || delayMs < 0) throw new Error(`--delay takes milliseconds, got ${values.delay}`)

/** One peer message as a client's hub sent or got it: when, and its bytes (read after the run, so timing costs nothing). */
interface Heard {
  readonly at: number
  readonly bytes: Uint8Array
}

/**
 * A client's peer network as the report sees it: every message it sends
 * and gets is timed, and each one it gets is held `delayMs` first.
 */
function observed(inner: Libp2pPeers, log: { sent: Heard[]; got: Heard[] }): PeerNetwork {
  const wrapped = new Map<PeerLink, PeerLink>()
  const wrap = (link: PeerLink): PeerLink => {
    let w = wrapped.get(link)
    if (!w) {
      w = {
        peer: link.peer,
        key: link.key,
        send: (m) => {
          log.sent.push({ at: performance.now(), bytes: m.slice() })
          return link.send(m)
        },
        close: (why) => link.close(why),
      }
      wrapped.set(link, w)
    }
    return w
  }
  return {
    start: (events: PeerEvents, identity) =>
      inner.start(
        {
          opened: (link) => events.opened(wrap(link)),
          closed: (link) => events.closed(wrap(link)),
          addressesChanged: () => events.addressesChanged(),
          message: (link, m) => {
            const deliver = (): void => {
              log.got.push({ at: performance.now(), bytes: m })
              events.message(wrap(link), m)
            }
            if (delayMs > 0) setTimeout(deliver, delayMs)
            else deliver()
          },
        },
        identity,
      ),
    stop: () => inner.stop(),
    addresses: () => inner.addresses(),
    dial: (address) => inner.dial(address),
  }
}

/** The ids of the envelopes a message carries or names, with whether it carries the frame. */
function named(bytes: Uint8Array): Array<{ id: string; frame: Envelope | undefined }> {
  // [tag, kind, space, body]: the SDK's peer messages (packages/client/src/peers/peer-messages.ts).
  const [, kind, , body] = decode(bytes) as [string, string, string, Uint8Array[]]
  if (kind === 'env') return body.map((f) => openEnvelopeSync({ sha256: nodeCrypto.sha256, verify: () => true }, decode(f))).map((env) => ({ id: env.idHex, frame: env }))
  if (kind === 'news' || kind === 'have') return body.map((id) => ({ id: Buffer.from(id).toString('hex'), frame: undefined }))
  return []
}

/** The set element an envelope adds, if it adds one of the report's. */
function elementOf(env: Envelope): string | undefined {
  for (const u of env.updates) for (const op of u.ops) {
    const found = JSON.stringify(op).match(/"(\d+:\d+)"/)
    if (found) return found[1]
  }
  return undefined
}

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
  /** The paper's breakdown, means over every update and receiving client (ms). */
  breakdownMs: { add: number; announce: number; retrieve: number; compute: number }
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
  const clients: Array<{ client: SteadClient; peers: Libp2pPeers; seen: Map<string, number>; log: { sent: Heard[]; got: Heard[] } }> = []
  const cluster = await TestCluster.create(4)
  // Every client comes from 127.0.0.1: a relay's peer directory keeps 16 announcers per address by default.
  await cluster.startAll(() => ['--limit', 'peerAnnouncements.perAddress=64'])
  const relays = cluster.relays.map((r) => `ws://${r.api}`)
  const started = Date.now()
  try {
    for (let i = 0; i < n; i++) {
      const peers = libp2pPeers()
      const log = { sent: [] as Heard[], got: [] as Heard[] }
      const client = await createClient({ relays, storage: memoryStorage(), peers: observed(peers, log), batchIntervalMs: 1 })
      const space = await client.space(SPACE)
      const seen = new Map<string, number>()
      const set = space.set<string>('s')
      set.subscribe(() => {
        const now = performance.now()
        for (const e of set.value) if (!seen.has(e)) seen.set(e, now)
      })
      clients.push({ client, peers, seen, log })
    }
    // Every pair vouched for by the relays and linked; then the relays go.
    await until('a full mesh', () => clients.every((c) => (c.client.peers?.exchanging ?? 0) >= n - 1), 120_000)
    for (let i = 0; i < cluster.relays.length; i++) cluster.kill(i)
    const connectMs = Date.now() - started
    const sentBefore = clients.reduce((a, c) => a + (c.client.peers?.bytesSent ?? 0), 0)
    const framesBefore = clients.reduce((a, c) => a + (c.client.peers?.framesSent ?? 0), 0)
    for (const c of clients) {
      c.log.sent.length = 0
      c.log.got.length = 0
    }
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
    const breakdownMs = breakdown(clients, issued)
    return {
      peers: n,
      updaters,
      updates: total,
      maxLatencyMs: { p50: round(median(latencies)), max: round(Math.max(...latencies)), mean: round(latencies.reduce((a, b) => a + b, 0) / latencies.length) },
      bytesPerUpdate: Math.round(sent / total),
      framesPerUpdate: round(frames / total),
      bytesPerUpdatePerPeer: Math.round(sent / total / (n - 1)),
      connectMs,
      breakdownMs,
    }
  } finally {
    await Promise.all(clients.map((c) => c.client.close()))
    await cluster.stopAll()
  }
}

const round = (x: number): number => Math.round(x * 10) / 10

/** The paper's four steps (see the top of this file), read from the clients' message logs after the run. */
function breakdown(clients: ReadonlyArray<{ seen: Map<string, number>; log: { sent: Heard[]; got: Heard[] } }>, issued: ReadonlyMap<string, { at: number; by: number }>): Point['breakdownMs'] {
  /** Per element: its envelope id, and when it first left its author. */
  const published = new Map<string, { id: string; at: number }>()
  for (const [u, c] of clients.entries()) {
    for (const h of c.log.sent) {
      for (const { id, frame } of named(h.bytes)) {
        const element = frame && elementOf(frame)
        if (element && issued.get(element)?.by === u && !published.has(element)) published.set(element, { id, at: h.at })
      }
    }
  }
  const sums = { add: 0, announce: 0, retrieve: 0, compute: 0 }
  let count = 0
  for (const [element, { at, by }] of issued) {
    const pub = published.get(element)
    if (!pub) continue
    for (const [r, c] of clients.entries()) {
      if (r === by) continue
      let heard: number | undefined
      let frame: number | undefined
      for (const h of c.log.got) {
        for (const n of named(h.bytes)) {
          if (n.id !== pub.id) continue
          heard ??= h.at
          if (n.frame) frame ??= h.at
        }
        if (frame !== undefined) break
      }
      const shown = c.seen.get(element)
      if (heard === undefined || frame === undefined || shown === undefined) continue
      sums.add += pub.at - at
      sums.announce += heard - pub.at
      sums.retrieve += frame - heard
      sums.compute += shown - frame
      count++
    }
  }
  const mean = (x: number): number => round(count ? x / count : NaN)
  return { add: mean(sums.add), announce: mean(sums.announce), retrieve: mean(sums.retrieve), compute: mean(sums.compute) }
}

const results: Point[] = []
for (const n of sizes) {
  for (const u of updaterCounts) {
    if (u > n) continue
    const p = await point(n, u)
    results.push(p)
    const b = p.breakdownMs
    console.log(`peers=${n} updaters=${u} updates=${p.updates} delay=${delayMs}: max latency p50 ${p.maxLatencyMs.p50} ms (mean ${p.maxLatencyMs.mean}, max ${p.maxLatencyMs.max}); add ${b.add} + announce ${b.announce} + retrieve ${b.retrieve} + compute ${b.compute} ms; ${p.bytesPerUpdate} B sent per update (${p.bytesPerUpdatePerPeer} per receiving peer, ${p.framesPerUpdate} envelope copies), mesh in ${p.connectMs} ms`)
  }
}
console.log(`\ndelay ${delayMs} ms one way\n| peers | updaters | updates | max latency p50 (ms) | mean | worst | add | announce | retrieve | compute | bytes sent per update | per receiving peer |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |`)
for (const p of results) {
  const b = p.breakdownMs
  console.log(`| ${p.peers} | ${p.updaters} | ${p.updates} | ${p.maxLatencyMs.p50} | ${p.maxLatencyMs.mean} | ${p.maxLatencyMs.max} | ${b.add} | ${b.announce} | ${b.retrieve} | ${b.compute} | ${p.bytesPerUpdate} | ${p.bytesPerUpdatePerPeer} |`)
}
if (values.out) writeFileSync(values.out, JSON.stringify({ updates, interval, delayMs, results }, null, 2) + '\n')
process.exit(0)
