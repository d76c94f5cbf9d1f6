import { encodeEnvelope, type Envelope } from '@stead/core'
import { SimCluster, type SimClusterOptions } from '@stead/sim'
import { afterEach } from 'vitest'
import { createClient, type ClientOptions, type Space, type SteadClient } from '../../src/index.node.ts'

/**
 * What a client test file opens on real relays in simulated time, closed
 * after each test. Clusters start held (see SimCluster.hold): nothing is
 * ordered until the test lets it (commitUntil, committing), so a test sees
 * prospective values before stable ones by construction.
 */
export function simWorld(): {
  cluster(options?: SimClusterOptions): Promise<SimCluster>
  /** A new client of the cluster, with its space `name` (default `bank`) open. */
  client(c: SimCluster, extra?: Partial<ClientOptions>, name?: string): Promise<Space>
  /** The client a space of `client` belongs to. */
  owner(space: Space): SteadClient
  /** Closes the client a space belongs to (its storage too), as an app shutting down does. */
  shutdown(space: Space): Promise<void>
  /** Leaves the client a space belongs to unclosed after the test: it crashed (a test killed it its own way). */
  abandon(space: Space): SteadClient
} {
  const open: SteadClient[] = []
  const clusters: SimCluster[] = []
  const owners = new Map<Space, SteadClient>()
  afterEach(async () => {
    for (const c of open.splice(0)) await c.close()
    for (const c of clusters.splice(0)) await c.close()
    owners.clear()
  })
  return {
    async cluster(options = {}) {
      const c = await SimCluster.start(options)
      c.hold()
      clusters.push(c)
      return c
    },
    async client(c, extra = {}, name = 'bank') {
      const cl = await createClient(c.clientOptions(extra))
      open.push(cl)
      const space = await cl.space(name)
      owners.set(space, cl)
      return space
    },
    owner(space) {
      return owners.get(space) as SteadClient
    },
    async shutdown(space) {
      const cl = owners.get(space) as SteadClient
      open.splice(open.indexOf(cl), 1)
      await cl.close()
    },
    abandon(space) {
      const cl = owners.get(space) as SteadClient
      open.splice(open.indexOf(cl), 1)
      return cl
    },
  }
}

/** Lets the relays order what they hold until `check` holds, then holds them again. */
export async function commitUntil(c: SimCluster, what: string, check: () => boolean, withinMs?: number): Promise<void> {
  c.release()
  await c.until(what, () => check() || undefined, withinMs)
  c.hold()
}

/** Lets the relays order from now on; the returned function holds them again. */
export function committing(c: SimCluster): () => void {
  c.release()
  return () => c.hold()
}

/** Hands `env` to relay `relay` (default 0) as a client's submit would: another author's update, made by hand. */
export function submit(c: SimCluster, env: Envelope, relay = 0): void {
  c.relays[relay]?.node.submit(encodeEnvelope(env))
}

/** The last envelope clients submitted (in the order relays first got them). */
export function lastSubmitted(c: SimCluster): Envelope | undefined {
  return [...c.submitted.values()].at(-1)
}
