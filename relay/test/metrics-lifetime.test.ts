import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { describe, expect, it } from 'vitest'
import { Metrics } from '../src/runtime/metrics.ts'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

/** Until the next macrotask: a WeakRef holds its target until the job that read it ends. */
const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

describe('Metrics lifetime', () => {
  it('a relay run that stopped is not kept alive by the process metrics (a process runs one relay per epoch)', async () => {
    // Made and scraped in a function of their own: nothing of this test's frame holds them.
    const run = async (i: number): Promise<WeakRef<Metrics>> => {
      const m = new Metrics(`r${i}`, () => 0)
      m.includeProcess()
      // Scraped once, as /metrics does: the process's metrics follow the relay's.
      expect(await m.text()).toMatch(/^nodejs_heap_size_used_bytes \S+$/m)
      return new WeakRef(m)
    }
    const refs = [await run(0), await run(1), await run(2)]
    await tick()
    gc()
    await tick()
    gc()
    expect(refs.map((r) => r.deref() === undefined)).toEqual([true, true, true])
  })
})
