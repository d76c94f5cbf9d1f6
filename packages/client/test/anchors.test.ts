import { describe, expect, it } from 'vitest'
import { SteadError, memoryStorage, type ClientStorage } from '../src/index.node.ts'
import { ClientRecords } from '../src/upstream/persist.ts'
import { simWorld } from './helpers/sim-world.ts'

/** Anchors (cursors, selections) of texts and lists, against real relays in simulated time. */
const world = simWorld()

/** One store that outlives the clients opened on it: closing a client leaves it as it was, as a disk does. */
function disk(): () => ClientStorage {
  const store = memoryStorage()
  return () => ({ load: (k) => store.load(k), loadRange: (p) => store.loadRange(p), write: (ch) => store.write(ch), removeRange: (p) => store.removeRange(p), close: async () => undefined })
}

function malformed(fn: () => unknown): void {
  let thrown: unknown
  try {
    fn()
  } catch (err) {
    thrown = err
  }
  expect(thrown).toBeInstanceOf(SteadError)
  expect((thrown as SteadError).reason).toBe('malformed')
}

describe('text anchors', () => {
  it("stay beside their character as another client types at them, 'before' in front of the typing and 'after' behind it", async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    const ta = a.text('doc')
    const tb = b.text('doc')
    await ta.insert(0, 'Hello world')
    await c.until('b has it', () => tb.value === 'Hello world')
    const start = ta.anchor(0)
    const before = ta.anchor(5)
    const after = ta.anchor(5, { assoc: 'after' })
    const end = ta.anchor(11, { assoc: 'after' })
    expect([before, after].map((x) => JSON.parse(JSON.stringify(x)))).toEqual([before, after])
    expect([ta.position(start), ta.position(before), ta.position(after), ta.position(end)]).toEqual([0, 5, 5, 11])
    await tb.insert(5, ', dear')
    await tb.insert(0, '> ')
    await tb.insert(tb.length, '!')
    await c.until('a has it', () => ta.value === '> Hello, dear world!')
    expect([ta.position(start), ta.position(before), ta.position(after), ta.position(end)]).toEqual([0, 7, 13, 20])
    // b resolves a's anchors the same way: they name characters, not indexes.
    expect([tb.position(before), tb.position(after)]).toEqual([7, 13])
    // Their characters deleted: both are where those were.
    await tb.delete(6, 8)
    await c.until('a has the delete', () => ta.value === '> Hellworld!')
    expect([ta.position(before), ta.position(after)]).toEqual([6, 6])
  })

  it('taken right after typing, while the character is an unsigned draft, resolve once it is signed and after a restart from storage', async () => {
    const c = await world.cluster()
    const store = disk()
    const a = await world.client(c, { storage: store() })
    const t = a.text('doc')
    for (const ch of 'Hello') void t.insert(t.length, ch)
    // As an editor does after each keystroke: the anchor beside the character just typed, not signed yet.
    const cursor = t.anchor(5)
    const behind = t.anchor(4, { assoc: 'after' })
    expect(cursor).toContain('~')
    await a.flush()
    expect(t.anchor(5)).not.toContain('~')
    expect(t.position(cursor)).toBe(5)
    await t.insert(0, 'Oh, ')
    expect([t.position(cursor), t.position(behind)]).toEqual([9, 8])
    await a.flush()
    await world.shutdown(a)

    const again = await world.client(c, { storage: store() })
    const t2 = again.text('doc')
    expect(t2.value).toBe('Oh, Hello')
    // Found by the character, not by the index it was taken at (5).
    expect([t2.position(cursor), t2.position(behind)]).toEqual([9, 8])
    await t2.insert(9, '!')
    await t2.insert(0, '-')
    expect([t2.position(cursor), t2.position(behind)]).toEqual([10, 9])
  })

  it("fall back to the index they were taken at while their character has not reached this client, and find it once it has", async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    await a.text('doc').insert(0, 'abc')
    await c.until('b has it', () => b.text('doc').value === 'abc')
    for (const r of c.relays) await r.down()
    // Signed and stored here, sent nowhere yet.
    await b.text('doc').insert(1, 'XYZ')
    const theirs = b.text('doc').anchor(4)
    expect(theirs).not.toContain('~')
    await a.text('doc').insert(0, '12345')
    expect(a.text('doc').position(theirs)).toBe(4)
    for (const r of c.relays) await r.up()
    await c.until('a has b\'s insert', () => a.text('doc').length === 11)
    expect(a.text('doc').value).toBe('12345aXYZbc')
    expect(a.text('doc').position(theirs)).toBe(9)
  })

  it('refuse bad input with malformed, and still take anchors of earlier versions', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const t = a.text('doc')
    await t.insert(0, 'abc')
    for (const index of [-1, 4, 0.5, Number.NaN, '1' as unknown as number]) malformed(() => t.anchor(index))
    malformed(() => t.anchor(0, { assoc: 'left' as 'before' }))
    malformed(() => t.anchor(0, 'after' as unknown as { assoc: 'after' }))
    for (const bad of [5, null, undefined, {}, 'garbage', 't<:0:', 't<zzzzzzz:0:', 't<1:99999999999999999:', `${t.anchor(1).slice(0, -2)}`]) malformed(() => t.position(bad as string))
    // Another object's anchor, of a text or of a list.
    malformed(() => t.position(a.text('other').anchor(0)))
    malformed(() => t.position(a.list('todos').anchor(0)))
    // An anchor that names a character this text never had, in the right format, is not here yet: its index.
    const [head] = t.anchor(2).split(':') as [string]
    expect(t.position(`${head}:2:nope:1.0`)).toBe(2)
    expect(t.position(`${head}:9:nope:1.0`)).toBe(3)
    // Earlier versions' anchors: '' (the start) and the bare id of the character before.
    const bare = t.anchor(2).split(':').slice(2).join(':')
    await t.insert(0, 'xy')
    expect([t.position(''), t.position(bare)]).toEqual([0, 4])
  })
})

