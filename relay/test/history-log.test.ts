import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { CollabList, CollabMap, CollabText, encode, historyPatch, historyValue, type Declaration } from '@stead/core'
import { HistoryLog, MAX_PATCH_RUN, type HistoryRecord, type ListingCursor } from '../src/store/history-log.ts'
import { MemoryKv, type KvTable } from '../src/store/kv.ts'

type Table = KvTable<[string, string, number]>

/** What pages gave before patches: the newest `limit` values before `before` that fit in `maxBytes` (at least one). */
function expectedPage(values: ReadonlyArray<{ index: number; value: unknown }>, before: number, limit: number, maxBytes: number): { entries: Array<{ index: number; value: unknown }>; more: boolean } {
  const older = values.filter((v) => v.index < before).reverse()
  const entries: Array<{ index: number; value: unknown }> = []
  let bytes = 0
  for (const v of older) {
    const size = encode(v.value).length
    if (entries.length >= limit || (entries.length > 0 && bytes + size > maxBytes)) return { entries, more: true }
    bytes += size
    entries.push(v)
  }
  return { entries, more: false }
}

function storedBytes(table: Table): number {
  let n = 0
  for (const { value } of table.getRange({})) n += value.length
  return n
}

/** Records of one object whose values come from `values`, each patched against the one before (as a relay's replica reports them). */
function records(decl: Declaration, values: readonly unknown[], space = 's', key = 'k'): HistoryRecord[] {
  return values.map((value, i) => {
    const index = i * 2 + 1
    const patch = i === 0 ? undefined : historyPatch(decl, values[i - 1], value)
    // No patch fits (a text's string before its first mark, spans after): the value goes whole, as the replica reports it.
    if (!patch) return { space, key, index, value }
    return { space, key, index, value, patch: { base: index - 2, patch } }
  })
}

async function put(kv: MemoryKv, log: HistoryLog, rs: readonly HistoryRecord[]): Promise<void> {
  await kv.write(() => {
    for (const r of rs) log.put(r)
  })
}

