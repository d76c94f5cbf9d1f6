#!/usr/bin/env node
/**
 * Chrono's causally consistent key-value store (§5.2,
 * examples/chrono/causal-store.ts) as a report, never a test: on a
 * 4-relay cluster (real relay processes on loopback), two replicas (two
 * Stead clients of one space); one session puts a key through replica A,
 * then reads it through replica B, which must serve that version or a
 * later one (the session depends on its own write). Reported per turn:
 *
 * - `put`: until the put's answer is checked (the write certified);
 * - `read after write`: from the put's start until replica B served a
 *   version the session accepts (retried every 2 ms on `gap` and
 *   `unsupported`); a read not served within 10 s counts as failed.
 *
 * `--baseline FILE` names another implementation with the same API (the
 * total-order one of the previous release, with the trust.ts it imports:
 * `mkdir packages/client/examples/chrono/ordered && for f in
 * causal-store.ts trust.ts; do git show
 * ee93eda:packages/client/examples/chrono/$f >
 * packages/client/examples/chrono/ordered/$f; done`); runs then
 * alternate between the two, A/B interleaved, each on fresh clients.
 *
 *   npm run bench:chrono-causal -- [--turns 50] [--runs 3] [--baseline FILE] [--json FILE]
 */
import { writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { performance } from 'node:perf_hooks'
import { isSteadError } from '@stead/core'
import type { Space } from '@stead/client'
import { reportArgs } from './args.ts'
import { BenchCluster, relayTrust } from './cluster.ts'
import { openSdkSpace } from './load/sdk.ts'
import { Samples, formatLatency, printRunMedians, type LatencySummary } from './stats.ts'

const values = reportArgs('usage: npm run bench:chrono-causal -- [--turns 50] [--runs 3] [--baseline FILE] [--json FILE]', {
  turns: { type: 'string', default: '50' },
  runs: { type: 'string', default: '3' },
  baseline: { type: 'string' },
  json: { type: 'string' },
})
const turns = Number(values.turns)
const runs = Number(values.runs)

/** What both implementations offer. */
interface Replica {
  close?(): void
}
interface Session {
  put(replica: Replica, key: string, value: string): Promise<unknown>
  get(replica: Replica, key: string): Promise<unknown>
}
interface Store {
  KvReplica: new (space: Space, trust: unknown) => Replica
  CausalSession: new (trust: unknown) => Session
}

const here = resolve(import.meta.dirname, '../../client/examples/chrono/causal-store.ts')
const kinds: Array<{ name: string; store: Store }> = [{ name: 'certificates', store: (await import(here)) as Store }]
if (values.baseline) kinds.push({ name: 'total order', store: (await import(resolve(String(values.baseline)))) as Store })

interface Row {
  readonly kind: string
  readonly run: number
  readonly put: LatencySummary | null
  readonly readAfterWrite: LatencySummary | null
  /** Turns whose read through replica B did not succeed within READ_WITHIN_MS. */
  readonly failed: number
}

/** How long a read after a write is retried before the turn counts as failed. */
const READ_WITHIN_MS = 10_000

/** Reads `key` through `replica` until the session accepts the answer and it is `value` (true), retried on `gap` (the replica is behind) and `unsupported` (it cannot prove the key yet) for READ_WITHIN_MS (false). */
async function readUntil(session: Session, replica: Replica, key: string, value: string): Promise<boolean> {
  const deadline = performance.now() + READ_WITHIN_MS
  for (;;) {
    try {
      if ((await session.get(replica, key)) === value) return true
    } catch (err) {
      if (!isSteadError(err, 'gap') && !isSteadError(err, 'unsupported')) throw err
    }
    if (performance.now() > deadline) return false
    await new Promise((r) => setTimeout(r, 2))
  }
}

const rows: Row[] = []
const cluster = await BenchCluster.start({ kind: 'stead', n: 4 })
const trust = relayTrust(cluster.descriptor)
try {
  for (let run = 1; run <= runs; run++) {
    for (const { name, store } of kinds) {
      const relays = cluster.relays.map((r) => `ws://${r.api}`)
      const tag = `${name.replace(' ', '-')}-${run}`
      const open = (i: number): ReturnType<typeof openSdkSpace> => openSdkSpace({ relays, cluster: cluster.descriptor, seed: `causal-${tag}-${i}`, space: `kv-${tag}` })
      const [one, two] = await Promise.all([open(0), open(1)])
      const replicas = [new store.KvReplica(one.space, trust), new store.KvReplica(two.space, trust)] as const
      try {
        const put = new Samples()
        const readAfterWrite = new Samples()
        const session = new store.CausalSession(trust)
        let failed = 0
        const turn = async (t: number, record: boolean): Promise<void> => {
          const key = `k${t % 8}`
          const value = `${tag}-${t}`
          const t0 = performance.now()
          await session.put(replicas[0], key, value)
          const t1 = performance.now()
          const read = await readUntil(session, replicas[1], key, value)
          if (!record) return
          if (!read) {
            failed++
            return
          }
          put.add(t1 - t0)
          readAfterWrite.add(performance.now() - t0)
        }
        // Warm up: the space exists at every relay, sessions are open.
        await turn(-1, false)
        for (let t = 0; t < turns; t++) await turn(t, true)
        const row = { kind: name, run, put: put.summary(), readAfterWrite: readAfterWrite.summary(), failed }
        rows.push(row)
        console.log(`run ${run} ${name}: put ${formatLatency(row.put)}; read after write at the other replica ${formatLatency(row.readAfterWrite)}${failed ? `; ${failed} reads not served within ${READ_WITHIN_MS / 1000} s` : ''}`)
      } finally {
        for (const r of replicas) r.close?.()
        await one.owner.close()
        await two.owner.close()
      }
    }
  }
} finally {
  await cluster.stop()
}
printRunMedians(rows, kinds.map((k) => k.name), ['put', 'readAfterWrite'])
if (values.json) writeFileSync(String(values.json), JSON.stringify(rows, null, 2))
