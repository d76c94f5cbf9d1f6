import { describe, expect, it } from 'vitest'
import type { Attestation } from '@stead/core'
import { CommitQuorum } from '../src/upstream/quorum.ts'

const att = (round: number, prevRound: number, fromIndex: number, toIndex: number, tag = 0): { a: Attestation; bytes: Uint8Array } => ({
  a: { space: 's', round, prevRound, fromIndex, toIndex, decisions: [], stateHash: new Uint8Array(32).fill(tag), batch: new Uint8Array(32) },
  bytes: new Uint8Array([round, prevRound, fromIndex, toIndex, tag]),
})
/** Signatures are checked before `offer`; the quorum only keeps them. */
const SIG = new Uint8Array(64)

describe('CommitQuorum', () => {
  it('needs f+1 identical attestations and follows the chain, never skipping a link', () => {
    const q = new CommitQuorum(1)
    const first = att(2, 0, 0, 0) // parks envelopes only: same index before and after
    const second = att(4, 2, 0, 3)
    q.offer(0, second.a, second.bytes, SIG, [])
    q.offer(1, second.a, second.bytes, SIG, [])
    expect(q.next({ stableIndex: 0, lastRound: 0 })).toBeUndefined() // its predecessor is not believed yet
    q.offer(2, first.a, first.bytes, SIG, [])
    expect(q.next({ stableIndex: 0, lastRound: 0 })).toBeUndefined() // f attestations are not enough
    q.offer(3, first.a, first.bytes, SIG, [])
    expect(q.next({ stableIndex: 0, lastRound: 0 })?.attestation.round).toBe(2)
    expect(q.next({ stableIndex: 0, lastRound: 2 })?.attestation.round).toBe(4)
  })

  it('names relays that signed something else for a settled round, and ignores a relay changing its word', () => {
    const q = new CommitQuorum(1)
    const good = att(2, 0, 0, 1, 1)
    const bad = att(2, 0, 0, 1, 9)
    q.offer(0, bad.a, bad.bytes, SIG, [])
    q.offer(0, good.a, good.bytes, SIG, []) // equivocation: its first word stands
    q.offer(1, good.a, good.bytes, SIG, [])
    q.offer(2, good.a, good.bytes, SIG, [])
    const settled = q.next({ stableIndex: 0, lastRound: 0 })
    expect(settled?.relays).toEqual(new Set([1, 2]))
    expect(q.dissenters(settled!)).toEqual([0])
  })

  it('bounds what one relay can make it hold, and forgets what is behind', () => {
    const q = new CommitQuorum(1, 3)
    for (let r = 1; r <= 10; r++) {
      const x = att(r * 2, 0, 0, 0)
      q.offer(0, x.a, x.bytes, SIG, [])
    }
    expect(q.size).toBe(3)
    q.prune({ stableIndex: 0, lastRound: 100 })
    expect(q.size).toBe(0)
    const y = att(102, 100, 0, 1)
    q.offer(0, y.a, y.bytes, SIG, [])
    expect(q.size).toBe(1)
    expect(CommitQuorum.stale({ fromIndex: 0, round: 100 }, { stableIndex: 0, lastRound: 100 })).toBe(true)
  })
})
