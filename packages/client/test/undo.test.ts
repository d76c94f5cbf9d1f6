import 'fake-indexeddb/auto'
import { SimCluster } from '@stead/sim'
import { afterEach, describe, expect, it } from 'vitest'
import type { SafeResult, Space, StackItemPoppedEvent, UndoOutcome } from '../src/index.node.ts'
import { commitUntil, simWorld } from './helpers/sim-world.ts'
import { FakeOrigin } from './helpers/tabs.ts'

/** Undo managers on real relays in simulated time: the client's clock is the cluster's, so capture grouping is exact. */
const world = simWorld()

/** Two clients of one space that see each other's updates. */
async function pair(c: SimCluster): Promise<[Space, Space]> {
  const a = await world.client(c)
  const b = await world.client(c)
  await c.until('both online', () => a.status.online && b.status.online)
  return [a, b]
}

/** Lets the relays order until every client's prospective values are stable (G5) and `check` holds. */
async function settle(c: SimCluster, spaces: readonly Space[], check: () => boolean = () => true): Promise<void> {
  for (const s of spaces) void s.flush().catch(() => undefined)
  await commitUntil(c, 'everything decided', () => spaces.every((s) => s.status.pending === 0) && check())
}

describe('undo manager', () => {
  it('undoes a burst of typing as one item, by captureTimeout on the client clock, and redoes it', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const text = a.text('doc')
    const undo = a.undoManager([text])
    expect(undo.canUndo()).toBe(false)
    for (const [i, ch] of [...'Hello'].entries()) void text.insert(i, ch)
    // 400 ms after the last keystroke: still the same burst.
    await c.advance(400)
    void text.insert(5, '!')
    await c.advance(500)
    for (const [i, ch] of [...' you'].entries()) void text.insert(6 + i, ch)
    expect(text.value).toBe('Hello! you')
    expect(undo.undoStack.length).toBe(2)
    expect(undo.undoStack[0]?.keys).toEqual(['doc'])

    expect(undo.undo()).toBe(true)
    expect(text.value).toBe('Hello!')
    expect(undo.undo()).toBe(true)
    expect(text.value).toBe('')
    expect(undo.canUndo()).toBe(false)
    expect(undo.undo()).toBe(false)
    expect(undo.redoStack.length).toBe(2)

    expect(undo.redo()).toBe(true)
    expect(text.value).toBe('Hello!')
    expect(undo.redo()).toBe(true)
    expect(text.value).toBe('Hello! you')
    expect(undo.canRedo()).toBe(false)
    // Undo and redo are updates like any other: the stable text ends where the prospective one is.
    await settle(c, [a], () => text.stable === text.value)
    expect(undo.undo()).toBe(true)
    expect(text.value).toBe('Hello!')
    await settle(c, [a], () => text.stable === 'Hello!')
  })

  it('starts a new item after stopCapturing, and a new edit empties the redo stack', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const list = a.list<string>('todo')
    const undo = a.undoManager(['todo'])
    const cleared: unknown[] = []
    undo.on('stack-cleared', (e) => cleared.push(e))
    void list.push('a')
    void list.push('b')
    undo.stopCapturing()
    void list.push('c')
    expect(undo.undoStack.length).toBe(2)
    expect(undo.undo()).toBe(true)
    expect(list.value).toEqual(['a', 'b'])
    expect(undo.canRedo()).toBe(true)
    void list.push('d')
    expect(undo.canRedo()).toBe(false)
    expect(cleared).toEqual([{ undoStackCleared: false, redoStackCleared: true }])
    // The edit after an undo starts its own item.
    expect(undo.undo()).toBe(true)
    expect(list.value).toEqual(['a', 'b'])
    expect(undo.undo()).toBe(true)
    expect(list.value).toEqual([])
    undo.clear()
    expect(cleared).toHaveLength(2)
    expect(undo.canRedo()).toBe(false)
    // The oldest items go past maxItems; a subscriber can tell an undo's changes from the app's.
    const short = a.undoManager(list, { captureTimeout: 0, maxItems: 2 })
    for (const v of ['x', 'y', 'z']) void list.push(v)
    expect(short.undoStack.length).toBe(2)
    const seen: boolean[] = []
    const stop = list.subscribe(() => seen.push(short.undoing))
    expect(short.undo()).toBe(true)
    expect(short.undo()).toBe(true)
    expect(short.undo()).toBe(false)
    stop()
    expect(list.value).toEqual(['x'])
    expect(seen).toEqual([true, true])
  })

  it("takes back this client's own edits only, never another user's", async () => {
    const c = await world.cluster()
    const [a, b] = await pair(c)
    const ta = a.text('doc')
    const tb = b.text('doc')
    const ra = a.register<string>('title')
    const rb = b.register<string>('title')
    const undo = a.undoManager([ta, ra])
    void ta.insert(0, 'Hello')
    void ra.set('draft')
    await settle(c, [a, b], () => tb.value === 'Hello' && rb.value === 'draft')
    // The other user types into the text, deletes part of this client's word, and overwrites the register.
    void tb.insert(5, ' world')
    void tb.delete(0, 1)
    void rb.set('theirs')
    await settle(c, [a, b], () => ta.value === 'ello world' && ra.value === 'theirs')
    expect(undo.undo()).toBe(true)
    // Only this client's characters that still show go; the register keeps the other user's write.
    expect(ta.value).toBe(' world')
    expect(ra.value).toBe('theirs')
    await settle(c, [a, b], () => tb.value === ' world')
    expect(rb.value).toBe('theirs')
    // b's own manager was not told of a's edits: nothing to undo there.
    expect(b.undoManager([tb]).canUndo()).toBe(false)
  })

  it('restores the selection an editor keeps in meta', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const text = a.text('doc')
    const undo = a.undoManager([text])
    // An editor: it keeps its cursor as an anchor, which stays beside its character as others edit.
    let cursor = 0
    undo.on('stack-item-added', ({ stackItem }) => stackItem.meta.set('cursor', text.anchor(cursor)))
    undo.on('stack-item-popped', ({ stackItem }) => (cursor = text.position(stackItem.meta.get('cursor') as string)))
    void text.insert(0, 'abc')
    cursor = 3
    await c.advance(1000)
    cursor = 1
    void text.insert(1, 'XY')
    cursor = 3
    expect(undo.undo()).toBe(true)
    expect(text.value).toBe('abc')
    expect(cursor).toBe(1)
    cursor = 2
    expect(undo.redo()).toBe(true)
    expect(text.value).toBe('aXYbc')
    // Where the cursor was when the undo was made: after the 'Y' it took back, now after the redone one.
    expect(cursor).toBe(3)
  })

  it('passes over an update the stable order rejected and undoes the one before it', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const account = a.counter('acct', { min: 0 })
    const undo = a.undoManager([account])
    void account.increment(5)
    undo.stopCapturing()
    // Past the bound here: held back, then rejected.
    let result: SafeResult | undefined
    void account.decrement(8, { safe: true }).then((r) => (result = r as SafeResult))
    expect(undo.undoStack.length).toBe(2)
    await settle(c, [a], () => result !== undefined)
    expect(result).toMatchObject({ status: 'rejected', reason: 'invariant' })
    expect(account.value).toBe(5)
    expect(undo.undo()).toBe(true)
    expect(account.value).toBe(0)
    expect(undo.canUndo()).toBe(false)
    expect(undo.redoStack.length).toBe(1)
    await settle(c, [a], () => account.stable === 0)
  })

  it('passes over an update that showed and was rejected later, whichever of two concurrent ones the order took', async () => {
    const c = await world.cluster()
    const [a, b] = await pair(c)
    const ca = a.counter('seats', { max: 10 })
    const cb = b.counter('seats', { max: 10 })
    const ua = a.undoManager([ca])
    const ub = b.undoManager([cb])
    void ca.increment(2)
    await settle(c, [a, b], () => cb.stable === 2)
    ua.stopCapturing()
    // Both fit where they are made; together they cross max: the stable order rejects the later one.
    void ca.increment(5)
    void cb.increment(6)
    expect([ca.value, cb.value]).toEqual([7, 8])
    await settle(c, [a, b], () => ca.stable === ca.value && cb.stable === cb.value && ca.value === cb.value)
    const aRejected = ca.stable === 8
    if (aRejected) {
      // a's increment was rejected (and undone here): undo takes back the one before it.
      expect(ua.undo()).toBe(true)
      expect(ca.value).toBe(6)
      expect(ub.undo()).toBe(true)
      // b's undo takes back its own increment; a's undo reaches b later (both end at 0 below).
      expect(cb.value).toBe(2)
    } else {
      expect(ca.stable).toBe(7)
      // b's was rejected: b has nothing to undo; a's undo takes back its committed increment.
      expect(ub.undo()).toBe(false)
      expect(ub.canUndo()).toBe(false)
      expect(cb.value).toBe(7)
      expect(ua.undo()).toBe(true)
      expect(ca.value).toBe(2)
    }
    await settle(c, [a, b], () => ca.stable === ca.value && cb.value === ca.value)
    // Every undo taken back on both: 2 + 6 - 2 - 6, or 2 + 5 - 5.
    expect(ca.value).toBe(aRejected ? 0 : 2)
  })

  it("reports a bounded counter's undo that its rights cannot cover, and never throws", async () => {
    const c = await world.cluster()
    const [a, b] = await pair(c)
    const seats = a.boundedCounter('seats', { min: 0, initial: 0 })
    const undo = a.undoManager([seats])
    const popped: StackItemPoppedEvent[] = []
    undo.on('stack-item-popped', (e) => popped.push(e))
    // An increment gives this client 5 rights; it gives them away.
    void seats.increment(5)
    await settle(c, [a, b])
    await seats.transfer(5, b.authorId)
    await settle(c, [a, b], () => seats.rights === 0)
    // Taking the increment back spends 5: the pool has none to claim.
    expect(undo.undo()).toBe(true)
    let outcome: UndoOutcome | undefined
    void (popped[0] as StackItemPoppedEvent).settled.then((o) => (outcome = o))
    await settle(c, [a, b], () => outcome !== undefined)
    expect(outcome?.refused).toEqual([expect.objectContaining({ keys: ['seats'], reason: 'invariant' })])
    expect(seats.value).toBe(5)
    // Its redo would take back a spend that never happened.
    expect(undo.redo()).toBe(false)
  })

  it('takes a safe transaction back atomically: a transfer whose credit was spent since is refused whole', async () => {
    const c = await world.cluster()
    const [a, b] = await pair(c)
    const alice = a.counter('alice', { min: 0 })
    const bob = a.counter('bob', { min: 0 })
    const undo = a.undoManager([alice, bob])
    const outcomes: Array<Promise<UndoOutcome>> = []
    undo.on('stack-item-popped', (e) => outcomes.push(e.settled))
    void alice.increment(100)
    undo.stopCapturing()
    let transfer: SafeResult | undefined
    void a
      .safe((tx) => {
        tx.counter('alice').decrement(30)
        tx.counter('bob').increment(30)
      })
      .then((r) => (transfer = r))
    await settle(c, [a, b], () => transfer !== undefined)
    expect(transfer).toMatchObject({ status: 'committed' })
    // Undone as one safe group: both at once.
    expect(undo.undo()).toBe(true)
    expect([alice.value, bob.value]).toEqual([100, 0])
    await settle(c, [a, b], () => alice.stable === 100)
    expect(await outcomes[0]).toEqual({ refused: [] })
    expect(undo.redo()).toBe(true)
    expect([alice.value, bob.value]).toEqual([70, 30])
    await settle(c, [a, b], () => bob.stable === 30)
    // Another user spends bob's 30: taking the transfer back would take bob below 0.
    void b.counter('bob', { min: 0 }).decrement(30)
    await settle(c, [a, b], () => bob.stable === 0)
    expect(undo.undo()).toBe(true)
    expect([alice.value, bob.value]).toEqual([70, 0])
    await settle(c, [a, b])
    expect(await outcomes[2]).toEqual({ refused: [expect.objectContaining({ keys: expect.arrayContaining(['alice', 'bob']), reason: 'invariant' })] })
    expect([alice.stable, bob.stable]).toEqual([70, 0])
    // What the refused undo would redo never happened.
    expect(undo.redo()).toBe(false)
    // The increment before it is still there to undo, by normal rules: alice holds 70 of its 100 now, so it waits.
    expect(undo.undo()).toBe(true)
    expect(alice.value).toBe(70)
    expect(alice.pending).toEqual([{ amount: -100, own: true }])
  })

  it('follows what an undo put back: undoing the insert after undoing a delete of part of it removes it all', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const text = a.text('doc')
    const undo = a.undoManager([text])
    void text.insert(0, 'Hello')
    undo.stopCapturing()
    void text.delete(2, 3)
    await settle(c, [a], () => text.stable === 'He')
    expect(undo.undo()).toBe(true)
    expect(text.value).toBe('Hello')
    expect(undo.undo()).toBe(true)
    expect(text.value).toBe('')
    expect(undo.redo()).toBe(true)
    expect(text.value).toBe('Hello')
    expect(undo.redo()).toBe(true)
    expect(text.value).toBe('He')
    await settle(c, [a], () => text.stable === 'He')
    expect(undo.undo()).toBe(true)
    expect(undo.undo()).toBe(true)
    expect(text.value).toBe('')
    await settle(c, [a], () => text.stable === '')
  })

  it("leaves another manager's undo to it, and does nothing once destroyed or closed", async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const text = a.text('doc')
    const first = a.undoManager(text)
    const second = a.undoManager('doc')
    expect(() => a.undoManager([text, 3 as unknown as string])).toThrow(expect.objectContaining({ reason: 'malformed' }))
    expect(() => a.undoManager(text, { captureTimeout: -1 })).toThrow(expect.objectContaining({ reason: 'malformed' }))
    void text.insert(0, 'abc')
    expect(first.undo()).toBe(true)
    expect(text.value).toBe('')
    // The second one did not take the first one's undo as an edit: its item has nothing left to take back.
    expect(second.canRedo()).toBe(false)
    expect(second.undo()).toBe(false)
    expect(first.redo()).toBe(true)
    expect(text.value).toBe('abc')
    first.destroy()
    void text.insert(3, 'd')
    expect(first.canUndo()).toBe(false)
    expect(first.undo()).toBe(false)
    expect(second.undo()).toBe(true)
    expect(text.value).toBe('abc')
    await a.close()
    expect(second.undo()).toBe(false)
    expect(() => a.undoManager([text])).toThrow(expect.objectContaining({ reason: 'closed' }))
  })
})

