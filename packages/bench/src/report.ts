import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Results } from './cli.ts'
import type { OpClass } from './load/workload.ts'
import type { PointResult } from './run.ts'
import type { LatencySummary } from './stats.ts'
import { barChart, lineChart, type Series } from './svg.ts'

type Point = Results['points'][number]
const SYSTEMS = ['reliable', 'plain', 'consensus-first'] as const

/** The paper's ratios (Janus, VLDB 2024, Figure 5) and the issue's targets. */
const PAPER = { counter: { plain: 0.65, cf: 1.5 }, set: { plain: 0.4, cf: 1.6 } }
const TARGET = { counter: { plain: 0.8, cf: 1.5 }, set: { plain: 0.6, cf: 1.5 }, safeP50: 50, safeP99: 250, bytes: 40 }

export interface ReportInput {
  readonly full: Results | null
  /** The curves again with the protocol-level driver (results/proto/full.json), if run. */
  readonly proto?: Results | null
  readonly quick: Results | null
  readonly reportPath: string
  readonly chartsDir: string
  /** How the report links to the charts directory. */
  readonly chartsRel: string
}

const n = (v: number | undefined | null, digits = 0): string => (v === undefined || v === null || !Number.isFinite(v) ? '–' : v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 }))
const ms = (s: LatencySummary | undefined, k: keyof LatencySummary = 'p50'): string => (s ? n(s[k], s[k] < 1 ? 3 : s[k] < 10 ? 1 : 0) : '–')
const ratio = (a: number | undefined, b: number | undefined): number | undefined => (a && b ? Math.round((a / b) * 100) / 100 : undefined)

function updateMean(p: PointResult): number | undefined {
  let sum = 0
  let count = 0
  for (const cls of ['regular', 'safe'] as const) {
    const s = p.latency[cls]
    if (s) {
      sum += s.mean * s.count
      count += s.count
    }
  }
  return count ? sum / count : undefined
}

function relayCpu(p: PointResult): number {
  return Math.round(p.procs.filter((u) => u.label !== 'bench-clients').reduce((a, u) => a + u.cpuPercent, 0))
}
function clientCpu(p: PointResult): number {
  return Math.round(p.procs.find((u) => u.label === 'bench-clients')?.cpuPercent ?? 0)
}
function relayRss(p: PointResult): number {
  return Math.round(Math.max(0, ...p.procs.filter((u) => u.label !== 'bench-clients').map((u) => u.rssMb)))
}

function peak(points: readonly Point[], experiment: string, label: string, system: string): Point | undefined {
  return points.filter((p) => p.experiment === experiment && p.label === label && p.system === system).sort((a, b) => b.throughput - a.throughput)[0]
}

function pointTable(points: readonly Point[], first: { head: string; cell: (p: Point) => string }, opts: { bank?: boolean } = {}): string {
  const classes: OpClass[] = opts.bank ? ['balance', 'deposit', 'withdraw', 'transfer'] : ['read', 'regular', 'safe']
  const head = [first.head, 'system', 'ops/s', 'updates/s', ...classes.map((c) => `${c} p50 / p99 ms`), 'relay CPU %', 'client CPU %', 'relay RSS MB', 'B/update up', 'drain ms']
  const rows = points.map((p) => [
    first.cell(p),
    p.system,
    n(p.throughput),
    n(p.updateThroughput),
    ...classes.map((c) => `${ms(p.latency[c])} / ${ms(p.latency[c], 'p99')}`),
    n(relayCpu(p)),
    n(clientCpu(p)),
    n(relayRss(p)),
    n(p.bytes.upPerUpdate, 1),
    `${n(p.drainMs)}${p.drained ? '' : ' (timeout)'}`,
  ])
  return table(head, rows)
}

