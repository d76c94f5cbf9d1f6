import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { decodeStateDelta } from '@stead/core'
import type { SimCluster, SimClusterOptions, SimRelay } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import { lmdbStorage, type Space } from '../src/index.node.ts'
import { fromHome } from '../src/upstream/outbox.ts'
import { commitUntil, committing, simWorld } from './helpers/sim-world.ts'

/** A client that starts or comes back far behind: verified snapshots and deltas from real relays in simulated time. */
const world = simWorld()

/** From now on: the commits relays send their clients, and the HTTP requests they are sent (which relay, which path). */
function mark(c: SimCluster): { commits(): number; requests(): Array<{ relay: number; path: string }> } {
  const commits = c.relays.map((r) => r.traffic.commits)
  const requests = c.relays.map((r) => r.requests.length)
  return {
    commits: () => c.relays.reduce((n, r, i) => n + r.traffic.commits - (commits[i] as number), 0),
    requests: () => c.relays.flatMap((r, i) => r.requests.slice(requests[i]).map((path) => ({ relay: i, path }))),
  }
}

describe('starting from a verified snapshot', () => {
  /** A cluster whose space holds `n` committed increments of 'acct' and a set, made by one client. */
  async function history(n: number, options: SimClusterOptions = {}): Promise<{ c: SimCluster; writer: Space }> {
    const c = await world.cluster(options)
    const writer = await world.client(c)
    const acct = writer.counter('acct')
    // One safe update at a time: a history of n + 1 commits.
    const stop = committing(c)
    for (let i = 0; i < n; i++) await acct.increment(1, { safe: true })
    await writer.set('tags').add('x', { safe: true })
    stop()
    await c.until('history stable at the writer', () => acct.stable === n && writer.set('tags').stable.length === 1)
    expect(c.relays[0]?.node.reads.stableHead('bank').index).toBeGreaterThan(n)
    return { c, writer }
  }

  /** The relay a client of space 'bank' asks first. */
  const home = (c: SimCluster): number => fromHome('bank', c.relays.length, c.relays.map((r) => ({ relay: r.index })) as never)[0]!.relay as number

  it('a client with nothing stored starts at the latest snapshot f+1 relays vouch for, replays no earlier commit, and follows from there', async () => {
    const { c, writer } = await history(40)
    // The others are farther: the home relay is the first the reader can ask.
    for (const r of c.relays) if (r.index !== home(c)) r.connectDelayMs = 50
    const seen = mark(c)
    const reader = await world.client(c)
    await c.until('reader at the writer state', () => reader.counter('acct').stable === 40 && reader.set('tags').stable.length === 1)
    expect(seen.commits()).toBe(0)
    expect(seen.requests().filter((q) => q.path.endsWith('/snapshot'))).toEqual([{ relay: home(c), path: '/v1/spaces/bank/snapshot' }])
    expect(new Set(seen.requests().filter((q) => q.path.includes('/attestations/')).map((q) => q.relay)).size).toBeGreaterThanOrEqual(c.f)
    expect(reader.status.relays.every((r) => r.faulty === undefined)).toBe(true)
    // It follows the commits after the snapshot, and its own updates decide as usual.
    const mine = reader.counter('acct').increment(2, { safe: true })
    void writer.counter('acct').increment(3)
    await commitUntil(c, 'both decided', () => reader.counter('acct').stable === 45 && writer.counter('acct').stable === 45)
    expect(await mine).toMatchObject({ status: 'committed' })
  })

  it('a client back after the relays pruned past its position starts again from a verified snapshot, its own envelope decided meanwhile settled', async () => {
    // Relays that keep only the last few commits for resuming clients, pruned with each snapshot.
    const { c, writer } = await history(5, { relay: { retention: { updates: 4 }, snapshotEveryBatches: 2 } })
    const dir = mkdtempSync(join(tmpdir(), 'stead-client-'))
    const away = await world.client(c, { storage: lmdbStorage(dir) })
    await c.until('caught up', () => away.counter('acct').stable === 5)
    const position = away.status.stableIndex
    // Sent and queued, then the app closes before it commits.
    void away.counter('acct').increment(100).catch(() => undefined)
    await c.until('queued at the relays', () => [...c.submitted.values()].some((e) => e.authorId === away.authorId))
    await world.shutdown(away)
    const stop = committing(c)
    for (let i = 0; i < 10; i++) await writer.counter('acct').increment(1, { safe: true })
    await c.until('every relay pruned past it', () => c.relays.every((r) => (r.node.reads.feedStart('bank') ?? 0) > position))
    stop()
    const seen = mark(c)
    const back = await world.client(c, { storage: lmdbStorage(dir) })
    await c.until('back at the stable state', () => back.counter('acct').stable === 115 && back.status.pending === 0)
    expect(back.counter('acct').value).toBe(115)
    expect(seen.requests().some((q) => q.path.endsWith('/snapshot'))).toBe(true)
    expect(back.status.problem).toBeUndefined()
  })

  /**
   * A client stored at the writer's state (a counter and a set of 20 long elements), closed while
   * the writer adds `hot` increments to the counter and one element to the set.
   */
  async function awayWhile(hot: number): Promise<{ c: SimCluster; writer: Space; dir: string; at: number; seen: ReturnType<typeof mark> }> {
    const { c, writer } = await history(3)
    const stop = committing(c)
    for (let i = 0; i < 20; i++) await writer.set('cold').add(`element ${i} of a set whose state outweighs one op`, { safe: true })
    const dir = mkdtempSync(join(tmpdir(), 'stead-client-'))
    const away = await world.client(c, { storage: lmdbStorage(dir) })
    await c.until('caught up', () => away.counter('acct').stable === 3 && away.set('cold').stable.length === 20)
    const at = away.status.stableIndex
    await world.shutdown(away)
    for (let i = 0; i < hot; i++) await writer.counter('acct').increment(1, { safe: true })
    await writer.set('cold').add('one more', { safe: true })
    await c.until('every relay at the writer', () => c.relays.every((r) => r.node.reads.stableHead('bank').index === writer.status.stableIndex))
    stop()
    return { c, writer, dir, at, seen: mark(c) }
  }

  it('a client back after a while catches up by a delta f+1 relays vouch for (the hot counter as its state, the cold one as ops), not commit by commit', async () => {
    const { c, writer, dir, at, seen } = await awayWhile(20)
    const served = c.relays[0]?.node.reads.stateDelta('bank', at)
    const delta = decodeStateDelta((served as { delta: Uint8Array }).delta, (signed) => ({ signed }) as never)
    // BENDY's rule on what the relay serves: 20 ops outweigh the counter's state; one op does not.
    expect(delta.objects.map((o) => [o.key, o.mode])).toEqual([
      ['acct', 'state'],
      ['cold', 'ops'],
    ])
    const back = await world.client(c, { storage: lmdbStorage(dir) })
    await c.until('back at the stable state', () => back.counter('acct').stable === 23 && back.set('cold').stable.length === 21)
    expect(seen.requests().filter((q) => q.path.endsWith('/delta'))).toHaveLength(1)
    expect(seen.commits()).toBe(0)
    await c.until('online', () => back.status.online)
    expect(back.status.problem).toBeUndefined()
    // It follows the commits after the delta, and its own updates decide as usual.
    const mine = back.counter('acct').increment(2, { safe: true })
    await commitUntil(c, 'decided', () => back.counter('acct').stable === 25 && writer.counter('acct').stable === 25)
    expect(await mine).toMatchObject({ status: 'committed' })
  })

  it('refuses a relay that serves a delta leading elsewhere, reports it, and catches up from a true one', async () => {
    const { c, dir, seen } = await awayWhile(12)
    const liar = c.relays[home(c)] as SimRelay
    await liar.lie('wrong-delta')
    // The others are farther: the liar is the first relay the client can ask.
    for (const r of c.relays) if (r !== liar) r.connectDelayMs = 50
    const back = await world.client(c, { storage: lmdbStorage(dir) })
    await c.until('liar reported', () => back.status.relays[liar.index]?.faulty !== undefined)
    expect(back.status.relays[liar.index]?.faulty).toMatch(/delta that proves nothing/)
    await c.until('back at the true state', () => back.counter('acct').stable === 15 && back.set('cold').stable.length === 21)
    expect(back.counter('acct').value).toBe(15)
    expect(seen.commits()).toBe(0)
  })

  it('follows the commits instead of a delta that would decide its own envelope (only commits say how a safe update fared)', async () => {
    const { c, writer } = await history(3)
    const dir = mkdtempSync(join(tmpdir(), 'stead-client-'))
    const away = await world.client(c, { storage: lmdbStorage(dir) })
    await c.until('caught up', () => away.counter('acct').stable === 3)
    void away.counter('acct').decrement(3, { safe: true }).catch(() => undefined)
    await c.until('queued at the relays', () => [...c.submitted.values()].some((e) => e.authorId === away.authorId))
    await world.shutdown(away)
    const stop = committing(c)
    for (let i = 0; i < 5; i++) await writer.counter('acct').increment(1, { safe: true })
    stop()
    const seen = mark(c)
    const back = await world.client(c, { storage: lmdbStorage(dir) })
    await c.until('back at the stable state', () => back.counter('acct').stable === 5 && back.status.pending === 0)
    expect(seen.requests().some((q) => q.path.endsWith('/delta'))).toBe(true)
    expect(seen.commits()).toBeGreaterThan(0)
  })

  it('after every session was lost it catches up by delta, and compact attestations of the rounds it skipped are not held against honest relays', async () => {
    const c = await world.cluster()
    const writer = await world.client(c)
    const reader = await world.client(c)
    await writer.counter('acct').increment(1)
    await commitUntil(c, 'reader follows', () => reader.counter('acct').stable === 1)
    // The reader's frame source goes quiet for one round: the others' compact attestations of it wait, unmatched.
    const source = c.relays.find((r) => r.sendsFramesTo(reader.authorId)) as SimRelay
    await source.lie('withhold-commits')
    await writer.counter('acct').increment(1)
    await writer.flush()
    await commitUntil(c, 'committed at every relay', () => c.relays.every((r) => r.stableValue('bank', 'acct') === 2))
    await c.advance(30)
    for (const r of c.relays) await r.down()
    await c.until('offline', () => !reader.status.online)
    await source.lie()
    const seen = mark(c)
    for (const r of c.relays) await r.up()
    await c.until('caught up', () => reader.counter('acct').stable === 2)
    expect(seen.requests().filter((q) => q.path.endsWith('/delta')).length).toBeGreaterThan(0)
    await writer.counter('acct').increment(1)
    await commitUntil(c, 'the next commit applied', () => reader.counter('acct').stable === 3)
    expect(reader.status.relays.filter((r) => r.faulty !== undefined)).toEqual([])
  })

  for (const mode of ['forge-snapshot', 'mismatched-snapshot'] as const) {
    it(`refuses a relay that serves a forged snapshot (${mode}), reports it, and starts from a true one`, async () => {
      const { c } = await history(12)
      const liar = c.relays[home(c)] as SimRelay
      await liar.lie(mode)
      // The others are farther: the liar is the first relay the reader can ask.
      for (const r of c.relays) if (r !== liar) r.connectDelayMs = 50
      const seen = mark(c)
      const reader = await world.client(c)
      await c.until('liar reported', () => reader.status.relays[liar.index]?.faulty !== undefined)
      expect(reader.status.relays[liar.index]?.faulty).toMatch(mode === 'forge-snapshot' ? /attested differently/ : /does not match the state hash/)
      await c.until('reader at the true state', () => reader.counter('acct').stable === 12)
      // It never showed the forged 13, and it still did not replay history.
      expect(reader.counter('acct').value).toBe(12)
      expect(seen.requests().filter((q) => q.path.endsWith('/snapshot')).length).toBe(2)
      expect(seen.commits()).toBe(0)
    })
  }
})
