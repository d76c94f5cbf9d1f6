import type { SimRelay } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import { ClosedError } from '../src/index.node.ts'
import type { Fetch } from '../src/transport/cluster.ts'
import { committing, simWorld } from './helpers/sim-world.ts'

/** Waits that end (timeouts, signals, quorums) and lifecycle edges, against real relays in simulated time. */
const world = simWorld()

describe('waits that end', () => {
  const reasonOf = async (p: Promise<unknown>): Promise<string> => p.then(() => 'resolved', (e: { reason?: string }) => e.reason ?? String(e))

  it('a safe update, flush, settled and a quorum read take timeoutMs and signal; the update keeps its place and commits later', async () => {
    const c = await world.cluster()
    for (const r of c.relays) await r.down()
    const a = await world.client(c)
    await c.until('offline problem', () => /0 of 4 relays connected, 2 needed/.test(a.status.problem ?? ''))
    expect(await reasonOf(a.counter('k').increment(5, { safe: true, timeoutMs: 50 }))).toBe('timeout')
    const ac = new AbortController()
    const aborted = a.safe((tx) => tx.counter('k').increment(2), { signal: ac.signal })
    ac.abort()
    expect(await reasonOf(aborted)).toBe('aborted')
    expect(await reasonOf(a.flush({ timeoutMs: 50 }))).toBe('timeout')
    expect(await reasonOf(a.settled({ timeoutMs: 50 }))).toBe('timeout')
    const gone = new AbortController()
    gone.abort()
    expect(await reasonOf(a.readStable('k', { quorum: true, signal: gone.signal }))).toBe('aborted')
    // Only the waits ended: both updates are still this client's, and commit once relays answer.
    expect(a.pendingUpdates().reduce((n, u) => n + u.safe, 0)).toBe(2)
    const settled: number[] = []
    a.onSettled((u) => settled.push(...u.safe.map((s) => (s.status === 'committed' ? 1 : 0))))
    for (const r of c.relays) await r.up()
    const stop = committing(c)
    await a.settled({ timeoutMs: 15_000 })
    stop()
    expect(settled).toEqual([1, 1])
    expect(a.counter('k').stable).toBe(7)
    expect(a.status.problem).toBeUndefined()
  })

  it('ends the promises of safe updates still pending at close with ClosedError, and an unawaited one harms nobody', async () => {
    const c = await world.cluster()
    for (const r of c.relays) await r.down()
    const a = await world.client(c)
    const awaited = a.counter('k').increment(1, { safe: true })
    void a.counter('k').increment(1, { safe: true }) // fire and forget
    const unhandled: unknown[] = []
    const trap = (e: unknown): void => void unhandled.push(e)
    process.on('unhandledRejection', trap)
    await a.close()
    expect(await reasonOf(awaited)).toBe('closed')
    // Node reports an unhandled rejection once the microtask queue has drained: one macrotask turn is enough.
    await new Promise((r) => setImmediate(r))
    process.off('unhandledRejection', trap)
    expect(unhandled).toEqual([])
  })

  it('a safe update resolves once 2f+1 relays attested its commit, not f+1 (then a quorum read anywhere sees it)', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    await c.until('online', () => a.status.online)
    // Relays 2 and 3 send no commits or attestations.
    const [, , r2, r3] = c.relays as [SimRelay, SimRelay, SimRelay, SimRelay]
    await r2.lie('withhold-commits')
    await r3.lie('withhold-commits')
    await c.until('online again', () => a.status.online)
    let outcome: unknown
    void a.counter('k').increment(4, { safe: true }).then((r) => (outcome = r))
    await a.flush()
    c.release()
    // f+1 relays attested it: the commit is applied and its value stable here, but the update waits.
    await c.until('applied', () => a.counter('k').stable === 4)
    await c.advance(100)
    expect(outcome).toBeUndefined()
    // A third relay attests it (its session comes up after the commit was applied, and is followed
    // from the commit still waited on): 2f+1, resolved.
    await r2.lie()
    r2.dropClients()
    await c.until('resolved', () => outcome !== undefined)
    expect(outcome).toMatchObject({ status: 'committed' })
  })

  it('a quorum read refuses a head that f+1 relays did not sign, and marks the relay that served it', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    await c.until('online', () => a.status.online)
    const stop = committing(c)
    await a.counter('k').increment(2, { safe: true })
    await c.relays[0]?.lie('inflate-head')
    // Taken at face value, head index + 5 would make the read wait for commits that never come.
    expect(await a.readStable('k', { quorum: true, timeoutMs: 5000 })).toBe(2)
    await c.until('liar flagged', () => a.status.relays[0]?.faulty !== undefined)
    expect(a.status.relays[0]?.faulty).toMatch(/f\+1 relays did not sign/)
    expect(a.status.relays.slice(1).every((r) => r.faulty === undefined)).toBe(true)
    stop()
  })

  it('a quorum read does not count a head signed for an earlier request (a replayed head)', async () => {
    const c = await world.cluster()
    const base = c.clientOptions().fetch as Fetch
    const a = await world.client(c, {
      // One relay out: the read has the liar's head and two honest ones, 2f+1 only while the liar's counts.
      fetch: (url) => (/relay1\.sim/.test(url) && url.includes('/head') ? Promise.reject(new TypeError('fetch failed')) : base(url)),
    })
    // Relay 0 serves the first head it signed again to every later read: genuine and fresh for the first.
    await c.relays[0]?.lie('replay-head')
    await c.until('online', () => a.status.online)
    const stop = committing(c)
    await a.counter('k').increment(1, { safe: true })
    expect(await a.readStable('k', { quorum: true, timeoutMs: 5000 })).toBe(1)
    expect(await reasonOf(a.readStable('k', { quorum: true, timeoutMs: 5000 }))).toBe('unsupported')
    stop()
  })

  it('a quorum read on a client that is behind takes the proven state of the object instead of waiting, and reports a relay whose proof leads elsewhere', async () => {
    const c = await world.cluster()
    // No relay but the liar sends commits, and one relay's attestations are not f+1: the reader stays at 0.
    for (const r of c.relays.slice(1)) await r.lie('withhold-commits')
    await c.relays[0]?.lie('wrong-object')
    const reader = await world.client(c)
    const writer = await world.client(c)
    await c.until('online', () => reader.status.online && writer.status.online)
    for (let i = 0; i < 5; i++) await writer.counter('k').increment(1)
    await writer.flush()
    // Left running: a head is proven by f+1 relays' signatures, which they gather over the mesh.
    c.release()
    await c.until('committed', () => c.relays.every((r) => r.stableValue('bank', 'k') === 5))
    const requestsBefore = c.relays.map((r) => r.requests.length)
    expect(await reader.readStable('k', { quorum: true, timeoutMs: 5000 })).toBe(5)
    expect(reader.counter('k').stable).toBe(0)
    expect(reader.status.relays[0]?.faulty).toMatch(/does not lead to the state hash/)
    expect(reader.status.relays.slice(1).every((r) => r.faulty === undefined)).toBe(true)
    expect(c.relays.flatMap((r, i) => r.requests.slice(requestsBefore[i]).filter((path) => path.includes('/objects/')).map(() => i))).toEqual([0, 1])
    // An object the space does not hold is proven absent.
    expect(await reader.readStable('nothing', { quorum: true, timeoutMs: 5000 })).toBeUndefined()
  })

  it('a quorum read completes on 2f+1 answers, without waiting for a relay that never answers', async () => {
    const c = await world.cluster()
    const base = c.clientOptions().fetch as Fetch
    const a = await world.client(c, {
      fetch: (url) => (url.includes('relay0') && url.includes('/head') ? new Promise(() => undefined) : base(url)),
    })
    const stop = committing(c)
    await a.counter('k').increment(3, { safe: true })
    const t0 = c.now
    expect(await a.readStable('k', { quorum: true, timeoutMs: 5000 })).toBe(3)
    expect(c.now - t0).toBeLessThan(2000)
    stop()
  })

  it('a relay whose answer never ends is cut off at the byte budget (the stream is cancelled) and the read completes from the others', async () => {
    const c = await world.cluster()
    let pulled = 0
    let cancelled = false
    const endless = (): Response =>
      new Response(
        new ReadableStream<Uint8Array>({
          pull(controller) {
            pulled += 1024 * 1024
            controller.enqueue(new Uint8Array(1024 * 1024).fill(0x20))
          },
          cancel() {
            cancelled = true
          },
        }),
      )
    const base = c.clientOptions().fetch as Fetch
    const a = await world.client(c, { fetch: (url) => (url.includes('relay0') && url.includes('/head') ? Promise.resolve(endless()) : base(url)) })
    const stop = committing(c)
    await a.counter('k').increment(3, { safe: true })
    expect(await a.readStable('k', { quorum: true, timeoutMs: 5000 })).toBe(3)
    await c.until('the endless answer cut off', () => cancelled)
    // The budget for a signed head (about 85 MiB), and a chunk or two read ahead.
    expect(pulled).toBeLessThanOrEqual(88 * 1024 * 1024)
    stop()
  })
})

