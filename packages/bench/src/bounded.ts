#!/usr/bin/env node
/**
 * The Bounded Counter paper's experiment (Balegas et al., SRDS 2015, §V),
 * as a report (never a test): clients decrement one counter that must never
 * go below 0, through the 4-relay cluster, in two ways side by side:
 *
 * - `bounded`: a Bounded Counter (`boundedCounter(key, { min: 0, initial })`):
 *   a spend within the client's rights is a regular update with no round
 *   trip; rights come from the pool (a safe claim) and then move between
 *   clients by asks and grants, without consensus (rights-broker.ts);
 * - `strong`: a counter with `{ min: 0 }` decremented by safe updates: each
 *   spend waits for its commit (strong consistency).
 *
 *   npm run bench:bounded -- [--clients 4,16,64] [--rate 100] [--seconds 12] [--initial 0.8] [--rtt 0,50-100] [--modes bounded,strong] [--batch-ms 20] [--json FILE]
 *
 * `--rate` spends per second offered by all clients together (Poisson,
 * spread evenly over the clients: every SDK client verifies every other
 * client's envelopes, so a fixed total keeps 64 clients within two cores);
 * `--initial` the counter's starting value as a share of the spends offered
 * in the run (below 1, the counter runs out before the end, and the last
 * spends must be refused); `--rtt` the round trip injected between each
 * client and the relays, one value or a `lo-hi` range drawn per client
 * (half of it each way, on every frame: the paper's geo-distribution).
 * Reports per run: spends that succeeded per second, their latency from the
 * call to the promise (`stored` for a bounded spend, `committed` for a
 * strong one), the share made without a round trip (the client held the
 * rights at the call), the spends refused, and the invariant checked on
 * the stable order: the stable value is the initial one less the spends
 * that succeeded, and never below 0.
 */
import { writeFileSync } from 'node:fs'
import type { BoundedCounterHandle, CounterHandle, Space, SteadClient } from '@stead/client'
import WebSocket from 'ws'
import { reportArgs } from './args.ts'
import { BenchCluster } from './cluster.ts'
import { openSdkSpace } from './load/sdk.ts'
import { Rng } from './rng.ts'
import { Samples, type LatencySummary } from './stats.ts'

const values = reportArgs(
  'usage: npm run bench:bounded -- [--clients 4,16,64] [--rate 100] [--seconds 12] [--initial 0.8] [--rtt 0,50-100] [--modes bounded,strong] [--batch-ms 20] [--json FILE]\n(what each option does: the comment at the top of packages/bench/src/bounded.ts)',
  {
    clients: { type: 'string', default: '4,16,64' },
    rate: { type: 'string', default: '100' },
    seconds: { type: 'string', default: '12' },
    initial: { type: 'string', default: '0.8' },
    rtt: { type: 'string', default: '0,50-100' },
    modes: { type: 'string', default: 'bounded,strong' },
    'batch-ms': { type: 'string', default: '20' },
    json: { type: 'string' },
  },
)
const clientCounts = String(values.clients).split(',').map(Number)
const rate = Number(values.rate)
const seconds = Number(values.seconds)
const initialShare = Number(values.initial)
const rtts = String(values.rtt)
  .split(',')
  .map((r) => r.split('-').map(Number))
const modes = String(values.modes).split(',')
const batchIntervalMs = Number(values['batch-ms'])
if (clientCounts.some((n) => !(Number.isInteger(n) && n >= 1)) || !(rate > 0) || !(seconds > 0) || !(initialShare > 0) || rtts.some((r) => r.length > 2 || r.some((v) => !(v >= 0))) || modes.some((m) => m !== 'bounded' && m !== 'strong') || !(batchIntervalMs >= 0)) {
  throw new Error('--clients takes whole numbers ≥ 1, --rate, --seconds and --initial positive numbers, --rtt ms or lo-hi ranges separated by commas, --modes some of bounded and strong, --batch-ms a number ≥ 0')
}

/** A `ws` socket that holds every frame `oneWayMs` each way, in order: a client far from the relays. */
class FarSocket extends WebSocket {
  private readonly oneWayMs: number
  constructor(url: string, oneWayMs: number) {
    super(url)
    this.oneWayMs = oneWayMs
  }

  override send(...args: unknown[]): void {
    setTimeout(() => {
      if (this.readyState === WebSocket.OPEN) (WebSocket.prototype.send as (...a: unknown[]) => void).apply(this, args)
    }, this.oneWayMs)
  }

  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (event !== 'message') return super.emit(event, ...args)
    setTimeout(() => super.emit(event, ...args), this.oneWayMs)
    return true
  }
}

interface Row {
  readonly mode: string
  readonly clients: number
  readonly rttMs: string
  readonly initial: number
  readonly offered: number
  readonly succeeded: number
  readonly refused: number
  readonly failed: number
  readonly perSecond: number
  readonly latency: LatencySummary | null
  readonly localShare: number
  readonly stable: number
  readonly invariantHolds: boolean
}

