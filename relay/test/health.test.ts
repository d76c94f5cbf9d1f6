import { describe, expect, it } from 'vitest'
import { commitWaitMs, readiness, roundsBehind, type HealthNumbers } from '../src/runtime/health.ts'

const NOW = 1_000_000
/** A relay of a healthy 4-relay cluster (f = 1) with nothing to do. */
const healthy: HealthNumbers = { f: 1, peers: 3, peersConnected: 3, round: 100, clusterRound: 101, pendingEnvelopes: 0, unorderedWork: false, pendingSince: null, lastCommitAt: NOW - 200, now: NOW }

describe('readiness', () => {
  it('is ready when connected to 2f peers, caught up and committing', () => {
    expect(readiness(healthy)).toEqual({ ready: true, reasons: [], peersNeeded: 2, roundsBehind: 1, commitWaitMs: 0 })
    // Exactly 2f peers is a quorum with itself.
    expect(readiness({ ...healthy, peersConnected: 2 }).ready).toBe(true)
  })

  it("is not ready, and says why, when f+1 peers pruned the rounds it needs", () => {
    const r = readiness({ ...healthy, round: 40, clusterRound: 25_000, historyPrunedPast: 5_000 })
    expect(r.ready).toBe(false)
    expect(r.reasons).toEqual([{ reason: 'behind', detail: 'at round 40; f+1 peers keep blocks only from round 5000 on (their retention window): it cannot catch up by fetching blocks' }])
  })

  it('needs 2f peers', () => {
    const r = readiness({ ...healthy, peersConnected: 1 })
    expect(r.ready).toBe(false)
    expect(r.reasons).toEqual([{ reason: 'peers', detail: 'connected to 1 of 3 peers; a quorum needs 2 (2f, f = 1)' }])
    // f = 2 of 7 relays: four peers are needed.
    expect(readiness({ ...healthy, f: 2, peers: 6, peersConnected: 3 }).reasons.map((x) => x.reason)).toEqual(['peers'])
    expect(readiness({ ...healthy, f: 2, peers: 6, peersConnected: 4 }).ready).toBe(true)
  })

  it('a cluster of one (f = 0) needs no peers', () => {
    expect(readiness({ ...healthy, f: 0, peers: 0, peersConnected: 0, clusterRound: 100 }).ready).toBe(true)
  })

  it('is not ready while far behind the round the cluster reached', () => {
    expect(readiness({ ...healthy, clusterRound: 110 }).ready).toBe(true)
    const r = readiness({ ...healthy, round: 40, clusterRound: 120 })
    expect(r.ready).toBe(false)
    expect(r.roundsBehind).toBe(80)
    expect(r.reasons).toEqual([{ reason: 'behind', detail: "at round 40, 80 rounds behind the cluster's 120 (at most 10); catching up" }])
    expect(readiness({ ...healthy, round: 40, clusterRound: 120 }, { maxRoundsBehind: 100, maxCommitWaitMs: 10_000 }).ready).toBe(true)
  })

  it('an idle relay with nothing waiting is ready however long ago it committed, or if it never did', () => {
    expect(readiness({ ...healthy, lastCommitAt: NOW - 3_600_000 }).ready).toBe(true)
    expect(readiness({ ...healthy, lastCommitAt: null }).ready).toBe(true)
  })

  it('is not ready when work waits and nothing commits', () => {
    const stalled = { ...healthy, pendingEnvelopes: 12, pendingSince: NOW - 30_000, lastCommitAt: NOW - 15_000 }
    const r = readiness(stalled)
    expect(r.ready).toBe(false)
    expect(r.commitWaitMs).toBe(15_000)
    expect(r.reasons).toEqual([{ reason: 'not-committing', detail: '12 envelopes waiting for a block and no commit for 15.0 s (at most 10 s)' }])
    // A commit since the work arrived shows the pipeline moves.
    expect(readiness({ ...stalled, lastCommitAt: NOW - 500 }).ready).toBe(true)
    // Work that just arrived after a long idle spell has not waited long.
    expect(readiness({ ...stalled, pendingSince: NOW - 2_000, lastCommitAt: NOW - 3_600_000 }).ready).toBe(true)
    // Never committed: the wait counts from when the work arrived.
    expect(readiness({ ...stalled, lastCommitAt: null }).commitWaitMs).toBe(30_000)
  })

  it('is not ready when commits stopped with envelopes already in blocks, its own queue empty', () => {
    const stalled = { ...healthy, unorderedWork: true, pendingSince: NOW - 30_000, lastCommitAt: NOW - 20_000 }
    const r = readiness(stalled)
    expect(r.reasons).toEqual([{ reason: 'not-committing', detail: '0 envelopes waiting for a block, blocks waiting for an order, and no commit for 20.0 s (at most 10 s)' }])
    expect(readiness({ ...stalled, lastCommitAt: NOW - 500 }).ready).toBe(true)
  })

  it('names every failed condition, in order', () => {
    const r = readiness({ ...healthy, peersConnected: 0, round: 5, clusterRound: 50, pendingEnvelopes: 1, pendingSince: NOW - 60_000, lastCommitAt: null })
    expect(r.reasons.map((x) => x.reason)).toEqual(['peers', 'behind', 'not-committing'])
  })
})

describe('the numbers behind it', () => {
  it('roundsBehind is never negative', () => {
    expect(roundsBehind({ round: 10, clusterRound: 7 })).toBe(0)
    expect(roundsBehind({ round: 7, clusterRound: 10 })).toBe(3)
  })

  it('commitWaitMs is 0 with nothing pending', () => {
    expect(commitWaitMs({ pendingEnvelopes: 0, unorderedWork: false, pendingSince: NOW - 99_000, lastCommitAt: null, now: NOW })).toBe(0)
    expect(commitWaitMs({ pendingEnvelopes: 3, unorderedWork: false, pendingSince: null, lastCommitAt: null, now: NOW })).toBe(0)
  })
})
