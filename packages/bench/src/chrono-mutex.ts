#!/usr/bin/env node
/**
 * Chrono's mutual exclusion (§5.1, examples/chrono/mutex.ts) as a report,
 * never a test: on a 4-relay cluster (real relay processes on loopback),
 * `--members` members run the protocol and acquire the resource, in the
 * paper's two experiments (its Figure 5):
 *
 * - `single`: one member acquires and releases at once, again and again
 *   (the others only answer);
 * - `contended`: every member acquires at once, then releases at once
 *   after it got in; the latency of each acquisition is reported.
 *
 * `--baseline FILE` names another implementation with the same API (the
 * total-order one of the previous release: `git show
 * c2c0d63:packages/client/examples/chrono/mutex.ts >
 * packages/client/examples/chrono/mutex-ordered.ts`); runs then
 * alternate between the two, A/B interleaved, each on fresh clients.
 *
 *   npm run bench:chrono-mutex -- [--members 3] [--turns 30] [--runs 3] [--baseline FILE] [--json FILE]
 */
import { writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { performance } from 'node:perf_hooks'
import type { Space, SteadClient } from '@stead/client'
import { reportArgs } from './args.ts'
import { BenchCluster, relayTrust } from './cluster.ts'
import { openSdkSpace } from './load/sdk.ts'
import { Samples, formatLatency, printRunMedians, type LatencySummary } from './stats.ts'

const values = reportArgs('usage: npm run bench:chrono-mutex -- [--members 3] [--turns 30] [--runs 3] [--baseline FILE] [--json FILE]', {
  members: { type: 'string', default: '3' },
  turns: { type: 'string', default: '30' },
  runs: { type: 'string', default: '3' },
  baseline: { type: 'string' },
  json: { type: 'string' },
})
const n = Number(values.members)
const turns = Number(values.turns)
const runs = Number(values.runs)

/** What both implementations offer. */
interface Mutex {
  acquire(options?: { timeoutMs?: number }): Promise<unknown>
  release(): Promise<void>
  close(): void
}
type MutexClass = new (space: Space, rules: { resource: string; members: readonly string[] }, me: { authorId: string; secretKey: Uint8Array }, trust: unknown) => Mutex

const here = resolve(import.meta.dirname, '../../client/examples/chrono/mutex.ts')
const kinds: Array<{ name: string; Mutex: MutexClass }> = [{ name: 'certificates', Mutex: ((await import(here)) as { ChronoMutex: MutexClass }).ChronoMutex }]
if (values.baseline) kinds.push({ name: 'total order', Mutex: ((await import(resolve(String(values.baseline)))) as { ChronoMutex: MutexClass }).ChronoMutex })

interface Row {
  readonly kind: string
  readonly run: number
  readonly single: LatencySummary | null
  readonly contended: LatencySummary | null
}

const rows: Row[] = []
const cluster = await BenchCluster.start({ kind: 'stead', n: 4 })
const trust = relayTrust(cluster.descriptor)
try {
  for (let run = 1; run <= runs; run++) {
    for (const { name, Mutex } of kinds) {
      const relays = cluster.relays.map((r) => `ws://${r.api}`)
      const tag = `${name.replace(' ', '-')}-${run}`
      const opened: Array<{ owner: SteadClient; space: Space; secretKey: Uint8Array }> = []
      for (let i = 0; i < n; i++) {
        opened.push(await openSdkSpace({ relays, cluster: cluster.descriptor, seed: `mutex-${tag}-${i}`, space: `mutex-${tag}` }))
      }
      const rules = { resource: 'printer', members: opened.map((o) => o.owner.authorId) }
      const members = opened.map((o) => new Mutex(o.space, rules, { authorId: o.owner.authorId, secretKey: o.secretKey }, trust))
      try {
        const single = new Samples()
        const contended = new Samples()
        const acquire = async (m: Mutex, into: Samples): Promise<void> => {
          const t0 = performance.now()
          await m.acquire({ timeoutMs: 60_000 })
          into.add(performance.now() - t0)
          await m.release()
        }
        // Warm up: the space exists at every relay, sessions are open.
        await acquire(members[0] as Mutex, new Samples())
        for (let t = 0; t < turns; t++) await acquire(members[0] as Mutex, single)
        for (let t = 0; t < Math.max(1, Math.round(turns / n)); t++) await Promise.all(members.map((m) => acquire(m, contended)))
        const row = { kind: name, run, single: single.summary(), contended: contended.summary() }
        rows.push(row)
        console.log(`run ${run} ${name}: single ${formatLatency(row.single)}; contended ${formatLatency(row.contended)}`)
      } finally {
        for (const m of members) m.close()
        for (const o of opened) await o.owner.close()
      }
    }
  }
} finally {
  await cluster.stop()
}
printRunMedians(rows, kinds.map((k) => k.name), ['single', 'contended'])
if (values.json) writeFileSync(String(values.json), JSON.stringify(rows, null, 2))
