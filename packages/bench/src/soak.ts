#!/usr/bin/env node
/**
 * Soak report (a report, never a test): a real 4-relay cluster on loopback
 * under a light, steady load from two SDK clients, with one relay killed
 * (SIGKILL) and restarted every few minutes, in turn. Every sample prints
 * each relay's store size, RSS and round; every restart prints how long
 * the relay took to serve again (recovery from its store) and to be ready
 * (caught up with the cluster and committing).
 *
 *   npm run soak -- [--minutes 30] [--rate 20] [--restart-every 5] [--sample-every 30] [--idle-minutes 0] [--out FILE]
 *
 * --rate: regular updates per second (one in ten is safe; 0: an idle
 * cluster, clients connected); --restart-every and --sample-every: minutes
 * and seconds (--restart-every 0: no restarts). --idle-minutes: after
 * the load, keep sampling the idle cluster this long and report its store
 * and RSS growth. --out writes the samples and restarts as JSON.
 */
import { statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Space } from '@stead/client'
import { BenchCluster } from './cluster.ts'
import { openSdkSpace } from './load/sdk.ts'
import { sampleProc } from './proc.ts'
import { reportArgs } from './args.ts'

const values = reportArgs(
  `usage: npm run soak -- [--minutes 30] [--rate 20] [--restart-every 5] [--sample-every 30] [--idle-minutes 0] [--out FILE]\n(what each option does: the comment at the top of packages/bench/src/soak.ts)`,
  {
    minutes: { type: 'string', default: '30' },
    rate: { type: 'string', default: '20' },
    'restart-every': { type: 'string', default: '5' },
    'sample-every': { type: 'string', default: '30' },
    'idle-minutes': { type: 'string', default: '0' },
    out: { type: 'string' },
  },
)
const idleMinutes = Number(values['idle-minutes'])
if (!Number.isFinite(idleMinutes) || idleMinutes < 0) throw new Error('--idle-minutes must be 0 or more')
const minutes = Number(values.minutes)
const rate = Number(values.rate)
const restartEveryMs = Number(values['restart-every']) * 60_000
const sampleEveryMs = Number(values['sample-every']) * 1000
for (const [name, v] of [['minutes', minutes], ['sample-every', sampleEveryMs]] as const) {
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${name} must be a positive number`)
}
// 0 for either: an idle cluster (clients connected, no updates) or one never restarted.
for (const [name, v] of [['rate', rate], ['restart-every', restartEveryMs]] as const) {
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} must be 0 or more`)
}

interface RelaySample {
  readonly relay: string
  readonly up: boolean
  readonly storeMb: number
  readonly rssMb: number
  /** Anonymous and file-backed parts of the RSS (see ProcSample). */
  readonly anonMb: number
  readonly fileMb: number
  /** V8 heap in use (from /v1/status): RSS that only grows while this stays flat is the allocator, not a leak. */
  readonly heapMb: number
  readonly round: number
  readonly committedRound: number
}

interface Sample {
  readonly minute: number
  readonly updates: number
  readonly relays: readonly RelaySample[]
}

interface Restart {
  readonly minute: number
  readonly relay: string
  /** From spawn until it serves HTTP again: reading its store and rebuilding its state. */
  readonly recoverMs: number
  /** From serving until /ready: caught up with the cluster and committing. */
  readonly catchUpMs: number
  /** What its own log says recovery took and replayed. */
  readonly recovered: { ms?: number; batches?: number; snapshotBatch?: number | null }
}

/** Resident set size of a process in MB (Linux): all of it, anonymous, and file-backed. */
function rss(pid: number | undefined): { rssMb: number; anonMb: number; fileMb: number } {
  const p = pid === undefined ? null : sampleProc(pid)
  return p ? { rssMb: p.rssMb, anonMb: p.anonMb, fileMb: p.fileMb } : { rssMb: NaN, anonMb: NaN, fileMb: NaN }
}

async function client(cluster: BenchCluster, name: string): Promise<Space> {
  const relays = cluster.descriptor.relays.map((r) => `http://${r.api}`)
  return (await openSdkSpace({ relays, cluster: cluster.descriptor, seed: `stead-soak-${name}`, space: 'soak' })).space
}

