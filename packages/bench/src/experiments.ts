import type { ClusterSpec } from './cluster.ts'
import type { CrdtKind, WorkloadSpec } from './load/workload.ts'
import type { System } from './load/types.ts'
import type { LoadSpec, PointSpec } from './run.ts'

export type Suite = 'smoke' | 'quick' | 'full'

/** Points that share one running cluster (relays are started once per group). */
export interface Group {
  readonly name: string
  readonly cluster: Omit<ClusterSpec, 'kind'>
  /** Relays killed (SIGKILL) right after start, as in the paper's crash runs. */
  readonly crash?: number
  /** Profile relay 0 (V8 --cpu-prof) for this group. */
  readonly profile?: boolean
  readonly points: readonly PointSpec[]
}

interface Timing {
  readonly warmupMs: number
  readonly durationMs: number
  readonly drainTimeoutMs: number
}

const TIMING: Record<Suite, Timing> = {
  smoke: { warmupMs: 200, durationMs: 800, drainTimeoutMs: 3000 },
  quick: { warmupMs: 500, durationMs: 2500, drainTimeoutMs: 8000 },
  full: { warmupMs: 1000, durationMs: 3000, drainTimeoutMs: 8000 },
}

const SYSTEMS: readonly System[] = ['reliable', 'consensus-first', 'plain']
const CLIENTS = 4

/** The paper's defaults: balanced mix, 50% safe, 100 objects, b = 500. */
const balanced = (crdt: CrdtKind, objects = 100): WorkloadSpec => ({ crdt, objects, readRatio: 0.5, safeRatio: 0.5 })

function point(suite: Suite, experiment: string, label: string, system: System, workload: WorkloadSpec, load: LoadSpec, batch: number, extra: Partial<PointSpec> = {}): PointSpec {
  return {
    experiment,
    label,
    system,
    workload,
    load,
    clients: CLIENTS,
    batch,
    batchIntervalMs: 10,
    // Envelopes a client may have in flight before its workers wait: enough to keep a
    // commit pipeline of ~1 s full at b = 500, small enough that nothing piles up unseen.
    maxBacklog: 64,
    seed: 42,
    ...TIMING[suite],
    ...extra,
  }
}

/** Every system at each point, split by which relays they need: Stead's (reliable, consensus-first) or plain. */
function bySystem(points: PointSpec[]): { stead: PointSpec[]; plain: PointSpec[] } {
  return { stead: points.filter((p) => p.system !== 'plain'), plain: points.filter((p) => p.system === 'plain') }
}

function groupsFor(name: string, points: PointSpec[], cluster: Omit<ClusterSpec, 'kind'> = { n: 4 }, crash = 0): Group[] {
  const { stead, plain } = bySystem(points)
  const out: Group[] = []
  if (stead.length) out.push({ name: `${name}/stead`, cluster, crash, points: stead })
  if (plain.length) out.push({ name: `${name}/plain`, cluster: { n: cluster.n }, crash, points: plain })
  return out
}