describe('list anchors', () => {
  it('follow their element when it moves, on every client, and stay where it was once it is deleted', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    const la = a.list<string>('todos')
    const lb = b.list<string>('todos')
    await la.insert(0, ['milk', 'eggs', 'bread', 'tea'])
    await c.until('b has it', () => lb.length === 4)
    // A drop target after 'eggs', and a selection's end in front of 'bread'.
    const afterEggs = la.anchor(2)
    const beforeBread = la.anchor(2, { assoc: 'after' })
    await lb.move(1, 3)
    await lb.insert(0, ['jam'])
    await c.until('a has it', () => JSON.stringify(la.value) === JSON.stringify(['jam', 'milk', 'bread', 'tea', 'eggs']))
    expect([la.position(afterEggs), la.position(beforeBread)]).toEqual([5, 2])
    expect([lb.position(afterEggs), lb.position(beforeBread)]).toEqual([5, 2])
    await lb.delete(4)
    await c.until('a has the delete', () => la.length === 4)
    expect(la.position(afterEggs)).toBe(4)
    expect(la.position(la.anchor(4, { assoc: 'after' }))).toBe(4)
    for (const index of [-1, 5, 1.5]) malformed(() => la.anchor(index))
    malformed(() => la.position(a.text('notes').anchor(0)))
    malformed(() => la.position(42 as unknown as string))
  })

  it('of an empty list are its start and end', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const l = a.list<number>('empty')
    const start = l.anchor(0)
    const end = l.anchor(0, { assoc: 'after' })
    await l.insert(0, [1, 2, 3])
    expect([l.position(start), l.position(end)]).toEqual([0, 3])
  })
})

describe('the names of signed drafts in storage', () => {
  it('are kept for the last 1,000 envelopes that had drafts, and a record that is not one is skipped', async () => {
    const storage = memoryStorage()
    const records = new ClientRecords(storage, 'bank')
    for (let seq = 1; seq <= 1003; seq++) await storage.write(records.names(seq, `env${seq}`, new Map([[`~tab:${seq}`, { n: 0, shift: 0 }]])))
    expect(records.names(1004, 'env1004', new Map())).toEqual([])
    await storage.write([{ key: ['bank', 'names', 'zz'], value: new Uint8Array([1, 2, 3]) }])
    const restored = await new ClientRecords(storage, 'bank').restore()
    expect(restored.names).toHaveLength(1000)
    expect(restored.names[0]).toEqual({ prefix: 'env4', places: new Map([['~tab:4', { n: 0, shift: 0 }]]) })
  })
})