describe('HistoryLog: stable histories of long objects as patches between whole values', () => {
  it('serves the pages whole values gave, for a text typed key by key, in a fraction of the bytes', async () => {
    const kv = new MemoryKv()
    const table = kv.table<[string, string, number]>('history')
    const log = new HistoryLog(table, kv.table('history-index'))
    const t = new CollabText()
    const values: string[] = []
    let seed = 7
    const rnd = (n: number): number => ((seed = (seed * 48271) % 2147483647), seed % n)
    for (let i = 0; i < 2000; i++) {
      const ctx = { replica: 'a', tag: `a:${i}` }
      if (t.length > 10 && rnd(5) === 0) t.apply(t.deleteOp(rnd(t.length), 1)!, ctx)
      else t.apply(t.insertOp(rnd(t.length + 1), 'xyz'[rnd(3)]!), ctx)
      values.push(t.value())
    }
    const rs = records({ type: 'text', bounds: {} }, values)
    for (let i = 0; i < rs.length; i += 100) await put(kv, log, rs.slice(i, i + 100))
    const whole = values.reduce((n, v) => n + encode(['w', v]).length, 0)
    const stored = storedBytes(table)
    expect(stored).toBeLessThan(whole / 10)
    const history = rs.map((r) => ({ index: r.index, value: r.value }))
    for (const [before, limit, maxBytes] of [[Number.MAX_SAFE_INTEGER, 100, Infinity], [4001, 1000, Infinity], [1500, 7, Infinity], [3000, 300, 20_000], [2, 5, 10], [1, 5, 10]] as const) {
      expect(log.page('s', 'k', before, limit, maxBytes)).toEqual(expectedPage(history, before, limit, maxBytes))
    }
    // Every entry reads back, whatever its place between whole values.
    for (let before = 1; before <= 4001; before += 37) expect(log.page('s', 'k', before, 3, Infinity)).toEqual(expectedPage(history, before, 3, Infinity))
  })

  it('serves the pages of a text that gains marks: its strings, then its spans patched from one to the next', async () => {
    const kv = new MemoryKv()
    const log = new HistoryLog(kv.table<[string, string, number]>('history'), kv.table('history-index'))
    const t = new CollabText()
    const values: unknown[] = []
    const decl: Declaration = { type: 'text', bounds: {} }
    for (let i = 0; i < 300; i++) {
      const ctx = { replica: 'a', tag: `a:${i}` }
      if (i > 100 && i % 7 === 0) t.apply(t.markOp(i % t.length, Math.min(t.length, (i % t.length) + 3), i % 2 ? 'bold' : 'link', i % 2 ? true : { href: `h${i}` }), ctx)
      else t.apply(t.insertOp((i * 31) % (t.length + 1), 'ab'[i % 2]!), ctx)
      values.push(historyValue(decl, t))
    }
    expect(typeof values[100]).toBe('string')
    expect(Array.isArray(values[299])).toBe(true)
    const rs = records(decl, values)
    expect(rs.filter((r) => !r.patch)).toHaveLength(2)
    await put(kv, log, rs)
    const history = rs.map((r) => ({ index: r.index, value: r.value }))
    for (let before = 1; before <= 601; before += 23) expect(log.page('s', 'k', before, 5, Infinity)).toEqual(expectedPage(history, before, 5, Infinity))
  })

  it('stores a whole value again after MAX_PATCH_RUN patches, after a restart, and for a patch that does not follow what it stored', async () => {
    const kv = new MemoryKv()
    const table = kv.table<[string, string, number]>('history')
    const text = 'x'.repeat(100_000)
    const values = Array.from({ length: MAX_PATCH_RUN + 10 }, (_, i) => `${text}${i}`)
    const rs = records({ type: 'text', bounds: {} }, values)
    const kinds = (): string[] => [...table.getRange({})].map(({ value }) => (value[1] === 0xa1 ? String.fromCharCode(value[2]!) : '?'))
    const log = new HistoryLog(table, kv.table('history-index'))
    await put(kv, log, rs.slice(0, MAX_PATCH_RUN + 3))
    expect(kinds().filter((k) => k === 'w')).toHaveLength(2)
    // A restart forgets what was stored last: the next entry is whole, then patches follow it.
    const restarted = new HistoryLog(table, kv.table('history-index'))
    await put(kv, restarted, rs.slice(MAX_PATCH_RUN + 3, MAX_PATCH_RUN + 5))
    expect(kinds().slice(-2)).toEqual(['w', 'p'])
    // A patch of an entry other than the latest stored (its base was never stored here) is stored whole.
    await put(kv, restarted, [{ ...rs[MAX_PATCH_RUN + 6]!, patch: { base: rs[MAX_PATCH_RUN + 4]!.index - 100, patch: rs[MAX_PATCH_RUN + 6]!.patch!.patch } }])
    expect(kinds().slice(-1)).toEqual(['w'])
    const history = rs.slice(0, MAX_PATCH_RUN + 5).map((r) => ({ index: r.index, value: r.value }))
    history.push({ index: rs[MAX_PATCH_RUN + 6]!.index, value: rs[MAX_PATCH_RUN + 6]!.value })
    expect(restarted.page('s', 'k', Number.MAX_SAFE_INTEGER, 1000, Infinity)).toEqual(expectedPage(history, Number.MAX_SAFE_INTEGER, 1000, Infinity))
  })

  it('patches lists and maps exactly, whatever their edits', async () => {
    const edits = fc.array(fc.tuple(fc.nat(), fc.nat(), fc.boolean()), { minLength: 1, maxLength: 60 })
    await fc.assert(
      fc.asyncProperty(edits, async (script) => {
        const kv = new MemoryKv()
        const log = new HistoryLog(kv.table('history'), kv.table('history-index'))
        const list = new CollabList()
        const map = new CollabMap()
        const lists: unknown[] = []
        const maps: unknown[] = []
        script.forEach(([a, b, flag], i) => {
          const ctx = { replica: `r${b % 3}`, tag: `t:${i}` }
          if (flag && list.length > 0) list.apply(a % 2 ? list.deleteOp(a % list.length, 1 + (b % 2))! : (list.moveOp(a % list.length, b % list.length) ?? list.deleteOp(0, 1)!), ctx)
          else list.apply(list.insertOp(a % (list.length + 1), [b, { nested: b % 5 }]), ctx)
          if (flag && a % 3 === 0) map.apply(['x', `f${b % 4}`, map.nextStamp()], ctx)
          else map.apply(['s', `f${b % 4}`, a % 2 ? a : { v: [a, b] }, map.nextStamp()], ctx)
          lists.push(list.value())
          maps.push(map.value())
        })
        await put(kv, log, [...records({ type: 'list', bounds: {} }, lists, 's', 'list'), ...records({ type: 'map', bounds: {} }, maps, 's', 'map')])
        for (const [key, values] of [['list', lists], ['map', maps]] as const) {
          const history = values.map((value, i) => ({ index: i * 2 + 1, value }))
          // Whole values went through msgpack: compare what a page encodes to.
          expect(encode(log.page('s', key, Number.MAX_SAFE_INTEGER, 1000, Infinity))).toEqual(encode(expectedPage(history, Number.MAX_SAFE_INTEGER, 1000, Infinity)))
        }
      }),
      { numRuns: 60 },
    )
  })

  it('forgets what it stored last when told a write failed, so the next entry is whole', async () => {
    const kv = new MemoryKv()
    const table = kv.table<[string, string, number]>('history')
    const log = new HistoryLog(table, kv.table('history-index'))
    const rs = records({ type: 'text', bounds: {} }, ['a'.repeat(1000), `${'a'.repeat(1000)}b`, `${'a'.repeat(1000)}bc`])
    await put(kv, log, rs.slice(0, 2))
    log.forget()
    await put(kv, log, rs.slice(2))
    expect([...table.getRange({})].map(({ value }) => String.fromCharCode(value[2]!))).toEqual(['w', 'p', 'w'])
  })
})

/** One object's change in a generated history: a value, or its deletion. */
type Change = { key: string; index: number; value: unknown; deleted?: true }

