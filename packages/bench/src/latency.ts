#!/usr/bin/env node
/**
 * Latency and idle-cost report (a report, never a test) on a real 4-relay
 * cluster on loopback, with SDK clients in this process:
 *
 * - safe updates one after another (light load): submit → committed, with
 *   where each one's time went as the writer's sockets saw it (its submit
 *   going out, then each relay's attestation of the commit coming in);
 * - a regular update made by one client until another client's subscriber
 *   sees it (prospective visibility);
 * - the cluster left idle: CPU per relay and store writes over a window;
 * - Yjs + y-websocket beside it, on the same machine and workloads: the
 *   visibility above, and a stream of regular updates (one per task) from
 *   one client until another has them all (throughput), with the WebSocket
 *   bytes each side sent and received per update;
 * - false dependencies (BENDY): two writers on two objects and a reader,
 *   once all through one relay and once with the second writer kept from
 *   the reader's relay: how often the reader gets an envelope before a dep
 *   it names, and whether those deps touch the same object, and how often
 *   before its stable index reached the envelope's clock base;
 * - freshness bounds (BENDY): a hot counter bumped every 2 ms for
 *   `--hot-seconds`, opened without a bound and with each bound of
 *   `--freshness` (ms): how long each update took to show at another
 *   client against its bound, and the bytes per update each way.
 *
 * Safe updates run for `--warmup-seconds` before any is timed: a relay
 * spends its first seconds of load compiling its hot paths (V8's optimizing
 * compiler took 19% of relay CPU 12-22 s after start, 2.6% at 60 s, in a
 * perf profile), and a relay runs for days.
 *
 *   npm run bench:latency -- [--updates 200] [--warmup-seconds 10] [--idle-seconds 60] [--batch-ms 10] [--stream 2000] [--freshness 100,500] [--hot-seconds 3] [--profile FILE]
 *
 * `--profile FILE` writes relay r1's CPU profile of the safe-update phase
 * (a .cpuprofile for Chrome's DevTools) and prints its summary.
 */
import { statSync } from 'node:fs'
import { join } from 'node:path'
import type { Space } from '@stead/client'
import { decode, decodeAttestation, decodeClientMessage, decodeRelayMessage, ENVELOPE_REF_BYTES, openEnvelopeSync, toHex } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { BenchCluster, freePort } from './cluster.ts'
import { openSdkSpace } from './load/sdk.ts'
import { sampleProc } from './proc.ts'
import { summarizeProfile } from './profile.ts'
import { countingSocket, startYjsServer, yjsPeer, type CounterPeer } from './yjs.ts'
import { reportArgs } from './args.ts'

const values = reportArgs(
  `usage: npm run bench:latency -- [--updates 200] [--warmup-seconds 10] [--idle-seconds 60] [--batch-ms 10] [--stream 2000] [--freshness 100,500] [--hot-seconds 3] [--profile FILE]\n(what each option does: the comment at the top of packages/bench/src/latency.ts)`,
  {
    updates: { type: 'string', default: '200' },
    'warmup-seconds': { type: 'string', default: '10' },
    'idle-seconds': { type: 'string', default: '60' },
    'batch-ms': { type: 'string', default: '10' },
    profile: { type: 'string' },
    stream: { type: 'string', default: '2000' },
    freshness: { type: 'string', default: '100,500' },
    'hot-seconds': { type: 'string', default: '3' },
  },
)
const updates = Number(values.updates)
const warmupSeconds = Number(values['warmup-seconds'])
if (!(warmupSeconds >= 0)) throw new Error('--warmup-seconds takes a number of seconds (0 or more)')
const idleSeconds = Number(values['idle-seconds'])
const batchIntervalMs = Number(values['batch-ms'])
const streamUpdates = Number(values.stream)
const freshnessBounds = [0, ...String(values.freshness).split(',').filter(Boolean).map(Number)]
const hotSeconds = Number(values['hot-seconds'])
if (freshnessBounds.some((b) => !(b >= 0)) || !(hotSeconds > 0)) throw new Error('--freshness takes bounds in ms separated by commas, --hot-seconds a positive number')

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN
}

