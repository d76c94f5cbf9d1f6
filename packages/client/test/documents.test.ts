import 'fake-indexeddb/auto'
import { decodeStateDelta } from '@stead/core'
import { SimCluster, type SimRelay } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import { nodeCrypto } from '@stead/core/node'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createClient, indexedDbStorage, lmdbStorage, memoryStorage, type ListChange, type MapChange, type MapHandle, type Space, type SteadClient, type TextChange, type TextDelta } from '../src/index.node.ts'

const open: SteadClient[] = []
const clusters: SimCluster[] = []

afterEach(async () => {
  for (const c of open.splice(0)) await c.close()
  for (const c of clusters.splice(0)) await c.close()
})

async function client(c: SimCluster): Promise<Space> {
  const cl = await createClient({ ...c.clientOptions(), storage: memoryStorage() })
  open.push(cl)
  return cl.space('notes')
}

/** Real relays in simulated time, closed after the test. */
async function cluster(): Promise<SimCluster> {
  const c = await SimCluster.start()
  clusters.push(c)
  return c
}


describe('space.text', () => {
  it('shows each keystroke at once and lets two clients type into one text, ending identical, prospective equal to stable', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    const ta = a.text('doc')
    const tb = b.text('doc')
    await ta.insert(0, 'Hello world')
    expect(ta.value).toBe('Hello world')
    await c.until('b sees a', () => tb.value === 'Hello world')
    // Both type at once, character by character, at two places; some keystrokes share an envelope.
    const typing: Array<Promise<unknown>> = []
    for (const [i, ch] of [...' there'].entries()) typing.push(ta.insert(5 + i, ch))
    for (const [i, ch] of [...'!!'].entries()) typing.push(tb.insert(11 + i, ch))
    typing.push(tb.insert(0, '> '))
    await Promise.all(typing)
    expect(ta.value).toBe('Hello there world')
    expect(tb.value).toBe('> Hello world!!')
    await c.until('both converge', () => ta.value === tb.value && ta.stable === ta.value && tb.stable === tb.value)
    expect(ta.value).toBe('> Hello there world!!')
    // A delete removes what its author saw, even with a concurrent insert inside the range.
    const del = ta.delete(2, 6)
    const ins = tb.insert(4, 'LL')
    await Promise.all([del, ins])
    await c.until('both converge again', () => ta.value === tb.value && ta.stable === ta.value && tb.stable === tb.value)
    expect(ta.value).toBe('> LLthere world!!')
    // Edits in one envelope that name characters made earlier in it (not typed as one run).
    const burst = [ta.insert(0, 'abc'), ta.insert(1, 'X'), ta.delete(0, 1), ta.insert(4, '|')]
    expect(ta.value).toBe('Xbc>| LLthere world!!')
    await Promise.all(burst)
    await c.until('the burst converges', () => tb.value === ta.value && ta.stable === ta.value && tb.stable === tb.value)
    expect(tb.value).toBe('Xbc>| LLthere world!!')
  })

  it('keeps the stable text within maxLength: a safe insert past it is rejected, and typing past it is undone', async () => {
    const c = await cluster()
    const a = await client(c)
    const t = a.text('title', { maxLength: 8 })
    expect(await t.insert(0, 'Shopping', { safe: true })).toMatchObject({ status: 'committed' })
    const r = await t.insert(8, '!', { safe: true })
    expect(r).toMatchObject({ status: 'rejected', reason: 'invariant' })
    expect(t.value).toBe('Shopping')
    await expect(t.insert(99, 'x')).rejects.toMatchObject({ reason: 'malformed' })
    await expect(t.delete(3, 9)).rejects.toMatchObject({ reason: 'malformed' })
    await expect(t.insert(0, '')).rejects.toMatchObject({ reason: 'malformed' })
    expect(() => a.text('title')).toThrowError(expect.objectContaining({ reason: 'type-mismatch' }))
  })
})

