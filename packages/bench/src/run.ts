import type { BenchCluster } from './cluster.ts'
import { key, issue, type OpClass, type WorkloadSpec } from './load/workload.ts'
import type { ClientFactoryOptions, LoadClient, System } from './load/types.ts'
import { ProcWatch, type ProcUsage } from './proc.ts'
import { Rng } from './rng.ts'
import { Samples, round, type LatencySummary } from './stats.ts'
import { meshDelta, meshSnapshot, wireSnapshot } from './wire.ts'

export type LoadSpec =
  /** `workers` concurrent op loops per client, each waiting for its op to complete (the paper's client threads). */
  | { readonly loop: 'closed'; readonly workers: number }
  /** Ops issued at a fixed total rate whatever happens; latency counted from the scheduled time. */
  | { readonly loop: 'open'; readonly rate: number }

export interface PointSpec {
  readonly experiment: string
  /** What varies in this experiment, for tables and chart series. */
  readonly label: string
  readonly x?: number
  readonly system: System
  readonly workload: WorkloadSpec
  readonly load: LoadSpec
  readonly clients: number
  /** Client batch size b: ops per envelope at most. */
  readonly batch: number
  readonly batchIntervalMs: number
  readonly maxBacklog: number
  readonly warmupMs: number
  readonly durationMs: number
  readonly drainTimeoutMs: number
  readonly seed: number
}

export interface PointResult extends PointSpec {
  readonly relays: number
  readonly crashed: number
  readonly byzantine: string | null
  readonly driver: string
  /** Ops (reads + updates) completed in the window, per second. */
  readonly throughput: number
  /** Updates completed in the window, per second. */
  readonly updateThroughput: number
  /** Updates the relays carried in the window (plain: streamed back; else committed), per second. */
  readonly carriedThroughput: number
  readonly completed: Record<string, number>
  readonly rejected: number
  readonly latency: Partial<Record<OpClass, LatencySummary>>
  readonly bytes: {
    /** Client → relay frame bytes per update issued in the window. */
    readonly upPerUpdate: number
    /** Relay → client frame bytes per update, per client. */
    readonly downPerUpdatePerClient: number
    /** Relay ↔ relay TCP payload bytes per update. */
    readonly meshPerUpdate: number
    readonly envelopesPerSecond: number
    /** Updates per frame the clients sent (≈ ops per envelope: nearly every frame is a submit). */
    readonly opsPerEnvelope: number
  }
  readonly procs: ProcUsage[]
  readonly drainMs: number
  readonly drained: boolean
  readonly errors: Record<string, number>
  readonly wallMs: number
}

export type ClientFactory = (o: ClientFactoryOptions) => Promise<LoadClient>

let spaceCounter = 0

/** One measurement: fresh space, fresh clients, warm-up, window, drain. */
export interface WindowHooks {
  start?(): void
  end?(): Promise<void>
}

