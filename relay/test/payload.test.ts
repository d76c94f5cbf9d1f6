import { SteadError } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { PayloadQueue, type PayloadInfo } from '../src/consensus/payload.ts'

const info = (author: string, seq: number, urgent = false): PayloadInfo => ({ idHex: `${author}-${seq}`, slot: `s/${author}:${seq}`, author, urgent })
const frame = (bytes = 10) => new Uint8Array(bytes)
const ids = (taken: ReadonlyArray<{ info: PayloadInfo }>) => taken.map((t) => t.info.idHex)

describe('PayloadQueue', () => {
  it('takes the authors in turn, each in its own order, so one author with many queued does not hold back another', () => {
    const q = new PayloadQueue({ maxBlockEnvelopes: 4, maxBlockBytes: 1 << 20, maxQueued: 1000, maxQueuedPerAuthor: 500 })
    for (let seq = 1; seq <= 100; seq++) q.add(frame(), info('flood', seq), 0)
    q.add(frame(), info('honest', 1, true), 0)
    q.add(frame(), info('honest', 2, true), 0)
    expect(ids(q.take())).toEqual(['flood-1', 'honest-1', 'flood-2', 'honest-2'])
    // The author served longest ago goes first in the next block.
    q.add(frame(), info('late', 1), 0)
    expect(ids(q.take())).toEqual(['flood-3', 'late-1', 'flood-4', 'flood-5'])
    expect(q.length).toBe(95)
    expect(q.hasUrgent).toBe(false)
  })

  it('stops a block at its byte bound, one large envelope going alone, and counts what it holds', () => {
    const q = new PayloadQueue({ maxBlockEnvelopes: 100, maxBlockBytes: 25, maxQueued: 1000, maxQueuedPerAuthor: 500 })
    q.add(frame(40), info('a', 1), 0)
    q.add(frame(10), info('b', 1), 0)
    q.add(frame(10), info('b', 2), 0)
    expect(q.queuedBytes).toBe(60)
    expect(ids(q.take())).toEqual(['a-1'])
    expect(ids(q.take())).toEqual(['b-1', 'b-2'])
    expect(q.queuedBytes).toBe(0)
    expect(q.length).toBe(0)
  })

  it("refuses an author past its share of the queue while others still get in", () => {
    const q = new PayloadQueue({ maxBlockEnvelopes: 10, maxBlockBytes: 1 << 20, maxQueued: 100, maxQueuedPerAuthor: 10 })
    for (let seq = 1; seq <= 10; seq++) q.add(frame(), info('flood', seq), 0)
    expect(() => q.add(frame(), info('flood', 11), 0)).toThrow(SteadError)
    expect(q.add(frame(), info('honest', 1), 0)).toBe('queued')
    // Its share frees as blocks take its envelopes.
    q.take()
    expect(q.add(frame(), info('flood', 11), 0)).toBe('queued')
  })

  it('drops envelopes ordered elsewhere from any author, and peeks in the order blocks take them', () => {
    const q = new PayloadQueue({ maxBlockEnvelopes: 10, maxBlockBytes: 1 << 20, maxQueued: 100, maxQueuedPerAuthor: 10 })
    for (let seq = 1; seq <= 3; seq++) q.add(frame(), info('a', seq, seq === 2), 0)
    q.add(frame(), info('b', 1), 0)
    q.dropOrdered(['a-2', 'b-1', 'unknown'])
    expect(q.length).toBe(2)
    expect(q.hasUrgent).toBe(false)
    expect(q.has('b-1')).toBe(false)
    q.add(frame(), info('c', 1), 0)
    expect(q.peek(10)).toHaveLength(3)
    expect(ids(q.take())).toEqual(['a-1', 'c-1', 'a-3'])
  })

  it('peeks at urgent envelopes only, up to a count and a byte budget (one at least, however big)', () => {
    const q = new PayloadQueue({ maxBlockEnvelopes: 10, maxBlockBytes: 1 << 20, maxQueued: 100, maxQueuedPerAuthor: 10 })
    expect(q.peekUrgent(4, 100)).toEqual([])
    const big = frame(500)
    q.add(frame(), info('a', 1), 0)
    q.add(big, info('a', 2, true), 0)
    q.add(frame(20), info('b', 1, true), 0)
    q.add(frame(30), info('b', 2, true), 0)
    expect(q.peekUrgent(4, 100)).toEqual([big])
    expect(q.peekUrgent(4, 1000).map((f) => f.length)).toEqual([500, 20, 30])
    expect(q.length).toBe(4)
    const r = new PayloadQueue({ maxBlockEnvelopes: 10, maxBlockBytes: 1 << 20, maxQueued: 100, maxQueuedPerAuthor: 10 })
    r.add(frame(), info('a', 1), 0)
    r.add(frame(20), info('b', 1, true), 0)
    r.add(frame(30), info('b', 2, true), 0)
    expect(r.peekUrgent(4, 100).map((f) => f.length)).toEqual([20, 30])
    expect(r.peekUrgent(1, 100).map((f) => f.length)).toEqual([20])
    expect(r.peekUrgent(4, 40).map((f) => f.length)).toEqual([20])
  })

  it('keeps the slot of a queued envelope past the GC round, so a twin never joins it in one block (sim seed 824)', () => {
    const q = new PayloadQueue({ maxBlockEnvelopes: 10, maxBlockBytes: 1 << 20, maxQueued: 100, maxQueuedPerAuthor: 10 })
    const twin: PayloadInfo = { ...info('a', 1), idHex: 'a-1-twin' }
    // Queued at a restarted relay's old clock round, which the GC passes while it catches up.
    expect(q.add(frame(), info('a', 1), 13)).toBe('queued')
    q.collect(31)
    expect(q.add(frame(), twin, 44)).toBe('conflict')
    expect(ids(q.take())).toEqual(['a-1'])
    // Once taken (in a block of ours), the slot goes with the GC as before.
    q.collect(50)
    expect(q.add(frame(), twin, 51)).toBe('queued')
  })
})