function table(head: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const align = head.map((_, i) => (i < 2 ? '---' : '---:'))
  return [`| ${head.join(' | ')} |`, `| ${align.join(' | ')} |`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n') + '\n'
}

function chart(input: ReportInput, name: string, svg: string): string {
  mkdirSync(input.chartsDir, { recursive: true })
  writeFileSync(join(input.chartsDir, `${name}.svg`), svg)
  return `![${name}](${input.chartsRel}/${name}.svg)\n`
}

function meta(r: Results): string {
  const m = r.meta
  return (
    `Suite \`${m.suite}\`, driver \`${m.driver}\`, commit \`${m.commit}\`, started ${m.started}, ${n(m.wallSeconds)} s wall. ` +
    `Machine: ${m.cpu}, ${m.cores} cores, ${m.memoryGb} GB, Node ${m.node}; load average ${m.loadavgBefore.join(' / ')} before and ${m.loadavgAfter.join(' / ')} after.` +
    (m.notes ? `\n\nNote: ${m.notes}.` : '') +
    (r.failures.length ? `\n\n**Failed cluster runs:** ${r.failures.map((f) => `${f.group} (${f.error.split('\n')[0]})`).join('; ')}` : '') +
    '\n'
  )
}

function headline(r: Results): string {
  const pts = r.points
  const rows: string[][] = []
  for (const crdt of ['counter', 'set'] as const) {
    const label = `${crdt} b=500`
    const rel = peak(pts, 'curve', label, 'reliable')
    const pl = peak(pts, 'curve', label, 'plain')
    const cf = peak(pts, 'curve', label, 'consensus-first')
    const name = crdt === 'counter' ? 'PN-Counter' : 'OR-Set'
    const rp = ratio(rel?.throughput, pl?.throughput)
    const rc = ratio(rel?.throughput, cf?.throughput)
    rows.push([`${name}: reliable / plain, peak ops/s at b = 500`, `${n(rel?.throughput)} / ${n(pl?.throughput)} = **${n(rp, 2)}x**`, `${PAPER[crdt].plain}x`, `≥ ${TARGET[crdt].plain}x`, verdict(rp === undefined ? null : rp >= TARGET[crdt].plain)])
    rows.push([`${name}: reliable / consensus-first, peak ops/s at b = 500`, `${n(rel?.throughput)} / ${n(cf?.throughput)} = **${n(rc, 2)}x**`, `${PAPER[crdt].cf}x`, `≥ ${TARGET[crdt].cf}x`, verdict(rc === undefined ? null : rc >= TARGET[crdt].cf)])
  }
  const light = pts.find((p) => p.experiment === 'light')
  const safe = light?.latency.safe
  rows.push(['safe-update latency at light load, p50', `${ms(safe)} ms`, '100–200 ms (Fig. 7)', `≤ ${TARGET.safeP50} ms`, verdict(safe ? safe.p50 <= TARGET.safeP50 : null)])
  rows.push(['safe-update latency at light load, p99', `${ms(safe, 'p99')} ms`, '', `≤ ${TARGET.safeP99} ms`, verdict(safe ? safe.p99 <= TARGET.safeP99 : null)])
  const bytes = pts.find((p) => p.experiment === 'bytes' && p.batch === 100 && p.x === 100)
  const worst = pts.find((p) => p.experiment === 'bytes' && p.batch === 100 && p.x === 100_000)
  rows.push(['bytes on the wire per regular counter update, b = 100 (client → relay)', `${n(bytes?.bytes.upPerUpdate, 1)} B (100 objects); ${n(worst?.bytes.upPerUpdate, 1)} B (100,000 objects)`, '380 B per PN-Counter message', `≤ ${TARGET.bytes} B`, verdict(bytes ? bytes.bytes.upPerUpdate <= TARGET.bytes : null)])
  return table(['measure', 'measured', 'paper', 'target', 'met'], rows)
}

function verdict(ok: boolean | null): string {
  return ok === null ? 'not measured' : ok ? 'yes' : '**no**'
}

function curves(input: ReportInput, r: Results, prefix: string): string {
  const pts = r.points.filter((p) => p.experiment === 'curve')
  const labels = [...new Set(pts.map((p) => p.label))]
  let md = ''
  for (const label of labels) {
    const these = pts.filter((p) => p.label === label)
    const series: Series[] = SYSTEMS.map((sys) => ({
      name: sys,
      points: these
        .filter((p) => p.system === sys)
        .sort((a, b) => (a.x ?? 0) - (b.x ?? 0))
        .map((p) => [p.throughput, updateMean(p) ?? NaN] as const),
    }))
    const slug = `${prefix}curve-${label.replace(/[^a-z0-9]+/gi, '-')}`
    md += `\n#### ${label}\n\n`
    md += chart(input, slug, lineChart(series, { title: `${label}: mean update latency vs throughput`, xLabel: 'throughput (ops/s completed, reads + updates)', yLabel: 'mean update latency (ms, log)', logY: true }))
    md += '\n' + pointTable(these.sort((a, b) => a.system.localeCompare(b.system) || (a.x ?? 0) - (b.x ?? 0)), { head: 'workers/client', cell: (p) => String(p.x ?? '') })
  }
  return md
}

function simple(r: Results, experiment: string, head: string, cell: (p: Point) => string, opts: { bank?: boolean } = {}): string {
  const pts = r.points.filter((p) => p.experiment === experiment)
  return pts.length ? pointTable(pts, { head, cell }, opts) : '_not run_\n'
}

function fullReport(input: ReportInput, r: Results): string {
  let md = ''
  md += `## Results (full suite)\n\n${meta(r)}\n`
  md += `### Headline: the paper's ratios and the issue's targets\n\n${headline(r)}\n`

  md += `### 1. Throughput–latency (balanced mix, 50% safe, 100 objects, 4 relays)\n\nEach point is one closed-loop run; load grows with the workers per client (4 clients). Latency is the mean over regular and safe updates.\n`
  md += curves(input, r, '')

  md += `\n### 2. Safe updates at light load\n\nOpen loop at a fixed rate, balanced mix, 50% safe, b = 500.\n\n${simple(r, 'light', 'load', (p) => p.label)}`

  md += `\n### 3. Bytes on the wire per update\n\nRegular counter increments only (no reads, no safe updates). Up = client → relay frame bytes per update; down = relay → client bytes per update per client (envelopes and commit batches from the space's home relay, compact attestations from the others); mesh = relay ↔ relay TCP payload per update.\n\n`
  md += table(
    ['setup', 'ops/s', 'envelopes/s sent', 'updates/envelope', 'up B/update', 'down B/update/client', 'mesh B/update'],
    r.points.filter((p) => p.experiment === 'bytes').map((p) => [p.label, n(p.throughput), n(p.bytes.envelopesPerSecond), n(p.bytes.opsPerEnvelope, 1), n(p.bytes.upPerUpdate, 1), n(p.bytes.downPerUpdatePerClient, 1), n(p.bytes.meshPerUpdate, 1)]),
  )

  const bank = r.points.filter((p) => p.experiment === 'bank')
  md += `\n### 4. Banking (100 accounts: 50% balance, 10% deposit, 20% withdraw, 20% transfer)\n\n`
  if (bank.length) {
    md += chart(
      input,
      'bank',
      lineChart(
        SYSTEMS.map((sys) => ({ name: sys, points: bank.filter((p) => p.system === sys).sort((a, b) => (a.x ?? 0) - (b.x ?? 0)).map((p) => [p.x ?? 0, p.throughput] as const) })),
        { title: 'Banking: transactions/s vs workers per client', xLabel: 'workers per client (4 clients)', yLabel: 'transactions/s', logX: true },
      ),
    )
  }
  md += '\n' + simple(r, 'bank', 'workers/client', (p) => String(p.x ?? ''), { bank: true })

  const mix = r.points.filter((p) => p.experiment === 'mix')
  md += `\n### 5. Peak throughput vs read/write mix and safe ratio (PN-Counter, b = 500, 256 workers per client)\n\n`
  if (mix.length) {
    const labels = [...new Set(mix.map((p) => p.label))]
    md += chart(
      input,
      'mix',
      barChart(
        labels.map((l) => ({ label: l.replace('counter ', '').replace(' safe ', ', safe '), values: Object.fromEntries(mix.filter((p) => p.label === l).map((p) => [p.system, p.throughput])) })),
        SYSTEMS,
        { title: 'PN-Counter throughput by read/write mix and safe ratio', yLabel: 'ops/s' },
      ),
    )
    md += '\n' + simple(r, 'mix', 'workload', (p) => p.label)
  }

  const obj = r.points.filter((p) => p.experiment === 'objects')
  md += `\n### 6. Peak throughput vs number of objects (b = 500, 256 workers per client)\n\n`
  if (obj.length) {
    for (const crdt of ['counter', 'set']) {
      md += chart(
        input,
        `objects-${crdt}`,
        lineChart(
          SYSTEMS.map((sys) => ({ name: sys, points: obj.filter((p) => p.label === crdt && p.system === sys).map((p) => [p.x ?? 0, p.throughput] as const) })),
          { title: `${crdt === 'counter' ? 'PN-Counter' : 'OR-Set'}: throughput vs objects`, xLabel: 'objects', yLabel: 'ops/s', logX: true },
        ),
      )
    }
    md += '\n' + simple(r, 'objects', 'objects', (p) => `${p.label} ${n(p.x)}`)
  }

  const relays = r.points.filter((p) => p.experiment === 'relays')
  md += `\n### 7. Number of relays (PN-Counter, b = 500, 256 workers per client)\n\n`
  if (relays.length) {
    md += chart(
      input,
      'relays',
      lineChart(
        SYSTEMS.map((sys) => ({ name: sys, points: relays.filter((p) => p.system === sys).map((p) => [p.x ?? 0, p.throughput] as const) })),
        { title: 'Throughput vs relays (all on this 2-core machine)', xLabel: 'relays', yLabel: 'ops/s' },
      ),
    )
    md += '\n' + simple(r, 'relays', 'relays', (p) => String(p.x ?? ''))
  }

  md += `\n### 8. Faults (7 relays, f = 2; PN-Counter, b = 500, 256 workers per client)\n\nCrashed relays are killed with SIGKILL right after the cluster starts (the paper's setup); clients connect to the live ones. Byzantine relays run \`stead-relay start --byzantine MODE\`: \`withhold-block\` sends its blocks to only f+1 peers and answers no fetches, \`equivocate\` sends a second chain of twin blocks to half of its peers. \`forged-envelopes\` adds to each block that carries client envelopes a copy of one with a broken signature (an invalid update); correct relays refuse such blocks, so that relay's envelopes never commit (clients here submit only to honest relays). Clients connect only to honest relays.\n\n`
  md += simple(r, 'faults', 'fault', (p) => (p.label === 'crashed' ? `${p.x} crashed` : `${p.x}x ${p.label.replace('byzantine ', '')}`))

  if (r.profile) {
    const pr = r.profile
    md += `\n### 9. Where a relay's CPU goes (V8 profile of relay r1, reliable PN-Counter at saturation)\n\n`
    md += `V8 CPU profile (inspector, 0.5 ms sampling) of relay r1 over the ${n(pr.seconds, 1)} s measurement window only; r1 was busy ${n(pr.busyPercent, 1)}% of it. Shares are of its busy (non-idle) self time.\n\n`
    md += table(['component (self time)', '%'], pr.components.map((c) => [c.name, n(c.percent, 1)]))
    md += '\n'
    md += table(['function (self time)', '%'], pr.functions.map((c) => [`\`${c.name}\``, n(c.percent, 1)]))
  }
  return md
}

function protoReport(input: ReportInput, r: Results): string {
  let md = `## The same curves with the protocol-level driver\n\n`
  md += `\`npm run bench -- --only curve --driver proto --out packages/bench/results/proto\`: the load clients are \`src/load/proto.ts\` (built on @stead/core alone: one relay takes a client's submissions, regular updates resolve when queued, no storage) instead of the SDK. Same relays, same workloads, same run protocol. This separates what the protocol costs from what the SDK's client side adds. With this driver an envelope also counts as carried when the relays have done their part (committed; plain: streamed back by its relay): \`carriedThroughput\` in the JSON. For plain at 256 workers the relays carried 74–100% of the updates within the window, and the drain took care of the rest.\n\n${meta(r)}\n`
  md += `### Headline with the protocol-level driver\n\n${headline(r)}\n`
  md += curves(input, r, 'proto-')
  return md
}

function quickReport(input: ReportInput, r: Results): string {
  let md = `## Quick run (\`npm run bench:quick\`)\n\n${meta(r)}\n`
  md += `### Headline\n\n${headline(r)}\n`
  md += `### Throughput–latency\n`
  md += curves(input, r, 'quick-')
  md += `\n### Safe updates at light load\n\n${simple(r, 'light', 'load', (p) => p.label)}`
  md += `\n### Bytes per update\n\n`
  md += table(
    ['setup', 'ops/s', 'updates/envelope', 'up B/update', 'down B/update/client', 'mesh B/update'],
    r.points.filter((p) => p.experiment === 'bytes').map((p) => [p.label, n(p.throughput), n(p.bytes.opsPerEnvelope, 1), n(p.bytes.upPerUpdate, 1), n(p.bytes.downPerUpdatePerClient, 1), n(p.bytes.meshPerUpdate, 1)]),
  )
  md += `\n### Banking\n\n${simple(r, 'bank', 'workers/client', (p) => String(p.x ?? ''), { bank: true })}`
  return md
}

const INTRO = `# Stead benchmark suite (generated)

This file is written by \`npm run bench\` (and \`bench:quick\`, \`--report-only\`):
do not edit it by hand. The report with today's headline figures, what
limits them and the comparisons with Yjs and the papers is
[BENCHMARKS.md](../BENCHMARKS.md); the run-by-run notes are in
[benchmarks-history.md](benchmarks-history.md).

What does reliability cost? This suite answers it with three systems run
from the same code, in the same run, on the same machine:

- **reliable**: Stead as designed. Real \`stead-relay\` processes (DAG-BFT
  consensus, audit, LMDB, signed attestations); clients apply every update
  at once (prospective), apply a commit once f+1 relays attested it alike
  and resolve safe updates once 2f+1 did (f+1 in the suite runs before
  session 13, which changed the rule).
- **plain**: the eventual-consistency ceiling. Relays built for the benchmark
  (\`packages/bench/src/plain\`) speak the same client protocol, verify each
  client envelope once, merge its ops into in-memory CRDTs and forward it to
  the other relays and subscribed clients. No consensus, no audit, no
  commits, no persistence. Safe updates are sent like regular ones.
- **consensus-first**: the naive BFT way, against the same Stead relays:
  clients apply nothing prospectively, read stable values, and an update
  completes only when its attested commit arrives (submit → 2f+1 matching
  attestations; f+1 before session 13).

Regenerate with \`npm run bench\` (full) or \`npm run bench:quick\`; the raw
numbers are in \`packages/bench/results/{full,quick}.json\`. Benchmarks are
reports, not tests: \`npm run bench:smoke\` (CI) only checks that the
pipeline runs.

## Method

- **Load**: 4 client replicas in the benchmark process, each with W
  closed-loop workers (the paper's client threads: next op when the last one
  completed). An op is a read (local, prospective; stable for
  consensus-first) or an update; safe updates are a share of the updates.
  PN-Counter: regular = increment 1..10, safe = decrement 1 (invariant
  min 0). OR-Set: regular = add one of 32 elements, safe = remove an observed
  element. Keys are uniform over the objects. All choices come from seeded
  PRNGs (seed 42), so a run issues the same op sequence.
- **Completion**: reads complete when they return. Regular updates complete
  when the client has applied (and stored) them — reliable and plain — or
  at their attested commit — consensus-first. Safe updates complete at the
  attested commit (plain: at once, it has no order).
- **Clients**: the load clients are SDK clients (\`@stead/client\`, memory
  storage, node:crypto, \`ws\`) unless a section says otherwise; the
  protocol-level driver (\`src/load/proto.ts\`, on @stead/core alone) is
  used for a second set of curves to separate protocol costs from the SDK's.
- **Flow control**: a client's workers pause while it has 64 envelopes not
  yet decided (SDK: \`status.pending\` minus one batch; protocol client:
  envelopes not committed, or for plain not yet streamed back), so a fast
  local path cannot run far ahead of what the relays absorb. SDK clients of
  the plain relays have no such signal (nothing is ever decided) and run
  unthrottled. After each window the clients drain (settle; plain: flush);
  the drain time is in the tables.
- **Throughput** = ops (reads + updates) completed in the measurement window
  per second. Latency: mean / p50 / p95 / p99 per class for ops issued in
  the window. CPU: utime + stime from \`/proc/<pid>/stat\` over the window
  (100% = one core); RSS: largest VmRSS sampled every 250 ms. Bytes: every
  WebSocket frame the clients send or receive (payload + frame header),
  divided by the updates issued; relay ↔ relay bytes from the kernel's
  per-socket \`bytes_sent\` (\`ss -tinp\`) between relay processes.
- **Machine**: everything (N relays, 4 clients) shares the 2 cores, so
  client CPU competes with relay CPU; the client share is in every table.
  Other jobs on the machine (tests, browsers) also compete: the load average
  at each point is in the JSON.
`

/** Writes the suite's generated report (docs/benchmarks-suite.md, and its SVG charts) from the full and quick results. */
export function writeReport(input: ReportInput): void {
  let md = INTRO + '\n'
  if (input.full) md += fullReport(input, input.full) + '\n'
  else md += '## Results (full suite)\n\n_Not run yet: `npm run bench`._\n\n'
  if (input.proto) md += protoReport(input, input.proto) + '\n'
  if (input.quick) md += quickReport(input, input.quick)
  writeFileSync(input.reportPath, md)
}
