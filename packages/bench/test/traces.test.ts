import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { steadText } from '../src/docs/stead.ts'
import { loadTrace, replayConcurrent, replaySequential, type ConcurrentTrace, type SequentialTrace } from '../src/docs/traces.ts'

const fixture = (name: string): string => join(import.meta.dirname, 'fixtures', name)

describe('real editing traces replay to their end content', () => {
  for (const name of ['automerge-paper-20k.json.gz', 'seph-blog1-10k.json.gz']) {
    it(`${name}: one replica`, () => {
      const trace = loadTrace(fixture(name)) as SequentialTrace
      expect(trace.kind).toBe('sequential')
      const r = steadText()
      replaySequential(trace, r)
      expect(r.text()).toBe(trace.endContent)
      // Its snapshot loads back to the same text.
      expect(r.crdt.clone().value()).toBe(trace.endContent)
    })
  }

  it('friendsforever: two replicas fork and merge as its parents say, and both end at its end content', () => {
    const trace = loadTrace(fixture('friendsforever.json.gz')) as ConcurrentTrace
    expect(trace.kind).toBe('concurrent')
    const [a, b] = replayConcurrent(trace, steadText)
    expect(a?.text()).toBe(trace.endContent)
    expect(b?.text()).toBe(trace.endContent)
  })
})
