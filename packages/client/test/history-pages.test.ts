import { encode } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { sharedNewest } from '../src/upstream/history-pages.ts'

const page = (relay: number, indexes: readonly number[], value = (i: number): unknown => `v${i}`) => ({ relay, entries: encode(indexes.map((i) => [i, value(i)])) })

describe('history pages relays pruned to different depths', () => {
  it('gives the newest entries f+1 relays served alike, and nothing a lone relay made up', () => {
    const answers = [
      page(0, [10, 9, 8, 7, 6, 5]),
      page(1, [10, 9, 8, 7, 6]),
      page(2, [10, 9, 8]),
      // A liar: its own 8, and itself again under another answer.
      page(3, [10, 9, 8, 7, 6, 5], (i) => (i === 8 ? 'forged' : `v${i}`)),
      page(3, [10, 9, 8, 7, 6, 5]),
    ]
    expect(sharedNewest(answers, 2)).toEqual({ pairs: [10, 9, 8, 7, 6].map((i) => [i, `v${i}`]), bytes: expect.any(Number), more: false })
    expect(sharedNewest(answers, 3)).toEqual({ pairs: [10, 9, 8].map((i) => [i, `v${i}`]), bytes: expect.any(Number), more: false })
    expect(sharedNewest([page(0, [3, 2]), page(1, [4, 3])], 2)).toBeUndefined()
    expect(sharedNewest([page(0, [3]), { relay: 1, entries: new Uint8Array([0xc1]) }], 2)).toBeUndefined()
  })
})
