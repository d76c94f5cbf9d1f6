import { describe, expect, it } from 'vitest'
import { MeshBudget, type Throttled } from '../src/mesh/budget.ts'

/**
 * The per-block budget of a peer's `blocks` messages (issue 51's flood, round
 * two): a block is an answer only to what this relay asked of that peer, by
 * digest for a fetch and by count for a pull; everything else is charged to
 * the peer's small unrequested-block budget, and past it not opened.
 */
describe('MeshBudget: which blocks of a peer are opened', () => {
  const now = () => 1_000
  function budget(maxAnswerCredit = 4_000) {
    const throttled: Throttled[] = []
    const b = new MeshBudget<unknown>(4, now, (t) => throttled.push(t), { unrequestedBlocks: { perSecond: 1, burst: 2, bytesPerSecond: 1e9, burstBytes: 1e9 }, maxAnswerCredit })
    return { b, throttled }
  }

  it('opens a fetched digest once, and any other block only from the unrequested budget', () => {
    const { b, throttled } = budget()
    b.fetchedFrom(1, ['aa', 'bb'])
    const gate = b.blockGate(1)
    expect(gate('aa')).toBe(true)
    expect(gate('bb')).toBe(true)
    // Asked once, answered once: the same digest again is unrequested, like any made-up one.
    expect(gate('aa')).toBe(true)
    expect(gate('cc')).toBe(true)
    expect(gate('dd')).toBe(false)
    expect(gate('ee')).toBe(false)
    // Told once per message, not per block.
    expect(throttled).toEqual([{ peer: 1, kind: 'blocks', why: 'rate' }])
    // What was fetched from one peer is not credit with another.
    b.fetchedFrom(2, ['ff'])
    expect(b.blockGate(1)('ff')).toBe(false)
    expect(b.blockGate(2)('ff')).toBe(true)
  })

  it('fetching a thousand digests of a peer lets it send only those blocks, not a thousand others', () => {
    const { b } = budget()
    b.fetchedFrom(1, Array.from({ length: 1_000 }, (_, i) => `asked${i}`))
    const gate = b.blockGate(1)
    const opened = Array.from({ length: 1_000 }, (_, i) => gate(`other${i}`)).filter(Boolean).length
    expect(opened).toBe(2)
    expect(gate('asked7')).toBe(true)
  })

  it('a pull lets the peer send that many blocks of any digest', () => {
    const { b } = budget()
    b.pulledFrom(1, 3)
    const gate = b.blockGate(1)
    expect([gate('a'), gate('b'), gate('c')]).toEqual([true, true, true])
    // Then the unrequested budget (2), then nothing.
    expect([gate('d'), gate('e'), gate('f')]).toEqual([true, true, false])
  })

  it('keeps at most maxAnswerCredit fetched digests and pulled blocks per peer, forgetting the oldest asks', () => {
    const { b } = budget(2)
    b.fetchedFrom(1, ['a', 'b', 'c'])
    b.pulledFrom(1, 10)
    b.pulledFrom(1, 10)
    const gate = b.blockGate(1)
    expect([gate('c'), gate('b')]).toEqual([true, true])
    // 'a' went out of the fetched set: it costs a pulled block (2 of them), then the unrequested budget.
    expect([gate('a'), gate('x'), gate('y'), gate('z'), gate('w')]).toEqual([true, true, true, true, false])
  })

  it('drops a blocks message unread when nothing was asked of the peer and its unrequested budget is spent', () => {
    const { b, throttled } = budget()
    expect(b.mayOpenBlocks(1, 500)).toBe(true)
    const gate = b.blockGate(1)
    gate('a')
    gate('b')
    expect(b.mayOpenBlocks(1, 500)).toBe(false)
    // An empty answer ends a pull: it always passes.
    expect(b.mayOpenBlocks(1, 0)).toBe(true)
    expect(throttled.length).toBe(1)
    b.fetchedFrom(1, ['c'])
    expect(b.mayOpenBlocks(1, 500)).toBe(true)
  })
})
