#!/usr/bin/env node
/**
 * Stead benchmark suite (a report, never a test).
 *
 *   npm run bench              full suite → packages/bench/results/full.json, docs/benchmarks-suite.md, charts
 *   npm run bench:quick        under 5 minutes → results/quick.json and the quick section of docs/benchmarks-suite.md
 *   npm run bench:smoke        under a minute, tiny → a result file in a temp dir (CI: checks the pipeline runs)
 *
 * Options: see USAGE (`npm run bench -- --help`).
 */
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir, totalmem } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { reportArgs } from './args.ts'
import { BenchCluster, sleep } from './cluster.ts'
import { suite, type Suite } from './experiments.ts'
import { ProtoClient } from './load/proto.ts'
import { summarizeProfile, type ProfileSummary } from './profile.ts'
import { writeReport } from './report.ts'
import { runPoint, type ClientFactory, type PointResult } from './run.ts'
import { installWireCounter } from './wire.ts'

export interface Results {
  readonly meta: {
    readonly suite: Suite
    readonly driver: string
    readonly started: string
    readonly wallSeconds: number
    readonly commit: string
    readonly node: string
    readonly cpu: string
    readonly cores: number
    readonly memoryGb: number
    readonly loadavgBefore: number[]
    readonly loadavgAfter: number[]
    /** Anything done to the file after the run (a point re-measured), said in the report. */
    readonly notes?: string
  }
  readonly points: Array<PointResult & { readonly loadavg1: number }>
  readonly profile: ProfileSummary | null
  readonly failures: Array<{ readonly group: string; readonly error: string }>
}

const BENCH_ROOT = resolve(import.meta.dirname, '..')
const REPO_ROOT = resolve(BENCH_ROOT, '../..')
const SUITE_REPORT = join(REPO_ROOT, 'docs/benchmarks-suite.md')

const USAGE = `Stead benchmark suite (a report, never a test)

  npm run bench [-- options]        full suite
  npm run bench:quick [-- options]  under 5 minutes
  npm run bench:smoke               under a minute, tiny (CI: checks the pipeline runs)

Options:
  --suite smoke|quick|full   which suite (npm run bench passes full)
  --driver sdk|proto         load clients: the SDK (default) or the protocol-level driver
  --only NAME                only the cluster runs whose group name contains NAME (e.g. curve/stead)
  --out DIR                  where the results go (default packages/bench/results; smoke: a temp dir)
  --no-report                measure only; leave docs/benchmarks-suite.md and the charts alone
  --report-only              rebuild docs/benchmarks-suite.md and the charts from results/*.json, measuring nothing
  -h, --help                 this text`

