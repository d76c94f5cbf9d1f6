import WebSocket from 'ws'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestCluster, until } from '@stead/relay/testing'
import { createClient, memoryStorage, type ClientOptions, type MapHandle, type SocketLike, type Space, type SteadClient } from '../src/index.node.ts'

/** Sockets that can be cut: while `offline`, open ones are closed and new ones fail, as when a laptop loses its network. */
function cuttable(): { connect: (url: string) => SocketLike; setOnline(on: boolean): void } {
  let online = true
  const open = new Set<WebSocket>()
  return {
    connect(url) {
      const ws = new WebSocket(online ? url : 'ws://127.0.0.1:1/v1/ws')
      open.add(ws)
      ws.on('close', () => open.delete(ws))
      return ws as unknown as SocketLike
    },
    setOnline(on) {
      online = on
      if (!on) for (const ws of open) ws.terminate()
    },
  }
}

/**
 * Documents against real relay processes: two clients edit one text, one
 * list and one map at once, one of them offline for a while, and both end
 * identical, with prospective equal to stable.
 */
describe('documents against a real relay cluster', () => {
  let cluster: TestCluster
  const owners: SteadClient[] = []

  beforeAll(async () => {
    cluster = await TestCluster.create(4, { openSpaces: true })
    await cluster.startAll()
  }, 90_000)

  afterAll(async () => {
    for (const c of owners) await c.close()
    await cluster?.stopAll()
  })

  const open = async (connect?: (url: string) => SocketLike, extra: Partial<ClientOptions> = {}, space = 'notes'): Promise<Space> => {
    const client = await createClient({ relays: cluster.relays.map((r) => `ws://${r.api}`), storage: memoryStorage(), ...(connect ? { connect } : {}), ...extra })
    owners.push(client)
    return client.space(space)
  }

  it('two clients edit a text, a list and a map concurrently, one offline for a while, and end identical', async () => {
    const net = cuttable()
    const a = await open()
    const b = await open(net.connect)
    await until('both online', () => (a.status.online && b.status.online ? true : undefined), 30_000)
    const [ta, tb] = [a.text('doc'), b.text('doc')]
    const [la, lb] = [a.list<string>('todo'), b.list<string>('todo')]
    const [ma, mb] = [a.map('meta'), b.map('meta')]
    await ta.insert(0, 'The quick fox')
    await la.insert(0, ['milk', 'eggs', 'bread'])
    await ma.set('title', 'Notes')
    await until('b has the start', () => (tb.value === 'The quick fox' && lb.length === 3 && mb.get('title') === 'Notes' ? true : undefined), 30_000)

    net.setOnline(false)
    await until('b offline', () => (!b.status.online ? true : undefined), 30_000)
    // Offline, b types, moves and sets; a does the same meanwhile, at the same places.
    for (const [i, ch] of [...' brown'].entries()) void tb.insert(9 + i, ch)
    for (const [i, ch] of [...' red'].entries()) void ta.insert(9 + i, ch)
    void tb.delete(0, 4)
    void lb.move(2, 0)
    void la.move(2, 0)
    void la.push('jam')
    void mb.set('title', 'My notes')
    void (mb.map('owner') as MapHandle).set('name', 'bob')
    void (ma.map('owner') as MapHandle).set('email', 'a@example.org')
    expect(tb.value).toBe('quick brown fox')
    await a.flush()
    await until('a settles alone', () => (ta.stable === ta.value ? true : undefined), 30_000)

    net.setOnline(true)
    const same = (): boolean =>
      ta.value === tb.value &&
      JSON.stringify(la.value) === JSON.stringify(lb.value) &&
      JSON.stringify(ma.value) === JSON.stringify(mb.value) &&
      ta.stable === ta.value &&
      tb.stable === tb.value &&
      JSON.stringify(lb.stable) === JSON.stringify(lb.value) &&
      JSON.stringify(mb.stable) === JSON.stringify(mb.value)
    await until('both converge', () => (same() ? true : undefined), 60_000)
    expect(['quick red brown fox', 'quick brown red fox']).toContain(ta.value)
    expect(la.value[0]).toBe('bread')
    expect([...la.value].sort()).toEqual(['bread', 'eggs', 'jam', 'milk'])
    expect(ma.value).toMatchObject({ owner: { name: 'bob', email: 'a@example.org' } })
    // Of the two concurrent title writes, the one made after seeing more wins everywhere alike.
    expect(['Notes', 'My notes']).toContain(ma.get('title'))
  }, 120_000)

  it('pages a text\'s and a list\'s whole history from the relays: the value each change gave, also where a relay was killed and restarted meanwhile', async () => {
    const writer = await open(undefined, { maxBatchOps: 1 }, 'journal')
    const text = writer.text('doc')
    const list = writer.list<number>('nums')
    const type = async (from: number, to: number): Promise<void> => {
      for (let i = from; i < to; i++) {
        await text.insert(text.length, String.fromCharCode(97 + (i % 26)), { safe: true })
        if (i % 5 === 0) await list.insert(0, [i], { safe: true })
      }
    }
    await type(0, 30)
    // kill -9 one relay and bring it back: it stores the next entry of each object whole, the others a patch.
    cluster.kill(2)
    await type(30, 45)
    cluster.start(2)
    await cluster.waitHealthy(2)
    await type(45, 70)
    await until('stable', () => (text.stable === text.value && text.value.length === 70 ? true : undefined), 30_000)
    // A reader keeping 2 entries per object in memory pages the rest from f+1 relays that sign alike.
    const reader = await open(undefined, { historyLimit: 2 }, 'journal')
    await until('the reader caught up', () => (reader.text('doc').stable === text.stable ? true : undefined), 30_000)
    for (const handle of [reader.text('doc'), reader.list('nums')] as const) {
      const mine = (handle.key === 'doc' ? text : list).history()
      expect(mine.length).toBeGreaterThanOrEqual(handle.key === 'doc' ? 70 : 14)
      const paged: Array<{ index: number; value: unknown }> = []
      let before: number | undefined
      for (;;) {
        const page = await handle.historyPage({ limit: 9, ...(before === undefined ? {} : { before }) })
        if (page.length === 0) break
        paged.unshift(...page)
        before = page[0]!.index
      }
      expect(JSON.stringify(paged)).toBe(JSON.stringify(mine))
    }
  }, 180_000)
})