function summary(samples: number[]): string {
  const s = [...samples].sort((a, b) => a - b)
  return `p50 ${quantile(s, 0.5).toFixed(1)} ms, p90 ${quantile(s, 0.9).toFixed(1)}, p99 ${quantile(s, 0.99).toFixed(1)}, min ${s[0]?.toFixed(1)}, max ${s[s.length - 1]?.toFixed(1)} (n = ${s.length})`
}

/** utime + stime of a process, in seconds (Linux). */
function cpuSeconds(pid: number): number {
  return sampleProc(pid)?.cpu ?? 0
}

interface RelaySample {
  /** Sum and count of the submit-to-decision histogram (stead_commit_latency_seconds). */
  readonly sum: number
  readonly count: number
  /** The relay's latest block round, and the commits it made. */
  readonly round: number
  readonly commits: number
  /** Peers' blocks it accepted. */
  readonly blocks: number
}

async function relaySamples(cluster: BenchCluster): Promise<RelaySample[]> {
  return Promise.all(
    cluster.descriptor.relays.map(async (r) => {
      const text = await (await fetch(`http://${r.api}/metrics`)).text()
      const read = (name: string) => Number(/^(\S+) (\S+)$/m.exec(text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`)) ?? '')?.[2] ?? NaN)
      return { sum: read('stead_commit_latency_seconds_sum'), count: read('stead_commit_latency_seconds_count'), round: read('stead_round'), commits: read('stead_commits_total'), blocks: read('stead_blocks_total') }
    }),
  )
}

/** WebSocket payload bytes each Stead client sent and received, by name. */
const steadBytes = new Map<string, { in: number; out: number }>()

/**
 * When each step of one safe update happened, as its client's sockets saw
 * it: the submit going out, and each relay's attestation of the commit
 * (full, or compact) coming in.
 */
interface SafeMarks {
  readonly t0: number
  submit?: number
  /** The commit's round, from the first attestation after the submit. */
  round?: number
  /** Per relay (socket url), when its attestation of `round` arrived. */
  readonly attested: Map<string, number>
  done?: number
}

/** The safe update being timed (undefined between updates and outside the safe phase), and the round of the one before. */
let marks: SafeMarks | undefined
let lastRound = 0

/** Watches a client's socket for the steps of the safe update being timed. */
function watchSteps(url: string, ws: ReturnType<typeof countingSocket>): void {
  ws.on('message', (data: Buffer) => {
    if (!marks?.submit) return
    const m = decodeRelayMessage(new Uint8Array(data))
    if ((m.type !== 'commit' && m.type !== 'attest') || m.space !== 'latency') return
    const round = m.type === 'commit' ? decodeAttestation(m.attestation.bytes).round : m.round
    // The slowest relay's attestation of the update before may come after this submit.
    if (round <= lastRound) return
    marks.round ??= round
    if (round === marks.round && !marks.attested.has(url)) marks.attested.set(url, performance.now())
  })
  const send = ws.send.bind(ws) as (data: unknown, ...rest: unknown[]) => void
  ;(ws as unknown as { send: (data: unknown, ...rest: unknown[]) => void }).send = (data, ...rest) => {
    if (marks && marks.submit === undefined && data instanceof Uint8Array && decodeClientMessage(data).type === 'submit') marks.submit = performance.now()
    send(data, ...rest)
  }
}

/** Medians of each step over the timed safe updates. */
function steps(all: readonly SafeMarks[]): string {
  const median = (xs: number[]) => quantile([...xs].sort((a, b) => a - b), 0.5).toFixed(1)
  const full = all.filter((m) => m.submit !== undefined && m.done !== undefined && m.attested.size >= 3)
  const at = (m: SafeMarks, k: number) => [...m.attested.values()].sort((a, b) => a - b)[k] as number
  return [
    `call → submit sent ${median(full.map((m) => (m.submit as number) - m.t0))} ms`,
    `→ 1st attestation ${median(full.map((m) => at(m, 0) - (m.submit as number)))}`,
    `→ 2nd ${median(full.map((m) => at(m, 1) - at(m, 0)))}`,
    `→ 3rd (2f+1) ${median(full.map((m) => at(m, 2) - at(m, 1)))}`,
    `→ resolved ${median(full.map((m) => (m.done as number) - at(m, 2)))}`,
    `(n = ${full.length})`,
  ].join(', ')
}

/** A client of `space` (default 'latency') over the relays `only` lists (default all), each socket handed to `watch`. */
async function client(cluster: BenchCluster, name: string, o: { space?: string; only?: readonly number[]; watch?: (url: string, ws: ReturnType<typeof countingSocket>) => void } = {}): Promise<Space> {
  const counts = { in: 0, out: 0 }
  steadBytes.set(name, counts)
  const relays = cluster.descriptor.relays.filter((_, i) => o.only?.includes(i) ?? true).map((r) => `http://${r.api}`)
  const connect = (url: string) => {
    const ws = countingSocket(url, counts)
    if (name === 'alice') watchSteps(url, ws)
    o.watch?.(url, ws)
    return ws as never
  }
  const options = { batchIntervalMs, connect }
  return (await openSdkSpace({ relays, cluster: cluster.descriptor, seed: `stead-bench-latency-${name}`, space: o.space ?? 'latency', options })).space
}

/**
 * False dependencies (BENDY): two writers bump a counter each, 5 ms apart,
 * and a third client reads. At the reader's sockets: for each envelope that
 * arrives early, whether a dep it names had not arrived yet (the client
 * holds it back until it has: causal delivery), and whether the deps it
 * waited for touch any object it touches (if not, the wait is a false
 * dependency). With `bobAway` the second writer cannot reach the relay the
 * reader takes its frames from, so its envelopes take another path.
 */
async function falseDependencies(cluster: BenchCluster, run: string, exclude: number | undefined): Promise<number | undefined> {
  const space = 'deps'
  const tag = exclude === undefined ? 'all' : `no-r${exclude + 1}`
  const arrived = new Map<string, { at: number; keys: Set<string>; author?: string }>()
  let citing = 0
  const held = new Map<string, { at: number; keys: Set<string>; missing: Set<string>; related: boolean }>()
  const waits: Array<{ ms: number; related: boolean }> = []
  // Envelopes whose clock base (the stable index their author had) is past the reader's: the client
  // holds them until its stable index gets there (causal delivery of the commits the author had seen).
  const baseHeld = new Set<{ at: number; base: number }>()
  const baseWaits: number[] = []
  const reading: { space?: Space } = {}
  const sources = new Map<string, number>()
  let early = 0
  const arrive = (id: string, keys: Set<string>, at: number, author?: string) => {
    if (arrived.has(id)) return
    arrived.set(id, { at, keys, author })
    for (const [hid, h] of held) {
      if (!h.missing.delete(id)) continue
      if ([...keys].some((k) => h.keys.has(k))) h.related = true
      if (h.missing.size === 0) {
        waits.push({ ms: at - h.at, related: h.related })
        held.delete(hid)
      }
    }
  }
  const watch = (url: string, ws: ReturnType<typeof countingSocket>) =>
    ws.on('message', (data: Buffer) => {
      const at = performance.now()
      const m = decodeRelayMessage(new Uint8Array(data))
      if ((m.type !== 'envelope' && m.type !== 'commit' && m.type !== 'commit-more') || m.space !== space) return
      const frames = m.type === 'envelope' ? [m.envelope as Uint8Array] : m.envelopes
      for (const frame of frames) {
        if (frame.length === ENVELOPE_REF_BYTES) {
          arrive(toHex(frame), new Set(), at)
          continue
        }
        const env = openEnvelopeSync({ sha256: (b) => nodeCrypto.sha256(b), verify: () => true }, decode(frame))
        const keys = new Set([...env.updates.map((u) => u.key), ...env.safe.flatMap((g) => g.updates.map((u) => u.key))])
        if (m.type === 'envelope' && !arrived.has(env.idHex)) {
          early++
          sources.set(url, (sources.get(url) ?? 0) + 1)
          const deps = env.deps.map(toHex)
          if (deps.some((d) => { const a = arrived.get(d)?.author; return a !== undefined && a !== env.authorId })) citing++
          const missing = new Set(deps.filter((d) => !arrived.has(d)))
          if (missing.size) held.set(env.idHex, { at, keys, missing, related: false })
          if (reading.space && env.base > reading.space.status.stableIndex) baseHeld.add({ at, base: env.base })
        }
        arrive(env.idHex, keys, at, env.authorId)
      }
    })
  const reader = await client(cluster, `carol-${run}`, { space, watch })
  reading.space = reader
  const stopWatching = reader.onStatus((s) => {
    for (const h of baseHeld) {
      if (h.base > s.stableIndex) continue
      baseWaits.push(performance.now() - h.at)
      baseHeld.delete(h)
    }
  })
  const everyone = cluster.descriptor.relays.map((_, i) => i)
  const alice = await client(cluster, `alice-${run}`, { space })
  const bob = await client(cluster, `bob-${run}`, { space, only: everyone.filter((i) => i !== exclude) })
  const [a, b] = [alice.counter(`${tag}:a`), bob.counter(`${tag}:b`)]
  const seen = [reader.counter(`${tag}:a`), reader.counter(`${tag}:b`)]
  for (let i = 0; i < updates; i++) {
    void a.increment(1)
    await new Promise((r) => setTimeout(r, 5))
    void b.increment(1)
    await new Promise((r) => setTimeout(r, 5))
  }
  const deadline = performance.now() + 20_000
  while (seen.some((c) => c.value < updates) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 10))
  stopWatching()
  const unrelated = waits.filter((w) => !w.related)
  const ms = (xs: typeof waits) => (xs.length ? `p50 ${quantile(xs.map((w) => w.ms).sort((x, y) => x - y), 0.5).toFixed(1)} ms, max ${Math.max(...xs.map((w) => w.ms)).toFixed(1)} ms` : '-')
  console.log(`false dependencies, ${run}: ${early} envelopes pushed early to the reader, ${citing} naming the other writer's; ${waits.length + held.size} named a dep not there yet (${ms(waits)}), ${unrelated.length} of them waiting only for the other object's updates (${ms(unrelated)}); ${baseWaits.length + baseHeld.size} with a clock base past the reader's stable index, held until it got there (${ms(baseWaits.map((x) => ({ ms: x, related: false })))}); reader values ${seen.map((c) => c.value).join('/')} of ${updates}`)
  for (const s of [reader, alice, bob]) await s.close()
  const [source] = [...sources.entries()].sort((x, y) => y[1] - x[1])[0] ?? []
  return source === undefined ? undefined : cluster.descriptor.relays.findIndex((r) => source.includes(r.api))
}

/** Waits until `reader` reads at least `target`. */
function reaches(reader: CounterPeer, target: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const check = () => {
      if (reader.read() < target) return
      stop()
      resolve()
    }
    const stop = reader.subscribe(check)
    check()
  })
}

/** Per update: what the writer sent and the reader received, over a window of `n` updates. */
function bytesPerUpdate(writer: CounterPeer, reader: CounterPeer, before: { w: { out: number }; r: { in: number } }, n: number): string {
  return `writer up ${((writer.bytes().out - before.w.out) / n).toFixed(0)} B/update, reader down ${((reader.bytes().in - before.r.in) / n).toFixed(0)} B/update`
}

/** Visibility (one update at a time, 20 ms apart) and a stream (one update per task), with bytes. */
async function compare(name: string, writer: CounterPeer, reader: CounterPeer, streamWriter: CounterPeer, streamReader: CounterPeer): Promise<void> {
  const visible: number[] = []
  let before = { w: writer.bytes(), r: reader.bytes() }
  const base = reader.read()
  for (let i = 1; i <= updates + 20; i++) {
    if (i === 21) before = { w: writer.bytes(), r: reader.bytes() }
    const t0 = performance.now()
    const shown = reaches(reader, base + i)
    writer.bump()
    await shown
    if (i > 20) visible.push(performance.now() - t0)
    await new Promise((r) => setTimeout(r, 20))
  }
  console.log(`${name}: regular update visible at peer: ${summary(visible)}`)
  console.log(`  ${bytesPerUpdate(writer, reader, before, updates)}`)
  const start = streamReader.read()
  before = { w: streamWriter.bytes(), r: streamReader.bytes() }
  const t0 = performance.now()
  const all = reaches(streamReader, start + streamUpdates)
  for (let i = 0; i < streamUpdates; i++) {
    streamWriter.bump()
    await new Promise((r) => setImmediate(r))
  }
  await all
  const seconds = (performance.now() - t0) / 1000
  console.log(`${name}: stream of ${streamUpdates} regular updates, one per task, all at the peer after ${(seconds * 1000).toFixed(0)} ms: ${(streamUpdates / seconds).toFixed(0)} updates/s`)
  console.log(`  ${bytesPerUpdate(streamWriter, streamReader, before, streamUpdates)}`)
}

/**
 * A hot counter bumped every 2 ms for hotSeconds by `writer`, opened with
 * `bound` (0: none): per update, the time until `reader` shows it, and the
 * bytes per update each client sent and received meanwhile.
 */
async function hotObject(writer: Space, reader: Space, bound: number): Promise<void> {
  const key = `hot-${bound}`
  const w = writer.counter(key, { freshness: bound })
  const r = reader.counter(key)
  const made: number[] = []
  const seen: number[] = []
  const stop = r.subscribe(() => {
    const now = performance.now()
    while (seen.length < made.length && r.value > seen.length) seen.push(now - (made[seen.length] as number))
  })
  const before = { w: { ...(steadBytes.get('alice') as { out: number }) }, r: { ...(steadBytes.get('bob') as { in: number }) } }
  const end = performance.now() + hotSeconds * 1000
  while (performance.now() < end) {
    made.push(performance.now())
    void w.increment(1)
    await new Promise((res) => setTimeout(res, 2))
  }
  const deadline = performance.now() + 10_000 + bound
  while (seen.length < made.length && performance.now() < deadline) await new Promise((res) => setTimeout(res, 5))
  stop()
  const up = ((steadBytes.get('alice') as { out: number }).out - before.w.out) / made.length
  const down = ((steadBytes.get('bob') as { in: number }).in - before.r.in) / made.length
  const over = seen.filter((ms) => ms > bound + batchIntervalMs).length
  console.log(`hot counter, ${bound ? `freshness ${bound} ms` : 'no freshness bound'}: ${made.length} updates in ${hotSeconds} s; visible at peer ${summary(seen)}${bound ? `; past the bound + batch interval: ${over}` : ''}`)
  console.log(`  writer up ${up.toFixed(1)} B/update, reader down ${down.toFixed(1)} B/update${seen.length < made.length ? `; ${made.length - seen.length} never seen` : ''}`)
}

const cluster = await BenchCluster.start({ kind: 'stead', n: 4, profile: values.profile !== undefined })
try {
  const alice = await client(cluster, 'alice')
  const bob = await client(cluster, 'bob')
  console.log(`latency report: 4 relays on loopback, client batch interval ${batchIntervalMs} ms, safe updates timed after ${warmupSeconds} s of them, ${new Date().toISOString()}`)

  // Safe updates, one at a time: each one starts from a quiet cluster.
  const counter = alice.counter('safe')
  const warmupEnd = performance.now() + warmupSeconds * 1000
  let warmups = 0
  do {
    await counter.increment(1, { safe: true })
    warmups++
  } while (performance.now() < warmupEnd || warmups < 20)
  const safe: number[] = []
  const relaysBefore = await relaySamples(cluster)
  const cpuBefore = cluster.pids().map((p) => cpuSeconds(p.pid))
  if (values.profile) cluster.profileStart()
  const timed: SafeMarks[] = []
  for (let i = 0; i < updates; i++) {
    const t0 = performance.now()
    marks = { t0, attested: new Map() }
    const r = await counter.increment(1, { safe: true })
    if (r.status !== 'committed') throw new Error(`safe update ${i}: ${JSON.stringify(r)}`)
    marks.done = performance.now()
    lastRound = marks.round ?? lastRound
    timed.push(marks)
    marks = undefined
    safe.push(performance.now() - t0)
  }
  console.log(`safe update, sequential:        ${summary(safe)}`)
  console.log(`  steps, medians: ${steps(timed)}`)
  const slowest = [...timed].sort((a, b) => (b.done as number) - b.t0 - ((a.done as number) - a.t0)).slice(0, Math.max(1, Math.round(timed.length / 20)))
  console.log(`  steps of the slowest 5%, medians: ${steps(slowest)}`)
  const cpuAfter = cluster.pids().map((p) => cpuSeconds(p.pid))
  if (values.profile) {
    await cluster.profileStop(values.profile)
    const p = summarizeProfile(values.profile)
    console.log(`  r1 profile (${p.file}): busy ${p.busyPercent.toFixed(0)}% of ${p.seconds.toFixed(1)} s`)
    for (const e of [...p.components, ...p.functions]) console.log(`    ${e.percent.toFixed(1).padStart(5)}%  ${e.name}`)
  }
  // The relay's share: from its submit to its audit deciding the envelope (the home relay only counts it).
  const relaysAfter = await relaySamples(cluster)
  const perRelay = relaysAfter.map((a, i) => {
    const b = relaysBefore[i] as { sum: number; count: number }
    return a.count > b.count ? `${(((a.sum - b.sum) / (a.count - b.count)) * 1000).toFixed(1)} ms (${a.count - b.count})` : '-'
  })
  console.log(`  relay submit → decided, mean per relay: ${perRelay.join(', ')}`)
  const per = (f: (s: RelaySample) => number) => relaysAfter.map((a, i) => ((f(a) - f(relaysBefore[i] as RelaySample)) / updates).toFixed(1)).join(', ')
  const cpuMs = cpuAfter.map((c, i) => (((c - (cpuBefore[i] as number)) * 1000) / updates).toFixed(1)).join(', ')
  console.log(`  per safe update, per relay: rounds ${per((x) => x.round)}, commits ${per((x) => x.commits)}, peers' blocks ${per((x) => x.blocks)}, CPU ms ${cpuMs}`)

  // Prospective visibility and a stream of regular updates, Stead then Yjs + y-websocket.
  const steadPeer = (space: Space, name: string, key: string): CounterPeer => {
    const counter = space.counter(key)
    return { bump: () => void counter.increment(1), read: () => counter.value, subscribe: (l) => counter.subscribe(l), bytes: () => ({ ...(steadBytes.get(name) as { in: number; out: number }) }) }
  }
  await compare('Stead', steadPeer(alice, 'alice', 'visible'), steadPeer(bob, 'bob', 'visible'), steadPeer(alice, 'alice', 'stream'), steadPeer(bob, 'bob', 'stream'))
  const yjs = await startYjsServer(await freePort())
  try {
    const [a, b, c, d] = [await yjsPeer(yjs, 'visible'), await yjsPeer(yjs, 'visible'), await yjsPeer(yjs, 'stream'), await yjsPeer(yjs, 'stream')]
    await compare('Yjs + y-websocket', a, b, c, d)
    for (const p of [a, b, c, d]) p.close()
  } finally {
    await yjs.stop()
  }

  for (const bound of freshnessBounds) await hotObject(alice, bob, bound)

  // False dependencies: every client through the reader's relay, then the second writer kept from it.
  const home = await falseDependencies(cluster, 'one path', undefined)
  await falseDependencies(cluster, `second writer without relay r${(home ?? 0) + 1}`, home ?? 0)

  // Idle: let the last commits settle, then watch CPU and the stores.
  await new Promise((r) => setTimeout(r, 3000))
  const pids = cluster.pids()
  const stores = cluster.dataDirs().map((d) => join(d, 'data.mdb'))
  const before = { cpu: pids.map((p) => cpuSeconds(p.pid)), stores: stores.map((s) => statSync(s)) }
  await new Promise((r) => setTimeout(r, idleSeconds * 1000))
  const after = { cpu: pids.map((p) => cpuSeconds(p.pid)), stores: stores.map((s) => statSync(s)) }
  pids.forEach((p, i) => {
    const cpu = ((after.cpu[i] as number) - (before.cpu[i] as number)) / idleSeconds
    const written = (after.stores[i] as { mtimeMs: number }).mtimeMs !== (before.stores[i] as { mtimeMs: number }).mtimeMs
    const grew = (after.stores[i] as { size: number }).size - (before.stores[i] as { size: number }).size
    console.log(`idle ${idleSeconds} s, ${p.label}: CPU ${(cpu * 100).toFixed(2)}% of a core, store ${written ? 'written' : 'not written'} (size +${grew} B)`)
  })
} finally {
  await cluster.stop()
  process.exit(0)
}
