/** Runs inside Chromium for bench/browser.ts: the SDK's browser build against the page's real IndexedDB. */
import { createClient, indexedDbStorage, type ClientOptions } from '../src/index.ts'

function fromBase64(s: string): Uint8Array {
  const bin = atob(s)
  const out = new Uint8Array(bin.length)
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i)
  return out
}

const bench = {
  /** Writes a client's stored records (made in Node) into this origin's IndexedDB. */
  async load(name: string, entries: Array<[string[], string]>): Promise<void> {
    const storage = await indexedDbStorage(name)
    await storage.removeRange([])
    await storage.write(entries.map(([key, value]) => ({ key, value: fromBase64(value) })))
    await storage.close()
  },

  /** Opens a client from that database and reads every counter: the time an app waits before it can show its data. */
  async open(name: string, options: Omit<ClientOptions, 'storage'>, keys: string[]): Promise<{ ms: number; values: number[]; crypto: string }> {
    const t0 = performance.now()
    const clientOwner = await createClient({ ...options, storage: indexedDbStorage(name) })
    const client = await clientOwner.space('bench')
    const values = keys.map((k) => client.counter(k).stable)
    const ms = performance.now() - t0
    await clientOwner.close()
    const { defaultCrypto } = await import('@stead/core')
    return { ms, values, crypto: (await defaultCrypto()).name }
  },

  /** Times updates until they are visible in `value` and to a subscriber. */
  async visibility(options: Omit<ClientOptions, 'storage'>, n: number): Promise<{ p50: number; p99: number; max: number }> {
    const clientOwner = await createClient({ ...options, storage: indexedDbStorage(`visibility-${Math.random()}`) })
    const client = await clientOwner.space('bench')
    const counter = client.counter('hits')
    let heard = 0
    counter.subscribe(() => heard++)
    const times: number[] = []
    for (let i = 0; i < n; i++) {
      const t0 = performance.now()
      void counter.increment(1)
      if (counter.value !== i + 1 || heard < i + 1) throw new Error('update not visible')
      times.push(performance.now() - t0)
      if (i % 500 === 499) await new Promise((r) => setTimeout(r, 0))
    }
    await clientOwner.close()
    times.sort((a, b) => a - b)
    return { p50: times[Math.floor(n * 0.5)] as number, p99: times[Math.floor(n * 0.99)] as number, max: times[n - 1] as number }
  },
}

Object.assign(globalThis, { steadBench: bench })
