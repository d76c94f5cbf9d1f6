#!/usr/bin/env node
/**
 * Steady load (a report, never a test): several clients updating at a
 * fixed total rate, a share of the updates safe, on a real 4-relay cluster
 * on loopback, beside Yjs + y-websocket and the bench's plain relays
 * (forward and merge, no order: what the SDK costs without consensus) on
 * the same machine in the same run. Per rate:
 *
 * - visible: from a client's update until each other client's value shows
 *   it (prospective), p50 / p99;
 * - safe: a safe update's call until it resolves committed, p50 / p99;
 * - relay CPU (sum over the relays' processes) in % of one core and in ms
 *   per update, and the clients' process (this one) beside it;
 * - bytes each client received per update the cluster carried, on the wire
 *   (WebSocket frames as its TCP socket counts them);
 * - where a safe update's wait goes: at the relay it was submitted to, its
 *   queue and proposal wait (until that relay's block carries it), the
 *   wait for its commit (in ms and rounds), and the relay's submit-to-
 *   decision; the rest of the client's wall time is its batch interval,
 *   the attestations' way back (2f+1 of them) and their checks. Relay
 *   figures are means (histogram sums over counts), the others medians.
 *
 * - what a client receives per update, by relay message type (Stead; message
 *   payloads, without the frames around them).
 *
 * `--pace-ms N` starts Stead's relays with `--pace-ms N`: the least time
 * between a relay's rounds when only regular updates wait (default 50;
 * the trade of relay CPU against regular updates' stable latency).
 *
 * `--profile DIR` writes relay r1's CPU profile of each rate's measured
 * window to DIR/r1-<rate>.cpuprofile (Chrome DevTools reads them) and
 * prints where its time went.
 *
 * Each client writes its own counter; a reader knows which update it sees
 * from the counter's value (one author's updates arrive in order).
 * Clients live in this process with in-memory storage, as in the other
 * reports. Rates the machine cannot carry show as a lower "carried" rate.
 *
 *   npm run bench:load -- [--rates 50,200,1000] [--seconds 15] [--warmup-seconds 5] [--clients 4] [--safe-share 0.1] [--batch-ms 10] [--systems stead,plain,yjs] [--pace-ms N] [--json FILE] [--profile DIR]
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Space } from '@stead/client'
import { decodeRelayMessage } from '@stead/core'
import { BenchCluster, freePort } from './cluster.ts'
import { openSdkSpace } from './load/sdk.ts'
import { sampleProc } from './proc.ts'
import { summarizeProfile } from './profile.ts'
import { Samples } from './stats.ts'
import { Rng } from './rng.ts'
import { countingSocket, startYjsServer, yjsDoc, type YjsServer } from './yjs.ts'
import { reportArgs } from './args.ts'

const values = reportArgs(
  `usage: npm run bench:load -- [--rates 50,200,1000] [--seconds 15] [--warmup-seconds 5] [--clients 4] [--safe-share 0.1] [--batch-ms 10] [--systems stead,plain,yjs] [--pace-ms N] [--json FILE] [--profile DIR]\n(what each option does: the comment at the top of packages/bench/src/steady.ts)`,
  {
    rates: { type: 'string', default: '50,200,1000' },
    seconds: { type: 'string', default: '15' },
    'warmup-seconds': { type: 'string', default: '5' },
    clients: { type: 'string', default: '4' },
    'safe-share': { type: 'string', default: '0.1' },
    'batch-ms': { type: 'string', default: '10' },
    systems: { type: 'string', default: 'stead,plain,yjs' },
    'pace-ms': { type: 'string' },
    json: { type: 'string' },
    profile: { type: 'string' },
  },
)
const rates = String(values.rates).split(',').map(Number)
const seconds = Number(values.seconds)
const warmupSeconds = Number(values['warmup-seconds'])
const clientCount = Number(values.clients)
const safeShare = Number(values['safe-share'])
const batchIntervalMs = Number(values['batch-ms'])
const systems = String(values.systems).split(',')
const paceMs = values['pace-ms'] === undefined ? undefined : Number(values['pace-ms'])
if (rates.some((r) => !(r > 0)) || !(seconds > 0) || !(warmupSeconds >= 0) || !(clientCount >= 2) || !(safeShare >= 0 && safeShare <= 1) || systems.some((s) => s !== 'stead' && s !== 'plain' && s !== 'yjs') || (paceMs !== undefined && !(Number.isInteger(paceMs) && paceMs >= 0))) {
  throw new Error('--rates takes positive updates/s separated by commas, --seconds a positive number, --clients 2 or more, --safe-share 0 to 1, --systems some of stead, plain and yjs, --pace-ms a whole number of milliseconds (0 turns pacing off)')
}

/** One client as the load sees it, whichever system is behind it. */
interface LoadPeer {
  /** Its own counter plus one (safe: resolves with the time it took, or undefined if not committed). */
  bump(safe: boolean): Promise<number | undefined> | undefined
  /** The value of writer `w`'s counter here. */
  read(w: number): number
  /** Calls `listener` after every change of any counter here. */
  subscribe(listener: () => void): void
  bytes(): { in: number; out: number }
  /** Bytes received so far by message type (Stead only). */
  byType?(): Record<string, number>
  close(): Promise<void> | void
}

