import { encode } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { HistoryLog, type HistoryRecord } from '../src/store/history-log.ts'
import { HistoryRetention, type SpaceRetention } from '../src/store/history-retention.ts'
import { MemoryKv } from '../src/store/kv.ts'

const HOUR = 3_600_000
const DAY = 24 * HOUR

/** A relay's histories and the retention over them, on one in-memory store; `feed` records what it was told to prune of the commits. */
function world() {
  const kv = new MemoryKv()
  // As the store wires them: entries are listed by stable index only in spaces with a retention.
  const log: HistoryLog = new HistoryLog(kv.table('history'), kv.table('history-index'), (space) => retention.covers(space))
  const feed: Array<[string, number]> = []
  const retention: HistoryRetention = new HistoryRetention(kv.table('history-retention'), kv.table('history-stamps'), log, (space, below) => {
    feed.push([space, below])
    return 0
  })
  return {
    log,
    /** Entries listed by stable index and not swept yet. */
    unswept: () => [...kv.table('history-index').getKeys({})].length,
    /** The spaces with entries listed by stable index. */
    listedSpaces: () => [...new Set([...kv.table<[string, number, string]>('history-index').getKeys({})].map((k) => k[0]))],
    feed,
    put: (rs: readonly HistoryRecord[]) => kv.write(() => rs.forEach((r) => log.put(r))),
    compact: (spaces: readonly SpaceRetention[], now: number, budget?: number) => kv.write(() => retention.compact(spaces, now, budget)),
    indexes: (space: string, key: string) => log.page(space, key, Number.MAX_SAFE_INTEGER, 1_000_000, Infinity).entries.map((e) => e.index).reverse(),
  }
}

/** Object `key` of space `space` took the value `index` at each of these stable indexes. */
const changes = (space: string, key: string, indexes: readonly number[]): HistoryRecord[] => indexes.map((index) => ({ space, key, index, value: index }))
const range = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i)

describe('HistoryRetention: what relays keep of a space’s history', () => {
  it('keeps the entries of the last N stable indexes, and the value in force before them; other spaces keep everything', async () => {
    const w = world()
    await w.put([...changes('s', 'a', range(1, 50)), ...changes('other', 'a', range(1, 50))])
    await w.compact([{ space: 's', stableIndex: 50, deleted: false, keep: { entries: 10, days: 0 } }, { space: 'other', stableIndex: 50, deleted: false }], 0)
    expect(w.indexes('s', 'a')).toEqual(range(40, 50))
    expect(w.indexes('other', 'a')).toEqual(range(1, 50))
    // A space without a retention costs no second row per entry, before or after.
    await w.put([...changes('s', 'a', [51]), ...changes('other', 'a', [51])])
    expect(w.listedSpaces()).toEqual(['s'])
    // The stored commits are the operator's to keep (--retain-updates), for clients resuming.
    expect(w.feed).toEqual([])
    // Back to keeping everything: later entries stay.
    await w.put(changes('s', 'a', range(52, 80)))
    await w.compact([{ space: 's', stableIndex: 80, deleted: false }], 0)
    expect(w.indexes('s', 'a')).toEqual(range(40, 80))
  })

  it('keeps the last D days by the stamps of its snapshots, and ages out a space that went quiet', async () => {
    const w = world()
    const keep = { entries: 0, days: 1 }
    const t0 = 1_000 * DAY
    await w.put(changes('s', 'a', range(1, 10)))
    await w.compact([{ space: 's', stableIndex: 10, deleted: false, keep }], t0)
    await w.put(changes('s', 'a', range(11, 20)))
    await w.compact([{ space: 's', stableIndex: 20, deleted: false, keep }], t0 + 2 * HOUR)
    expect(w.indexes('s', 'a')).toEqual(range(1, 20))
    // A day and an hour on: what the space held at t0 is older than a day.
    await w.put(changes('s', 'a', range(21, 25)))
    await w.compact([{ space: 's', stableIndex: 25, deleted: false, keep }], t0 + DAY + HOUR)
    expect(w.indexes('s', 'a')).toEqual(range(10, 25))
    // Quiet since: other spaces' snapshots age it out, but for the value in force.
    await w.compact([], t0 + 2 * DAY + 2 * HOUR)
    expect(w.indexes('s', 'a')).toEqual([25])
  })

  it('takes a deleted space’s histories, objects deleted with it whole, and its commits but the latest', async () => {
    const w = world()
    await w.put([...changes('s', '$policy', [1, 4]), ...changes('s', 'a', [2, 3]), { space: 's', key: 'a', index: 4, value: null, deleted: true }, { space: 's', key: 'b', index: 2, value: 'x' }, { space: 's', key: 'b', index: 4, value: null, deleted: true }])
    await w.compact([{ space: 's', stableIndex: 4, deleted: true }], 0)
    expect([w.indexes('s', 'a'), w.indexes('s', 'b'), w.indexes('s', '$policy')]).toEqual([[], [], [4]])
    // (The store keeps the latest commit, whatever the limit.)
    expect(w.feed).toEqual([['s', 4]])
    // Pruned to the end, it leaves the sweep.
    await w.compact([], 0)
    expect(w.feed).toEqual([['s', 4]])
  })

  it('prunes a bounded number of entries per compaction, going on where it stopped, over every space', async () => {
    const w = world()
    const spaces = ['p', 'q', 'r']
    for (const space of spaces) for (let k = 0; k < 20; k++) await w.put(changes(space, `o${k}`, range(1, 10).map((i) => i * 20 + k)))
    const all: SpaceRetention[] = spaces.map((space) => ({ space, stableIndex: 220, deleted: false, keep: { entries: 1, days: 0 } }))
    const left = () => spaces.flatMap((space) => range(0, 19).flatMap((k) => w.indexes(space, `o${k}`))).length
    // 600 entries stored before the spaces had a retention: listed by stable index first, then swept, about 50
    // of them per compaction (objects' entries and spaces visited cost too), from where the last stopped.
    expect(w.unswept()).toBe(0)
    await w.compact(all, 0, 50)
    const unswept = [w.unswept()]
    expect(unswept[0]).toBeLessThanOrEqual(50)
    while ((unswept.length < 13 || unswept.at(-1)! > 0) && unswept.length < 200) {
      await w.compact([], 0, 50)
      unswept.push(w.unswept())
    }
    for (let i = 1; i < unswept.length; i++) expect(Math.abs(unswept[i]! - unswept[i - 1]!)).toBeLessThanOrEqual(50)
    expect(unswept.at(-1)).toBe(0)
    expect(unswept.length).toBeLessThanOrEqual(80)
    // Each object's last entry is left.
    expect(left()).toBe(3 * 20)
    expect(encode(w.log.page('q', 'o7', Number.MAX_SAFE_INTEGER, 10, Infinity))).toEqual(encode({ entries: [{ index: 207, value: 207 }], more: false }))
  })

  it('prunes a long-lived object a bounded number of entries at a time', async () => {
    const w = world()
    await w.put(changes('s', 'a', range(1, 1000)))
    await w.compact([{ space: 's', stableIndex: 1000, deleted: false, keep: { entries: 1, days: 0 } }], 0, 10)
    expect(w.indexes('s', 'a').length).toBeGreaterThanOrEqual(980)
    let compactions = 1
    while (w.indexes('s', 'a').length > 2 && compactions < 1000) {
      await w.compact([], 0, 10)
      compactions++
    }
    expect(w.indexes('s', 'a')).toEqual([999, 1000])
    expect(compactions).toBeGreaterThan(50)
  })
})
