import { describe, expect, it } from 'vitest'
import { encodeAttestation, toHex } from '@stead/core'
import { AttestedCommits } from '../src/store/attested-commits.ts'
import { MemoryKv } from '../src/store/kv.ts'

describe('AttestedCommits.prune', () => {
  it('never removes a space’s latest commit, whatever the limit, nor another space’s', async () => {
    const kv = new MemoryKv()
    const commits = new AttestedCommits(kv.table('attestations'), kv.table('attestation-chunks'), kv.table('decided-ids'))
    // Each commit decides one envelope, whose id is its round repeated.
    const idOf = (n: number) => new Uint8Array(32).fill(n)
    const attestation = (n: number) => encodeAttestation({ space: 's', round: n, prevRound: 0, fromIndex: 0, toIndex: 1, decisions: [[idOf(n), 'committed', n, [], true], [idOf(n - 10), 'duplicate']], stateHash: new Uint8Array(32), batch: new Uint8Array(32) })
    const value = (n: number) => ({ attestation: { bytes: attestation(n), sig: new Uint8Array(64) }, envelopes: [new Uint8Array([n])] })
    await kv.write(() => {
      // Commits of s at rounds 10, 20, 30 starting at stable indexes 0, 2, 5 (the last covers 6 to 9), and one of t.
      for (const [fromIndex, round] of [[0, 10], [2, 20], [5, 30]] as const) commits.put({ space: 's', fromIndex, round, value: value(round) })
      commits.put({ space: 't', fromIndex: 0, round: 10, value: value(1) })
    })
    // Each commit also decides a copy of the previous one's envelope again (a duplicate): that does not hide the commit that took it.
    expect(commits.decidedBy('s', toHex(idOf(10)))?.position).toEqual([0, 10])
    expect(commits.decidedBy('s', toHex(idOf(20)))?.position).toEqual([2, 20])
    let removed = 0
    await kv.write(() => (removed = commits.prune('s', 9)))
    expect(removed).toBe(2)
    expect(commits.latest('s')?.position).toEqual([5, 30])
    expect(commits.at('s', [0, 0])?.position).toEqual([5, 30])
    expect(commits.chunk('s', [5, 30], 0)).toBeInstanceOf(Uint8Array)
    expect(commits.latest('t')?.position).toEqual([0, 10])
    // The envelopes the pruned commits decided are no longer found; the kept one's still is, in its own space only.
    expect(commits.decidedBy('s', toHex(idOf(10)))).toBeUndefined()
    expect(commits.decidedBy('s', toHex(idOf(20)))).toBeUndefined()
    expect(commits.decidedBy('s', toHex(idOf(30)))?.position).toEqual([5, 30])
    expect(commits.decidedBy('t', toHex(idOf(1)))?.position).toEqual([0, 10])
    expect(commits.decidedBy('t', toHex(idOf(30)))).toBeUndefined()
    await kv.write(() => (removed = commits.prune('s', Number.MAX_SAFE_INTEGER)))
    expect(removed).toBe(0)
  })
})
