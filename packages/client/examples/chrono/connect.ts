/**
 * What the runnable Chrono examples share: `n` Node clients of a local
 * cluster (`npx stead-relay dev --relays 4`, or RELAYS=ws://host:port,...)
 * and the relays' keys that proofs are checked against.
 */
import { nodeCrypto } from '@stead/core/node'
import { createClient, memoryStorage, parseClusterDescriptor, type SteadClient } from '@stead/client'
import type { Trust } from './trust.ts'

export const relays = (process.env.RELAYS ?? 'ws://127.0.0.1:7401,ws://127.0.0.1:7402,ws://127.0.0.1:7403,ws://127.0.0.1:7404').split(',')

/** Opens `n` clients (each its own author, in memory, with the secret key it was given) and waits until each reaches a quorum of relays. */
export async function connect(n: number): Promise<Array<SteadClient & { secretKey: Uint8Array }>> {
  const clients = await Promise.all(
    Array.from({ length: n }, async () => {
      const secretKey = nodeCrypto.generateSecretKey()
      return Object.assign(await createClient({ relays, storage: memoryStorage(), identity: { secretKey } }), { secretKey })
    }),
  )
  const started = Date.now()
  while (!clients.every((c) => c.status.online)) {
    if (Date.now() - started > 20_000) {
      console.error(`no quorum of relays reachable at ${relays.join(', ')}; is \`npx stead-relay dev --relays 4\` running?`)
      process.exit(1)
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  return clients
}

/**
 * The relays' keys, as the cluster file lists them. Here they are asked of
 * the first relay, which is trust on first use; a real verifier takes the
 * cluster file from the operator.
 */
export async function clusterTrust(): Promise<Trust> {
  const url = (relays[0] as string).replace(/^ws/, 'http')
  const res = await fetch(`${url}/v1/cluster`)
  const cluster = parseClusterDescriptor(await res.json(), `${url}/v1/cluster`)
  return { crypto: nodeCrypto, cluster: { f: cluster.f, relayKeys: cluster.relays.map((r) => r.publicKey) } }
}