describe('typing while earlier keys are being signed', () => {
  for (const gap of [0, 3]) {
    it(`shows every key at once and ends right, keys ${gap} ms apart, signing taking 6 ms as WebCrypto's may`, async () => {
      const c = await cluster()
      // Keys typed while a batch is signed name its characters by their draft tags; once it is
      // signed, the view holds them under their real tags and must find them there.
      const slow = { ...nodeCrypto, sign: async (k: Uint8Array, m: Uint8Array) => (await c.advance(6), nodeCrypto.sign(k, m)) }
      const cl = await createClient({ ...c.clientOptions(), storage: memoryStorage(), crypto: slow })
      open.push(cl)
      const ta = (await cl.space('notes')).text('doc')
      const tb = (await client(c)).text('doc')
      const s = 'Hello world, typed key by key'
      for (let i = 0; i < s.length; i++) {
        void ta.insert(ta.length, s[i] as string)
        expect(ta.value).toBe(s.slice(0, i + 1))
        await c.advance(gap)
      }
      await c.until('b has it, stable', () => tb.value === s && ta.stable === s && tb.stable === s)
    })
  }
})

describe('space.map', () => {
  it('holds plain fields and nested objects that two clients create and edit at once, ending identical', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    const da = a.map('todo')
    const db = b.map('todo')
    await da.set('title', 'Groceries')
    expect(da.get('title')).toBe('Groceries')
    // Both make the same nested card at once and type into its text: one card, both edits.
    const ca = da.map('card')
    const cb = db.map('card')
    await ca.text('name').insert(0, 'milk')
    await cb.text('name').insert(0, 'eggs ')
    void ca.set('done', false)
    void cb.counter('qty').increment(2)
    await c.until('both converge', () => JSON.stringify(da.value) === JSON.stringify(db.value) && JSON.stringify(da.stable) === JSON.stringify(da.value) && (da.get('card') as { qty?: number }).qty === 2)
    const card = da.value.card as { name: string; done: boolean; qty: number }
    expect(['eggs milk', 'milkeggs ']).toContain(card.name)
    expect(card).toMatchObject({ done: false, qty: 2 })
    expect(da.value.title).toBe('Groceries')
    // A delete concurrent with an edit inside the deleted card: the card stays deleted; made again, it is fresh.
    await Promise.all([da.delete('card'), cb.text('name').insert(0, 'x')])
    await c.until('the delete settles', () => JSON.stringify(da.stable) === JSON.stringify(db.stable) && db.stable.card === undefined && da.value.card === undefined)
    expect(da.map('card').value).toEqual({})
    await c.until('the fresh card settles', () => JSON.stringify(db.stable) === JSON.stringify(da.stable) && db.stable.card !== undefined)
    expect(db.stable.card).toEqual({})
    await expect(da.set('', 1)).rejects.toMatchObject({ reason: 'malformed' })
  })
})