export async function runPoint(cluster: BenchCluster, spec: PointSpec, factory: ClientFactory, driver: string, crashed = 0, hooks: WindowHooks = {}): Promise<PointResult> {
  const started = performance.now()
  const space = `${spec.experiment}-${spec.system}-${++spaceCounter}-${process.pid}`
  const honest = cluster.honest()
  const clients: LoadClient[] = []
  for (let i = 0; i < spec.clients; i++) {
    const order = honest.map((_, j) => honest[(i + j) % honest.length] as number)
    clients.push(
      await factory({
        system: spec.system,
        index: i,
        space,
        relays: order.map((r) => ({ url: `ws://${cluster.descriptor.relays[r]?.api}/v1/ws`, publicKey: cluster.descriptor.relays[r]?.publicKey as string, index: r })),
        f: cluster.descriptor.f,
        cluster: cluster.descriptor,
        batchIntervalMs: spec.batchIntervalMs,
        maxBatchOps: spec.batch,
        maxBacklog: spec.maxBacklog,
      }),
    )
  }
  // The bank opens every account with a deposit that the cluster has carried before the clock starts.
  if (spec.workload.crdt === 'bank') {
    const c0 = clients[0] as LoadClient
    for (let i = 0; i < spec.workload.objects; i++) void c0.counterAdd(key('bank', i), 1_000_000, false)
    await c0.drain(spec.drainTimeoutMs)
  }

  const latency = new Map<OpClass, Samples>()
  const sample = (cls: OpClass, ms: number) => {
    let s = latency.get(cls)
    if (!s) latency.set(cls, (s = new Samples()))
    s.add(ms)
  }
  const completed: Record<string, number> = {}
  let rejected = 0
  let phase: 'warmup' | 'measure' | 'stopped' = 'warmup'
  const stopped = () => phase === 'stopped'
  let windowStart = 0
  let windowEnd = 0
  let updatesIssued = 0

  const track = (op: ReturnType<typeof issue>, t0: number) => {
    const measured = phase === 'measure'
    if (measured && op.update) updatesIssued++
    const done = (outcome: string) => {
      const t = performance.now()
      if (measured) {
        sample(op.cls, t - t0)
        if (op.cls !== op.base) sample(op.base, t - t0)
        if (outcome === 'rejected') rejected++
      }
      if (phase === 'measure' && t >= windowStart) completed[op.cls] = (completed[op.cls] ?? 0) + 1
    }
    if (!op.done) done('ok')
    return op.done?.then(done)
  }

  const loops: Promise<void>[] = []
  if (spec.load.loop === 'closed') {
    const workers = spec.load.workers
    clients.forEach((client, ci) => {
      for (let w = 0; w < workers; w++) {
        const rng = new Rng(spec.seed * 1_000_003 + ci * 1009 + w)
        loops.push(
          (async () => {
            let n = 0
            while (phase !== 'stopped') {
              if (client.backlog() >= spec.maxBacklog) await client.ready()
              if (stopped()) break
              const t0 = performance.now()
              const op = issue(client, rng, spec.workload)
              await track(op, t0)
              // Ops that complete locally would otherwise never let the socket be read.
              if (++n % 16 === 0) await new Promise<void>((r) => setImmediate(r))
            }
          })(),
        )
      }
    })
  } else {
    const perClient = spec.load.rate / spec.clients
    clients.forEach((client, ci) => {
      const rng = new Rng(spec.seed * 1_000_003 + ci * 1009)
      loops.push(
        new Promise<void>((resolve) => {
          const t0 = performance.now()
          let issued = 0
          const timer = setInterval(() => {
            if (phase === 'stopped') {
              clearInterval(timer)
              return resolve()
            }
            // Op k is due at t0 + k / rate: issue every op whose time has come.
            const due = Math.floor(((performance.now() - t0) / 1000) * perClient) + 1
            while (issued < due) {
              const scheduled = t0 + (issued / perClient) * 1000
              issued++
              void track(issue(client, rng, spec.workload), scheduled)
            }
          }, 2)
        }),
      )
    })
  }

  await sleep(spec.warmupMs)
  const procs = new ProcWatch([...cluster.pids(), { label: 'bench-clients', pid: process.pid }])
  const relayPids = new Set(cluster.pids().map((p) => p.pid))
  const wire0 = wireSnapshot()
  const mesh0 = meshSnapshot(relayPids)
  const carried0 = clients.reduce((n, c) => n + c.carriedOps(), 0)
  windowStart = performance.now()
  phase = 'measure'
  procs.begin()
  hooks.start?.()
  await sleep(spec.durationMs)
  windowEnd = performance.now()
  await hooks.end?.()
  const usage = procs.end()
  const wire1 = wireSnapshot()
  const mesh1 = meshSnapshot(relayPids)
  const carried1 = clients.reduce((n, c) => n + c.carriedOps(), 0)
  const counted = { ...completed }
  phase = 'stopped'

  const drainStart = performance.now()
  const drained = (await Promise.all(clients.map((c) => c.drain(spec.drainTimeoutMs)))).every(Boolean)
  const drainMs = performance.now() - drainStart
  await Promise.race([Promise.all(loops), sleep(2000)])
  const errors: Record<string, number> = {}
  for (const c of clients) for (const [k, v] of Object.entries(c.errors())) errors[k] = (errors[k] ?? 0) + v
  await Promise.all(clients.map((c) => c.close()))

  const seconds = (windowEnd - windowStart) / 1000
  const total = Object.values(counted).reduce((a, b) => a + b, 0)
  const updates = Object.entries(counted)
    .filter(([cls]) => cls !== 'read' && cls !== 'balance')
    .reduce((a, [, b]) => a + b, 0)
  const perUpdate = (bytes: number) => (updatesIssued ? round(bytes / updatesIssued, 1) : 0)
  return {
    ...spec,
    relays: cluster.spec.n,
    crashed,
    byzantine: cluster.spec.byzantine ? `${cluster.spec.byzantine.count}x ${cluster.spec.byzantine.mode}` : null,
    driver,
    throughput: Math.round(total / seconds),
    updateThroughput: Math.round(updates / seconds),
    carriedThroughput: Math.round((carried1 - carried0) / seconds),
    completed: counted,
    rejected,
    latency: Object.fromEntries([...latency].map(([cls, s]) => [cls, s.summary()]).filter(([, s]) => s)) as PointResult['latency'],
    bytes: {
      upPerUpdate: perUpdate(wire1.sentBytes - wire0.sentBytes),
      downPerUpdatePerClient: perUpdate((wire1.recvBytes - wire0.recvBytes) / spec.clients),
      meshPerUpdate: perUpdate(meshDelta(mesh0, mesh1)),
      envelopesPerSecond: Math.round((wire1.sentFrames - wire0.sentFrames) / seconds),
      opsPerEnvelope: wire1.sentFrames > wire0.sentFrames ? round(updatesIssued / (wire1.sentFrames - wire0.sentFrames), 1) : 0,
    },
    procs: usage,
    drainMs: Math.round(drainMs),
    drained,
    errors,
    wallMs: Math.round(performance.now() - started),
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}
