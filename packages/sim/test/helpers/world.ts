import { createClient, type ClientOptions, type SteadClient } from '@stead/client'
import { afterEach } from 'vitest'
import { SimCluster, type SimClusterOptions } from '../../src/index.ts'

/**
 * A test file's simulated world: `start` a cluster and make SDK `client`s
 * on it; after each test the clients close, then the cluster.
 */
export function simWorld(): { start(options?: SimClusterOptions): Promise<SimCluster>; client(c: SimCluster, more?: Partial<ClientOptions>): Promise<SteadClient> } {
  let cluster: SimCluster | undefined
  const clients: SteadClient[] = []
  afterEach(async () => {
    for (const c of clients.splice(0)) await c.close()
    await cluster?.close()
    cluster = undefined
  })
  return {
    start: async (options) => (cluster = await SimCluster.start(options)),
    client: async (c, more) => {
      const made = await createClient(c.clientOptions(more))
      clients.push(made)
      return made
    },
  }
}