describe('documents on storage', () => {
  it('restores texts, lists and maps exactly from IndexedDB, committed, received and not yet sent', async () => {
    const c = await cluster()
    const name = `stead-docs-${Math.random()}`
    const first = await createClient({ ...c.clientOptions(), storage: indexedDbStorage(name) })
    const a = await first.space('notes')
    await c.until('online', () => a.status.online)
    await a.text('doc').insert(0, 'Hello world')
    const card = a.list('todo').insertMap(0)
    await card.text('title').insert(0, 'Book the venue')
    await a.map('meta', { maxKeys: 8 }).set('owner', 'ann')
    await c.until('stable', () => a.text('doc').stable === 'Hello world' && JSON.stringify(a.list('todo').stable) === JSON.stringify([{ title: 'Book the venue' }]))
    // Another client's edit, received; then, offline, edits of our own not yet sent.
    const b = await client(c)
    await c.until('b has the text', () => b.text('doc').value === 'Hello world')
    await b.text('doc').insert(11, '!')
    await c.until('a received it', () => a.text('doc').value === 'Hello world!')
    for (const r of c.relays) await r.down()
    await a.text('doc').delete(0, 6)
    await a.list('todo').push('milk')
    const shown = (x: Space) => ({
      doc: [x.text('doc').value, x.text('doc').stable],
      todo: [x.list('todo').value, x.list('todo').stable],
      meta: [x.map('meta', { maxKeys: 8 }).value, x.map('meta', { maxKeys: 8 }).stable],
      pending: x.status.pending,
    })
    const before = shown(a)
    // b's '!' may or may not have committed before the relays went away.
    expect(before.doc[0]).toBe('world!')
    expect(['Hello world', 'Hello world!']).toContain(before.doc[1])
    await first.close()
    const again = await createClient({ ...c.clientOptions(), storage: indexedDbStorage(name) })
    open.push(again)
    const restored = await again.space('notes')
    expect(shown(restored)).toEqual(before)
    // Back online, the edits made offline commit and everything settles as it was shown.
    for (const r of c.relays) await r.up()
    await c.until('settled', () => restored.text('doc').stable === 'world!' && restored.list('todo').stable.length === 2 && b.text('doc').value === 'world!')
  })
})

describe('a map with a schema', () => {
  it('opens declared fields with the schema\'s invariants and refuses writes of another kind', async () => {
    const c = await cluster()
    const a = await client(c)
    const card = a.map('card', { schema: { title: { text: { maxLength: 5 } }, done: 'value', tags: 'list' } })
    const title = card.text('title')
    expect(title.declaration).toEqual({ type: 'text', bounds: { maxLength: 5 } })
    expect(await title.insert(0, 'Hello', { safe: true })).toMatchObject({ status: 'committed' })
    expect(await title.insert(5, '!', { safe: true })).toMatchObject({ status: 'rejected', reason: 'invariant' })
    await card.set('done', true)
    await expect(card.set('title', 'x')).rejects.toMatchObject({ reason: 'type-mismatch' })
    expect(() => card.map('done')).toThrowError(expect.objectContaining({ reason: 'type-mismatch' }))
    expect(() => card.text('title', { maxLength: 9 })).toThrowError(expect.objectContaining({ reason: 'type-mismatch' }))
    expect(() => card.counter('tags')).toThrowError(expect.objectContaining({ reason: 'type-mismatch' }))
    expect(() => a.map('card')).toThrowError(expect.objectContaining({ reason: 'type-mismatch' }))
    await c.until('stable', () => JSON.stringify(card.stable) === JSON.stringify({ done: true, title: 'Hello' }))
  })
})

describe('space.list: the shared to-do list that lost edits with sets and registers', () => {
  it('keeps concurrent renames and toggles of one item, moves each item once, and ends identical', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    const la = a.list('todos')
    const lb = b.list('todos')
    for (const title of ['milk', 'eggs', 'bread']) {
      const item = la.insertMap(la.length)
      void item.text('title').insert(0, title)
      void item.set('done', false)
    }
    await c.until('b sees the items', () => JSON.stringify(lb.value) === JSON.stringify(la.value) && lb.length === 3)
    // A renames 'eggs' while B ticks it; both move 'bread' to the top at once; B also moves 'milk' last.
    await Promise.all([
      (la.mapAt(1) as MapHandle).text('title').insert(4, ' (6)'),
      (lb.mapAt(1) as MapHandle).set('done', true),
      la.move(2, 0),
      lb.move(2, 0),
      lb.move(1, 2),
    ])
    await c.until('both converge', () => JSON.stringify(la.value) === JSON.stringify(lb.value) && JSON.stringify(la.stable) === JSON.stringify(la.value))
    const items = la.value as Array<{ title: string; done: boolean }>
    expect(items.map((i) => i.title).sort()).toEqual(['bread', 'eggs (6)', 'milk'])
    expect(items[0]?.title).toBe('bread')
    expect(items.find((i) => i.title === 'eggs (6)')?.done).toBe(true)
    // Plain values, a delete and malformed calls.
    const tags = a.list<string>('tags', { maxLength: 3 })
    await tags.insert(0, ['a', 'b', 'c'])
    expect(await tags.push('d', { safe: true })).toMatchObject({ status: 'rejected', reason: 'invariant' })
    await tags.delete(1)
    expect(tags.value).toEqual(['a', 'c'])
    await expect(tags.move(0, 5)).rejects.toMatchObject({ reason: 'malformed' })
    await expect(tags.insert(0, [])).rejects.toMatchObject({ reason: 'malformed' })
  })
})

