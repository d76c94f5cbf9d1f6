#!/usr/bin/env node
/**
 * Chrono's certificates before order against the total order, as a report
 * (never a test): on a 4-relay cluster (real relay processes on loopback),
 * one writer alternates two kinds of update, A/B interleaved, one at a
 * time:
 *
 * - `certificate`: a regular update, sent, then its clock proof asked of
 *   the relays until ceil((N+f+1)/2) of them voted for it (the writer's
 *   `clockProof(id)` puts their answers together: what an app built on
 *   Chrono's certificates waits for);
 * - `commit`: a safe update, which resolves once f+1 relays attested the
 *   commit that ordered it (what an app built on the total order waits for).
 *
 *   npm run bench:chrono -- [--updates 200] [--runs 3] [--json FILE]
 *
 * Reports each kind's latency (median, p95, p99, max) per run, and the
 * medians over the runs with their spread.
 */
import { writeFileSync } from 'node:fs'
import { performance } from 'node:perf_hooks'
import type { ClockProof, Space } from '@stead/client'
import { reportArgs } from './args.ts'
import { BenchCluster } from './cluster.ts'
import { openSdkSpace } from './load/sdk.ts'
import { Samples, type LatencySummary } from './stats.ts'

const values = reportArgs('usage: npm run bench:chrono -- [--updates 200] [--runs 3] [--json FILE]', {
  updates: { type: 'string', default: '200' },
  runs: { type: 'string', default: '3' },
  json: { type: 'string' },
})
const updates = Number(values.updates)
const runs = Number(values.runs)

/** Asks for `id`'s clock proof until the relays can make one; ms it took. */
async function certified(space: Space, id: string, started: number): Promise<{ ms: number; proof: ClockProof }> {
  for (let tries = 0; ; tries++) {
    const proof = await space.clockProof(id).catch(() => undefined)
    if (proof) return { ms: performance.now() - started, proof }
    if (tries > 5000) throw new Error(`no certificate for ${id} after ${tries} tries`)
  }
}

interface Row {
  readonly run: number
  readonly certificate: LatencySummary | null
  readonly commit: LatencySummary | null
  /** How many of the certificates were the relays' votes (the rest: the update had committed first). */
  readonly byVotes: number
}

const rows: Row[] = []
const cluster = await BenchCluster.start({ kind: 'stead', n: 4 })
try {
  for (let run = 1; run <= runs; run++) {
    const relays = cluster.relays.map((r) => `ws://${r.api}`)
    const { owner, space } = await openSdkSpace({ relays, cluster: cluster.descriptor, seed: `chrono-${run}`, space: `chrono-${run}` })
    try {
      const cert = new Samples()
      const commit = new Samples()
      let byVotes = 0
      // Warm up: the space exists, sessions are open, the relays' replicas are loaded.
      await space.counter('n').increment(1, { safe: true })
      for (let i = 0; i < updates; i++) {
        if (i % 2 === 0) {
          const t0 = performance.now()
          await space.counter('n').increment(1)
          await space.flush()
          const id = space.pendingUpdates().at(-1)?.id
          if (!id) throw new Error('the update was decided before it could be named')
          const got = await certified(space, id, t0)
          cert.add(got.ms)
          if (got.proof.certificate.kind === 'validators') byVotes++
        } else {
          const t0 = performance.now()
          const r = await space.counter('n').increment(1, { safe: true })
          if (r.status !== 'committed') throw new Error(`a safe update was ${r.status}`)
          commit.add(performance.now() - t0)
        }
        // Nothing of ours in flight: each update starts alone.
        await space.settled()
      }
      const row = { run, certificate: cert.summary(), commit: commit.summary(), byVotes }
      rows.push(row)
      const fmt = (s: LatencySummary | null) => (s ? `p50 ${s.p50.toFixed(1)} / p95 ${s.p95.toFixed(1)} / p99 ${s.p99.toFixed(1)} / max ${s.max.toFixed(1)} ms` : '-')
      console.log(`run ${run}: certificate ${fmt(row.certificate)} (${byVotes} of ${cert.count} by votes); commit ${fmt(row.commit)}`)
    } finally {
      await owner.close()
    }
  }
} finally {
  await cluster.stop()
}
const medians = (pick: (r: Row) => number | undefined) => rows.map(pick).filter((x): x is number => x !== undefined).sort((a, b) => a - b)
const cert50 = medians((r) => r.certificate?.p50)
const commit50 = medians((r) => r.commit?.p50)
if (cert50.length && commit50.length) {
  console.log(`median of the runs' medians: certificate ${cert50[cert50.length >> 1]?.toFixed(1)} ms (runs ${cert50[0]?.toFixed(1)}-${cert50.at(-1)?.toFixed(1)}), commit ${commit50[commit50.length >> 1]?.toFixed(1)} ms (runs ${commit50[0]?.toFixed(1)}-${commit50.at(-1)?.toFixed(1)})`)
}
if (values.json) writeFileSync(String(values.json), JSON.stringify(rows, null, 2))
