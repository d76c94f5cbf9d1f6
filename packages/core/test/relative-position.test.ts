import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { CollabList, CollabText, validateRelativePosition, type Assoc, type ListOp, type OpContext, type RelativePosition, type TextOp } from '../src/crdt/index.ts'

/** What the property needs of a text or a list. */
interface Sequence<Op> {
  readonly length: number
  relativePosition(index: number, assoc?: Assoc): RelativePosition
  absolutePosition(pos: RelativePosition): number | undefined
  apply(op: Op, ctx: OpContext): void
}

/** How one kind of sequence is made, read and edited. */
interface Kind<S extends Sequence<Op>, Op> {
  make(): S
  ids(s: S): string[]
  insert(s: S, at: number, n: number): Op
  remove(s: S, at: number, n: number): Op | undefined
  /** A move, for kinds that have one. */
  move?(s: S, from: number, to: number): Op | undefined
  isDelete(op: Op): boolean
}

const text: Kind<CollabText, TextOp> = {
  make: () => new CollabText(),
  ids: (t) => t.visibleIds(),
  insert: (t, at, n) => t.insertOp(at, 'xyz😀'.slice(0, n)),
  remove: (t, at, n) => t.deleteOp(at, n),
  isDelete: (op) => op[0] === 'd',
}

let value = 0
const list: Kind<CollabList, ListOp> = {
  make: () => new CollabList(),
  ids: (l) => l.value().map((e) => e.id),
  insert: (l, at, n) => l.insertOp(at, Array.from({ length: n }, () => value++)),
  remove: (l, at, n) => l.deleteOp(at, n),
  move: (l, from, to) => l.moveOp(from, to),
  isDelete: (op) => op[0] === 'd',
}

interface Made<Op> {
  readonly op: Op
  readonly ctx: OpContext
  /** Every op its author had applied when it made it: what must come first anywhere (causal delivery). */
  readonly deps: ReadonlySet<number>
}

interface Replica<S> {
  readonly seq: S
  readonly applied: Set<number>
}

interface Anchor {
  readonly pos: RelativePosition
  readonly index: number
}

const step = fc.record({
  who: fc.nat(2),
  kind: fc.constantFrom('ins', 'ins', 'ins', 'del', 'del', 'mov', 'mov', 'anchor', 'anchor', 'sync', 'sync', 'sync'),
  at: fc.nat(),
  to: fc.nat(),
  n: fc.integer({ min: 1, max: 3 }),
  after: fc.boolean(),
  from: fc.nat(2),
})

/** A small deterministic generator (an LCG), seeded by fast-check: delivery orders that replay. */
function rng(seed: number): (n: number) => number {
  let s = seed >>> 0
  return (n) => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0
    return (s >>> 8) % n
  }
}

/** Applies `ops` (indexes into made) to `r` in a random order that keeps causality: an op only after every op its author had seen. */
function deliver<S extends Sequence<Op>, Op>(r: Replica<S>, made: ReadonlyArray<Made<Op>>, ops: readonly number[], pick: (n: number) => number, after?: () => void): void {
  const pending = ops.filter((i) => !r.applied.has(i))
  while (pending.length) {
    const ready = pending.filter((i) => [...(made[i] as Made<Op>).deps].every((d) => r.applied.has(d)))
    const i = ready[pick(ready.length)] as number
    pending.splice(pending.indexOf(i), 1)
    const m = made[i] as Made<Op>
    r.seq.apply(m.op, m.ctx)
    r.applied.add(i)
    after?.()
  }
}

/**
 * Where a relative position must be in `s`: beside its element, before or
 * after it as assoc says; for a deleted element, where it was: after every
 * visible element that comes before it in `all` (the ids of every element
 * ever inserted, in order: the sequence with no deletes applied).
 */
function expected(visible: readonly string[], pos: RelativePosition, all: readonly string[]): number {
  if (pos.id === '') return pos.assoc === 'before' ? 0 : visible.length
  const j = visible.indexOf(pos.id)
  if (j >= 0) return pos.assoc === 'before' ? j + 1 : j
  const rank = new Map(all.map((id, i) => [id, i]))
  const at = rank.get(pos.id) as number
  expect(at).toBeDefined()
  return visible.filter((id) => (rank.get(id) as number) < at).length
}

type Step = typeof step extends fc.Arbitrary<infer R> ? R : never

