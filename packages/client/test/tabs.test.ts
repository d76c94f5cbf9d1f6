import { nodeCrypto } from '@stead/core/node'
import { SimCluster } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import type { SteadClient } from '../src/client.ts'
import { FakeOrigin } from './helpers/tabs.ts'
import { createClient, memoryStorage } from '../src/index.node.ts'

const clusters: SimCluster[] = []
const origins: FakeOrigin[] = []

/** Tabs that crashed: gone, so nothing closes them (a close would wait for a leader their dead link never hears of). */
const crashed = new Set<SteadClient>()

afterEach(async () => {
  for (const o of origins.splice(0)) for (const c of o.clients) if (!crashed.has(c)) await c.close().catch(() => undefined)
  crashed.clear()
  for (const c of clusters.splice(0)) await c.close()
})

async function setup(): Promise<{ c: SimCluster; origin: FakeOrigin }> {
  const c = await SimCluster.start()
  const origin = new FakeOrigin()
  clusters.push(c)
  origins.push(origin)
  return { c, origin }
}


/** Sessions the relays hold open (one per client per relay when tabs share a client). */
function sessions(c: SimCluster): number {
  return c.relays.reduce((n, r) => n + r.openSessions, 0)
}

/** The value of `key` in relay 0's stable state of the space. */
function stableValue(c: SimCluster, key: string): unknown {
  return c.relays[0]?.stableValue('bank', key)
}

/** What a tab that dies without closing leaves: its locks released, nothing more said, its storage handle gone. */
async function crash(client: SteadClient): Promise<void> {
  crashed.add(client)
  const internals = client as unknown as {
    lead?: { sessions: { close(): void }; storage: { close(): Promise<void> } }
    init: { tabs: { hub?: { closed: boolean; channel: { close(): void } }; link?: { close(handedOver: boolean): void }; lock: { release(): void }; stopWaiting: AbortController } }
  }
  const tabs = internals.init.tabs
  internals.lead?.sessions.close()
  if (tabs.hub) {
    tabs.hub.closed = true
    tabs.hub.channel.close()
  }
  // Gone without a word: no 'bye'.
  tabs.link?.close(true)
  tabs.stopWaiting.abort()
  await internals.lead?.storage.close()
  tabs.lock.release()
}