async function main(): Promise<void> {
  const values = reportArgs(USAGE, {
    suite: { type: 'string', default: 'quick' },
    driver: { type: 'string' },
    only: { type: 'string' },
    out: { type: 'string' },
    'no-report': { type: 'boolean', default: false },
    'report-only': { type: 'boolean', default: false },
  })
  if (values['report-only']) {
    // Regenerate docs/benchmarks-suite.md and the charts from results/{full,quick}.json without measuring.
    const load = (name: string): Results | null => {
      const f = join(BENCH_ROOT, 'results', `${name}.json`)
      return existsSync(f) ? (JSON.parse(readFileSync(f, 'utf8')) as Results) : null
    }
    writeReport({ full: load('full'), quick: load('quick'), proto: load('proto/full'), reportPath: SUITE_REPORT, chartsDir: join(BENCH_ROOT, 'charts'), chartsRel: '../packages/bench/charts' })
    console.log(`wrote ${SUITE_REPORT}`)
    return
  }
  const which = values.suite as Suite
  if (!['smoke', 'quick', 'full'].includes(which)) return usageError(`unknown suite ${which}: smoke, quick or full`)
  if (values.driver !== undefined && !['sdk', 'proto'].includes(values.driver)) return usageError(`unknown driver ${values.driver}: sdk or proto`)
  const driver = values.driver ?? (await sdkAvailable() ? 'sdk' : 'proto')
  // The SDK adapter loads only when used (and when @stead/client has createClient).
  const sdkModule = './load/sdk.ts'
  const factory: ClientFactory = driver === 'sdk' ? ((await import(sdkModule)) as { createSdkClient: ClientFactory }).createSdkClient : (o) => ProtoClient.connect(o)
  const out = resolve(values.out ?? (which === 'smoke' ? mkdtempSync(join(tmpdir(), 'stead-bench-smoke-')) : join(BENCH_ROOT, 'results')))
  mkdirSync(out, { recursive: true })
  installWireCounter()

  const started = new Date()
  const t0 = performance.now()
  const loadavgBefore = loadavg().map((v) => Math.round(v * 100) / 100)
  const groups = suite(which)
    .filter((g) => !values.only || g.name.includes(values.only))
    // The protocol-level client has no Bounded Counter (escrow rights live in the SDK).
    .filter((g) => driver === 'sdk' || g.points.every((p) => p.workload.crdt !== 'bounded'))
  const total = groups.reduce((n, g) => n + g.points.length, 0)
  console.log(`stead bench: suite ${which}, driver ${driver}, ${groups.length} cluster runs, ${total} points → ${out}`)
  const points: Results['points'] = []
  const failures: Results['failures'] = []
  let profile: ProfileSummary | null = null
  let done = 0
  const kindOf = (g: (typeof groups)[number]) => (g.points.every((p) => p.system === 'plain') ? 'plain' : 'stead')
  // The smoke run measures nothing worth keeping: start its clusters side by side to stay well under a minute.
  const prestarted = which === 'smoke' ? groups.map((g) => BenchCluster.start({ kind: kindOf(g), ...g.cluster })) : []
  prestarted.forEach((p) => p.catch(() => undefined))
  for (const [gi, g] of groups.entries()) {
    const kind = kindOf(g)
    const profFile = g.profile ? join(mkdtempSync(join(tmpdir(), 'stead-bench-prof-')), 'relay-r1.cpuprofile') : undefined
    let cluster: BenchCluster | null = null
    try {
      const t = performance.now()
      cluster = await (prestarted[gi] ?? BenchCluster.start({ kind, ...g.cluster, ...(profFile ? { profile: true } : {}) }))
      for (let i = 0; i < (g.crash ?? 0); i++) cluster.crash(g.cluster.n - 1 - i)
      // Let the mesh settle (and, after crashes, the survivors notice) before measuring.
      await sleep(g.crash ? 1500 : 500)
      console.log(`  [${g.name}] ${g.cluster.n} ${kind} relays up in ${Math.round(performance.now() - t)} ms${g.crash ? `, ${g.crash} crashed` : ''}${g.cluster.byzantine ? `, ${g.cluster.byzantine.count} byzantine (${g.cluster.byzantine.mode})` : ''}`)
      for (const spec of g.points) {
        const la = loadavg()[0] as number
        const c = cluster
        const hooks = profFile ? { start: () => c.profileStart(), end: () => c.profileStop(profFile) } : {}
        const r = await runPoint(cluster, spec, factory, driver, g.crash ?? 0, hooks)
        points.push({ ...r, loadavg1: Math.round(la * 100) / 100 })
        done++
        const lat = (c: string) => r.latency[c as keyof typeof r.latency]
        console.log(
          `    ${String(done).padStart(3)}/${total} ${spec.experiment} ${spec.label} ${spec.system} x=${spec.x ?? ''}: ${r.throughput} ops/s (updates ${r.updateThroughput}/s, carried ${r.carriedThroughput}/s)` +
            ` regular p50 ${lat('regular')?.p50 ?? '-'} ms, safe p50 ${lat('safe')?.p50 ?? '-'} / p99 ${lat('safe')?.p99 ?? '-'} ms, up ${r.bytes.upPerUpdate} B/update${r.drained ? '' : ' (NOT DRAINED)'}${Object.keys(r.errors).length ? ` errors ${JSON.stringify(r.errors)}` : ''}`,
        )
      }
    } catch (err) {
      failures.push({ group: g.name, error: String((err as Error)?.stack ?? err).slice(0, 2000) })
      console.error(`  [${g.name}] failed: ${String((err as Error)?.message ?? err)}`)
    } finally {
      await cluster?.stop()
    }
    if (profFile && existsSync(profFile)) {
      profile = summarizeProfile(profFile)
      console.log(`  profile of relay r1: ${profile.busyPercent}% busy; top: ${profile.components.slice(0, 5).map((c) => `${c.name} ${c.percent}%`).join(', ')}`)
      rmSync(dirname(profFile), { recursive: true, force: true })
    }
  }

  const results: Results = {
    meta: {
      suite: which,
      driver,
      started: started.toISOString(),
      wallSeconds: Math.round((performance.now() - t0) / 100) / 10,
      commit: gitCommit(),
      node: process.version,
      cpu: cpus()[0]?.model ?? 'unknown',
      cores: cpus().length,
      memoryGb: Math.round(totalmem() / 1024 ** 3),
      loadavgBefore,
      loadavgAfter: loadavg().map((v) => Math.round(v * 100) / 100),
    },
    points,
    profile,
    failures,
  }
  const file = join(out, `${which}.json`)
  writeFileSync(file, JSON.stringify(results, null, 1) + '\n')
  console.log(`wrote ${file} (${points.length} points, ${failures.length} failed groups) in ${results.meta.wallSeconds} s`)
  if (!values['no-report']) {
    if (which === 'smoke') {
      writeReport({ full: null, quick: results, reportPath: join(out, 'BENCHMARKS.md'), chartsDir: join(out, 'charts'), chartsRel: 'charts' })
      console.log(`wrote ${join(out, 'BENCHMARKS.md')}`)
    } else {
      const load = (name: string): Results | null => {
        const f = join(BENCH_ROOT, 'results', `${name}.json`)
        return existsSync(f) ? (JSON.parse(readFileSync(f, 'utf8')) as Results) : null
      }
      const full = which === 'full' ? results : load('full')
      const quick = which === 'quick' ? results : load('quick')
      writeReport({ full, quick, proto: load('proto/full'), reportPath: SUITE_REPORT, chartsDir: join(BENCH_ROOT, 'charts'), chartsRel: '../packages/bench/charts' })
      console.log(`wrote ${SUITE_REPORT}`)
    }
  }
  // A benchmark never fails on a figure: only a broken pipeline is an error (nothing measured, or in
  // the smoke run, which exists to keep every system's pipeline working, any group that could not run).
  if (points.length === 0 || (which === 'smoke' && failures.length > 0)) process.exitCode = 1
}

async function sdkAvailable(): Promise<boolean> {
  try {
    const m = (await import('@stead/client')) as { createClient?: unknown }
    return typeof m.createClient === 'function'
  } catch {
    return false
  }
}

function usageError(message: string): void {
  console.error(`${message}\n\n${USAGE}`)
  process.exitCode = 2
}

function gitCommit(): string {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim()
  } catch {
    return 'unknown'
  }
}

main().then(
  () => process.exit(process.exitCode ?? 0),
  (err: unknown) => {
    console.error(err)
    process.exit(1)
  },
)