/** Records of a history of several objects (texts patched, registers whole, deletions), as a relay's replica reports them. */
function historyRecords(changes: readonly Change[]): HistoryRecord[] {
  const last = new Map<string, Change>()
  return changes.map((c) => {
    const before = last.get(c.key)
    last.set(c.key, c)
    if (c.deleted) return { space: 's', key: c.key, index: c.index, value: null, deleted: true }
    const patch = before && !before.deleted && typeof c.value === 'string' && typeof before.value === 'string' ? historyPatch({ type: 'text', bounds: {} }, before.value, c.value) : undefined
    return patch ? { space: 's', key: c.key, index: c.index, value: c.value, patch: { base: before!.index, patch } } : { space: 's', key: c.key, index: c.index, value: c.value }
  })
}

describe('HistoryLog.prune: retention', () => {
  const step = fc.record({ object: fc.integer({ min: 0, max: 3 }), kind: fc.constantFrom('edit', 'edit', 'edit', 'null', 'delete'), n: fc.nat({ max: 50 }) })

  it('keeps each object’s entries from the limit on and the one in force there (none for a deletion), in budgeted steps, across restarts and for entries listed late (property)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 80 }), fc.array(fc.nat({ max: 90 }), { minLength: 1, maxLength: 4 }), fc.integer({ min: 1, max: 7 }), fc.boolean(), async (steps, cuts, budget, oldStore) => {
        const kv = new MemoryKv()
        const table = kv.table<[string, string, number]>('history')
        // Objects 0 and 1 are texts (patched), 2 and 3 registers whose own value may be null.
        const texts = new Map<string, string>()
        const changes: Change[] = steps.map((s, i) => {
          const key = `o${s.object}`
          if (s.kind === 'delete') {
            texts.delete(key)
            return { key, index: i + 1, value: null, deleted: true }
          }
          if (s.object >= 2) return { key, index: i + 1, value: s.kind === 'null' ? null : s.n }
          const text = `${texts.get(key) ?? 'x'.repeat(200)}${s.n}`
          texts.set(key, text)
          return { key, index: i + 1, value: text }
        })
        // An old store (or a space whose retention came late) listed none of its entries: they are listed first, `budget` at a time.
        await put(kv, new HistoryLog(table, kv.table('history-index'), () => !oldStore), historyRecords(changes))
        let log = new HistoryLog(table, kv.table('history-index'))
        for (let at: ListingCursor | undefined = oldStore ? ['', 0] : undefined; at; ) {
          const from: ListingCursor = at
          await kv.write(() => (at = log.listExisting('s', from, budget).next))
        }
        let limit = 0
        for (const cut of [...cuts].sort((a, b) => a - b)) {
          limit = cut
          // In steps of `budget` entries, a restart between two.
          while (true) {
            let visited = 0
            await kv.write(() => (visited = log.prune('s', limit, budget)))
            log = new HistoryLog(table, kv.table('history-index'))
            if (visited < budget) break
          }
        }
        for (const key of ['o0', 'o1', 'o2', 'o3']) {
          const all = changes.filter((c) => c.key === key)
          const older = all.filter((c) => c.index < limit)
          const inForce = older.at(-1)
          const kept = [...(inForce && !inForce.deleted ? [inForce] : []), ...all.filter((c) => c.index >= limit)].map((c) => ({ index: c.index, value: c.value }))
          expect(encode(log.page('s', key, Number.MAX_SAFE_INTEGER, 1000, Infinity))).toEqual(encode(expectedPage(kept, Number.MAX_SAFE_INTEGER, 1000, Infinity)))
          // Paged a few at a time, too (a page reads back to a whole value).
          const page = log.page('s', key, Number.MAX_SAFE_INTEGER, 2, Infinity)
          expect(encode(page)).toEqual(encode(expectedPage(kept, Number.MAX_SAFE_INTEGER, 2, Infinity)))
        }
        expect([...table.getKeys({})].length).toBeLessThanOrEqual(changes.length)
      }),
      { numRuns: 200 },
    )
  })

  it('takes a deleted object’s history whole once its deletion is past the limit, and what a later write starts stays', async () => {
    const kv = new MemoryKv()
    const table = kv.table<[string, string, number]>('history')
    const log = new HistoryLog(table, kv.table('history-index'))
    await put(kv, log, historyRecords([
      { key: 'a', index: 1, value: 'one' },
      { key: 'a', index: 2, value: 'one two' },
      { key: 'a', index: 3, value: null, deleted: true },
      { key: 'b', index: 4, value: 5 },
    ]))
    await kv.write(() => log.prune('s', 4, 100))
    expect(log.page('s', 'a', Number.MAX_SAFE_INTEGER, 10, Infinity)).toEqual({ entries: [], more: false })
    expect(log.page('s', 'b', Number.MAX_SAFE_INTEGER, 10, Infinity)).toEqual({ entries: [{ index: 4, value: 5 }], more: false })
    expect([...table.getKeys({})]).toEqual([['s', 'b', 4]])
  })
})
