/**
 * Safe updates have a default timeout (60 s, the client's safeTimeoutMs),
 * `timeoutMs: Infinity` waits for ever, and a timeout says what was
 * missing (relays connected against the quorum needed, which relays are
 * down and why) and that the update is not lost.
 */
import { SimCluster } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import { createClient, type ClientOptions, type SafeResult, type Space, type SteadClient } from '../src/index.node.ts'

const open: SteadClient[] = []
const clusters: SimCluster[] = []
afterEach(async () => {
  for (const c of open.splice(0)) await c.close()
  for (const c of clusters.splice(0)) await c.close()
})

/** Real relays in simulated time, the first `up` of them running. */
async function cluster(up = 4): Promise<SimCluster> {
  const c = await SimCluster.start()
  clusters.push(c)
  for (const r of c.relays.slice(up)) await r.down()
  return c
}

async function client(c: SimCluster, extra: Partial<ClientOptions> = {}): Promise<Space> {
  const cl = await createClient(c.clientOptions(extra))
  open.push(cl)
  return cl.space('bank')
}


/** Follows a promise: 'pending' until it settles, then how. */
function watch(p: Promise<unknown>): { state: string; error?: unknown } {
  const w: { state: string; error?: unknown } = { state: 'pending' }
  p.then(
    () => (w.state = 'resolved'),
    (e: unknown) => {
      w.state = 'rejected'
      w.error = e
    },
  )
  return w
}

describe('safe updates: a default timeout that says why', () => {
  it('with only f relays up, a safe update times out by the client default, saying 1 of 4 connected, 2 needed, which relays are down and why, and that it may still commit; it does commit later', async () => {
    // f = 1: one relay up, three refuse connections.
    const c = await cluster(1)
    const a = await client(c, { safeTimeoutMs: 100 })
    await c.until('one relay connected', () => a.status.relays.filter((r) => r.connected).length === 1 && a.status.relays.filter((r) => r.error).length === 3)

    const err = await a.counter('k').increment(5, { safe: true }).then(
      () => undefined,
      (e: unknown) => e as Error & { reason: string },
    )
    expect(err?.reason).toBe('timeout')
    const message = err?.message ?? ''
    expect(message).toContain('timed out after 100 ms waiting for an update of k')
    expect(message).toContain('no quorum: 1 of 4 relays connected, 2 needed')
    for (const i of [1, 2, 3]) expect(message).toContain(`ws://relay${i}.sim (cannot connect)`)
    expect(message).not.toContain('relay0.sim')
    expect(message).toContain('The update is not lost: it stays pending (pendingUpdates()) and may still commit (onSettled)')
    expect(message).toContain('timeoutMs: Infinity')

    // A safe group says the same.
    await expect(a.safe((tx) => tx.counter('k').increment(1))).rejects.toMatchObject({ reason: 'timeout', message: expect.stringContaining('waiting for a safe transaction: no quorum: 1 of 4 relays connected, 2 needed') })

    // What the message says holds: the update kept its place and commits once relays are back.
    expect(a.pendingUpdates().reduce((n, u) => n + u.safe, 0)).toBe(2)
    const settled: SafeResult[] = []
    a.onSettled((u) => settled.push(...u.safe))
    for (const r of c.relays) await r.up()
    await a.settled({ timeoutMs: 15_000 })
    expect(settled.map((s) => s.status)).toEqual(['committed', 'committed'])
    expect(a.counter('k').stable).toBe(6)
  })

  it('with no relay up, the timeout says 0 connected and lists every relay', async () => {
    const c = await cluster(0)
    const a = await client(c, { safeTimeoutMs: 50 })
    await c.until('relays refusing', () => a.status.relays.every((r) => r.error !== undefined))
    await expect(a.counter('k').decrement(1, { safe: true })).rejects.toMatchObject({
      reason: 'timeout',
      message: expect.stringMatching(/no quorum: 0 of 4 relays connected, 2 needed.*down: ws:\/\/relay0\.sim \(cannot connect\), ws:\/\/relay1.*ws:\/\/relay3\.sim \(cannot connect\)\. The update is not lost/),
    })
  })

  it('connected but the cluster does not commit: says so rather than blaming the connection', async () => {
    const c = await cluster()
    const a = await client(c, { safeTimeoutMs: 50 })
    await c.until('online', () => a.status.online)
    // Nothing commits (no relay reaches another): the relays have it but never decide.
    c.hold()
    await expect(a.counter('k').increment(1, { safe: true })).rejects.toMatchObject({
      reason: 'timeout',
      message: expect.stringContaining('connected to 4 of 4 relays, but the cluster has not committed it yet'),
    })
  })

  it('without timeoutMs or safeTimeoutMs waits 60 s, then times out; timeoutMs: Infinity is still pending long after', async () => {
    const c = await cluster(0)
    const a = await client(c)
    await c.until('offline', () => a.status.relays.every((r) => r.error !== undefined))
    const byDefault = watch(a.counter('k').increment(1, { safe: true }))
    const forEver = watch(a.counter('k').increment(2, { safe: true, timeoutMs: Number.POSITIVE_INFINITY }))
    const group = watch(a.safe((tx) => tx.counter('k').increment(3), { timeoutMs: Number.POSITIVE_INFINITY }))
    await c.advance(59_990)
    expect(byDefault.state).toBe('pending')
    await c.advance(20)
    expect(byDefault.state).toBe('rejected')
    expect(byDefault.error).toMatchObject({ reason: 'timeout', message: expect.stringContaining('timed out after 60000 ms') })
    // Ten minutes on: the ones told to wait for ever still wait.
    await c.advance(600_000)
    expect(forEver.state).toBe('pending')
    expect(group.state).toBe('pending')
    expect(a.pendingUpdates().reduce((n, u) => n + u.safe, 0)).toBe(3)
  })

  it('safeTimeoutMs: Infinity on the client makes every safe update wait for ever unless the call says otherwise', async () => {
    const c = await cluster(0)
    const a = await client(c, { safeTimeoutMs: Number.POSITIVE_INFINITY })
    await c.until('offline', () => a.status.relays.every((r) => r.error !== undefined))
    const forEver = watch(a.counter('k').increment(1, { safe: true }))
    const bounded = watch(a.counter('k').increment(1, { safe: true, timeoutMs: 1000 }))
    await c.advance(3_600_000)
    expect(forEver.state).toBe('pending')
    expect(bounded.state).toBe('rejected')
  })
})

describe('a fire-and-forget safe update', () => {
  it('that times out by the default harms nobody (no unhandled rejection)', async () => {
    const c = await cluster(0)
    const a = await client(c, { safeTimeoutMs: 20 })
    const unhandled: unknown[] = []
    const trap = (e: unknown): void => void unhandled.push(e)
    process.on('unhandledRejection', trap)
    void a.counter('k').increment(1, { safe: true })
    // A second one, awaited, times out after the first did.
    await expect(a.counter('k').increment(1, { safe: true, timeoutMs: 40 })).rejects.toMatchObject({ reason: 'timeout' })
    await new Promise((r) => setImmediate(r))
    process.off('unhandledRejection', trap)
    expect(unhandled).toEqual([])
  })
})