describe('undo on each type', () => {
  it('counter, set and register', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const counter = a.counter('n')
    const set = a.set<string>('tags')
    const reg = a.register<{ title: string }>('card')
    const undo = a.undoManager([counter, set, reg], { captureTimeout: 0 })
    void counter.increment(3)
    void counter.decrement(1)
    void set.add('x')
    void set.add('y')
    void set.delete('x')
    void reg.set({ title: 'one' })
    void reg.set({ title: 'two' })
    expect(undo.undoStack.length).toBe(7)
    const states = (): unknown[] => [counter.value, set.values().sort(), reg.value]
    const seen = [states()]
    while (undo.undo()) seen.push(states())
    // The register's first write stays: a register has no empty state to go back to.
    expect(seen).toEqual([
      [2, ['y'], { title: 'two' }],
      [2, ['y'], { title: 'one' }],
      [2, ['x', 'y'], { title: 'one' }],
      [2, ['x'], { title: 'one' }],
      [2, [], { title: 'one' }],
      [3, [], { title: 'one' }],
      [0, [], { title: 'one' }],
    ])
    while (undo.redo()) seen.push(states())
    expect(seen.at(-1)).toEqual([2, ['y'], { title: 'two' }])
    await settle(c, [a], () => counter.stable === 2 && set.stableValues().join() === 'y')
  })

  it("leaves another user's add of the same element when it takes back its own", async () => {
    const c = await world.cluster()
    const [a, b] = await pair(c)
    const sa = a.set<string>('tags')
    const sb = b.set<string>('tags')
    const undo = a.undoManager([sa])
    void sa.add('x')
    await settle(c, [a, b], () => sb.has('x'))
    void sb.add('x')
    await settle(c, [a, b])
    expect(undo.undo()).toBe(true)
    expect(sa.has('x')).toBe(true)
    void sb.delete('x')
    await settle(c, [a, b], () => !sa.has('x') && !sb.has('x'))
  })

  it('map fields, nested objects included', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const card = a.map('card')
    const undo = a.undoManager([card], { captureTimeout: 0 })
    void card.set('done', false)
    const title = card.text('title')
    void title.insert(0, 'Plan')
    void card.set('done', true)
    void card.delete('title')
    expect(card.value).toEqual({ done: true })
    expect(undo.undo()).toBe(true)
    // The nested text comes back with its content.
    expect(card.value).toEqual({ done: true, title: 'Plan' })
    expect(undo.undo()).toBe(true)
    expect(card.value).toEqual({ done: false, title: 'Plan' })
    expect(undo.undo()).toBe(true)
    expect(card.value).toEqual({ done: false, title: '' })
    expect(undo.undo()).toBe(true)
    expect(card.value).toEqual({ done: false })
    expect(undo.undo()).toBe(true)
    expect(card.value).toEqual({})
    while (undo.redo());
    expect(card.value).toEqual({ done: true })
    await settle(c, [a], () => JSON.stringify(card.stable) === JSON.stringify(card.value))
  })

  it('list inserts, deletes and moves, nested objects included', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const list = a.list<string>('todo')
    const undo = a.undoManager([list], { captureTimeout: 0 })
    void list.insert(0, ['a', 'b', 'c', 'd'])
    const note = list.insertMap(4)
    void note.set('text', 'milk')
    void list.move(0, 2)
    void list.delete(3, 2)
    expect(list.value).toEqual(['b', 'c', 'a'])
    const seen = [list.value]
    while (undo.undo()) seen.push(list.value)
    expect(seen).toEqual([
      ['b', 'c', 'a'],
      ['b', 'c', 'a', 'd', { text: 'milk' }],
      ['a', 'b', 'c', 'd', { text: 'milk' }],
      ['a', 'b', 'c', 'd', {}],
      ['a', 'b', 'c', 'd'],
      [],
    ])
    while (undo.redo()) seen.push(list.value)
    expect(seen.at(-1)).toEqual(['b', 'c', 'a'])
    await settle(c, [a], () => JSON.stringify(list.stable) === JSON.stringify(list.value))
  })

  it('formatting: undo sets each character back to what it showed, partly bold and comments of others included; redo formats again', async () => {
    const c = await world.cluster()
    const [a, b] = await pair(c)
    const marks = { comment: { expand: 'none', multiple: true } } as const
    const text = a.text('doc', { marks })
    const theirs = b.text('doc', { marks })
    await text.insert(0, 'Hello brave world')
    await text.format(6, 5, { bold: true })
    await c.until('b has it', () => theirs.value === 'Hello brave world')
    await theirs.format(0, 5, { comment: { id: 'b1' } })
    await c.until('a sees b\'s comment', () => text.spans[0]?.marks.comment !== undefined)
    const undo = a.undoManager([text])
    const before = text.spans
    // Bold over a range that is partly bold already, and a comment of this client's over b's.
    await text.format(0, 17, { bold: true })
    undo.stopCapturing()
    await text.format(0, 11, { comment: { id: 'a1' } })
    expect(text.spans.every((s) => s.marks.bold === true)).toBe(true)
    expect(undo.undo()).toBe(true)
    expect(text.spans[0]?.marks.comment).toEqual([{ id: 'b1' }])
    expect(undo.undo()).toBe(true)
    expect(text.spans).toEqual(before)
    expect(undo.redo()).toBe(true)
    expect(text.spans.every((s) => s.marks.bold === true)).toBe(true)
    await settle(c, [a, b], () => theirs.spans.length === text.spans.length)
    expect(theirs.stableSpans).toEqual(text.spans)
  })

  it("never takes another user's characters for its own: a re-insert a full text holds back stands for nothing", async () => {
    const c = await world.cluster()
    const [a, b] = await pair(c)
    const text = a.text('doc', { maxLength: 6 })
    const theirs = b.text('doc', { maxLength: 6 })
    const undo = a.undoManager([text])
    await text.insert(0, 'abc')
    await settle(c, [a, b], () => theirs.stable === 'abc')
    await theirs.insert(3, '123')
    await settle(c, [a, b], () => text.stable === 'abc123')
    undo.stopCapturing()
    await text.delete(0, 3)
    await settle(c, [a, b], () => theirs.stable === '123')
    // The other user fills the text to its maxLength, in front of where "abc" lies.
    await theirs.insert(0, 'xyz')
    await settle(c, [a, b], () => text.stable === 'xyz123')
    // Taking the delete back would go past maxLength: the re-insert is held back and shows nothing
    // (where it would go, between "xyz" and "123", shows the other's "123").
    expect(undo.undo()).toBe(true)
    expect(text.value).toBe('xyz123')
    // Taking the typing back finds none of its characters (nor anything standing for them): the other's stay.
    undo.undo()
    expect(text.value).toBe('xyz123')
    await settle(c, [a, b])
    expect(theirs.stable).toBe('xyz123')
  })

  it('text deletes come back where they were, around what others typed since', async () => {
    const c = await world.cluster()
    const [a, b] = await pair(c)
    const ta = a.text('doc')
    const tb = b.text('doc')
    void tb.insert(0, 'one two three')
    await settle(c, [a, b], () => ta.value === 'one two three')
    const undo = a.undoManager([ta])
    void ta.delete(3, 4)
    expect(ta.value).toBe('one three')
    await settle(c, [a, b], () => tb.value === 'one three')
    void tb.insert(3, '!')
    void tb.insert(0, '> ')
    await settle(c, [a, b], () => ta.value === '> one! three')
    expect(undo.undo()).toBe(true)
    expect(ta.value).toBe('> one! two three')
    await settle(c, [a, b], () => tb.value === ta.value)
    expect(undo.redo()).toBe(true)
    expect(ta.value).toBe('> one! three')
    await settle(c, [a, b], () => tb.value === ta.value && tb.stable === ta.value)
  })
})

