/**
 * Client-side costs the SDK promises to keep small (issue targets):
 * - an update is visible in `value` and to subscribers in under 1 ms;
 * - a client with 10k stored updates opens in under 200 ms.
 * Storage here is fake-indexeddb (IndexedDB's API in Node) and LMDB; a real
 * browser's IndexedDB is measured by the e2e suite's numbers, not here.
 *
 *   npm run bench -w @stead/client
 */
import 'fake-indexeddb/auto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { SimCluster } from '@stead/sim'
import { createClient, indexedDbStorage, lmdbStorage, memoryStorage, type ClientOptions, type ClientStorage } from '../src/index.node.ts'
import { fillCommitted } from './fill.ts'

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] as number
}
const ms = (x: number): number => +x.toFixed(4)

/** A client of `c`'s real relays, in simulated time. */
function options(c: SimCluster, storage: ClientStorage | Promise<ClientStorage>, extra: Partial<ClientOptions> = {}): ClientOptions {
  return c.clientOptions({ storage, ...extra })
}

async function visibility(): Promise<void> {
  const c = await SimCluster.start()
  const clientOwner = await createClient(options(c, memoryStorage()))
  const client = await clientOwner.space('bench')
  const counter = client.counter('hits')
  const set = client.set<number>('seen')
  let heard = 0
  counter.subscribe(() => heard++)
  set.subscribe(() => heard++)
  const counterTimes: number[] = []
  const setTimes: number[] = []
  for (let i = 0; i < 20_000; i++) {
    const t0 = performance.now()
    void counter.increment(1)
    if (counter.value !== i + 1) throw new Error('not visible')
    counterTimes.push(performance.now() - t0)
    const t1 = performance.now()
    void set.add(i)
    if (!set.has(i)) throw new Error('not visible')
    setTimes.push(performance.now() - t1)
    // Let batches seal now and then, as they would in an app.
    if (i % 500 === 499) await new Promise((r) => setTimeout(r, 0))
  }
  await clientOwner.close()
  await c.close()
  if (heard < 40_000) throw new Error(`subscribers heard ${heard} of 40000 updates`)
  console.log(
    JSON.stringify({
      bench: 'update visible in value and to subscribers (ms)',
      counter: { p50: ms(quantile(counterTimes, 0.5)), p99: ms(quantile(counterTimes, 0.99)), max: ms(Math.max(...counterTimes)) },
      setOf20kElements: { p50: ms(quantile(setTimes, 0.5)), p99: ms(quantile(setTimes, 0.99)), max: ms(Math.max(...setTimes)) },
    }),
  )
}

/** Stores `updates` counter updates in envelopes of `perEnvelope`, all committed, then times reopening. */
async function reopen(kind: 'indexeddb' | 'lmdb', updates: number, perEnvelope: number): Promise<void> {
  const c = await SimCluster.start()
  const dir = mkdtempSync(join(tmpdir(), 'stead-bench-'))
  const name = `bench-${kind}-${updates}-${perEnvelope}-${performance.now()}`
  const storage = (): Promise<ClientStorage> | ClientStorage => (kind === 'indexeddb' ? indexedDbStorage(name) : lmdbStorage(dir))
  const clientOwner = await createClient(options(c, storage(), { batchIntervalMs: 1_000_000, maxBatchOps: perEnvelope }))
  const client = await clientOwner.space('bench')
  const expected = await fillCommitted(client, c, Array.from({ length: 100 }, (_, i) => `acct:${i}`), updates, perEnvelope)
  await clientOwner.close()
  // The relays gone and simulated time stopped: the open is timed alone, and must not wait for the network.
  await c.close()
  const t0 = performance.now()
  const againOwner = await createClient(options(c, storage()))
  const again = await againOwner.space('bench')
  const values = Array.from({ length: 100 }, (_, i) => again.counter(`acct:${i}`).stable)
  const elapsed = performance.now() - t0
  if (JSON.stringify(values) !== JSON.stringify(expected)) throw new Error('reopened client has other values')
  await againOwner.close()
  console.log(JSON.stringify({ bench: 'open a client with stored updates', storage: kind, updates, envelopes: Math.ceil(updates / perEnvelope), openMs: +elapsed.toFixed(1) }))
}

if (!process.env.ONLY_REOPEN) await visibility()
for (const kind of (process.env.ONLY_REOPEN ? [process.env.ONLY_REOPEN] : ['indexeddb', 'lmdb']) as Array<'indexeddb' | 'lmdb'>) {
  await reopen(kind, 10_000, 100)
  await reopen(kind, 10_000, 1)
}