interface Row {
  system: string
  rate: number
  carried: number
  visible: { p50: number; p99: number; n: number }
  safe: { p50: number; p99: number; n: number } | undefined
  serverCpuPercent: number
  serverCpuMsPerUpdate: number
  clientCpuPercent: number
  downBytesPerUpdate: number
  upBytesPerUpdate: number
  /** Bytes a client received per update, by message type (Stead only). */
  downByType?: Record<string, number>
  steps?: Record<string, number>
  profile?: { file: string; busyPercent: number; components: Array<{ name: string; percent: number }>; functions: Array<{ name: string; percent: number }> }
}

/** p50, p99 and count of latency samples (NaN when there are none). */
function percentiles(samples: Samples): { p50: number; p99: number; n: number } {
  const summary = samples.summary()
  return { p50: summary?.p50 ?? NaN, p99: summary?.p99 ?? NaN, n: samples.count }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/**
 * Drives `peers` at `rate` updates/s in all for warmup + measured seconds
 * and returns what the measured window showed. `serverPids` are the
 * processes whose CPU counts as the server's; `scrape` reads the relays'
 * step figures (Stead only) before and after the window.
 */
async function drive(system: string, rate: number, peers: readonly LoadPeer[], serverPids: readonly number[], scrape?: () => Promise<Record<string, number>>, profile?: { start(): void; stop(): Promise<Row['profile']> }): Promise<Row> {
  const rng = new Rng(rate)
  const n = peers.length
  /** sent[w][k]: when writer w made its update number `base[w] + k + 1`. */
  const sent: number[][] = peers.map(() => [])
  const base = peers.map((p, w) => p.read(w))
  const seen = peers.map((p) => peers.map((_, w) => p.read(w)))
  const visible = new Samples()
  const safe = new Samples()
  let measuring = false
  let windowStart = Infinity
  for (const [r, peer] of peers.entries()) {
    peer.subscribe(() => {
      const now = performance.now()
      for (let w = 0; w < n; w++) {
        if (w === r) continue
        const value = peer.read(w)
        const row = seen[r] as number[]
        for (let v = (row[w] as number) + 1; v <= value; v++) {
          const at = (sent[w] as number[])[v - (base[w] as number) - 1]
          if (at !== undefined && at >= windowStart) visible.add(now - at)
        }
        if (value > (row[w] as number)) row[w] = value
      }
    })
  }
  const perClient = rate / n
  const started = performance.now()
  const end = started + (warmupSeconds + seconds) * 1000
  let before: { server: number; client: number; bytes: Array<{ in: number; out: number }>; byType: Array<Record<string, number>>; steps: Record<string, number>; made: number } | undefined
  let made = 0
  const cpuOf = () => serverPids.reduce((sum, pid) => sum + (sampleProc(pid)?.cpu ?? 0), 0)
  const clientCpu = () => {
    const u = process.cpuUsage()
    return (u.user + u.system) / 1e6
  }
  while (performance.now() < end) {
    const now = performance.now()
    if (!measuring && now - started >= warmupSeconds * 1000) {
      measuring = true
      windowStart = now
      before = { server: cpuOf(), client: clientCpu(), bytes: peers.map((p) => p.bytes()), byType: peers.map((p) => ({ ...p.byType?.() })), steps: (await scrape?.()) ?? {}, made }
      profile?.start()
    }
    const due = Math.floor(((now - started) / 1000) * perClient)
    for (let w = 0; w < n; w++) {
      const list = sent[w] as number[]
      while (list.length < due) {
        const t0 = performance.now()
        list.push(t0)
        made++
        const wantSafe = rng.next() < safeShare
        const result = (peers[w] as LoadPeer).bump(wantSafe)
        if (result && measuring) void result.then((ms) => ms !== undefined && safe.add(ms))
      }
    }
    await sleep(2)
  }
  const windowMs = performance.now() - windowStart
  const after = { server: cpuOf(), client: clientCpu(), bytes: peers.map((p) => p.bytes()), byType: peers.map((p) => ({ ...p.byType?.() })), steps: (await scrape?.()) ?? {} }
  const profiled = await profile?.stop()
  // Let the last updates arrive before the next rate starts (they count only if made in the window).
  await sleep(1000)
  const b = before as NonNullable<typeof before>
  const updates = made - b.made
  const down = after.bytes.reduce((sum, x, i) => sum + x.in - (b.bytes[i] as { in: number }).in, 0) / n
  const up = after.bytes.reduce((sum, x, i) => sum + x.out - (b.bytes[i] as { out: number }).out, 0) / n
  const serverCpu = after.server - b.server
  const steps = scrape ? stepFigures(b.steps, after.steps, windowMs) : undefined
  const downByType: Record<string, number> = {}
  for (const [i, types] of after.byType.entries()) {
    for (const [type, bytes] of Object.entries(types)) downByType[type] = (downByType[type] ?? 0) + (bytes - (b.byType[i]?.[type] ?? 0)) / n / updates
  }
  return {
    system,
    rate,
    carried: updates / (windowMs / 1000),
    visible: percentiles(visible),
    safe: safe.count > 0 ? percentiles(safe) : undefined,
    serverCpuPercent: (serverCpu / (windowMs / 1000)) * 100,
    serverCpuMsPerUpdate: (serverCpu * 1000) / updates,
    clientCpuPercent: ((after.client - b.client) / (windowMs / 1000)) * 100,
    downBytesPerUpdate: down / updates,
    upBytesPerUpdate: up / updates,
    ...(Object.keys(downByType).length ? { downByType } : {}),
    ...(steps ? { steps } : {}),
    ...(profiled ? { profile: profiled } : {}),
  }
}

/** The relays' histograms and counters this report reads (by series, labels included), summed over the relays. */
const RELAY_SERIES = /^(stead_envelope_(proposed_seconds|ordered_seconds|order_rounds)_(sum|count)\{safe="(true|false)"\}|stead_commit_latency_seconds_(sum|count)|stead_commits_total|stead_round) (\S+)$/

async function scrapeRelays(cluster: BenchCluster): Promise<Record<string, number>> {
  const out: Record<string, number> = {}
  for (const r of cluster.descriptor.relays) {
    const text = await (await fetch(`http://${r.api}/metrics`)).text()
    for (const line of text.split('\n')) {
      const m = RELAY_SERIES.exec(line)
      if (m) out[m[1] as string] = (out[m[1] as string] ?? 0) + Number(m[6])
    }
  }
  return out
}

/** Means per envelope over the window, from the relays' series before and after it: for envelopes with safe updates, and the relays' pace. */
function stepFigures(a: Record<string, number>, b: Record<string, number>, windowMs: number): Record<string, number> {
  const d = (name: string) => (b[name] ?? 0) - (a[name] ?? 0)
  const mean = (series: string, labels = '') => d(`${series}_sum${labels}`) / d(`${series}_count${labels}`)
  const relays = 4
  const figures: Record<string, number> = {
    decidedMs: mean('stead_commit_latency_seconds') * 1000,
    roundsPerSecond: d('stead_round') / relays / (windowMs / 1000),
    commitsPerSecond: d('stead_commits_total') / relays / (windowMs / 1000),
  }
  for (const safe of ['true', 'false']) {
    const labels = `{safe="${safe}"}`
    const kind = safe === 'true' ? 'safe' : 'regular'
    figures[`${kind}ProposedMs`] = mean('stead_envelope_proposed_seconds', labels) * 1000
    figures[`${kind}OrderedMs`] = mean('stead_envelope_ordered_seconds', labels) * 1000
    figures[`${kind}OrderRounds`] = mean('stead_envelope_order_rounds', labels)
  }
  return figures
}

/** SDK clients of `cluster`; on plain relays every update is regular (they order nothing) and nothing is sent again for want of a decision. */
async function steadPeers(cluster: BenchCluster): Promise<LoadPeer[]> {
  const plain = cluster.spec.kind === 'plain'
  const peers: LoadPeer[] = []
  for (let i = 0; i < clientCount; i++) {
    const counts = { in: 0, out: 0 }
    const byType: Record<string, number> = {}
    const relays = cluster.descriptor.relays.map((r) => `http://${r.api}`)
    const connect = (url: string) => {
      const ws = countingSocket(url, counts)
      ws.on('message', (data: Buffer | ArrayBuffer) => {
        const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
        const type = decodeRelayMessage(bytes).type
        byType[type] = (byType[type] ?? 0) + bytes.byteLength
      })
      return ws as never
    }
    const options = { batchIntervalMs, connect, ...(plain ? { resubmitAfterMs: 1e9 } : {}) }
    const { owner, space } = await openSdkSpace({ relays, cluster: cluster.descriptor, seed: `stead-bench-load-${i}`, space: 'load', options })
    const peer = steadPeer(space, i, counts, () => owner.close())
    peers.push({ ...peer, bump: (safe) => peer.bump(safe && !plain), byType: () => byType })
  }
  return peers
}

function steadPeer(space: Space, me: number, counts: { in: number; out: number }, close: () => Promise<void>): LoadPeer {
  const counter = (w: number) => space.counter(`k${w}`)
  const own = counter(me)
  return {
    bump: (safe) => {
      if (!safe) {
        void own.increment(1)
        return undefined
      }
      const t0 = performance.now()
      return own.increment(1, { safe: true }).then(
        (r) => (r.status === 'committed' ? performance.now() - t0 : undefined),
        () => undefined,
      )
    },
    read: (w) => counter(w).value,
    subscribe: (listener) => {
      for (let w = 0; w < clientCount; w++) if (w !== me) counter(w).subscribe(listener)
    },
    bytes: () => ({ ...counts }),
    close,
  }
}

async function yjsPeers(server: YjsServer): Promise<LoadPeer[]> {
  const peers: LoadPeer[] = []
  for (let i = 0; i < clientCount; i++) {
    const { doc, bytes, close } = await yjsDoc(server, 'load')
    const map = doc.getMap<number>('counters')
    peers.push({
      bump: () => {
        map.set(`k${i}`, (map.get(`k${i}`) ?? 0) + 1)
        return undefined
      },
      read: (w) => map.get(`k${w}`) ?? 0,
      subscribe: (listener) => map.observe(listener),
      bytes,
      close,
    })
  }
  return peers
}

const fmt = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : '-')