describe('lifecycle edges (found in review)', () => {
  it('survives app callbacks that throw, and reports them through onError', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const errors: string[] = []
    a.onError((e) => errors.push(e.message))
    a.onSettled(() => {
      throw new Error('app bug in onSettled')
    })
    a.onStatus(() => {
      throw new Error('app bug in onStatus')
    })
    await c.until('online', () => a.status.online)
    const stop = committing(c)
    expect(await a.counter('k').increment(1, { safe: true })).toMatchObject({ status: 'committed' })
    expect(await a.counter('k').increment(2, { safe: true })).toMatchObject({ status: 'committed' })
    stop()
    expect(a.pendingUpdates()).toEqual([])
    expect(errors.some((m) => /onSettled listener threw/.test(m))).toBe(true)
    expect(errors.some((m) => /onStatus listener threw/.test(m))).toBe(true)
  })

  it('lets nothing in once close() is called, and closes of a space and its client wait for each other', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const closing = a.close()
    expect(() => a.counter('k')).toThrow(ClosedError)
    // Reopening waits for the close, then gives a new space on the same storage.
    const again = await world.owner(a).space('bank')
    expect(again).not.toBe(a)
    await closing
    void again.close()
    const owner = world.abandon(a)
    await owner.close() // waits for the space's close, which still writes to the storage
    expect(again.status.problem).toBe('closed')
    expect(again.status.online).toBe(false)
  })

  it('bounds safe bounded-counter spends that need the pool by signal and timeoutMs', async () => {
    const c = await world.cluster()
    for (const r of c.relays) await r.down()
    const a = await world.client(c)
    const seats = a.boundedCounter('seats', { min: 0, initial: 10 })
    await expect(seats.decrement(5, { safe: true, timeoutMs: 50 })).rejects.toMatchObject({ reason: 'timeout' })
  })

  it('never trusts a descriptor one relay serves alone, even when the app lists only some relays', async () => {
    const c = await world.cluster()
    const liar = c.descriptor
    const lie = { f: 0, relays: [liar.relays[0]] }
    const urls = c.urls.slice(0, 3)
    const base = c.clientOptions().fetch as Fetch
    const fetchLying: Fetch = async (url) => (url.includes('relay0') && url.endsWith('/v1/cluster') ? { ok: true, status: 200, json: async () => lie } : base(url))
    const a = await world.client(c, { relays: urls, cluster: undefined, fetch: fetchLying })
    await c.until('a problem', () => /cluster not trusted yet/.test(a.status.problem ?? ''))
    expect(a.status.trusted).toBe(false)
  })
})