describe('tabs sharing one client', () => {
  it('one tab leads with one session per relay; another follows, sees updates both ways at once, and its safe update resolves', async () => {
    const { c, origin } = await setup()
    const a = await origin.tab(c.clientOptions())
    const b = await origin.tab(c.clientOptions())
    expect(a.leading).toBe(true)
    expect(b.leading).toBe(false)
    expect(b.authorId).toBe(a.authorId)
    const [sa, sb] = await Promise.all([a.space('bank'), b.space('bank')])
    await c.until('online in both tabs', () => sa.status.online && sb.status.online && b.status.online)
    expect(sessions(c)).toBe(4)

    const ka = sa.counter('k', { min: 0 })
    const kb = sb.counter('k', { min: 0 })
    void ka.increment(5)
    expect(ka.value).toBe(5)
    await c.until('b sees a', () => kb.value === 5)
    const stored = kb.increment(10)
    expect(kb.value).toBe(15)
    expect(await stored).toMatchObject({ status: 'stored' })
    await c.until('a sees b', () => ka.value === 15)
    expect(await kb.decrement(20, { safe: true })).toMatchObject({ status: 'rejected', reason: 'invariant' })
    expect(await kb.decrement(3, { safe: true })).toMatchObject({ status: 'committed' })
    await c.until('stable 12 in both', () => ka.stable === 12 && kb.stable === 12)
    await sb.settled()
    expect(sb.pendingUpdates()).toEqual([])
    expect(stableValue(c, 'k')).toBe(12)
  })

  it('a leading tab that reads at a freshness bound keeps every update while another tab follows the space (it replays them), and paces once none does', async () => {
    const { c, origin } = await setup()
    const a = await origin.tab(c.clientOptions())
    const b = await origin.tab(c.clientOptions())
    const [sa, sb] = await Promise.all([a.space('bank'), b.space('bank')])
    await c.until('online in both tabs', () => sa.status.online && sb.status.online)
    const paces = (): number => c.relays.reduce((n, r) => n + r.traffic.paces, 0)
    sa.setFreshness(200)
    await c.advance(3000)
    expect(paces()).toBe(0)
    await sb.close()
    await c.until('paced once no other tab follows', () => paces() > 0 || undefined)
  })

  it('tabs share one presence: the client shows the latest state a tab set, a tab that closes takes only its own away, and every tab sees the others present', async () => {
    const { c, origin } = await setup()
    const a = await origin.tab(c.clientOptions())
    const b = await origin.tab(c.clientOptions())
    const other = await createClient({ ...c.clientOptions(), storage: memoryStorage() })
    try {
      const [sa, sb, so] = await Promise.all([a.space('bank'), b.space('bank'), other.space('bank')])
      sb.presence.set({ name: 'from tab b' })
      await c.until('the other client sees the tabs\' client', () => so.presence.others.some((p) => p.author === a.authorId && (p.state as { name?: string }).name === 'from tab b'))
      so.presence.set({ name: 'Olga' })
      await c.until('both tabs see olga', () => [sa, sb].every((s) => s.presence.others.some((p) => p.author === other.authorId)))
      expect(sb.presence.others.map((p) => p.state)).toEqual([{ name: 'Olga' }])
      // The leading tab shows its own state; the following one's, set later, shows instead; when the following tab
      // closes its space, the client shows the leading tab's again, not nothing.
      sa.presence.set({ name: 'from tab a' })
      sb.presence.set({ name: 'from tab b, again' })
      const shown = () => (so.presence.others.find((p) => p.author === a.authorId)?.state as { name?: string } | undefined)?.name
      await c.until('the other client sees tab b\'s state', () => shown() === 'from tab b, again')
      await sb.close()
      await c.until('the other client sees tab a\'s state again', () => shown() === 'from tab a')
      expect(sa.presence.state).toEqual({ name: 'from tab a' })
      await so.close()
      await c.until('tab a sees her go', () => sa.presence.others.length === 0)
    } finally {
      await other.close()
    }
  })

  it('a following tab types into a text key by key while the leader signs: every key shows at once there and lands in order', async () => {
    const { c, origin } = await setup()
    // The leader signs as slowly as WebCrypto may: keys typed meanwhile name characters of the batch it signs.
    const slow = { ...nodeCrypto, sign: async (k: Uint8Array, m: Uint8Array) => (await c.advance(6), nodeCrypto.sign(k, m)) }
    const a = await origin.tab({ ...c.clientOptions(), crypto: slow })
    const b = await origin.tab(c.clientOptions())
    const [sa, sb] = await Promise.all([a.space('bank'), b.space('bank')])
    await c.until('online in both tabs', () => sa.status.online && sb.status.online)
    const ta = sa.text('doc')
    const tb = sb.text('doc')
    const s = 'typed in a following tab'
    for (let i = 0; i < s.length; i++) {
      void tb.insert(tb.length, s[i] as string)
      expect(tb.value).toBe(s.slice(0, i + 1))
      await c.advance(1)
    }
    await c.until('both tabs have it, stable', () => ta.value === s && tb.value === s && ta.stable === s && tb.stable === s)
  })

  it('the leader closes while the other tab writes: that tab takes the lead and no update is lost or counted twice', async () => {
    const { c, origin } = await setup()
    const a = await origin.tab(c.clientOptions())
    const b = await origin.tab(c.clientOptions())
    const third = await origin.tab(c.clientOptions())
    const sb = await b.space('bank')
    const s3 = await third.space('bank')
    await a.space('bank')
    const kb = sb.counter('n')
    const k3 = s3.counter('n')
    let written = 0
    const writes: Array<Promise<unknown>> = []
    const closing = a.close()
    for (let i = 0; i < 40; i++) {
      writes.push(kb.increment(1), k3.increment(1))
      written += 2
      if (i % 8 === 0) await c.advance(5)
    }
    await closing
    await c.until('a new leader', () => b.leading || third.leading)
    await Promise.all(writes)
    await c.until('every write stable', () => stableValue(c, 'n') === written && kb.stable === written && k3.stable === written, 20_000).catch((err: Error) => {
      throw new Error(`${err.message}: relays ${String(stableValue(c, 'n'))}, b ${kb.stable}/${kb.value}, third ${k3.stable}/${k3.value}, written ${written}, leading ${b.leading}/${third.leading}`)
    })
    expect(kb.value).toBe(written)
    expect(k3.value).toBe(written)
    expect(sessions(c)).toBe(4)
  })

  it('the leader dies without closing, with a safe update of another tab in flight: it resolves once, from the new leader', async () => {
    const { c, origin } = await setup()
    const a = await origin.tab(c.clientOptions())
    const b = await origin.tab(c.clientOptions())
    const sa = await a.space('bank')
    const sb = await b.space('bank')
    await c.until('online', () => sa.status.online && sb.status.online)
    // Nothing commits until the leader is gone: the update waits in its outbox (or in flight).
    c.hold()
    const kb = sb.counter('n', { min: 0 })
    void kb.increment(7)
    const safe = kb.decrement(2, { safe: true })
    await c.until('the leader stored it', () => sa.pendingUpdates().length > 0 && sb.pendingUpdates().length > 0)
    await crash(a)
    await c.until('b leads', () => b.leading)
    c.release()
    expect(await safe).toMatchObject({ status: 'committed' })
    await c.until('stable 5', () => kb.stable === 5)
    expect(kb.value).toBe(5)
    await sb.settled()
  })

  it('a tab that opens a space later gets its state from the leader before its first read, and a quorum read and history pages go through the leader', async () => {
    const { c, origin } = await setup()
    const a = await origin.tab(c.clientOptions())
    const sa = await a.space('bank')
    await c.until('online', () => sa.status.online)
    await sa.counter('k').increment(4, { safe: true })
    const b = await origin.tab(c.clientOptions())
    const sb = await b.space('bank')
    expect(sb.counter('k').stable).toBe(4)
    expect(await sb.readStable('k', { quorum: true })).toBe(4)
    expect(await sb.counter('k').historyPage({ limit: 10 })).toEqual([{ index: 1, value: 4 }])
    // So does a causal comparison, with its proofs.
    const first = await new Promise<string>((ok) => {
      const off = sa.onSettled((u) => (off(), ok(u.id)))
      void sa.counter('k').increment(1, { safe: true })
    })
    const compared = await sb.compare(first, first)
    expect(compared.order).toBe('equal')
    expect(compared.a.certificate.signatures.length).toBeGreaterThanOrEqual(c.f + 1)
    // A following tab gets one update's proof, by stable index, from the leader.
    expect((await sb.clockProof(compared.a.index as number)).id).toBe(first)
    // The leader's app closing the space does not close it for the other tab.
    await sa.close()
    await sb.counter('k').increment(1, { safe: true })
    expect(sb.counter('k').stable).toBe(6)
  })

  // STEAD_TABS_SEEDS=200 for a longer soak. Seed 7 closes a following tab the moment the lead comes
  // to it (its leader had just closed): its close used to hang for ever, its last write never stored.
  const seeds = process.env.STEAD_TABS_SEEDS ? Array.from({ length: Number(process.env.STEAD_TABS_SEEDS) }, (_, i) => i + 1) : [1, 2, 3, 4, 7]
  it.each(seeds)('tabs opening, closing and crashing at random while they write: every stored update commits exactly once (seed %i)', async (first) => {
    const { c, origin } = await setup()
    let seed = first
    const random = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return seed % n
    }
    type Tab = { client: SteadClient; space: Awaited<ReturnType<SteadClient['space']>> }
    const live: Tab[] = []
    const open = async (): Promise<void> => {
      const client = await origin.tab(c.clientOptions())
      const space = await client.space('bank')
      live.push({ client, space })
    }
    const writes: Array<{ key: string; outcome: Promise<'stored' | 'failed'> }> = []
    await open()
    for (let step = 0; step < 60; step++) {
      const roll = random(10)
      if (live.length < 4 && (roll < 2 || live.length === 0)) await open()
      else if (live.length > 1 && roll === 2) {
        const [tab] = live.splice(random(live.length), 1) as [Tab]
        await tab.client.close()
      } else if (live.length > 1 && roll === 3) {
        const [tab] = live.splice(random(live.length), 1) as [Tab]
        await crash(tab.client)
      } else {
        const tab = live[random(live.length)] as Tab
        const key = `w${step}`
        writes.push({
          key,
          outcome: tab.space
            .counter(key)
            .increment(1)
            .then(
              () => 'stored' as const,
              () => 'failed' as const,
            ),
        })
      }
      if (random(3) === 0) await c.advance(random(15))
    }
    if (live.length === 0) await open()
    const last = live[0] as Tab
    // Writes of crashed tabs may never answer: give the others time, then judge what answered.
    const outcomes = await Promise.all(writes.map((w) => Promise.race([w.outcome, c.advance(3000).then(() => 'unanswered' as const)])))
    await last.space.settled({ timeoutMs: 20_000 })
    await c.until('leader online', () => last.space.status.online)
    for (const [i, w] of writes.entries()) {
      const value = stableValue(c, w.key) ?? 0
      // Stored means committed once; a write that failed or never answered (its tab crashed) committed at most once.
      if (outcomes[i] === 'stored') expect(value, `${w.key} (stored)`).toBe(1)
      else expect(value, `${w.key} (${outcomes[i]})`).toBeLessThanOrEqual(1)
    }
    expect(outcomes.filter((o) => o === 'stored').length).toBeGreaterThan(writes.length / 2)
  }, 60_000)
})