function print(row: Row): void {
  const safe = row.safe ? `, safe p50 ${fmt(row.safe.p50, 0)} / p99 ${fmt(row.safe.p99, 0)} ms (n ${row.safe.n})` : ''
  console.log(
    `${row.system} at ${row.rate}/s (carried ${fmt(row.carried, 0)}): visible p50 ${fmt(row.visible.p50)} / p99 ${fmt(row.visible.p99)} ms (n ${row.visible.n})${safe}; server CPU ${fmt(row.serverCpuPercent, 0)}% (${fmt(row.serverCpuMsPerUpdate, 2)} ms/update), clients' process ${fmt(row.clientCpuPercent, 0)}%; per update per client: down ${fmt(row.downBytesPerUpdate, 0)} B, up ${fmt(row.upBytesPerUpdate, 0)} B`,
  )
  if (row.downByType) console.log(`  down per update per client by message: ${Object.entries(row.downByType).sort((x, y) => y[1] - x[1]).map(([t, b]) => `${t} ${fmt(b, 0)} B`).join(', ')}`)
  if (row.profile) {
    console.log(`  r1 profile (${row.profile.file}): busy ${fmt(row.profile.busyPercent, 0)}%`)
    for (const e of [...row.profile.components, ...row.profile.functions]) console.log(`    ${e.percent.toFixed(1).padStart(5)}%  ${e.name}`)
  }
  const s = row.steps
  if (s) {
    const at = (kind: string) => `accept → own block ${fmt(s[`${kind}ProposedMs`] ?? NaN)} ms, → commit ${fmt(s[`${kind}OrderedMs`] ?? NaN)} ms (${fmt(s[`${kind}OrderRounds`] ?? NaN, 2)} rounds)`
    console.log(`  at the relay (means): safe envelopes ${at('safe')}; regular ${at('regular')}; accept → decided ${fmt(s.decidedMs ?? NaN)} ms; ${fmt(s.roundsPerSecond ?? NaN, 0)} rounds/s, ${fmt(s.commitsPerSecond ?? NaN, 0)} commits/s per relay`)
  }
}

