import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { CollabList, validateOp, type ListOp, type OpContext, type RegisterValue } from '../src/crdt/index.ts'

interface Made {
  readonly op: ListOp
  readonly ctx: OpContext
}

let counter = 0
function edit(l: CollabList, replica: string, make: (l: CollabList) => ListOp | undefined): Made | undefined {
  const op = make(l)
  if (!op) return undefined
  const made = { op, ctx: { replica, tag: `${replica}:${counter++}` } }
  l.apply(op, made.ctx)
  return made
}

const values = (l: CollabList): RegisterValue[] => l.value().map((e) => ('value' in e ? e.value : e.name))

function deliver(l: CollabList, ops: ReadonlyArray<Made | undefined>): void {
  for (const m of ops) if (m) l.apply(m.op, m.ctx)
}

describe('list: a FugueMax sequence whose elements move', () => {
  it('inserts, moves and deletes by index', () => {
    const l = new CollabList()
    edit(l, 'a', (x) => x.insertOp(0, ['milk', 'eggs', 'bread']))
    edit(l, 'a', (x) => x.moveOp(2, 0))
    expect(values(l)).toEqual(['bread', 'milk', 'eggs'])
    edit(l, 'a', (x) => x.moveOp(0, 2))
    expect(values(l)).toEqual(['milk', 'eggs', 'bread'])
    edit(l, 'a', (x) => x.deleteOp(1, 1))
    expect(values(l)).toEqual(['milk', 'bread'])
    expect(l.moveOp(5, 0)).toBeUndefined()
  })

  it('two concurrent moves of one element leave it once, at one place, everywhere', () => {
    const base = new CollabList()
    const start = edit(base, 'o', (x) => x.insertOp(0, ['a', 'b', 'c', 'd']))
    const p = new CollabList()
    const q = new CollabList()
    deliver(p, [start])
    deliver(q, [start])
    // Both move 'd' to the top; q also moves 'a' to the end.
    const m1 = edit(p, 'p', (x) => x.moveOp(3, 0))
    const m2 = edit(q, 'q', (x) => x.moveOp(3, 0))
    const m3 = edit(q, 'q', (x) => x.moveOp(1, 3))
    deliver(p, [m2, m3])
    deliver(q, [m1])
    expect(values(p)).toEqual(values(q))
    expect([...values(p)].sort()).toEqual(['a', 'b', 'c', 'd'])
    expect(values(p)[0]).toBe('d')
  })

  it('a move concurrent with a delete of the element leaves it deleted; undoing the delete brings it back at the moved place', () => {
    const l = new CollabList()
    deliver(l, [edit(new CollabList(), 'o', (x) => x.insertOp(0, ['a', 'b', 'c']))])
    const r = l.clone()
    const mv = edit(l, 'p', (x) => x.moveOp(0, 2)) as Made
    const del = edit(r, 'q', (x) => x.deleteOp(0, 1)) as Made
    deliver(l, [del])
    deliver(r, [mv])
    expect(values(l)).toEqual(['b', 'c'])
    expect(values(r)).toEqual(values(l))
    l.apply(l.inverse(del.op, del.ctx), del.ctx)
    expect(values(l)).toEqual(['b', 'c', 'a'])
  })

  it('refuses what breaks maxLength on the stable path, and malformed ops', () => {
    const l = new CollabList({ maxLength: 2 })
    expect(l.tryApply(l.insertOp(0, [1, 2]), { replica: 'a', tag: 'a:1' }).ok).toBe(true)
    const r = l.tryApply(l.insertOp(2, [3]), { replica: 'a', tag: 'a:2' })
    expect(r.ok ? 'ok' : r.reason).toBe('invariant')
    expect(values(l)).toEqual([1, 2])
    const d = { type: 'list', bounds: {} } as const
    expect(validateOp(d, ['i', '', 1, '', []])).toMatch(/1 to/)
    expect(validateOp(d, ['o', '', 1, '', ['nope'], 'x1'])).toMatch(/unknown object type/)
    expect(validateOp(d, ['o', '', 1, '', ['t', null], 'no spaces'])).toMatch(/name/)
    expect(validateOp(d, ['o', '', 1, '', ['t', null], 'card-1'])).toBeNull()
    expect(validateOp(d, ['m', 'bad', '', 1, '', 1])).toMatch(/element/)
    expect(validateOp(d, ['M'])).toMatch(/unknown/)
    expect(validateOp(d, ['i', '', 1, '', [undefined]])).toMatch(/msgpack/)
  })
})

const editArb = fc.record({
  replica: fc.integer({ min: 0, max: 2 }),
  kind: fc.constantFrom('ins', 'ins', 'obj', 'del', 'mov', 'mov'),
  at: fc.nat(),
  to: fc.nat(),
  n: fc.integer({ min: 1, max: 3 }),
  sync: fc.boolean(),
})