describe('space.transact', () => {
  async function batched(c: SimCluster): Promise<Space> {
    // Two operations per envelope outside a transaction: a transaction must ignore that.
    const cl = await createClient({ ...c.clientOptions(), storage: memoryStorage(), maxBatchOps: 2 })
    open.push(cl)
    return cl.space('notes')
  }
  const envelopes = (c: SimCluster): number => c.submitted.size

  it('sends every edit of the transaction in one envelope and tells subscribers once, with everything applied', async () => {
    const c = await cluster()
    const a = await batched(c)
    const b = await client(c)
    const title = a.text('title')
    const card = a.map('card')
    const calls: string[] = []
    title.subscribe(() => calls.push(`title:${title.value}`))
    card.subscribe(() => calls.push(`card:${JSON.stringify(card.value)}`))
    // Control: the same edits without a transaction take several envelopes.
    await Promise.all([title.insert(0, 'ab'), title.insert(2, 'cd'), title.insert(4, 'ef'), card.set('n', 0), card.set('m', 0)])
    await c.until('the control is submitted', () => envelopes(c) >= 3)
    const before = envelopes(c)
    expect(before).toBeGreaterThanOrEqual(3)
    await c.until('b has the control', () => b.text('title').value === 'abcdef')
    calls.length = 0
    const done = a.transact(() => {
      void title.delete(0, title.length)
      void title.insert(0, 'Q3')
      expect(title.value).toBe('Q3')
      void title.insert(2, ' plan')
      void card.set('updated', true)
      void card.set('n', 1)
      void a.transact(() => void card.set('nested', 'joins'))
      expect(calls).toEqual([])
    })
    expect(calls).toEqual(['title:Q3 plan', `card:${JSON.stringify({ m: 0, n: 1, nested: 'joins', updated: true })}`])
    expect(await done).toMatchObject({ status: 'stored' })
    await c.until('b has the transaction', () => b.text('title').value === 'Q3 plan' && b.map('card').value['nested'] === 'joins')
    expect(envelopes(c)).toBe(before + 1)
    await c.until('stable', () => title.stable === 'Q3 plan')
  })

  it('keeps and sends the edits made before an edit function threw, and rejects with what it threw', async () => {
    const c = await cluster()
    const a = await batched(c)
    const t = a.text('t')
    const boom = new Error('boom')
    await expect(a.transact(() => {
      void t.insert(0, 'kept')
      throw boom
    })).rejects.toBe(boom)
    expect(t.value).toBe('kept')
    await c.until('stable', () => t.stable === 'kept')
    // A transaction with no edits resolves at once.
    expect(await a.transact(() => undefined)).toMatchObject({ status: 'stored' })
  })
})