const rows: Row[] = []
const profileDir = values.profile === undefined ? undefined : String(values.profile)
if (profileDir) mkdirSync(profileDir, { recursive: true })
// Stead's relays, then the plain ones: the same SDK clients; the relays' step figures and profile for Stead only.
for (const kind of ['stead', 'plain'] as const) {
  if (!systems.includes(kind)) continue
  const stead = kind === 'stead'
  const cluster = await BenchCluster.start({ kind, n: 4, profile: stead && profileDir !== undefined, ...(stead && paceMs !== undefined ? { paceMs } : {}) })
  try {
    const peers = await steadPeers(cluster)
    for (const rate of rates) {
      const file = stead && profileDir ? join(profileDir, `r1-${rate}.cpuprofile`) : undefined
      const profile = file
        ? {
            start: () => cluster.profileStart(),
            stop: async () => {
              await cluster.profileStop(file)
              const p = summarizeProfile(file, 12)
              return { file, busyPercent: p.busyPercent, components: p.components.slice(0, 12), functions: p.functions }
            },
          }
        : undefined
      const row = await drive(kind, rate, peers, cluster.pids().map((p) => p.pid), stead ? () => scrapeRelays(cluster) : undefined, profile)
      print(row)
      rows.push(row)
    }
    for (const p of peers) await p.close()
  } finally {
    await cluster.stop()
  }
}
if (systems.includes('yjs')) {
  const server = await startYjsServer(await freePort())
  try {
    const peers = await yjsPeers(server)
    for (const rate of rates) {
      const row = await drive('yjs', rate, peers, [server.pid])
      print(row)
      rows.push(row)
    }
    for (const p of peers) await p.close()
  } finally {
    await server.stop()
  }
}
if (values.json) writeFileSync(String(values.json), JSON.stringify({ at: new Date().toISOString(), clients: clientCount, safeShare, seconds, warmupSeconds, batchIntervalMs, rows }, null, 2) + '\n')
process.exit(0)
