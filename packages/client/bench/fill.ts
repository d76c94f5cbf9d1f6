import type { SimCluster } from '@stead/sim'
import type { Space } from '../src/index.ts'

/**
 * Makes `updates` counter increments over `keys`, `perEnvelope` to an
 * envelope (the client must be created with that maxBatchOps and a long
 * batch interval), flushing every 50 envelopes to the cluster's real
 * relays (in simulated time), and returns the stable values once nothing
 * is pending.
 */
export async function fillCommitted(client: Space, cluster: SimCluster, keys: readonly string[], updates: number, perEnvelope: number): Promise<number[]> {
  const handles = keys.map((k) => client.counter(k))
  await cluster.until('online', () => client.status.online)
  for (let i = 0; i < updates; i += perEnvelope) {
    await Promise.all(Array.from({ length: perEnvelope }, (_, j) => (handles[(i + j) % handles.length] as (typeof handles)[number]).increment(1)))
    if ((i / perEnvelope) % 50 === 49) await client.flush()
  }
  await client.flush()
  await cluster.until('every update committed', () => client.status.pending === 0, 3_600_000)
  return handles.map((h) => h.stable)
}
