import type { Space } from '../src/index.ts'
import type { FakeCluster } from '../test/helpers/fake-cluster.ts'

/**
 * Makes `updates` counter increments over `keys`, `perEnvelope` to an
 * envelope (the client must be created with that maxBatchOps and a long
 * batch interval), commits them through the fake cluster every 50
 * envelopes, and returns the stable values once nothing is pending.
 */
export async function fillCommitted(client: Space, cluster: FakeCluster, keys: readonly string[], updates: number, perEnvelope: number): Promise<number[]> {
  const handles = keys.map((k) => client.counter(k))
  while (!client.status.online) await new Promise((r) => setTimeout(r, 1))
  for (let i = 0; i < updates; i += perEnvelope) {
    await Promise.all(Array.from({ length: perEnvelope }, (_, j) => (handles[(i + j) % handles.length] as (typeof handles)[number]).increment(1)))
    if ((i / perEnvelope) % 50 === 49) {
      await client.flush()
      cluster.commit()
    }
  }
  await client.flush()
  cluster.commit()
  while (client.status.pending > 0) await new Promise((r) => setTimeout(r, 1))
  return handles.map((h) => h.stable)
}
