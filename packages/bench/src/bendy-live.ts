#!/usr/bin/env node
/**
 * BENDY's experiment (SAC 2016, §5) on the live stream, as a report (never
 * a test): writers update objects of one space through the 4-relay cluster
 * (real relay processes on loopback), and four readers follow the same
 * space side by side, each its own way:
 *
 * - `every`: every envelope and commit as it comes (the paper's op-based
 *   propagation: eager, unbatched);
 * - `ops`, `state`, `adaptive`: paced at the freshness bound `--freshness`
 *   δ (`space.setFreshness(δ, { mode })`): the relay sends one certified
 *   delta at the earliest first change + δ − μ_x, each changed object as
 *   its ops, as its state, or the cheaper way by BENDY's rule on the
 *   tracker's hot objects (adaptive).
 *
 *   npm run bench:bendy-live -- [--workloads counters,sets,registers,texts] [--access uniform,zipf] [--objects 200] [--rate 100] [--seconds 20] [--freshness 1000] [--writers 4] [--runs 1] [--json FILE]
 *
 * `--rate` updates per second from all writers together (each object
 * belongs to one writer, so its updates are numbered); `--access`
 * uniform or Zipf(0.99) over `--objects` objects. Workloads: `counters`
 * (an update is an increment), `sets` (an update adds a new element, so
 * sets grow), `registers` (an update writes a new 96-character value),
 * `texts` (an update types one character at the end, so texts grow).
 *
 * Reports per reader: the bytes it received over its WebSocket (every
 * frame, from every relay) per update written; an update's delay from the
 * moment its writer saw it stable (the writer follows every commit) to
 * the moment the reader's stable value holds it; and freshness violations,
 * the updates whose delay passed δ.
 */
import { writeFileSync } from 'node:fs'
import { performance } from 'node:perf_hooks'
import type { Space, SteadClient } from '@stead/client'
import WebSocket from 'ws'
import { reportArgs } from './args.ts'
import { BenchCluster } from './cluster.ts'
import { openSdkSpace } from './load/sdk.ts'
import { Rng, zipfSampler } from './rng.ts'
import { Samples, type LatencySummary } from './stats.ts'
import { byteLength } from './wire.ts'

