/**
 * A causally consistent key-value store, runnable: `npx stead-relay dev
 * --relays 4` in one terminal, `npm run example:causal-store` in another.
 * Alice posts a photo, then an album that shows it, through one replica;
 * Bob reads the album through another, then the photo through a replica
 * that serves an older (genuine, certified) version: his session refuses
 * it, because the album he saw depends on the newer one, and an
 * up-to-date replica serves it. Every answer is proven by the relays'
 * clock votes: nothing waits for the total order.
 */
import { isSteadError } from '@stead/core'
import type { ClockProof, Space } from '@stead/client'
import { CausalSession, KvReplica, type Replica, type Version } from './causal-store.ts'
import { clusterTrust, connect } from './connect.ts'

const clients = await connect(2)
const trust = await clusterTrust()
const [spaceA, spaceB] = await Promise.all(clients.map((c) => c.space('example-causal-store')))
const [a, b] = [new KvReplica(spaceA as Space, trust), new KvReplica(spaceB as Space, trust)]
const run = Date.now().toString(36)
const show = (v: Version): string => `${v.author.slice(0, 8)}:${v.seq} (clock weight ${v.weight})`
const [photo, album] = [`photo-${run}`, `album-${run}`]

const alice = new CausalSession(trust)
console.log(`alice puts ${photo} = "beach, blurry" via replica A: version ${show(await alice.put(a, photo, 'beach, blurry'))}`)
const stale = (await a.get(photo)) as ClockProof
console.log(`alice puts ${photo} = "beach, sharp" via replica A: version ${show(await alice.put(a, photo, 'beach, sharp'))}`)
console.log(`alice puts ${album} = "shows ${photo}" via replica A: version ${show(await alice.put(a, album, `shows ${photo}`))}`)
console.log(`alice's dependency clock: ${alice.dependencies.map(([k, v]) => `${k} >= ${show(v)}`).join(', ')}\n`)

const bob = new CausalSession(trust)
/**
 * Bob reads `key` through replica B, again while it is behind: B holds each of Alice's writes once the
 * relays pushed it and its clock votes, a moment later, and not always in the order she wrote (the album's
 * certificate may be complete before the photo's). The session refuses what B does not hold yet (`gap`).
 */
async function viaB(key: string): Promise<unknown> {
  for (let tries = 0; ; tries++) {
    try {
      const value = await bob.get(b, key)
      if (value !== undefined) return value
    } catch (err) {
      if (!isSteadError(err) || tries > 100) throw err
    }
    await new Promise((r) => setTimeout(r, 50))
  }
}
const seen = await viaB(album)
console.log(`bob gets ${album} via replica B: "${String(seen)}"; his dependency clock: ${bob.dependencies.map(([k, v]) => `${k} >= ${show(v)}`).join(', ')}`)
const behind: Replica = { get: async () => stale, put: (key, value, deps) => a.put(key, value, deps) }
try {
  await bob.get(behind, photo)
  console.log('a stale photo was accepted: this is a bug')
  process.exitCode = 1
} catch (err) {
  if (!isSteadError(err, 'gap')) throw err
  console.log(`bob gets ${photo} via a replica that serves the old version: refused (${err.message})`)
}
console.log(`bob gets ${photo} via replica B: "${String(await viaB(photo))}"`)
a.close()
b.close()
await Promise.all(clients.map((c) => c.close()))