describe('change events (observe)', () => {
  /** Applies a text delta to `s`, in code points. */
  function applyText(s: string, delta: readonly TextDelta[]): string {
    const points = [...s]
    const out: string[] = []
    let i = 0
    for (const d of delta) {
      if ('retain' in d) out.push(...points.slice(i, (i += d.retain)))
      else if ('delete' in d) i += d.delete
      else out.push(...d.insert)
    }
    return out.join('') + points.slice(i).join('')
  }

  it('tells a text\'s observers exactly what changed, who made it and whether it was made here, and nothing when an edit is only signed or committed', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    const ta = a.text('doc')
    const tb = b.text('doc')
    const seen: TextChange[] = []
    let mirror = ''
    ta.observe((change) => {
      seen.push(change)
      mirror = applyText(mirror, change.delta)
      expect(mirror).toBe(ta.value)
    })
    await ta.insert(0, 'Hello 👋 world')
    expect(seen).toEqual([{ delta: [{ insert: 'Hello 👋 world', author: a.authorId }], local: true }])
    await c.until('committed', () => ta.stable === 'Hello 👋 world' && tb.value === ta.value)
    // Signing and committing the edit changed no character: no event.
    expect(seen).toHaveLength(1)
    await tb.insert(7, ',')
    await c.until('a sees b', () => seen.length === 2)
    expect(seen[1]).toEqual({ delta: [{ retain: 7 }, { insert: ',', author: b.authorId }], local: false })
    await ta.delete(5, 2)
    expect(seen[2]).toEqual({ delta: [{ retain: 5 }, { delete: 2 }], local: true })
    // Typing key by key while earlier keys are signed: one event per key, and none for the signing.
    for (const ch of '!!!') await ta.insert(ta.length, ch)
    await c.until('stable', () => ta.stable === ta.value && tb.value === ta.value)
    expect(seen).toHaveLength(6)
    expect(mirror).toBe('Hello, world!!!')
    // A transaction is one event, with both its edits.
    await a.transact(() => {
      void ta.insert(0, '> ')
      void ta.delete(ta.length - 2, 2)
    })
    expect(seen[6]).toEqual({ delta: [{ insert: '> ', author: a.authorId }, { retain: 13 }, { delete: 2 }], local: true })
  })

  it('tells a map\'s observers which fields were added, updated and deleted, and by whom; a list\'s a delta where a move is a delete and an insert', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    const ma = a.map('card')
    const changes: MapChange[] = []
    ma.observe((ch) => changes.push(ch))
    await ma.set('title', 'Plan')
    expect(changes).toEqual([{ keys: new Map([['title', { action: 'add', oldValue: undefined, author: a.authorId }]]), local: true }])
    await c.until('b has it', () => b.map('card').get('title') === 'Plan' && ma.stable['title'] === 'Plan')
    expect(changes).toHaveLength(1)
    await b.map('card').set('title', 'Q3 plan')
    await c.until('a hears b', () => changes.length === 2)
    expect(changes[1]).toEqual({ keys: new Map([['title', { action: 'update', oldValue: 'Plan', author: b.authorId }]]), local: false })
    await a.transact(() => {
      void ma.delete('title')
      ma.text('notes')
    })
    expect(changes[2]).toEqual({
      keys: new Map([
        ['title', { action: 'delete', oldValue: 'Q3 plan', author: undefined }],
        ['notes', { action: 'add', oldValue: undefined, author: a.authorId }],
      ]),
      local: true,
    })

    const la = a.list<string>('todos')
    const lb = b.list<string>('todos')
    const deltas: ListChange[] = []
    let mirror: unknown[] = []
    la.observe((ch) => {
      deltas.push(ch)
      const out: unknown[] = []
      let i = 0
      for (const d of ch.delta) {
        if ('retain' in d) out.push(...mirror.slice(i, (i += d.retain)))
        else if ('delete' in d) i += d.delete
        else out.push(...d.insert)
      }
      mirror = [...out, ...mirror.slice(i)]
      expect(mirror).toEqual(la.value)
    })
    await la.insert(0, ['milk', 'eggs', 'bread'])
    await c.until('b has the list', () => lb.length === 3 && la.stable.length === 3)
    const before = deltas.length
    await lb.move(2, 0)
    await c.until('a hears the move', () => deltas.length > before)
    expect(la.value).toEqual(['bread', 'milk', 'eggs'])
    expect(deltas[deltas.length - 1]).toEqual({ delta: [{ insert: ['bread'], author: b.authorId }, { retain: 2 }, { delete: 1 }], local: false })
  })
})

