import { decodeRelayMessage, encodeAttestation } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { AttestedCommits } from '../src/store/attested-commits.ts'
import { CommitFeed } from '../src/store/feed.ts'
import { MemoryKv } from '../src/store/kv.ts'

/** A space's commits (from, to) at rounds 10, 20, ...: each chained to the one before. */
async function commitsOf(spans: ReadonlyArray<readonly [number, number]>) {
  const kv = new MemoryKv()
  const commits = new AttestedCommits(kv.table('attestations'), kv.table('attestation-chunks'), kv.table('decided-ids'))
  await kv.write(() =>
    spans.forEach(([fromIndex, toIndex], i) => {
      const bytes = encodeAttestation({ space: 's', round: (i + 1) * 10, prevRound: i * 10, fromIndex, toIndex, decisions: [], stateHash: new Uint8Array(32), batch: new Uint8Array(32) })
      commits.put({ space: 's', fromIndex, round: (i + 1) * 10, value: { attestation: { bytes, sig: new Uint8Array(64) }, envelopes: [new Uint8Array([i])] } })
    }),
  )
  const store = { commitAt: (space: string, from: readonly [number, number]) => commits.at(space, from), commitChunk: (space: string, at: readonly [number, number], k: number) => commits.chunk(space, at, k) }
  return { kv, commits, store }
}

describe('CommitFeed', () => {
  it('tells a subscriber whose next commits were pruned while it read to start again from a snapshot, once, and sends nothing past the gap', async () => {
    const { kv, commits, store } = await commitsOf([[0, 2], [2, 4], [4, 6], [6, 8]])
    const feed = new CommitFeed(store, 's', 0)
    expect(feed.next()).toBeDefined()
    expect(feed.resumeIndex).toBe(2)
    // The relay prunes below 6 while the subscriber is at 2.
    await kv.write(() => commits.prune('s', 6))
    const told = feed.next() as Uint8Array
    expect(decodeRelayMessage(told)).toEqual({ type: 'pruned', space: 's', from: 6 })
    expect(feed.next()).toBeUndefined()
    expect(feed.resumeIndex).toBe(2)
  })

  it('follows commits that keep the index (parked only) without taking them for a gap', async () => {
    const { store } = await commitsOf([[0, 2], [2, 2], [2, 3]])
    const feed = new CommitFeed(store, 's', 0)
    const sent = [feed.next(), feed.next(), feed.next()].map((f) => decodeRelayMessage(f as Uint8Array).type)
    expect(sent).toEqual(['commit', 'commit', 'commit'])
    expect(feed.resumeIndex).toBe(3)
    expect(feed.next()).toBeUndefined()
  })
})