let value = 0
function history(edits: ReadonlyArray<{ replica: number; kind: string; at: number; to: number; n: number; sync: boolean }>): { made: Made[]; replicas: CollabList[] } {
  const replicas = [new CollabList(), new CollabList(), new CollabList()]
  const seen = [0, 0, 0]
  const made: Made[] = []
  for (const e of edits) {
    const l = replicas[e.replica] as CollabList
    if (e.sync) {
      deliver(l, made.slice(seen[e.replica]).filter((m) => m.ctx.replica !== `r${e.replica}`))
      seen[e.replica] = made.length
    }
    const len = l.length
    const m = edit(l, `r${e.replica}`, (x) =>
      e.kind === 'ins'
        ? x.insertOp(e.at % (len + 1), Array.from({ length: e.n }, () => value++))
        : e.kind === 'obj'
          ? x.insertObjectOp(e.at % (len + 1), ['t', null], `n${value++}`)
          : len === 0 ? undefined : e.kind === 'del' ? x.deleteOp(e.at % len, e.n) : x.moveOp(e.at % len, e.to % len),
    )
    if (m) made.push(m)
  }
  return { made, replicas }
}

function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items]
  let s = seed >>> 0
  for (let i = out.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0
    const j = s % (i + 1)
    ;[out[i], out[j]] = [out[j] as T, out[i] as T]
  }
  return out
}

describe('list: maxLength in the stable order', () => {
  it('a rejected insert leaves no trace (replicas that never saw it hold the same state)', () => {
    const l = new CollabList({ maxLength: 1 })
    expect(l.tryApply(['i', '', 1, '', ['a']], { replica: 'a', tag: 'a:1' }).ok).toBe(true)
    const before = JSON.stringify(l.snapshot())
    expect(l.tryApply(['i', '', 1, '', ['b']], { replica: 'b', tag: 'b:1' }).ok).toBe(false)
    expect(JSON.stringify(l.snapshot())).toBe(before)
    expect(l.tryApply(['o', '', 1, '', ['t', null], 'name'], { replica: 'b', tag: 'b:2' }).ok).toBe(false)
    expect(JSON.stringify(l.snapshot())).toBe(before)
  })

  it('holds when inserts come out of causal order: one waiting for its anchor counts already', () => {
    const l = new CollabList({ maxLength: 3 })
    // 'x' and 'y' are placed after p:1's element, which the stable order has not reached yet.
    expect(l.tryApply(['i', 'p:1.0', 1, '', ['x', 'y']], { replica: 'a', tag: 'a:1' }).ok).toBe(true)
    expect(l.length).toBe(0)
    expect(l.tryApply(['i', '', 1, '', ['z']], { replica: 'b', tag: 'b:1' }).ok).toBe(true)
    // p:1 would make x and y show too: four elements.
    expect(l.tryApply(['i', '', 1, '', ['p']], { replica: 'p', tag: 'p:1' }).ok).toBe(false)
    expect(l.invariantsHold()).toBe(true)
    // Deleting the waiting ones first makes room.
    expect(l.tryApply(['d', [['a:1', 0, 2]]], { replica: 'a', tag: 'a:2' }).ok).toBe(true)
    expect(l.tryApply(['i', '', 1, '', ['p']], { replica: 'p', tag: 'p:1' }).ok).toBe(true)
    expect(l.length).toBe(2)
  })
})

describe('list laws (property tests)', () => {
  it('converges in any delivery order and never duplicates or loses an element', () => {
    fc.assert(
      fc.property(fc.array(editArb, { maxLength: 40 }), fc.nat(), (edits, seed) => {
        const { made } = history(edits)
        const ref = new CollabList()
        deliver(ref, made)
        const other = new CollabList()
        deliver(other, shuffled(made, seed))
        expect(values(other)).toEqual(values(ref))
        expect(other.snapshot()).toEqual(ref.snapshot())
        const ids = ref.value().map((e) => e.id)
        expect(new Set(ids).size).toBe(ids.length)
        // Every element inserted and not deleted is there once: moves never lose one.
        const inserted = new Set(made.flatMap((m) => (m.op[0] === 'i' ? m.op[4].map((_, k) => `${m.ctx.tag}.${k}`) : m.op[0] === 'o' ? [`${m.ctx.tag}.0`] : [])))
        const deleted = new Set<string>()
        for (const m of made) if (m.op[0] === 'd') for (const [tag, from, n] of m.op[1]) for (let k = from; k < from + n; k++) deleted.add(`${tag}.${k}`)
        expect(new Set(ids)).toEqual(new Set([...inserted].filter((id) => !deleted.has(id))))
      }),
      { numRuns: 300 },
    )
  })

  it('apply then inverse restores the value; merge is a join equal to applying the union', () => {
    fc.assert(
      fc.property(fc.array(editArb, { maxLength: 30 }), fc.nat(), (edits, pick) => {
        const { made, replicas } = history(edits)
        const l = new CollabList()
        deliver(l, made)
        if (made.length) {
          const m = made[pick % made.length] as Made
          const before = values(l)
          l.apply(l.inverse(m.op, m.ctx), m.ctx)
          // A withdrawn move puts its element back where it was: nothing duplicated or lost.
          if (m.op[0] === 'm') expect([...values(l)].sort()).toEqual([...before].sort())
          l.apply(m.op, m.ctx)
          expect(values(l)).toEqual(before)
          expect(l.clone().snapshot()).toEqual(l.snapshot())
        }
        const [a, b, c] = replicas as [CollabList, CollabList, CollabList]
        const abc = a.clone()
        abc.merge(b)
        abc.merge(c)
        const cba = c.clone()
        cba.merge(b)
        cba.merge(a)
        cba.merge(a)
        expect(cba.snapshot()).toEqual(abc.snapshot())
        const all = new CollabList()
        deliver(all, made)
        expect(values(abc)).toEqual(values(all))
      }),
      { numRuns: 300 },
    )
  })
})
