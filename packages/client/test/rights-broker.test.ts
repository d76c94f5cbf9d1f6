import { BoundedCounter, type BoundedCounterDeclaration, type BoundedCounterOp, type HostClock } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { RightsBroker } from '../src/space/rights-broker.ts'

/** A broker for replica A on one counter whose states the test sets, recording what it sends. */
function brokerOf(own: BoundedCounter, seen: BoundedCounter) {
  const decl: BoundedCounterDeclaration = { type: 'bounded-counter', params: own.params }
  const sent: BoundedCounterOp[] = []
  const clock: HostClock = { now: () => 0, setTimer: () => ({ cancel: () => {} }) }
  const broker = new RightsBroker({
    authorId: 'A',
    clock,
    ownView: () => own,
    prospective: () => seen,
    update: (_key, _decl, op) => {
      sent.push(op)
      return Promise.resolve({ status: 'stored' })
    },
    subscribe: () => () => {},
    isOpen: () => true,
  })
  return { broker, decl, sent }
}

const ctx = (replica: string, i: number) => ({ replica, tag: `${replica}:${i}` })

describe('rights broker', () => {
  it('grants none while it waits for rights itself, and keeps the rights its resolved spends are about to take', async () => {
    // A holds 1, C holds 4; B holds none and asks A.
    const own = new BoundedCounter({ min: 0, initial: 0 })
    own.apply(['i', 1], ctx('A', 1))
    own.apply(['i', 4], ctx('C', 1))
    const seen = own.clone()
    seen.apply(['q', 1, 'A', 0, 1], ctx('B', 1))
    const { broker, decl, sent } = brokerOf(own, seen)
    // A spend of 2 waits (A can reach 1 + half of C's 4): A asks C for the 1 it lacks, and does not answer B.
    const waiting = broker.acquire('k', decl, 'd', 2, new AbortController().signal)
    expect(sent.filter((op) => op[0] === 'g')).toEqual([])
    expect(sent.filter((op) => op[0] === 'q')).toEqual([['q', 1, 'C', 0, 1]])
    // A spend of 1 has its right: it resolves, and the right is not granted away under it.
    expect(await broker.acquire('k', decl, 'd', 1, new AbortController().signal)).toBe(true)
    expect(sent.filter((op) => op[0] === 'g')).toEqual([])
    broker.close()
    expect(await waiting).toBe(false)
  })

  it('answers an ask once it waits for nothing: half of its rights, rounded up', async () => {
    const own = new BoundedCounter({ min: 0, initial: 0 })
    own.apply(['i', 3], ctx('A', 1))
    const seen = own.clone()
    seen.apply(['q', 5, 'A', 0, 1], ctx('B', 1))
    const { broker, decl, sent } = brokerOf(own, seen)
    expect(await broker.acquire('k', decl, 'd', 0, new AbortController().signal)).toBe(true)
    expect(sent).toEqual([['g', 2, 'B', 0]])
    broker.close()
  })
})
