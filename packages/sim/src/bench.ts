#!/usr/bin/env node
/**
 * Consensus benchmark (a report, never a test): a fault-free simulated
 * cluster with real Ed25519 signatures and no verification memo, kept busy
 * by clients submitting all along, run to a target round (or until the
 * work runs out: idle relays make no rounds). Reports rounds/s, commits/s,
 * blocks/s, signature work per round and heap over the run. `node --expose-gc` makes the heap samples
 * exact (the npm script passes it).
 */
import { parseArgs } from 'node:util'
import { runSimulation } from './simulation.ts'
import { prepareWorkload } from './workload.ts'

const USAGE = `usage: npm run bench:consensus -- [--rounds N] [--relays N,N,...] [--envelopes N]
  --rounds N        rounds to run each cluster to (default 10000)
  --relays N,N,...  cluster sizes to run (default 4,7,10)
  --envelopes N     client envelopes the workload submits (default 500)`

let values: { rounds: string; relays: string; envelopes: string; help?: boolean }
try {
  values = parseArgs({
    options: {
      rounds: { type: 'string', default: '10000' },
      relays: { type: 'string', default: '4,7,10' },
      envelopes: { type: 'string', default: '500' },
      help: { type: 'boolean' },
    },
  }).values
} catch (err) {
  console.error(`${(err as Error).message}\n${USAGE}`)
  process.exit(2)
}
if (values.help) {
  console.log(USAGE)
  process.exit(0)
}
const rounds = Number(values.rounds)
const sizes = String(values.relays).split(',').map(Number)
const gc = (globalThis as { gc?: () => void }).gc

function heapMb(): number {
  gc?.()
  return process.memoryUsage().heapUsed / 1024 / 1024
}

console.log(`consensus benchmark: ${rounds} rounds, real Ed25519 (node:crypto), one core, ${new Date().toISOString()}`)
console.log(`node ${process.version}${gc ? '' : ' (run with --expose-gc for exact heap figures)'}`)
console.log('N   rounds  wall s  rounds/s  commits/s  blocks/s  signs/round  verifies/round  heap MB (start → 25% → 50% → 75% → end)')
for (const n of sizes) {
  const workload = await prepareWorkload(1, 4, Number(values.envelopes), false)
  const samples: number[] = []
  const base = heapMb()
  const started = performance.now()
  const r = await runSimulation(
    {
      seed: 1,
      relays: n,
      byzantine: 0,
      strategy: 'silent',
      crash: 0,
      steps: Number.MAX_SAFE_INTEGER,
      partition: false,
      loss: 0,
      memoizeVerification: false,
      // Throughput is measured here, not checked.
      consensusChecks: 'off',
      untilRound: rounds,
      // Submissions spread so the cluster never runs out of work before the target round.
      durationMs: (rounds * 20) / 0.6,
      onRound: (round) => {
        if (round % Math.max(1, Math.floor(rounds / 4)) === 0) samples.push(heapMb())
      },
    },
    workload,
  )
  const wall = (performance.now() - started) / 1000
  const reached = Math.min(...r.rounds)
  const anchors = Math.min(...r.anchors)
  console.log(
    [
      String(n).padEnd(3),
      String(reached).padStart(6),
      wall.toFixed(1).padStart(7),
      (reached / wall).toFixed(1).padStart(9),
      (anchors / wall).toFixed(1).padStart(10),
      ((reached * n) / wall).toFixed(0).padStart(8),
      (r.signatures.signs / reached).toFixed(1).padStart(12),
      (r.signatures.verifies / reached).toFixed(1).padStart(15),
      `  ${[base, ...samples].map((m) => m.toFixed(0)).join(' → ')}`,
    ].join(' '),
  )
  if (!r.ok) console.log(`  (the run reported a violation: ${r.violation?.message})`)
}