describe('documents catching up', () => {
  it('a client back after a while catches up on texts, lists and maps by one delta, and a new one after pruning starts from a verified snapshot', async () => {
    // Relays that keep only the last few commits for resuming clients, pruned with each snapshot.
    const c = await SimCluster.start({ relay: { retention: { updates: 4 }, snapshotEveryBatches: 2 } })
    clusters.push(c)
    const writer = await client(c)
    const doc = writer.text('doc')
    const card = writer.map('card')
    const todos = writer.list<string>('todos')
    await doc.insert(0, 'Hello', { safe: true })
    await card.set('status', 'draft', { safe: true })
    await todos.insert(0, ['milk', 'eggs'], { safe: true })
    const dir = mkdtempSync(join(tmpdir(), 'stead-docs-'))
    const awayClient = await createClient({ ...c.clientOptions(), storage: lmdbStorage(dir) })
    const away = await awayClient.space('notes')
    await c.until('caught up', () => away.text('doc').stable === 'Hello' && away.list('todos').stable.length === 2)
    const from = away.status.stableIndex
    await awayClient.close()
    // While it is away: typing key by key, a map field written over and over (its state outweighs its ops), a move.
    for (const ch of ' world') await doc.insert(doc.length, ch, { safe: true })
    for (let i = 0; i < 20; i++) await card.set('status', `revision ${i}`, { safe: true })
    await todos.move(1, 0, { safe: true })
    await card.text('notes').insert(0, 'nested', { safe: true })
    const relay = c.relays[0] as SimRelay
    const delta = relay.node.reads.stateDelta('notes', from)
    expect(delta && decodeStateDelta(delta.delta, (signed) => ({ signed }) as never).objects.find((o) => o.key === 'card')?.mode).toBe('state')
    const commitsBefore = commitsSent(c)
    const requestsBefore = c.relays.map((r) => r.requests.length)
    const backClient = await createClient({ ...c.clientOptions(), storage: lmdbStorage(dir) })
    open.push(backClient)
    const back = await backClient.space('notes')
    const same = (s: Space, text = 'Hello world'): boolean =>
      s.text('doc').stable === text &&
      JSON.stringify(s.map('card').stable) === JSON.stringify({ notes: 'nested', status: 'revision 19' }) &&
      JSON.stringify(s.list('todos').stable) === JSON.stringify(['eggs', 'milk'])
    await c.until('back at the stable state', () => same(back))
    expect(requestsSince(c, requestsBefore).filter((path) => path.endsWith('/delta'))).toHaveLength(1)
    expect(commitsSent(c)).toBe(commitsBefore)
    expect(back.text('doc').value).toBe('Hello world')

    // The relays pruned what came before their last few commits: a new client starts from the snapshot.
    await doc.insert(doc.length, '!', { safe: true })
    await c.until('every relay pruned', () => c.relays.every((r) => (r.node.reads.feedStart('notes') ?? 0) > 0))
    const before = c.relays.map((r) => r.requests.length)
    const fresh = await client(c)
    await c.until('the new client has everything', () => same(fresh, 'Hello world!'))
    expect(requestsSince(c, before).some((path) => path.endsWith('/snapshot'))).toBe(true)
    expect(fresh.text('doc').value).toBe('Hello world!')
    // And both go on editing as usual.
    await fresh.text('doc').insert(0, '> ')
    await c.until('the writer sees it', () => doc.stable === '> Hello world!' && back.text('doc').value === '> Hello world!')
  })
})

/** Commits (with their envelopes) the relays sent their clients so far. */
function commitsSent(c: SimCluster): number {
  return c.relays.reduce((n, r) => n + r.traffic.commits, 0)
}

/** Paths of the HTTP requests the relays were sent since they had served `before[i]` each. */
function requestsSince(c: SimCluster, before: readonly number[]): string[] {
  return c.relays.flatMap((r, i) => r.requests.slice(before[i]))
}
