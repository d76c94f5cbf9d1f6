#!/usr/bin/env node
/**
 * How fast a new client gets a space's history from one peer alone (a
 * report, never a test), beside Helia's bitswap doing the same for blocks
 * of the same size (`npm run bench:bitswap`): on loopback, a client holds
 * `--envelopes` updates of a space (each its own envelope, each naming the
 * previous one as its dep); every relay is killed; a new client, given the
 * cluster to pin and the holder's address, joins the space from the holder.
 *
 * - `undecided`: the updates were made while the relays were down (the
 *   holder holds them undecided): the new client gets them all with the
 *   holder's answer to its `have`;
 * - `committed`: the relays committed them first: the new client gets the
 *   attested commits (`sync`, then `commits`), believed on f+1 relay
 *   signatures.
 *
 * Reported: from creating the new client to its link being up (connect),
 * and from there to showing every update (fetch); medians of `--runs`.
 *
 *   npm run bench:peer-fetch -- [--envelopes 100,1000] [--runs 3]
 */
import { createClient, memoryStorage, type SteadClient } from '@stead/client'
import { libp2pPeers } from '@stead/client/peers'
import { TestCluster } from '@stead/relay/testing'
import { reportArgs } from './args.ts'
import { median } from './stats.ts'

const values = reportArgs('usage: npm run bench:peer-fetch -- [--envelopes 100,1000] [--runs 3]', {
  envelopes: { type: 'string', default: '100,1000' },
  runs: { type: 'string', default: '3' },
})
const sizes = values.envelopes.split(',').map(Number)
const runs = Number(values.runs)
const SPACE = 'fetch'

async function until(what: string, check: () => boolean, ms: number): Promise<void> {
  const end = performance.now() + ms
  while (!check()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 2))
  }
}

/** One run: the time to connect and the time to fetch, in ms. */
async function run(envelopes: number, kind: 'undecided' | 'committed'): Promise<{ connect: number; fetch: number }> {
  const cluster = await TestCluster.create(4)
  await cluster.startAll()
  const relays = cluster.relays.map((r) => `ws://${r.api}`)
  const opened: SteadClient[] = []
  try {
    const holderPeers = libp2pPeers()
    const holder = await createClient({ relays, storage: memoryStorage(), peers: holderPeers, batchIntervalMs: 1 })
    opened.push(holder)
    // Anybody may write: the holder shares the space with the newcomer on its policy, no relay naming it.
    const space = await holder.createSpace(SPACE, { everyone: 'writer' })
    // What the newcomer pins: the relays will be gone when it starts.
    const descriptor = await cluster.json(0, '/v1/cluster')
    const counter = space.counter('n')
    if (kind === 'undecided') for (let i = 0; i < cluster.relays.length; i++) cluster.kill(i)
    for (let i = 0; i < envelopes; i++) await counter.increment(1)
    if (kind === 'committed') {
      await until('committed', () => counter.stable === envelopes, 120_000)
      for (let i = 0; i < cluster.relays.length; i++) cluster.kill(i)
    }
    // Peer sync starts in the background: wait until the holder listens.
    await until('the holder listening', () => holderPeers.addresses().length > 0, 30_000)
    const address = holderPeers.addresses().find((a) => !a.includes('/ws/')) as string
    const started = performance.now()
    const newcomer = await createClient({ relays, storage: memoryStorage(), cluster: descriptor, peers: libp2pPeers({ dial: [address] }), batchIntervalMs: 1 })
    opened.push(newcomer)
    const joined = await newcomer.space(SPACE)
    await until('a link', () => (newcomer.peers?.peers ?? 0) > 0, 30_000)
    const linked = performance.now()
    const got = joined.counter('n')
    await until('every update', () => (kind === 'committed' ? got.stable : got.value) === envelopes, 120_000)
    return { connect: linked - started, fetch: performance.now() - linked }
  } finally {
    for (const c of opened) await c.close()
    await cluster.stopAll()
  }
}

for (const envelopes of sizes) {
  for (const kind of ['undecided', 'committed'] as const) {
    const results: Array<{ connect: number; fetch: number }> = []
    for (let i = 0; i < runs; i++) results.push(await run(envelopes, kind))
    const fetch = results.map((r) => r.fetch)
    console.log(
      `${kind}, ${envelopes} envelopes: fetch median ${median(fetch).toFixed(0)} ms (runs ${fetch.map((x) => x.toFixed(0)).join(', ')}), ${(median(fetch) / envelopes).toFixed(3)} ms per envelope; connect median ${median(results.map((r) => r.connect)).toFixed(0)} ms`,
    )
  }
}
process.exit(0)
