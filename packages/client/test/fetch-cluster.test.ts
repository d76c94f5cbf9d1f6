import { describe, expect, it } from 'vitest'
import { toHex } from '@stead/core'
import { fetchCluster } from '../src/transport/cluster.ts'

/** Four relays' descriptors of epoch 1 (f = 1), as GET /v1/cluster serves them. */
const keys = [1, 2, 3, 4].map((b) => toHex(new Uint8Array(32).fill(b)))
const descriptor = (startRound: number) => ({ f: 1, epoch: 1, startRound, relays: keys.map((publicKey, i) => ({ id: `r${i + 1}`, publicKey, api: `127.0.0.1:${7771 + i}` })) })
const urls = keys.map((_, i) => `http://relay${i}.test`)

/** A fetch where each relay serves its descriptor. */
function serving(bodies: readonly unknown[]): (url: string) => Promise<Response> {
  return async (url) => new Response(JSON.stringify(bodies[urls.findIndex((u) => url.startsWith(u))]), { headers: { 'content-type': 'application/json' } })
}

describe('trusting a cluster on first use (fetchCluster)', () => {
  it('takes the descriptor 2f+1 relays serve, startRound included, and names the relay that served another start', async () => {
    // The liar, asked first, moves the epoch's start far ahead: its client would count no signature of any round against a relay.
    const dissent: string[] = []
    const cluster = await fetchCluster(urls, serving([descriptor(1_000_000), descriptor(40), descriptor(40), descriptor(40)]), (url) => dissent.push(url))
    expect(cluster.startRound).toBe(40)
    expect(cluster.epoch).toBe(1)
    await expect.poll(() => dissent).toEqual([urls[0]])
  })

  it('trusts nothing while no 2f+1 relays agree on where the epoch began', async () => {
    await expect(fetchCluster(urls, serving([descriptor(1_000_000), descriptor(40), descriptor(41), descriptor(40)]))).rejects.toThrow(/4 of 4 relays answered GET \/v1\/cluster with 3 different descriptors/)
  })
})