async function ready(cluster: BenchCluster, i: number, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs
  while (Date.now() < end) {
    try {
      if ((await cluster.status(i))['ready'] === true) return true
    } catch {
      // restarting
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  return false
}

const cluster = await BenchCluster.start({ kind: 'stead', n: 4, logLevel: 'info' })
const started = Date.now()
const minute = () => (Date.now() - started) / 60_000
const samples: Sample[] = []
const restarts: Restart[] = []
let updates = 0
let failures = 0
try {
  const [alice, bob] = [await client(cluster, 'alice'), await client(cluster, 'bob')]
  console.log(`soak: 4 relays, ${rate} updates/s (1 in 10 safe), ${restartEveryMs ? `a relay killed and restarted every ${restartEveryMs / 60_000} min` : 'no restarts'}, ${minutes} min, ${new Date().toISOString()}`)
  // The load: a steady trickle, spread over a few hundred objects and both clients.
  const load = setInterval(() => {
    if (rate === 0) return
    const space = updates % 2 ? bob : alice
    const counter = space.counter(`acct:${updates % 300}`)
    const safe = updates % 10 === 0
    updates++
    counter.increment(1, { safe }).catch(() => failures++)
  }, rate ? 1000 / rate : 60_000)

  const sample = async (): Promise<void> => {
    const relays: RelaySample[] = []
    for (const [i, r] of cluster.relays.entries()) {
      const pid = cluster.pids().find((p) => p.label.endsWith(r.id))?.pid
      let status: Record<string, unknown> = {}
      try {
        if (pid) status = await cluster.status(i)
      } catch {
        // restarting
      }
      relays.push({
        relay: r.id,
        up: pid !== undefined,
        storeMb: statSync(join(r.data, 'data.mdb')).size / 1e6,
        ...rss(pid),
        heapMb: Number((status['process'] as { heapUsed?: number } | undefined)?.heapUsed ?? NaN) / 1e6,
        round: Number(status['round'] ?? NaN),
        committedRound: Number(status['committedRound'] ?? NaN),
      })
    }
    const s = { minute: Number(minute().toFixed(2)), updates, relays }
    samples.push(s)
    console.log(`${s.minute.toFixed(1).padStart(6)} min  ${String(updates).padStart(7)} updates  ${relays.map((r) => `${r.relay} ${r.storeMb.toFixed(1)} MB store, ${r.rssMb.toFixed(0)} MB RSS (anon ${r.anonMb.toFixed(0)}, heap ${r.heapMb.toFixed(0)}), round ${r.round}`).join(' | ')}`)
  }

  let next = 1
  let nextRestart = restartEveryMs || Number.POSITIVE_INFINITY
  let nextSample = 0
  while (Date.now() - started < minutes * 60_000) {
    const at = Date.now() - started
    if (at >= nextSample) {
      await sample()
      nextSample += sampleEveryMs
    }
    if (at >= nextRestart) {
      nextRestart += restartEveryMs
      const i = next
      next = (next % 3) + 1
      const r = cluster.relays[i] as { id: string; log: string }
      cluster.crash(i)
      r.log = ''
      const t0 = Date.now()
      await cluster.restart(i)
      const recoverMs = Date.now() - t0
      const t1 = Date.now()
      const caughtUp = await ready(cluster, i, 600_000)
      const line = r.log.split('\n').find((l) => l.includes('recovered from store'))
      const parsed = line ? (JSON.parse(line) as { ms?: number; batches?: number; snapshotBatch?: number | null }) : {}
      const restart: Restart = { minute: Number(minute().toFixed(2)), relay: r.id, recoverMs, catchUpMs: caughtUp ? Date.now() - t1 : NaN, recovered: { ms: parsed.ms, batches: parsed.batches, snapshotBatch: parsed.snapshotBatch } }
      restarts.push(restart)
      console.log(`${restart.minute.toFixed(1).padStart(6)} min  restarted ${r.id}: serving after ${recoverMs} ms (store read in ${parsed.ms ?? '?'} ms, ${parsed.batches ?? '?'} batches replayed), ready after ${caughtUp ? `${restart.catchUpMs} ms more` : 'never (10 min)'}`)
    }
    await new Promise((r) => setTimeout(r, 250))
  }
  clearInterval(load)
  await sample()
  const growth = (label: string, first: Sample | undefined, last: Sample | undefined): void => {
    if (!first || !last || last.minute <= first.minute) return
    const span = last.minute - first.minute
    console.log(`${label}, ${first.minute.toFixed(1)} → ${last.minute.toFixed(1)} min:`)
    for (const [k, r] of last.relays.entries()) {
      const f = first.relays[k] as RelaySample
      console.log(`  ${r.relay}: store ${f.storeMb.toFixed(2)} → ${r.storeMb.toFixed(2)} MB (${((r.storeMb - f.storeMb) / span).toFixed(2)} MB/min), RSS ${f.rssMb.toFixed(1)} → ${r.rssMb.toFixed(1)} MB (${(r.rssMb - f.rssMb).toFixed(1)} MB; anonymous ${(r.anonMb - f.anonMb).toFixed(1)}, files ${(r.fileMb - f.fileMb).toFixed(1)}), heap ${f.heapMb.toFixed(1)} → ${r.heapMb.toFixed(1)} MB`)
    }
  }
  growth('under load', samples[1] ?? samples[0], samples[samples.length - 1])
  console.log(`${updates} updates sent, ${failures} failed`)
  // Then the same cluster idle (clients still connected): what a quiet night costs.
  const idleFrom = samples.length - 1
  const idleEnd = Date.now() + idleMinutes * 60_000
  while (Date.now() < idleEnd) {
    await new Promise((r) => setTimeout(r, Math.min(sampleEveryMs, idleEnd - Date.now())))
    await sample()
  }
  if (idleMinutes > 0) growth(`idle for ${idleMinutes} min`, samples[idleFrom], samples[samples.length - 1])
  if (values.out) writeFileSync(values.out, JSON.stringify({ rate, minutes, idleMinutes, restartEveryMs, samples, restarts, updates, failures }, null, 2))
} finally {
  await cluster.stop()
  process.exit(0)
}