async function run(cluster: BenchCluster, mode: string, clients: number, rtt: readonly number[], seed: number): Promise<Row> {
  const rng = new Rng(seed)
  const relays = cluster.descriptor.relays.map((r) => `http://${r.api}`)
  const space = `bounded-${mode}-${clients}-${rtt.join('-')}-${seed}`
  const offered = Math.round(rate * seconds)
  const initial = Math.max(1, Math.round(offered * initialShare))
  const key = 'stock'
  const owners: SteadClient[] = []
  const spaces: Space[] = []
  for (let i = 0; i < clients; i++) {
    const rttMs = rtt.length === 2 ? (rtt[0] as number) + rng.next() * ((rtt[1] as number) - (rtt[0] as number)) : (rtt[0] as number)
    const connect = (url: string) => (rttMs > 0 ? new FarSocket(url, rttMs / 2) : new WebSocket(url)) as never
    const { owner, space: s } = await openSdkSpace({ relays, cluster: cluster.descriptor, seed: `${space}-${i}`, space, options: { batchIntervalMs, connect } })
    owners.push(owner)
    spaces.push(s)
  }
  const bounded = (s: Space): BoundedCounterHandle => s.boundedCounter(key, { min: 0, initial })
  const strong = (s: Space): CounterHandle => s.counter(key, { min: 0 })
  const first = spaces[0] as Space
  // The strong counter starts at `initial` too: one safe deposit before the clock starts.
  if (mode === 'strong') await strong(first).increment(initial, { safe: true })
  for (const s of spaces) {
    if (mode === 'bounded') bounded(s)
    else await waitFor(() => strong(s).stable === initial, 20_000, 'every client sees the deposit')
  }

  const latency = new Samples()
  let succeeded = 0
  let refused = 0
  let failed = 0
  let local = 0
  const spends: Array<Promise<void>> = []
  const t0 = performance.now()
  const end = t0 + seconds * 1000
  // Poisson arrivals over the clients, each spend an independent call (a client may have several under way).
  let next = t0
  while (next < end) {
    next += (-Math.log(1 - rng.next()) * 1000) / rate
    const wait = next - performance.now()
    if (wait > 1) await sleep(wait)
    const s = spaces[rng.int(0, clients - 1)] as Space
    const start = performance.now()
    let p: Promise<{ status: string }>
    if (mode === 'bounded') {
      const h = bounded(s)
      if (h.rightsToDecrement >= 1) local++
      p = h.decrement(1, { timeoutMs: 30_000 })
    } else p = strong(s).decrement(1, { safe: true, timeoutMs: 30_000 })
    spends.push(
      p.then(
        (r) => {
          if (r.status === 'stored' || r.status === 'committed') {
            succeeded++
            latency.add(performance.now() - start)
          } else refused++
        },
        () => void failed++,
      ),
    )
  }
  await Promise.all(spends)
  const elapsed = (performance.now() - t0) / 1000
  for (const s of spaces) await s.flush({ timeoutMs: 60_000 }).catch(() => undefined)
  // The invariant, on the stable order: every spend that succeeded is in it, and nothing more.
  const read = (s: Space): number => (mode === 'bounded' ? bounded(s).stable : strong(s).stable)
  await waitFor(() => read(first) === initial - succeeded, 60_000, 'the stable value to take every spend').catch(() => undefined)
  const stable = read(first)
  for (const o of owners) await o.close()
  return {
    mode,
    clients,
    rttMs: rtt.join('-'),
    initial,
    offered: spends.length,
    succeeded,
    refused,
    failed,
    perSecond: Math.round(succeeded / elapsed),
    latency: latency.summary(),
    localShare: mode === 'bounded' ? Math.round((1000 * local) / spends.length) / 1000 : 0,
    stable,
    invariantHolds: stable >= 0 && stable === initial - succeeded,
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}

async function waitFor(check: () => boolean, withinMs: number, what: string): Promise<void> {
  const deadline = performance.now() + withinMs
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`${what}: not within ${withinMs} ms`)
    await sleep(20)
  }
}

const rows: Row[] = []
const cluster = await BenchCluster.start({ kind: 'stead', n: 4 })
try {
  let seed = 1
  for (const rtt of rtts) {
    for (const clients of clientCounts) {
      for (const mode of modes) {
        const row = await run(cluster, mode, clients, rtt, seed++)
        rows.push(row)
        const l = row.latency
        console.log(
          `${mode.padEnd(7)} clients ${String(clients).padStart(2)} rtt ${row.rttMs.padStart(6)} ms: ${row.succeeded}/${row.offered} spends succeeded (${row.perSecond}/s), ${row.refused} refused, ${row.failed} failed; latency p50 ${l?.p50.toFixed(1) ?? '-'} / p99 ${l?.p99.toFixed(1) ?? '-'} ms; local ${(row.localShare * 100).toFixed(0)}%; stable ${row.stable} of ${row.initial} (invariant ${row.invariantHolds ? 'holds' : 'BROKEN'})`,
        )
      }
    }
  }
} finally {
  await cluster.stop()
}
if (values.json) writeFileSync(String(values.json), JSON.stringify(rows, null, 2))
