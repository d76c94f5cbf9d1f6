import { isSteadError } from '@stead/core'
import { SimCluster } from '@stead/sim'
import { afterEach } from 'vitest'
import { createClient, type ClientOptions, type SteadClient, type SteadError } from '../../src/index.node.ts'

/**
 * Users of one space on real relays in simulated time, each a client with
 * its own identity (for members, invitations and read policies), closed
 * after each test. The cluster orders what it gets as it comes: safe
 * updates resolve by themselves.
 */
export function people(): {
  cluster(): Promise<SimCluster>
  /** A user: a client of `c` with its own identity, made from one byte. */
  person(c: SimCluster, byte: number, more?: Partial<ClientOptions>): Promise<SteadClient>
} {
  const open: SteadClient[] = []
  const clusters: SimCluster[] = []
  afterEach(async () => {
    for (const c of open.splice(0)) await c.close()
    for (const c of clusters.splice(0)) await c.close()
  })
  return {
    async cluster() {
      const c = await SimCluster.start()
      clusters.push(c)
      return c
    },
    async person(c, byte, more = {}) {
      const client = await createClient(c.clientOptions({ identity: { secretKey: new Uint8Array(32).fill(byte) }, ...more }))
      open.push(client)
      return client
    },
  }
}

/** The SteadError a promise rejects with (fails the test if it resolves or throws something else). */
export async function failure(p: Promise<unknown>): Promise<SteadError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  )
  if (!isSteadError(err)) throw new Error(`expected a SteadError, got ${String(err)}`)
  return err
}