export function suite(s: Suite): Group[] {
  if (s === 'smoke') {
    const pts = SYSTEMS.map((sys) => point(s, 'curve', 'counter b=10', sys, balanced('counter', 20), { loop: 'closed', workers: 2 }, 10, { clients: 2, x: 2 }))
    return groupsFor('smoke', pts)
  }
  const quick = s === 'quick'
  const groups: Group[] = []

  // 1. Throughput–latency curves: load grows with the number of closed-loop workers per client.
  const workerSteps = quick ? [4, 64] : [4, 32, 256]
  const batches = quick ? [100] : [1, 100, 500]
  const curve: PointSpec[] = []
  for (const crdt of ['counter', 'set'] as const)
    for (const b of batches)
      for (const w of workerSteps)
        for (const sys of SYSTEMS) curve.push(point(s, 'curve', `${crdt} b=${b}`, sys, balanced(crdt), { loop: 'closed', workers: w }, b, { x: w }))
  groups.push(...groupsFor('curve', curve))

  // 1b. Bounded Counter (escrow), SDK driver only: spends within a client's rights need no coordination.
  // Not on plain relays: rights come from the pool through the stable order, which plain does not have
  // (a spend beyond a client's rights would wait forever for a commit).
  const bounded: PointSpec[] = []
  for (const w of workerSteps) for (const sys of ['reliable', 'consensus-first'] as const) bounded.push(point(s, 'curve', 'bounded b=100', sys, balanced('bounded'), { loop: 'closed', workers: w }, 100, { x: w }))
  groups.push(...groupsFor('bounded', bounded))

  // 2. Safe-update latency at light load (open loop, a few envelopes per second).
  groups.push(
    ...groupsFor('light', [point(s, 'light', 'counter 40 ops/s', 'reliable', balanced('counter'), { loop: 'open', rate: 40 }, 500, quick ? {} : { durationMs: 10_000 })]),
  )

  // 3. Bytes on the wire per regular counter update (no reads, no safe updates), b = 100:
  // 100 objects (a batch often touches one object twice, and compaction sums those) and
  // 100,000 objects (almost never: the worst case for per-object overhead).
  const bytes: PointSpec[] = []
  for (const objects of [100, 100_000]) bytes.push(point(s, 'bytes', `counter b=100, ${objects} objects`, 'reliable', { crdt: 'counter', objects, readRatio: 0, safeRatio: 0 }, { loop: 'closed', workers: 256 }, 100, { x: objects }))
  bytes.push(point(s, 'bytes', 'counter b=1, 100 objects', 'reliable', { crdt: 'counter', objects: 100, readRatio: 0, safeRatio: 0 }, { loop: 'closed', workers: 2 }, 1, { x: 100 }))
  groups.push(...groupsFor('bytes', bytes))

  // 4. Banking: 100 accounts, 50% balance checks, deposits, withdrawals, transfers.
  const bank: PointSpec[] = []
  for (const w of quick ? [64] : [4, 32, 256]) for (const sys of SYSTEMS) bank.push(point(s, 'bank', 'bank 100 accounts', sys, { crdt: 'bank', objects: 100, readRatio: 0.5, safeRatio: 0.5 }, { loop: 'closed', workers: w }, 500, { x: w }))
  groups.push(...groupsFor('bank', bank))
  if (quick) return groups

  const SAT = { loop: 'closed', workers: 256 } as const

  // 5. Peak throughput vs safe ratio and read/write mix (PN-Counter and OR-Set, b = 500).
  const mix: PointSpec[] = []
  // PN-Counter only (the OR-Set's balanced / 50% point is in the curves), to keep the full suite near 20 minutes.
  for (const crdt of ['counter'] as const)
    for (const [mixName, readRatio] of [['read-heavy', 0.75], ['balanced', 0.5], ['write-heavy', 0.25]] as const)
      for (const safeRatio of [0.3, 0.5, 0.7])
        for (const sys of SYSTEMS) mix.push(point(s, 'mix', `${crdt} ${mixName} safe ${Math.round(safeRatio * 100)}%`, sys, { crdt, objects: 100, readRatio, safeRatio }, SAT, 500, { x: safeRatio }))
  groups.push(...groupsFor('mix', mix))

  // 6. Peak throughput vs number of objects.
  const objects: PointSpec[] = []
  for (const crdt of ['counter', 'set'] as const)
    for (const n of [10, 100, 1000, 5000]) for (const sys of SYSTEMS) objects.push(point(s, 'objects', `${crdt}`, sys, balanced(crdt, n), SAT, 500, { x: n }))
  groups.push(...groupsFor('objects', objects))

  // 7. Number of relays.
  for (const n of [4, 7, 10]) {
    groups.push(...groupsFor(`relays-${n}`, SYSTEMS.map((sys) => point(s, 'relays', 'counter', sys, balanced('counter'), SAT, 500, { x: n })), { n }))
  }

  // 8. Faults on N = 7 (f = 2): crashed relays, and Byzantine relays (withhold-block: its blocks
  // reach only f+1 peers, the closest to the paper's "no certificates for half of the blocks").
  for (const crash of [0, 1, 2]) {
    groups.push(...groupsFor(`crash-${crash}`, SYSTEMS.map((sys) => point(s, 'faults', `crashed`, sys, balanced('counter'), SAT, 500, { x: crash })), { n: 7 }, crash))
  }
  for (const [count, mode] of [[1, 'withhold-block'], [2, 'withhold-block'], [2, 'equivocate'], [1, 'forged-envelopes']] as const) {
    const pts = (['reliable', 'consensus-first'] as const).map((sys) => point(s, 'faults', `byzantine ${mode}`, sys, balanced('counter'), SAT, 500, { x: count }))
    groups.push({ name: `byzantine-${count}-${mode}`, cluster: { n: 7, byzantine: { count, mode } }, points: pts })
  }

  // 9. One profiled run: relay 0 under the reliable saturation load, V8 CPU profile.
  groups.push({ name: 'profile', cluster: { n: 4 }, profile: true, points: [point(s, 'profile', 'counter b=500', 'reliable', balanced('counter'), SAT, 500, { durationMs: 6000 })] })
  return groups
}
