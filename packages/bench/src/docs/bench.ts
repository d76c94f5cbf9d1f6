/**
 * `npm run bench:docs`: Stead's text beside Yjs and Automerge on real
 * editing traces, each (system, trace) in a fresh process so memory is its
 * own. Reports replay time, memory held after GC, encoded size and the
 * time to load the encoded document. `--trace FILE` (repeatable) replays
 * any trace of the editing-traces format; `--json` prints one JSON object
 * per line per system and trace; `--systems stead,yjs` picks systems.
 * `--shapes [N]` runs the crdt-benchmarks shapes for text, lists and maps instead (shapes.ts, collections.ts).
 */
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { basename, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { automerge, stead, yjs, type TextSystem } from './systems.ts'
import { runCollectionShapes } from './collections.ts'
import { runShapes } from './shapes.ts'
import { loadTrace, replayConcurrent, replaySequential } from './traces.ts'

export interface DocResult {
  readonly system: string
  readonly trace: string
  /** The final text equals the trace's endContent (every replica's, for a concurrent trace). */
  readonly ok: boolean
  /** Every replica ended with the same text (a concurrent trace's end content follows one way of ordering concurrent inserts; a correct CRDT may order them its own way). */
  readonly converged: boolean
  readonly replayMs: number
  readonly encodedBytes: number
  /** Heap and external memory held by the replayed document after GC (the replica of agent 0 for a concurrent trace). */
  readonly memBytes: number
  readonly loadMs: number
}

const here = fileURLToPath(new URL('.', import.meta.url))
const SHARED = join(here, '../../../../../shared/data/editing-traces')
const FIXTURES = join(here, '../../test/fixtures')

function systemNamed(name: string): TextSystem {
  if (name === 'stead') return stead
  if (name === 'yjs') return yjs
  if (name === 'automerge') return automerge()
  throw new Error(`unknown system ${name} (stead, yjs, automerge)`)
}

function held(): number {
  globalThis.gc?.()
  globalThis.gc?.()
  const m = process.memoryUsage()
  return m.heapUsed + m.external
}

/** One system on one trace, in this process. */
export function runOne(systemName: string, file: string): DocResult {
  const system = systemNamed(systemName)
  const trace = loadTrace(file)
  const before = held()
  const t0 = performance.now()
  let replicas
  if (trace.kind === 'sequential') {
    const r = system.replica()
    replaySequential(trace, r)
    replicas = [r]
  } else replicas = replayConcurrent(trace, () => system.replica())
  const replayMs = performance.now() - t0
  const ok = replicas.every((r) => r.text() === trace.endContent)
  const converged = replicas.every((r) => r.text() === replicas[0]?.text())
  const first = replicas[0] as ReturnType<TextSystem['replica']>
  replicas.length = 1
  const memBytes = held() - before
  const bytes = first.encode()
  const l0 = performance.now()
  const loaded = system.load(bytes)
  const loadMs = performance.now() - l0
  return { system: systemName, trace: basename(file).replace(/\.json(\.gz)?$/, ''), ok: ok && loaded === trace.endContent, converged: converged && loaded === first.text(), replayMs: Math.round(replayMs), encodedBytes: bytes.length, memBytes: Math.max(0, memBytes), loadMs: Math.round(loadMs * 10) / 10 }
}

function defaultTraces(): string[] {
  const full = ['automerge-paper', 'seph-blog1', 'friendsforever'].map((n) => join(SHARED, `${n}.json.gz`))
  if (full.every(existsSync)) return full
  console.error(`(${SHARED} not found: replaying the slices in packages/bench/test/fixtures)`)
  return ['automerge-paper-20k', 'seph-blog1-10k', 'friendsforever'].map((n) => join(FIXTURES, `${n}.json.gz`))
}

function main(argv: string[]): void {
  const shapes = argv.indexOf('--shapes')
  if (shapes >= 0) {
    const n = Number(argv[shapes + 1] ?? 6000) || 6000
    const json = argv.includes('--json')
    if (!json) {
      console.log('| shape | system | ok | ms | encoded kB |')
      console.log('| --- | --- | --- | ---: | ---: |')
    }
    const results = [...[stead, yjs, automerge()].flatMap((system) => runShapes(system, n)), ...runCollectionShapes(n)]
    for (const r of results) console.log(json ? JSON.stringify(r) : `| ${r.shape} (N=${r.n}) | ${r.system} | ${r.ok ? 'yes' : 'NO'} | ${r.ms} | ${(r.encodedBytes / 1e3).toFixed(1)} |`)
    if (results.some((r) => !r.ok)) process.exitCode = 1
    return
  }
  const one = argv.indexOf('--one')
  if (one >= 0) {
    console.log(JSON.stringify(runOne(argv[one + 1] as string, argv[one + 2] as string)))
    return
  }
  const traces = argv.flatMap((a, i) => (argv[i - 1] === '--trace' ? [a] : []))
  const systemsArg = argv[argv.indexOf('--systems') + 1]
  const systems = argv.includes('--systems') && systemsArg ? systemsArg.split(',') : ['stead', 'yjs', 'automerge']
  const json = argv.includes('--json')
  const results: DocResult[] = []
  for (const file of traces.length ? traces : defaultTraces()) {
    for (const system of systems) {
      const out = execFileSync(process.execPath, ['--expose-gc', '--conditions=@stead/source', '--import', 'tsx', fileURLToPath(import.meta.url), '--one', system, file], { encoding: 'utf8', maxBuffer: 1 << 24 })
      const r = JSON.parse(out.trim().split('\n').pop() as string) as DocResult
      results.push(r)
      if (json) console.log(JSON.stringify(r))
      else console.error(`${r.trace} ${r.system}: ${r.ok ? 'ok' : r.converged ? 'converged, not to endContent' : 'DIVERGED'} replay ${r.replayMs} ms, ${(r.memBytes / 1e6).toFixed(1)} MB held, ${(r.encodedBytes / 1e3).toFixed(1)} kB encoded, load ${r.loadMs} ms`)
    }
  }
  if (!json) printTable(results)
  // A sequential trace must end at its end content; replicas of a concurrent one must agree.
  if (results.some((r) => !r.converged || (!r.ok && r.system === 'stead'))) process.exitCode = 1
}

function printTable(results: readonly DocResult[]): void {
  console.log('| trace | system | end content | replay ms | memory MB | encoded kB | load ms |')
  console.log('| --- | --- | --- | ---: | ---: | ---: | ---: |')
  for (const r of results) console.log(`| ${r.trace} | ${r.system} | ${r.ok ? 'yes' : r.converged ? 'converged elsewhere' : 'DIVERGED'} | ${r.replayMs} | ${(r.memBytes / 1e6).toFixed(1)} | ${(r.encodedBytes / 1e3).toFixed(1)} | ${r.loadMs} |`)
}

main(process.argv.slice(2))
