import { readFileSync } from 'node:fs'
import { fromHex, toHex, verifyClockCertificate } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestCluster, until } from '@stead/relay/testing'
import { createClient, memoryStorage, type ClientOptions, type SafeResult, type Space, type SteadClient } from '../src/index.node.ts'

/**
 * The SDK against real relay processes over real WebSockets: several
 * clients withdraw from and transfer between shared accounts at once, with
 * one relay running a Byzantine strategy.
 */
describe('clients against a real relay cluster', () => {
  let cluster: TestCluster
  const clients: Space[] = []
  const owners: SteadClient[] = []
  /** A new client (closed after the tests) and its space `name`. */
  const open = async (name: string, options: ClientOptions): Promise<Space> => {
    const client = await createClient(options)
    owners.push(client)
    return client.space(name)
  }
  const ACCOUNTS = ['acct:0', 'acct:1', 'acct:2']

  /** The only key that may read and write the space 'vault'. */
  const owner = { secretKey: new Uint8Array(32).fill(77) }

  beforeAll(async () => {
    cluster = await TestCluster.create(4, { openSpaces: true, spaces: { vault: { writers: [toHex(publicKeyOfSync(owner.secretKey))], readers: [] } } })
    await cluster.startAll((i) => (i === 3 ? ['--byzantine', 'equivocate'] : []))
  }, 90_000)

  afterAll(async () => {
    for (const c of owners) await c.close()
    await cluster?.stopAll()
  })

  const urls = (): string[] => cluster.relays.map((r) => `ws://${r.api}`)

  it('never lets a stable balance go below its minimum, converges, and conserves money', async () => {
    const file = JSON.parse(readFileSync(cluster.clusterPath, 'utf8')) as unknown
    // One client trusts on first use; the others are given the cluster file.
    for (let i = 0; i < 3; i++) {
      clients.push(await open('bank', { relays: urls(), storage: memoryStorage(), ...(i === 0 ? {} : { cluster: file }) }))
    }
    await until('clients online', () => (clients.every((c) => c.status.online) ? true : undefined), 30_000)

    let belowMin = 0
    for (const c of clients) {
      for (const key of ACCOUNTS) {
        const h = c.counter(key, { min: 0 })
        h.subscribe(() => {
          if (h.stable < 0) belowMin++
        })
      }
    }
    const [first] = clients as [Space]
    for (const key of ACCOUNTS) await first.counter(key, { min: 0 }).increment(100)
    await first.flush()
    await until('deposits stable', () => (clients.every((c) => ACCOUNTS.every((k) => c.counter(k, { min: 0 }).stable === 100)) ? true : undefined), 30_000)

    // Deterministic pseudo-random plan per client: withdrawals that together far exceed the balances, and transfers.
    let seed = 42
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    const withdrawals: Array<{ amount: number; result: Promise<SafeResult> }> = []
    const transfers: Array<Promise<SafeResult>> = []
    for (let round = 0; round < 8; round++) {
      for (const c of clients) {
        const from = ACCOUNTS[rand(3)] as string
        const amount = 10 + rand(40)
        withdrawals.push({ amount, result: c.counter(from, { min: 0 }).decrement(amount, { safe: true }) })
        const to = ACCOUNTS[rand(3)] as string
        if (to !== from) {
          const x = 5 + rand(30)
          transfers.push(
            c.safe((tx) => {
              tx.counter(from).decrement(x)
              tx.counter(to).increment(x)
            }),
          )
        }
      }
    }
    const wResults = await Promise.all(withdrawals.map((w) => w.result))
    const tResults = await Promise.all(transfers)
    const committed = wResults.filter((r) => r.status === 'committed').length
    const rejected = wResults.filter((r) => r.status === 'rejected')
    expect(committed).toBeGreaterThan(0)
    expect(rejected.length).toBeGreaterThan(0) // 24 withdrawals of 10..49 from 300 cannot all fit
    for (const r of rejected) expect(r).toMatchObject({ reason: 'invariant' })
    for (const r of tResults) expect(['committed', 'rejected']).toContain(r.status)

    for (const c of clients) await c.flush()
    // Everyone reaches the same stable index, then prospective equals stable (G5).
    await until(
      'identical stable states',
      () => {
        const index = clients[0]?.status.stableIndex
        return clients.every((c) => c.status.stableIndex === index && c.status.pending === 0) ? true : undefined
      },
      30_000,
    )
    const stableOf = (c: Space): number[] => ACCOUNTS.map((k) => c.counter(k, { min: 0 }).stable)
    const reference = stableOf(first)
    for (const c of clients) {
      expect(stableOf(c)).toEqual(reference)
      expect(ACCOUNTS.map((k) => c.counter(k, { min: 0 }).value)).toEqual(reference)
    }
    for (const v of reference) expect(v).toBeGreaterThanOrEqual(0)
    expect(belowMin).toBe(0)
    // Transfers move money, withdrawals remove exactly what committed.
    const withdrawn = wResults.reduce((sum, r, i) => sum + (r.status === 'committed' ? (withdrawals[i] as { amount: number }).amount : 0), 0)
    expect(reference.reduce((a, b) => a + b, 0)).toBe(300 - withdrawn)
    // And the quorum read agrees with what the relays hold.
    expect(await first.readStable('acct:0', { quorum: true })).toBe(reference[0])
    // Relays reach that index on their own schedule (a relay may decide the last commit a moment later).
    const index = first.status.stableIndex
    const heads = await until(
      'relays at the clients\' stable index',
      async () => {
        const hs = await Promise.all([0, 1, 2].map((i) => cluster.json<{ index: number; stateHash: string }>(i, '/v1/spaces/bank/head')))
        return hs.every((h) => h.index === index) ? hs : undefined
      },
      30_000,
    )
    expect(new Set(heads.map((h) => h.stateHash)).size).toBe(1)
  }, 120_000)

  it('reads a space with readers and multi-MiB history (commits sent in several frames), and refuses other keys', async () => {
    // 8 writes of 500 KB in one flush: the commits that order them are sent in several frames.
    const writer = await open('vault', { relays: urls(), storage: memoryStorage(), identity: owner, maxBatchOps: 1 })
    clients.push(writer)
    const big = (i: number) => new Uint8Array(500_000).fill(i)
    await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map((i) => writer.register(`doc:${i}`).set(big(i))))
    await writer.flush()
    await until('the writes stable', () => (writer.status.stableIndex >= 8 ? true : undefined), 60_000)
    // A second client with the same key starts from nothing and gets the whole history.
    const again = await open('vault', { relays: urls(), storage: memoryStorage(), identity: owner })
    clients.push(again)
    await until('the history', () => (again.status.stableIndex >= 8 ? true : undefined), 60_000)
    expect((again.register('doc:8').stable as Uint8Array).length).toBe(500_000)
    expect(await again.readStable('doc:1', { quorum: true })).toEqual(big(1))
    // Another key is refused the subscription: it never gets the history.
    const outsider = await open('vault', { relays: urls(), storage: memoryStorage() })
    clients.push(outsider)
    const seen: string[] = []
    outsider.onError((e) => seen.push(String(e)))
    await until('outsider online', () => (outsider.status.online ? true : undefined), 30_000)
    await expect(outsider.readStable('doc:1', { quorum: true, timeoutMs: 3000 })).rejects.toThrow()
    expect(outsider.status.stableIndex).toBe(0)
  }, 120_000)

  it('opens and closes clients at random moments (connecting, mid-update, mid-commit) without an unhandled error', async () => {
    const problems: unknown[] = []
    const trap = (e: unknown): void => void problems.push(e)
    process.on('uncaughtException', trap)
    process.on('unhandledRejection', trap)
    const file = JSON.parse(readFileSync(cluster.clusterPath, 'utf8')) as unknown
    let seed = 7
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    const pause = (ms: number) => new Promise((r) => setTimeout(r, ms))
    const cycle = async (i: number): Promise<void> => {
      const client = await createClient({ relays: urls(), storage: memoryStorage(), ...(i % 3 === 0 ? {} : { cluster: file }) })
      const opening = client.space(rand(3) === 0 ? 'churn' : `churn-${i % 5}`)
      if (rand(5) === 0) {
        // Closed while its space is still being opened.
        await client.close()
        await opening.catch(() => undefined)
        return
      }
      const c = await opening
      await pause(rand(40))
      const n = c.counter('hits')
      if (rand(2) === 0) void n.increment(1) // regular: resolves when stored
      if (rand(3) === 0) void n.increment(1, { safe: true }) // safe and never awaited
      if (rand(4) === 0) void n.increment(1, { safe: true, timeoutMs: rand(50) }).catch(() => undefined)
      await pause(rand(40))
      // Half close the space first (the client goes on), half the whole client at once.
      if (rand(2) === 0) await c.close()
      await client.close()
    }
    const openSessions = async (): Promise<number[]> => (await Promise.all([0, 1, 2, 3].map((i) => cluster.json<{ sessions: { open: number } }>(i, '/v1/status')))).map((s) => s.sessions.open)
    const before = await openSessions()
    try {
      for (let i = 0; i < 200; i += 4) await Promise.all([i, i + 1, i + 2, i + 3].map(cycle))
      // Late socket events of the last clients have come once every relay saw their sockets close.
      await until('every churned session closed at the relays', async () => ((await openSessions()).every((n, i) => n <= (before[i] ?? 0)) ? true : undefined))
    } finally {
      process.off('uncaughtException', trap)
      process.off('unhandledRejection', trap)
    }
    expect(problems).toEqual([])
    // The relays took it: a new client still commits.
    const after = await open('churn', { relays: urls(), storage: memoryStorage(), cluster: file })
    clients.push(after)
    expect(await after.counter('hits').increment(1, { safe: true, timeoutMs: 30_000 })).toMatchObject({ status: 'committed' })
  }, 120_000)

  it('serves many spaces from one client over one session per relay', async () => {
    const file = JSON.parse(readFileSync(cluster.clusterPath, 'utf8')) as unknown
    const sessionsBefore = await Promise.all([0, 1, 2, 3].map((i) => cluster.json<{ sessions: { open: number } }>(i, '/v1/status')))
    const client = await createClient({ relays: urls(), storage: memoryStorage(), cluster: file })
    owners.push(client)
    const boards = await Promise.all(['board:red', 'board:green', 'board:blue'].map((name) => client.space(name)))
    expect(await client.space('board:red')).toBe(boards[0]) // one Space per name
    await until('online', () => (client.status.online ? true : undefined), 30_000)
    const results = await Promise.all(boards.map((b, i) => b.counter('cards').increment(i + 1, { safe: true })))
    expect(results.map((r) => r.status)).toEqual(['committed', 'committed', 'committed'])
    expect(boards.map((b) => b.counter('cards').stable)).toEqual([1, 2, 3])
    // Same author everywhere, and one WebSocket per relay for all three spaces.
    expect(new Set(boards.map((b) => b.authorId)).size).toBe(1)
    const sessionsAfter = await Promise.all([0, 1, 2, 3].map((i) => cluster.json<{ sessions: { open: number } }>(i, '/v1/status')))
    expect(sessionsAfter.map((s, i) => s.sessions.open - (sessionsBefore[i]?.sessions.open ?? 0))).toEqual([1, 1, 1, 1])
    // Closing one space leaves the others working.
    await boards[0]!.close()
    expect(await boards[1]!.counter('cards').increment(5, { safe: true })).toMatchObject({ status: 'committed' })
    await expect(boards[0]!.counter('cards').increment(1)).rejects.toThrow(/space board:red is closed/)
    const reopened = await client.space('board:red')
    expect(reopened).not.toBe(boards[0])
    expect(reopened.counter('cards').stable).toBe(1)
  }, 60_000)

  it('pages through an object\'s whole stable history: recent pages from memory, older ones from f+1 relays', async () => {
    const file = JSON.parse(readFileSync(cluster.clusterPath, 'utf8')) as unknown
    // A client that keeps only 5 entries per object in memory, so older pages must come from the relays.
    const log = await open('ledger', { relays: urls(), storage: memoryStorage(), cluster: file, historyLimit: 5, maxBatchOps: 1 })
    const n = log.counter('n')
    for (let i = 1; i <= 12; i++) expect(await n.increment(i, { safe: true })).toMatchObject({ status: 'committed' })
    expect(n.history().map((h) => h.value)).toEqual([28, 36, 45, 55, 66, 78].slice(1)) // the latest 5 in memory
    const totals = Array.from({ length: 12 }, (_, i) => ((i + 1) * (i + 2)) / 2) // 1, 3, 6, ... 78
    const recent = await n.historyPage({ limit: 3 })
    expect(recent.map((e) => e.value)).toEqual([55, 66, 78])
    // Paging backwards past what memory holds asks the relays.
    const pages: unknown[] = [...recent.map((e) => e.value)]
    let before = recent[0]!.index
    for (;;) {
      const page = await n.historyPage({ limit: 4, before })
      if (page.length === 0) break
      pages.unshift(...page.map((e) => e.value))
      before = page[0]!.index
    }
    expect(pages).toEqual(totals)
    await expect(n.historyPage({ limit: 0 })).rejects.toMatchObject({ reason: 'malformed' })
  }, 60_000)

  it('starts a new client from a snapshot f+1 relays vouch for, not from the first commit, with the older history still paged from the relays', async () => {
    const asked: string[] = []
    const fetchLogged: ClientOptions['fetch'] = async (url, init) => {
      asked.push(new URL(url).pathname)
      return fetch(url, init)
    }
    const fresh = await open('ledger', { relays: urls(), storage: memoryStorage(), fetch: fetchLogged })
    const n = fresh.counter('n')
    await until('the stable state', () => (n.stable === 78 ? true : undefined), 30_000)
    expect(asked.filter((p) => p === '/v1/spaces/ledger/snapshot')).toHaveLength(1)
    expect(asked.filter((p) => p.startsWith('/v1/spaces/ledger/attestations/')).length).toBeGreaterThanOrEqual(1)
    // Nothing was replayed: memory holds no history from before the snapshot, the relays do.
    expect(n.history()).toEqual([])
    const page = await n.historyPage({ limit: 12 })
    expect(page.map((e) => e.value)).toEqual(Array.from({ length: 12 }, (_, i) => ((i + 1) * (i + 2)) / 2))
    expect(await n.increment(1, { safe: true })).toMatchObject({ status: 'committed' })
    expect(n.stable).toBe(79)
  }, 60_000)

  it('lets a client that joined after 10,000 updates prove the order of the first and the last, from the relays alone', async () => {
    const file = JSON.parse(readFileSync(cluster.clusterPath, 'utf8')) as { f: number; relays: Array<{ publicKey: string }> }
    const keys = { f: file.f, relayKeys: file.relays.map((r) => fromHex(r.publicKey)) }
    // One envelope per update: each is an update of its own, with its own clock.
    const writer = await open('chrono', { relays: urls(), storage: memoryStorage(), cluster: file, maxBatchOps: 1 })
    const settled: string[] = []
    writer.onSettled((u) => settled.push(u.id))
    const n = writer.counter('n')
    const UPDATES = 10_000
    for (let i = 0; i < UPDATES - 1; i++) void n.increment(1)
    await writer.flush()
    await until('9,999 updates committed', () => (n.stable === UPDATES - 1 ? true : undefined), 120_000)
    // The last one by another author, who applied everything before it (its base covers the first).
    const other = await open('chrono', { relays: urls(), storage: memoryStorage(), cluster: file })
    await until('the other author caught up', () => (other.counter('n').stable === UPDATES - 1 ? true : undefined), 60_000)
    const done = await other.counter('n').increment(1, { safe: true })
    expect(done).toMatchObject({ status: 'committed', index: UPDATES })
    // Its id, from its proof by the stable index it took (the other author applied that commit).
    const last = (await other.clockProof(UPDATES)).id
    await until('the writer’s updates all settled', () => (settled.length === UPDATES - 1 ? true : undefined), 60_000)
    const first = settled[0] as string
    // A client that joins now holds no proof of either: it asks the relays, trusting none of them.
    const late = await open('chrono', { relays: urls(), storage: memoryStorage(), cluster: file })
    const cmp = await late.compare(first, last)
    expect(cmp.order).toBe('before')
    expect((await late.compare(last, first)).order).toBe('after')
    const a = await verifyClockCertificate(nodeCrypto, keys, cmp.a.envelope, cmp.a.certificate)
    const b = await verifyClockCertificate(nodeCrypto, keys, cmp.b.envelope, cmp.b.certificate)
    expect(a.index).toBe(1)
    expect(b.index).toBe(UPDATES)
    expect(a.index as number).toBeLessThanOrEqual(b.env.base)
    // A proof with too few relays' signatures, or a forged one, is refused.
    const short = { ...cmp.a.certificate, signatures: cmp.a.certificate.signatures.slice(0, keys.f) }
    await expect(verifyClockCertificate(nodeCrypto, keys, cmp.a.envelope, short)).rejects.toMatchObject({ reason: 'bad-signature' })
    const forged = { ...cmp.a.certificate, signatures: cmp.a.certificate.signatures.map((s) => ({ ...s, sig: new Uint8Array(64).fill(7) })) }
    await expect(verifyClockCertificate(nodeCrypto, keys, cmp.a.envelope, forged)).rejects.toMatchObject({ reason: 'bad-signature' })
  }, 300_000)

  it('keeps committing when a relay is killed mid-session', async () => {
    const [a, b] = clients as [Space, Space]
    const before = a.counter('acct:0', { min: 0 }).stable
    cluster.kill(1)
    const results = await Promise.all([a.counter('acct:0', { min: 0 }).increment(10, { safe: true }), b.counter('acct:0', { min: 0 }).increment(5, { safe: true })])
    expect(results.map((r) => r.status)).toEqual(['committed', 'committed'])
    await until('both see it', () => (a.counter('acct:0', { min: 0 }).stable === before + 15 && b.counter('acct:0', { min: 0 }).stable === before + 15 ? true : undefined), 30_000)
    expect(a.status.relays[1]?.connected).toBe(false)
    expect(a.status.online).toBe(true)
  }, 60_000)
})