function check<S extends Sequence<Op>, Op>(kind: Kind<S, Op>, script: readonly Step[], seed: number): void {
  const pick = rng(seed)
  const replicas: Array<Replica<S>> = [0, 1, 2].map(() => ({ seq: kind.make(), applied: new Set<number>() }))
  const made: Array<Made<Op>> = []
  const anchors: Anchor[] = []
  const inRange = (r: Replica<S>): void => {
    for (const a of anchors) {
      const p = r.seq.absolutePosition(a.pos)
      if (p !== undefined) expect(p >= 0 && p <= r.seq.length).toBe(true)
    }
  }
  for (const s of script) {
    const r = replicas[s.who] as Replica<S>
    const len = r.seq.length
    if (s.kind === 'sync') {
      deliver(r, made, [...(replicas[s.from] as Replica<S>).applied], pick, () => inRange(r))
      continue
    }
    if (s.kind === 'anchor') {
      const index = s.at % (len + 1)
      const pos = r.seq.relativePosition(index, s.after ? 'after' : 'before')
      expect(validateRelativePosition(pos)).toBeNull()
      // Taken and read on one replica, with nothing between: the index it was taken at.
      expect(r.seq.absolutePosition(pos)).toBe(index)
      anchors.push({ pos, index })
      continue
    }
    const op =
      s.kind === 'ins'
        ? kind.insert(r.seq, s.at % (len + 1), s.n)
        : len === 0
          ? undefined
          : s.kind === 'del'
            ? kind.remove(r.seq, s.at % len, s.n)
            : kind.move?.(r.seq, s.at % len, s.to % len)
    if (!op) continue
    const m: Made<Op> = { op, ctx: { replica: `r${s.who}`, tag: `r${s.who}:${made.length}` }, deps: new Set(r.applied) }
    made.push(m)
    r.seq.apply(m.op, m.ctx)
    r.applied.add(made.length - 1)
  }
  const every = made.map((_, i) => i)
  for (const r of replicas) deliver(r, made, every, pick, () => inRange(r))
  const [first, ...rest] = replicas.map((r) => kind.ids(r.seq))
  for (const ids of rest) expect(ids).toEqual(first)
  // Every element ever inserted, in order: the ops without the deletes, in the order they were made (a causal one).
  const revived = kind.make()
  for (const m of made) if (!kind.isDelete(m.op)) revived.apply(m.op, m.ctx)
  const all = kind.ids(revived)
  for (const a of anchors) {
    for (const r of replicas) {
      const p = r.seq.absolutePosition(a.pos)
      expect(p).toBeDefined()
      expect(p).toBe(expected(kind.ids(r.seq), a.pos, all))
    }
  }
}

describe('relative positions (property tests)', () => {
  it('in a text: an anchor taken on one replica resolves on every replica, once they converge, beside the same character, as assoc says', () => {
    fc.assert(
      fc.property(fc.array(step, { minLength: 10, maxLength: 60 }), fc.nat(), (script, seed) => check(text, script, seed)),
      { numRuns: 300 },
    )
  })

  it('in a list with moves: beside the same element wherever it moved', () => {
    fc.assert(
      fc.property(fc.array(step, { minLength: 10, maxLength: 60 }), fc.nat(), (script, seed) => check(list, script, seed)),
      { numRuns: 300 },
    )
  })
})

describe('relative positions', () => {
  it('stick to the character before (typing at the position lands after it) or after (typing lands before it)', () => {
    const t = new CollabText()
    t.apply(t.insertOp(0, 'abcd'), { replica: 'a', tag: 'a:1' })
    const before = t.relativePosition(2)
    const after = t.relativePosition(2, 'after')
    expect([before, after]).toEqual([
      { id: 'a:1.1', assoc: 'before' },
      { id: 'a:1.2', assoc: 'after' },
    ])
    t.apply(t.insertOp(2, 'XY'), { replica: 'b', tag: 'b:1' })
    expect(t.value()).toBe('abXYcd')
    expect([t.absolutePosition(before), t.absolutePosition(after)]).toEqual([2, 4])
    // Both characters deleted: both are where they were.
    t.apply(t.deleteOp(1, 4) as TextOp, { replica: 'b', tag: 'b:2' })
    expect(t.value()).toBe('ad')
    expect([t.absolutePosition(before), t.absolutePosition(after)]).toEqual([1, 1])
  })

  it('hold the start and the end with no element, and refuse an index outside the sequence', () => {
    const t = new CollabText()
    expect([t.relativePosition(0), t.relativePosition(0, 'after')]).toEqual([
      { id: '', assoc: 'before' },
      { id: '', assoc: 'after' },
    ])
    t.apply(t.insertOp(0, 'ab'), { replica: 'a', tag: 'a:1' })
    expect(t.absolutePosition({ id: '', assoc: 'after' })).toBe(2)
    expect(t.relativePosition(2, 'after')).toEqual({ id: '', assoc: 'after' })
    expect(() => t.relativePosition(3)).toThrow(RangeError)
    expect(() => t.relativePosition(-1, 'after')).toThrow(RangeError)
    expect(() => t.relativePosition(0.5)).toThrow(RangeError)
    expect(t.absolutePosition({ id: 'nope:1.0', assoc: 'before' })).toBeUndefined()
  })

  it('in a list follow their element when it moves', () => {
    const l = new CollabList()
    l.apply(l.insertOp(0, ['a', 'b', 'c', 'd']), { replica: 'a', tag: 'a:1' })
    const afterB = l.relativePosition(2)
    const beforeB = l.relativePosition(1, 'after')
    l.apply(l.moveOp(1, 3) as ListOp, { replica: 'a', tag: 'a:2' })
    expect(l.value().map((e) => ('value' in e ? e.value : null))).toEqual(['a', 'c', 'd', 'b'])
    expect([l.absolutePosition(beforeB), l.absolutePosition(afterB)]).toEqual([3, 4])
    l.apply(l.deleteOp(3, 1) as ListOp, { replica: 'a', tag: 'a:3' })
    expect([l.absolutePosition(beforeB), l.absolutePosition(afterB)]).toEqual([3, 3])
  })

  it('validate what comes from outside', () => {
    expect(validateRelativePosition({ id: 'p:1.0', assoc: 'after' })).toBeNull()
    expect(validateRelativePosition({ id: '', assoc: 'before' })).toBeNull()
    for (const bad of [null, 'p:1.0', {}, { id: 'p:1.0' }, { id: 'p:1', assoc: 'before' }, { id: 'p:1.0', assoc: 'left' }, { id: 3, assoc: 'before' }, { id: `${'x'.repeat(200)}.0`, assoc: 'before' }]) {
      expect(validateRelativePosition(bad)).toEqual(expect.any(String))
    }
  })
})
