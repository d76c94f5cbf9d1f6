/**
 * A causally consistent key-value store, runnable: `npx stead-relay dev
 * --relays 4` in one terminal, `npm run example:causal-store` in another.
 * Alice posts a photo, then an album that shows it, through one replica;
 * Bob reads the album through another, then the photo through a replica
 * that serves an older (genuine, proven) version: his session refuses it,
 * because the album he saw depends on the newer one, and an up-to-date
 * replica serves it.
 */
import { isSteadError } from '@stead/core'
import type { ClockProof, Space } from '@stead/client'
import { CausalSession, KvReplica, type Replica } from './causal-store.ts'
import { clusterTrust, connect } from './connect.ts'

const clients = await connect(2)
const trust = await clusterTrust()
const [spaceA, spaceB] = await Promise.all(clients.map((c) => c.space('example-causal-store')))
const [a, b] = [new KvReplica(spaceA as Space, trust), new KvReplica(spaceB as Space, trust)]
const run = Date.now().toString(36)
const [photo, album] = [`photo-${run}`, `album-${run}`]

const alice = new CausalSession(trust)
console.log(`alice puts ${photo} = "beach, blurry" via replica A: version ${await alice.put(a, photo, 'beach, blurry')}`)
const stale = (await a.get(photo)) as ClockProof
console.log(`alice puts ${photo} = "beach, sharp" via replica A: version ${await alice.put(a, photo, 'beach, sharp')}`)
console.log(`alice puts ${album} = "shows ${photo}" via replica A: version ${await alice.put(a, album, `shows ${photo}`)}`)
console.log(`alice's dependency clock: ${JSON.stringify(alice.dependencies)}\n`)

const bob = new CausalSession(trust)
// Replica B follows the same stable order; it may be a moment behind.
let seen: unknown
for (let tries = 0; ; tries++) {
  try {
    seen = await bob.get(b, album)
    if (seen !== undefined) break
  } catch (err) {
    if (!isSteadError(err) || tries > 100) throw err
  }
  await new Promise((r) => setTimeout(r, 50))
}
console.log(`bob gets ${album} via replica B: "${String(seen)}"; his dependency clock: ${JSON.stringify(bob.dependencies)}`)
const behind: Replica = { get: async () => stale, put: (key, value, deps) => a.put(key, value, deps) }
try {
  await bob.get(behind, photo)
  console.log('a stale photo was accepted: this is a bug')
  process.exitCode = 1
} catch (err) {
  if (!isSteadError(err, 'gap')) throw err
  console.log(`bob gets ${photo} via a replica that serves the old version: refused (${err.message})`)
}
console.log(`bob gets ${photo} via replica B: "${String(await bob.get(b, photo))}"`)
await Promise.all(clients.map((c) => c.close()))