describe('undo in a tab that follows another', () => {
  const closing: Array<() => Promise<void>> = []
  afterEach(async () => {
    for (const close of closing.splice(0).reverse()) await close()
  })

  it("takes back the following tab's own edits, named as the leader signed them, and passes over its rejected update", async () => {
    const c = await SimCluster.start()
    closing.push(() => c.close())
    const origin = new FakeOrigin()
    const leader = await origin.tab(c.clientOptions())
    const follower = await origin.tab(c.clientOptions())
    closing.push(async () => {
      await follower.close()
      await leader.close()
    })
    expect(follower.leading).toBe(false)
    const [sa, sb] = await Promise.all([leader.space('bank'), follower.space('bank')])
    await c.until('online in both tabs', () => sa.status.online && sb.status.online)
    const text = sb.text('doc')
    const tags = sb.set<string>('tags')
    const seats = sb.counter('seats', { max: 10 })
    const undo = sb.undoManager([text, tags, seats], { captureTimeout: 0 })
    void text.insert(0, 'Hello')
    void tags.add('x')
    void seats.increment(5)
    let result: SafeResult | undefined
    // Past max where it is made: held back, then rejected.
    void seats.increment(8, { safe: true }).then((r) => (result = r as SafeResult))
    // The leader signed them all (the drafts' ids are the envelope's now) and the stable order decided.
    await c.until('decided', () => (result !== undefined && text.stable === 'Hello' && seats.stable === 5) || undefined)
    expect(result).toMatchObject({ status: 'rejected', reason: 'invariant' })
    expect(undo.undo()).toBe(true)
    expect(seats.value).toBe(0)
    expect(undo.undo()).toBe(true)
    expect(tags.values()).toEqual([])
    expect(undo.undo()).toBe(true)
    expect(text.value).toBe('')
    expect(undo.canUndo()).toBe(false)
    const ta = sa.text('doc')
    await c.until('the leader tab and the stable order agree', () => (ta.value === '' && text.stable === '' && sa.set('tags').stableValues().length === 0 && sa.counter('seats', { max: 10 }).stable === 0) || undefined)
  })
})