const values = reportArgs(
  'usage: npm run bench:bendy-live -- [--workloads counters,sets,registers,texts] [--access uniform,zipf] [--objects 200] [--rate 100] [--seconds 20] [--freshness 1000] [--writers 4] [--runs 1] [--json FILE]\n(what each option does: the comment at the top of packages/bench/src/bendy-live.ts)',
  {
    workloads: { type: 'string', default: 'counters,sets,registers,texts' },
    access: { type: 'string', default: 'uniform,zipf' },
    objects: { type: 'string', default: '200' },
    rate: { type: 'string', default: '100' },
    seconds: { type: 'string', default: '20' },
    freshness: { type: 'string', default: '1000' },
    writers: { type: 'string', default: '4' },
    runs: { type: 'string', default: '1' },
    json: { type: 'string' },
  },
)
const WORKLOADS = ['counters', 'sets', 'registers', 'texts'] as const
type Workload = (typeof WORKLOADS)[number]
const READERS = ['every', 'ops', 'state', 'adaptive'] as const
type ReaderMode = (typeof READERS)[number]
const workloads = String(values.workloads).split(',') as Workload[]
for (const w of workloads) if (!WORKLOADS.includes(w)) throw new Error(`--workloads takes ${WORKLOADS.join(', ')}, got ${w}`)
const accesses = String(values.access).split(',')
for (const a of accesses) if (a !== 'uniform' && a !== 'zipf') throw new Error(`--access takes uniform and zipf, got ${a}`)
const num = (k: 'objects' | 'rate' | 'seconds' | 'freshness' | 'writers' | 'runs'): number => {
  const v = Number(values[k])
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${k} must be a positive number`)
  return v
}
const objects = num('objects')
const rate = num('rate')
const seconds = num('seconds')
const freshness = num('freshness')
const writerCount = num('writers')
const runs = num('runs')

/** A WebSocket that counts the bytes of every frame it receives. */
function countingSocket(counter: { bytes: number }): new (url: string) => WebSocket {
  return class extends WebSocket {
    override emit(event: string | symbol, ...args: unknown[]): boolean {
      if (event === 'message') counter.bytes += byteLength(args[0])
      return super.emit(event, ...args)
    }
  }
}

/** How many of its updates an object's stable value shows: each update adds exactly one. */
function countOf(s: Space, w: Workload, key: string): number {
  if (w === 'counters') return s.counter(key).stable
  if (w === 'sets') return s.set<string>(key).stable.length
  if (w === 'texts') return s.text(key).stable.length
  const v = s.register<string>(key).stable
  return v === undefined ? 0 : Number(v.slice(0, 8))
}

function update(s: Space, w: Workload, key: string, n: number): Promise<unknown> {
  if (w === 'counters') return s.counter(key).increment(1)
  if (w === 'sets') return s.set<string>(key).add(`e${n}`)
  if (w === 'texts') return s.text(key).insert(n - 1, 'x')
  // A register's value names its update: its first 8 characters (padded to 96).
  return s.register<string>(key).set(String(n).padStart(8, '0').padEnd(96, '.'))
}

/** Records when each of an object's updates first shows in `s`'s stable value: key → update number → ms. */
function watch(s: Space, w: Workload, keys: readonly string[]): Map<string, number[]> {
  // What shows already is no update of the run: NaN.
  const seen = new Map<string, number[]>(keys.map((k) => [k, new Array<number>(countOf(s, w, k)).fill(Number.NaN)]))
  s.onChange(({ keys: changed }) => {
    const now = performance.now()
    for (const key of changed) {
      const times = seen.get(key)
      if (!times) continue
      const count = countOf(s, w, key)
      while (times.length < count) times.push(now)
    }
  })
  return seen
}

interface Row {
  readonly workload: Workload
  readonly access: string
  readonly reader: ReaderMode
  readonly updates: number
  readonly bytes: number
  readonly bytesPerUpdate: number
  readonly delay: LatencySummary | null
  readonly violations: number
  readonly missing: number
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

async function run(cluster: BenchCluster, workload: Workload, access: string, seed: number): Promise<Row[]> {
  const rng = new Rng(seed)
  const relays = cluster.descriptor.relays.map((r) => `http://${r.api}`)
  const space = `bendy-${workload}-${access}-${seed}`
  const keys = Array.from({ length: objects }, (_, i) => `o${i}`)
  const owners: SteadClient[] = []
  const open = async (name: string, counter?: { bytes: number }): Promise<Space> => {
    const { owner, space: s } = await openSdkSpace({ relays, cluster: cluster.descriptor, seed: `${space}-${name}`, space, options: counter ? { connect: ((url: string) => new (countingSocket(counter))(url)) as never } : {} })
    owners.push(owner)
    return s
  }
  try {
    const writers: Space[] = []
    for (let i = 0; i < writerCount; i++) writers.push(await open(`writer${i}`))
    const readers = new Map<ReaderMode, { space: Space; traffic: { bytes: number } }>()
    for (const mode of READERS) {
      const traffic = { bytes: 0 }
      const s = await open(`reader-${mode}`, traffic)
      if (mode !== 'every') s.setFreshness(freshness, { mode })
      readers.set(mode, { space: s, traffic })
    }
    // Every object declared once (by its writer) and stable everywhere before the clock starts.
    const first = writers[0] as Space
    await Promise.all(keys.map((key, i) => update(writers[i % writerCount] as Space, workload, key, 1)))
    const declared = (s: Space) => keys.every((k) => countOf(s, workload, k) >= 1)
    const deadline = performance.now() + 60_000
    while (![first, ...[...readers.values()].map((r) => r.space)].every(declared)) {
      if (performance.now() > deadline) throw new Error('objects not stable everywhere within 60 s')
      await sleep(50)
    }
    const written = watch(first, workload, keys)
    const read = new Map([...readers].map(([mode, r]) => [mode, watch(r.space, workload, keys)]))
    const start = new Map([...readers].map(([mode, r]) => [mode, r.traffic.bytes]))
    const pick = access === 'zipf' ? zipfSampler(objects, 0.99, rng) : () => Math.floor(rng.next() * objects)
    const numbers = new Map(keys.map((k) => [k, 1]))
    let updates = 0
    const t0 = performance.now()
    let next = t0
    while (next < t0 + seconds * 1000) {
      next += (-Math.log(1 - rng.next()) * 1000) / rate
      const wait = next - performance.now()
      if (wait > 0) await sleep(wait)
      const i = pick()
      const key = keys[i] as string
      const n = (numbers.get(key) as number) + 1
      numbers.set(key, n)
      void update(writers[i % writerCount] as Space, workload, key, n)
      updates++
    }
    // Everything written shows at the writer and at every reader (or a minute passes).
    const done = (s: Space) => keys.every((k) => countOf(s, workload, k) >= (numbers.get(k) as number))
    const settle = performance.now() + 60_000
    while (performance.now() < settle && ![first, ...[...readers.values()].map((r) => r.space)].every(done)) await sleep(100)
    return READERS.map((mode): Row => {
      const delays = new Samples()
      let violations = 0
      let missing = 0
      const times = read.get(mode) as Map<string, number[]>
      for (const key of keys) {
        const w = written.get(key) as number[]
        const r = times.get(key) as number[]
        for (let j = 0; j < w.length; j++) {
          if (Number.isNaN(w[j])) continue
          const at = r[j]
          if (at === undefined) {
            missing++
            continue
          }
          const delay = Math.max(0, at - (w[j] as number))
          delays.add(delay)
          if (delay > freshness) violations++
        }
      }
      const bytes = (readers.get(mode) as { traffic: { bytes: number } }).traffic.bytes - (start.get(mode) as number)
      return { workload, access, reader: mode, updates, bytes, bytesPerUpdate: Math.round(bytes / updates), delay: delays.summary(), violations, missing }
    })
  } finally {
    for (const o of owners) await o.close().catch(() => undefined)
  }
}

const rows: Row[] = []
const cluster = await BenchCluster.start({ kind: 'stead', n: 4 })
try {
  let seed = 1
  for (let r = 0; r < runs; r++) {
    for (const workload of workloads) {
      for (const access of accesses) {
        for (const row of await run(cluster, workload, access, seed++)) {
          rows.push(row)
          const d = row.delay
          console.log(
            `${workload.padEnd(9)} ${access.padEnd(7)} ${row.reader.padEnd(8)}: ${String(row.bytesPerUpdate).padStart(6)} B/update (${(row.bytes / 1024).toFixed(0)} KiB for ${row.updates}), delay p50 ${d?.p50.toFixed(0) ?? '-'} / p99 ${d?.p99.toFixed(0) ?? '-'} ms, ${row.violations} past δ = ${freshness} ms${row.missing ? `, ${row.missing} never seen` : ''}`,
          )
        }
      }
    }
  }
} finally {
  await cluster.stop()
}
if (values.json) writeFileSync(String(values.json), JSON.stringify(rows, null, 2))
