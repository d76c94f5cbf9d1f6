import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  BoundedCounter,
  LWWRegister,
  ORSet,
  PNCounter,
  POOL,
  asGeneric,
  boundedCounterType,
  compactOps,
  createCrdt,
  decodeDeclaration,
  encodeDeclaration,
  type AnyCrdt,
  type AnyOp,
  type BoundedCounterOp,
  type BoundedCounterParams,
  type Declaration,
  type OpContext,
  type RegisterOp,
  type SetOp,
  validateRegisterValue,
} from '../src/crdt/index.ts'

const REPLICAS = ['r0', 'r1', 'r2']

/** An op log per replica; tags are unique because they encode replica and position. */
type Logs = AnyOp[][]

function ctxOf(replica: number, i: number): OpContext {
  return { replica: REPLICAS[replica] as string, tag: `${REPLICAS[replica]}:${i}` }
}

/** Builds a state holding the first prefix[r] ops of each replica's log, interleaved round-robin. */
function build(decl: Declaration, logs: Logs, prefix: number[]): AnyCrdt {
  const c = createCrdt(decl)
  const g = asGeneric(c)
  const upto = logs.map((log, r) => Math.min(prefix[r] as number, log.length))
  for (let i = 0; i < Math.max(0, ...upto); i++) {
    for (let r = 0; r < logs.length; r++) if (i < (upto[r] as number)) g.apply((logs[r] as AnyOp[])[i] as AnyOp, ctxOf(r, i))
  }
  return c
}

const counterOp = fc.integer({ min: -50, max: 50 }).filter((n) => n !== 0)
const element = fc.oneof(fc.constantFrom('a', 'b', 'c', 'd'), fc.integer({ min: 0, max: 3 }))
// Removes name tags that may or may not exist yet: the OR-Set must cope with both.
const setOp: fc.Arbitrary<SetOp> = fc.oneof(
  element.map((e): SetOp => ['a', e]),
  fc.tuple(element, fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), fc.integer({ min: 0, max: 8 })), { maxLength: 3 })).map(
    ([e, tags]): SetOp => ['r', e, tags.map(([r, i]) => `${REPLICAS[r]}:${i}`)],
  ),
)
const registerOp: fc.Arbitrary<RegisterOp> = fc.tuple(fc.oneof(fc.string({ maxLength: 4 }), fc.integer()), fc.integer({ min: 0, max: 20 })).map(([v, t]): RegisterOp => ['s', v, t])
const boundedOp: fc.Arbitrary<BoundedCounterOp> = fc.oneof(
  fc.integer({ min: 1, max: 20 }).map((n): BoundedCounterOp => ['i', n]),
  fc.integer({ min: 1, max: 20 }).map((n): BoundedCounterOp => ['d', n]),
  fc.tuple(fc.integer({ min: 1, max: 20 }), fc.constantFrom(...REPLICAS)).map(([n, to]): BoundedCounterOp => ['t', n, to]),
)

/** Ops on a counter with both bounds: transfers name the kind of rights they move. */
const rangeOp: fc.Arbitrary<BoundedCounterOp> = fc.oneof(
  fc.integer({ min: 1, max: 20 }).map((n): BoundedCounterOp => ['i', n]),
  fc.integer({ min: 1, max: 20 }).map((n): BoundedCounterOp => ['d', n]),
  fc.tuple(fc.integer({ min: 1, max: 20 }), fc.constantFrom(...REPLICAS), fc.constantFrom('i' as const, 'd' as const)).map(([n, to, k]): BoundedCounterOp => ['t', n, to, k]),
  fc.tuple(fc.integer({ min: 1, max: 10 }), fc.constantFrom(...REPLICAS), fc.integer({ min: 0, max: 20 }), fc.constantFrom('i' as const, 'd' as const)).map(([n, to, seen, k]): BoundedCounterOp => ['g', n, to, seen, k]),
  fc.tuple(fc.integer({ min: 1, max: 10 }), fc.constantFrom(...REPLICAS), fc.integer({ min: 0, max: 20 }), fc.integer({ min: 1, max: 9 }), fc.constantFrom('i' as const, 'd' as const)).map(([n, from, seen, no, k]): BoundedCounterOp => ['q', n, from, seen, no, k]),
)

const TYPES: Array<{ name: string; decl: Declaration; op: fc.Arbitrary<AnyOp> }> = [
  { name: 'PN-Counter', decl: { type: 'counter', bounds: {} }, op: counterOp },
  { name: 'OR-Set', decl: { type: 'set', bounds: {} }, op: setOp },
  { name: 'LWW-Register', decl: { type: 'register' }, op: registerOp },
  { name: 'Bounded Counter (min)', decl: { type: 'bounded-counter', params: { min: 0, initial: 10 } }, op: boundedOp },
  { name: 'Bounded Counter (max)', decl: { type: 'bounded-counter', params: { max: 100, initial: 90 } }, op: boundedOp },
  { name: 'Bounded Counter (min and max)', decl: { type: 'bounded-counter', params: { min: 0, max: 100, initial: 50 } }, op: rangeOp },
]

const logsArb = (op: fc.Arbitrary<AnyOp>) => fc.array(fc.array(op, { maxLength: 8 }), { minLength: 3, maxLength: 3 })
const prefixArb = fc.array(fc.integer({ min: 0, max: 8 }), { minLength: 3, maxLength: 3 })

for (const { name, decl, op } of TYPES) {
  describe(`${name} laws`, () => {
    it('merge is commutative, associative and idempotent', () => {
      fc.assert(
        fc.property(logsArb(op), prefixArb, prefixArb, prefixArb, (logs, pa, pb, pc) => {
          const a = () => build(decl, logs, pa)
          const b = () => build(decl, logs, pb)
          const c = () => build(decl, logs, pc)
          const ab = a()
          asGeneric(ab).merge(b())
          const ba = b()
          asGeneric(ba).merge(a())
          expect(ab.snapshot()).toEqual(ba.snapshot())
          expect(sortValue(ab.value())).toEqual(sortValue(ba.value()))

          const left = a()
          asGeneric(left).merge(b())
          asGeneric(left).merge(c())
          const bc = b()
          asGeneric(bc).merge(c())
          const right = a()
          asGeneric(right).merge(bc)
          expect(left.snapshot()).toEqual(right.snapshot())

          const aa = a()
          asGeneric(aa).merge(a())
          expect(aa.snapshot()).toEqual(a().snapshot())
        }),
      )
    })

    it('merging two states equals applying the union of their ops', () => {
      fc.assert(
        fc.property(logsArb(op), prefixArb, prefixArb, (logs, pa, pb) => {
          const merged = build(decl, logs, pa)
          asGeneric(merged).merge(build(decl, logs, pb))
          const union = build(decl, logs, pa.map((n, i) => Math.max(n, pb[i] as number)))
          expect(sortValue(merged.value())).toEqual(sortValue(union.value()))
        }),
      )
    })

    it('operations commute: any interleaving that keeps each replica in order gives the same state', () => {
      fc.assert(
        fc.property(logsArb(op), fc.array(fc.integer({ min: 0, max: 2 }), { maxLength: 40 }), (logs, schedule) => {
          const inOrder = build(decl, logs, logs.map((l) => l.length))
          const shuffled = createCrdt(decl)
          const next = [0, 0, 0]
          const step = (r: number) => {
            const i = next[r] as number
            const log = logs[r] as AnyOp[]
            if (i >= log.length) return
            asGeneric(shuffled).apply(log[i] as AnyOp, ctxOf(r, i))
            next[r] = i + 1
          }
          for (const r of schedule) step(r)
          for (let r = 0; r < 3; r++) while ((next[r] as number) < (logs[r] as AnyOp[]).length) step(r)
          expect(sortValue(shuffled.value())).toEqual(sortValue(inOrder.value()))
        }),
      )
    })

    it("an op's inverse restores the value exactly, even after other ops", () => {
      fc.assert(
        fc.property(logsArb(op), prefixArb, op, fc.array(op, { maxLength: 4 }), (logs, prefix, target, later) => {
          const s = build(decl, logs, prefix)
          const g = asGeneric(s)
          const ctx: OpContext = { replica: 'r1', tag: 'target' }
          const before = sortValue(s.value())
          g.apply(target, ctx)
          g.apply(g.inverse(target, ctx), ctx)
          expect(sortValue(s.value())).toEqual(before)

          // Compensation also works when other ops happened in between.
          const withLater = build(decl, logs, prefix)
          const reference = build(decl, logs, prefix)
          const gl = asGeneric(withLater)
          gl.apply(target, ctx)
          later.forEach((o, i) => {
            gl.apply(o, { replica: 'r2', tag: `later:${i}` })
            asGeneric(reference).apply(o, { replica: 'r2', tag: `later:${i}` })
          })
          gl.apply(gl.inverse(target, ctx), ctx)
          expect(sortValue(withLater.value())).toEqual(sortValue(reference.value()))
        }),
      )
    })

    it('tryApply either applies and keeps invariants, or leaves the state untouched', () => {
      fc.assert(
        fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), op), { maxLength: 30 }), (steps) => {
          const s = createCrdt(decl)
          steps.forEach(([r, o], i) => {
            const before = s.snapshot()
            const result = asGeneric(s).tryApply(o, ctxOf(r, i))
            if (result.ok) expect(s.invariantsHold()).toBe(true)
            else expect(s.snapshot()).toEqual(before)
          })
        }),
      )
    })

    it('clone is independent and snapshots round-trip', () => {
      fc.assert(
        fc.property(logsArb(op), prefixArb, op, (logs, prefix, extra) => {
          const s = build(decl, logs, prefix)
          const copy = s.clone()
          const snap = s.snapshot()
          asGeneric(copy).apply(extra, { replica: 'r0', tag: 'extra' })
          expect(s.snapshot()).toEqual(snap)
        }),
      )
    })
  })
}

function sortValue(v: unknown): unknown {
  return Array.isArray(v) ? [...v].sort((a, b) => (String(a) < String(b) ? -1 : String(a) > String(b) ? 1 : 0)) : v
}

describe('PN-Counter invariants', () => {
  it('rejects a decrement below min with reason invariant', () => {
    const c = new PNCounter({ min: 0 })
    expect(c.tryApply(5, { replica: 'a', tag: 't1' })).toEqual({ ok: true })
    const r = c.tryApply(-6, { replica: 'a', tag: 't2' })
    expect(r.ok).toBe(false)
    expect(!r.ok && r.reason).toBe('invariant')
    expect(c.value()).toBe(5)
  })
  it('rejects above max, and refuses contradictory bounds', () => {
    const c = new PNCounter({ max: 3 })
    expect(c.tryApply(4, { replica: 'a', tag: 't' }).ok).toBe(false)
    expect(() => new PNCounter({ min: 0, max: -1 })).toThrow(RangeError)
  })
  it('refuses malformed ops in tryApply', () => {
    const r = new PNCounter().tryApply(1.5, { replica: 'a', tag: 't' })
    expect(!r.ok && r.reason).toBe('malformed')
  })
})

describe('OR-Set semantics', () => {
  it('add wins over a concurrent remove', () => {
    const a = new ORSet()
    a.apply(['a', 'x'], { replica: 'A', tag: 'A:1' })
    const b = a.clone()
    a.apply(['r', 'x', a.tagsOf('x')], { replica: 'A', tag: 'A:2' }) // A removes what it saw
    b.apply(['a', 'x'], { replica: 'B', tag: 'B:1' }) // B adds concurrently
    a.merge(b)
    expect(a.has('x')).toBe(true)
  })
  it('reversing one of two concurrent removes keeps the element removed', () => {
    const s = new ORSet()
    s.apply(['a', 'x'], { replica: 'A', tag: 'A:1' })
    const r1: SetOp = ['r', 'x', ['A:1']]
    s.apply(r1, { replica: 'B', tag: 'B:1' })
    s.apply(['r', 'x', ['A:1']], { replica: 'C', tag: 'C:1' })
    s.apply(s.inverse(r1, { replica: 'B', tag: 'B:1' }), { replica: 'B', tag: 'B:1' })
    expect(s.has('x')).toBe(false)
  })
  it('enforces maxSize in tryApply', () => {
    const s = new ORSet({ maxSize: 1 })
    expect(s.tryApply(['a', 1], { replica: 'A', tag: 'A:1' }).ok).toBe(true)
    expect(s.tryApply(['a', 1], { replica: 'A', tag: 'A:2' }).ok).toBe(true) // same element: no growth
    const r = s.tryApply(['a', 2], { replica: 'A', tag: 'A:3' })
    expect(!r.ok && r.reason).toBe('invariant')
    expect(s.value()).toEqual([1])
  })
  it('keeps the string "1" and the number 1 apart', () => {
    const s = new ORSet()
    s.apply(['a', '1'], { replica: 'A', tag: 'A:1' })
    expect(s.has(1)).toBe(false)
  })
})

describe('LWW-Register', () => {
  it('breaks timestamp ties by replica id, the same everywhere', () => {
    const a = new LWWRegister()
    const b = new LWWRegister()
    a.apply(['s', 'from-x', 5], { replica: 'x', tag: 'x:1' })
    a.apply(['s', 'from-y', 5], { replica: 'y', tag: 'y:1' })
    b.apply(['s', 'from-y', 5], { replica: 'y', tag: 'y:1' })
    b.apply(['s', 'from-x', 5], { replica: 'x', tag: 'x:1' })
    expect(a.value()).toBe('from-y')
    expect(b.value()).toBe('from-y')
  })
  it('refuses values that would not survive the wire, with a reason', () => {
    expect(validateRegisterValue(JSON.parse('{"a":{"__proto__":1}}'))).toMatch(/__proto__/)
    expect(validateRegisterValue({ a: [1, 'x', null, { b: true }] })).toBeNull()
  })
  it('withdrawing the winning write brings back the previous one', () => {
    const r = new LWWRegister()
    r.apply(['s', 'old', 1], { replica: 'x', tag: 'x:1' })
    const ctx = { replica: 'y', tag: 'y:1' }
    r.apply(['s', 'new', 2], ctx)
    r.apply(r.inverse(), ctx)
    expect(r.value()).toBe('old')
  })
})

describe('Bounded Counter (escrow)', () => {
  it('decrements only within local rights; transfers move rights', () => {
    const c = new BoundedCounter({ min: 0, initial: 0 })
    expect(c.tryApply(['i', 10], { replica: 'A', tag: 'A:1' }).ok).toBe(true)
    expect(c.localRights('A')).toBe(10)
    const r = c.tryApply(['d', 1], { replica: 'B', tag: 'B:1' })
    expect(!r.ok && r.reason).toBe('invariant')
    expect(c.tryApply(['t', 4, 'B'], { replica: 'A', tag: 'A:2' }).ok).toBe(true)
    expect(c.localRights('A')).toBe(6)
    expect(c.localRights('B')).toBe(4)
    expect(c.tryApply(['d', 4], { replica: 'B', tag: 'B:2' }).ok).toBe(true)
    expect(c.value()).toBe(6)
  })

  it('initial rights sit in the pool until claimed', () => {
    const c = new BoundedCounter({ min: 0, initial: 5 })
    expect(c.value()).toBe(5)
    expect(c.localRights(POOL)).toBe(5)
    expect(c.tryApply(['d', 1], { replica: 'A', tag: 'A:1' }).ok).toBe(false)
    expect(c.tryApply(['c', 3], { replica: 'A', tag: 'A:2' }).ok).toBe(true)
    expect(c.tryApply(['c', 3], { replica: 'B', tag: 'B:1' }).ok).toBe(false)
    expect(c.tryApply(['d', 3], { replica: 'A', tag: 'A:3' }).ok).toBe(true)
    expect(c.value()).toBe(2)
  })

  it('upper bound variant: increments consume rights', () => {
    const c = new BoundedCounter({ max: 10, initial: 8 })
    expect(c.tryApply(['c', 2], { replica: 'A', tag: 'A:1' }).ok).toBe(true)
    expect(c.tryApply(['i', 2], { replica: 'A', tag: 'A:2' }).ok).toBe(true)
    expect(c.value()).toBe(10)
    expect(c.tryApply(['i', 1], { replica: 'A', tag: 'A:3' }).ok).toBe(false)
    expect(c.tryApply(['d', 5], { replica: 'B', tag: 'B:1' }).ok).toBe(true)
    expect(c.localRights('B')).toBe(5)
  })

  it('with both bounds: each change spends rights toward the bound it moves to and gains as many toward the other', () => {
    const c = new BoundedCounter({ min: 0, max: 10, initial: 4 })
    expect(c.localRights(POOL, 'd')).toBe(4)
    expect(c.localRights(POOL, 'i')).toBe(6)
    expect(() => c.localRights(POOL)).toThrow(RangeError)
    const a = { replica: 'A', tag: 'A:1' }
    expect(c.tryApply(['i', 1], a).ok).toBe(false)
    const noKind = c.tryApply(['c', 6], a)
    expect(!noKind.ok && noKind.reason).toBe('malformed')
    expect(c.tryApply(['c', 6, 'i'], a).ok).toBe(true)
    expect(c.tryApply(['i', 6], a).ok).toBe(true)
    expect(c.value()).toBe(10)
    expect(c.spendable('A', 'i')).toBe(0)
    expect(c.spendable('A', 'd')).toBe(6)
    // The pool's rights to decrement (4) are still there: the value may go from 10 to 0 in all.
    expect(c.tryApply(['d', 7], a).ok).toBe(false)
    expect(c.tryApply(['t', 2, 'B', 'd'], a).ok).toBe(true)
    expect(c.tryApply(['d', 2], { replica: 'B', tag: 'B:1' }).ok).toBe(true)
    expect(c.value()).toBe(8)
    expect(c.spendable('B', 'i')).toBe(2)
    expect(c.invariantsHold()).toBe(true)
    // One-bound counters have no rights of the other kind: nothing limits that change.
    const seats = new BoundedCounter({ min: 0, initial: 5 })
    expect(seats.spendable('A', 'i')).toBe(Infinity)
    const wrongKind = seats.tryApply(['c', 1, 'i'], a)
    expect(!wrongKind.ok && wrongKind.reason).toBe('malformed')
    expect(seats.tryApply(['c', 1, 'd'], a).ok).toBe(true)
  })

  it('moves rights by ask and grant: a grant gives at most half, and answers an ask once', () => {
    const c = new BoundedCounter({ min: 0, initial: 0 })
    const ctx = (replica: string, i: number) => ({ replica, tag: `${replica}:${i}` })
    expect(c.tryApply(['i', 10], ctx('B', 1)).ok).toBe(true)
    // A asks B for 4, having been given nothing by B.
    expect(c.tryApply(['q', 4, 'B', 0, 1], ctx('A', 1)).ok).toBe(true)
    expect(c.rightsOfKind('d')?.askOf('A')).toEqual({ no: 1, from: 'B', seen: 0, n: 4 })
    const tooMuch = c.tryApply(['g', 6, 'A', 0], ctx('B', 2))
    expect(!tooMuch.ok && tooMuch.detail).toMatch(/at most half/)
    expect(c.tryApply(['g', 4, 'A', 0], ctx('B', 3)).ok).toBe(true)
    expect(c.localRights('A')).toBe(4)
    // The same ask answered again (a replay, or the ask seen through another relay): refused.
    const twice = c.tryApply(['g', 1, 'A', 0], ctx('B', 4))
    expect(!twice.ok && twice.reason).toBe('invariant')
    expect(c.localRights('A')).toBe(4)
    // A newer ask names what B gave it so far.
    expect(c.tryApply(['q', 1, 'B', 0, 1], ctx('A', 2)).ok).toBe(false)
    expect(c.tryApply(['q', 1, 'B', 4, 2], ctx('A', 3)).ok).toBe(true)
    expect(c.tryApply(['g', 1, 'A', 4], ctx('B', 5)).ok).toBe(true)
    expect(c.value()).toBe(10)
    // Half rounded up: a replica down to its last right may give it.
    expect(c.tryApply(['t', 1, 'C'], ctx('B', 6)).ok).toBe(true)
    expect(c.tryApply(['g', 1, 'A', 0], ctx('C', 1)).ok).toBe(true)
    expect(c.localRights('C')).toBe(0)
    expect(c.tryApply(['q', 1, 'A', 0, 1], ctx('A', 4)).ok).toBe(false)
    expect(c.tryApply(['q', 1, POOL, 0, 1], ctx('C', 1)).ok).toBe(false)
    // Asks travel in the state: a snapshot keeps them, and a merge keeps each replica's latest.
    const copy = BoundedCounter.fromSnapshot(c.params, c.snapshot())
    expect(copy.snapshot()).toEqual(c.snapshot())
    const older = new BoundedCounter({ min: 0, initial: 0 })
    older.apply(['q', 9, 'C', 0, 1], ctx('A', 1))
    older.merge(c)
    expect(older.rightsOfKind('d')?.askOf('A')).toEqual({ no: 2, from: 'B', seen: 4, n: 1 })
    // Without asks the snapshot has the form it had before asks existed.
    expect(Object.keys(new BoundedCounter({ min: 0, initial: 3 }).snapshot())).toEqual(['R', 'U'])
  })

  it('answers each ask at most once, and keeps its bounds, whatever grants and asks come in whatever order', () => {
    const op = fc.oneof(
      boundedOp,
      fc.tuple(fc.integer({ min: 1, max: 12 }), fc.constantFrom(...REPLICAS), fc.integer({ min: 0, max: 12 })).map(([n, to, seen]): BoundedCounterOp => ['g', n, to, seen]),
      fc.tuple(fc.integer({ min: 1, max: 12 }), fc.constantFrom(...REPLICAS), fc.integer({ min: 0, max: 12 }), fc.integer({ min: 1, max: 5 })).map(([n, from, seen, no]): BoundedCounterOp => ['q', n, from, seen, no]),
    )
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), op), { maxLength: 80 }), (steps) => {
        const c = new BoundedCounter({ min: 0, initial: 30 })
        REPLICAS.forEach((r, i) => c.tryApply(['c', 10], { replica: r, tag: `claim:${i}` }))
        const answered = new Set<string>()
        steps.forEach(([who, o], i) => {
          const replica = REPLICAS[who] as string
          if (!c.tryApply(o, { replica, tag: `${replica}:${i}` }).ok || o[0] !== 'g') return
          const ask = `${replica}>${o[2]}@${o[3]}`
          expect(answered.has(ask)).toBe(false)
          answered.add(ask)
        })
        expect(c.value()).toBeGreaterThanOrEqual(0)
        expect(c.invariantsHold()).toBe(true)
      }),
    )
  })

  it('retires a replica: its rights go to the pool, its cells go, the value stays, and it spends nothing more', () => {
    const c = new BoundedCounter({ min: 0, max: 100, initial: 50 })
    const ctx = (replica: string, i: number) => ({ replica, tag: `${replica}:${i}` })
    expect(c.tryApply(['c', 20, 'd'], ctx('X', 1)).ok).toBe(true)
    expect(c.tryApply(['d', 5], ctx('X', 2)).ok).toBe(true)
    expect(c.tryApply(['t', 4, 'A', 'd'], ctx('X', 3)).ok).toBe(true)
    expect(c.tryApply(['i', 7], { replica: 'A', tag: 'A:0' }).ok).toBe(false)
    expect(c.tryApply(['c', 10, 'i'], ctx('A', 1)).ok).toBe(true)
    expect(c.tryApply(['t', 3, 'X', 'i'], ctx('A', 2)).ok).toBe(true)
    expect(c.tryApply(['q', 1, 'A', 0, 1, 'd'], ctx('X', 4)).ok).toBe(true)
    const value = c.value()
    const poolDown = c.localRights(POOL, 'd') + c.localRights('X', 'd')
    const poolUp = c.localRights(POOL, 'i') + c.localRights('X', 'i')
    const [aDown, aUp] = [c.localRights('A', 'd'), c.localRights('A', 'i')]
    expect(c.tryApply(['r', 'X'], ctx('admin', 1)).ok).toBe(true)
    expect(c.value()).toBe(value)
    expect([c.localRights(POOL, 'd'), c.localRights(POOL, 'i')]).toEqual([poolDown, poolUp])
    expect([c.localRights('A', 'd'), c.localRights('A', 'i')]).toEqual([aDown, aUp])
    expect([c.localRights('X', 'd'), c.localRights('X', 'i')]).toEqual([0, 0])
    expect(JSON.stringify(c.snapshot())).not.toContain('"X"')
    expect(c.invariantsHold()).toBe(true)
    // Its later spend has nothing behind it.
    const late = c.tryApply(['d', 1], ctx('X', 5))
    expect(!late.ok && late.reason).toBe('invariant')
    expect(BoundedCounter.fromSnapshot(c.params, c.snapshot()).snapshot()).toEqual(c.snapshot())
    expect(boundedCounterType.mustBeSafe?.(['r', 'X'])).toBe(true)
    expect(c.tryApply(['r', POOL], ctx('admin', 2)).ok).toBe(false)
  })

  it('keeps its bounds, and every kind of rights adds up to its distance, through spends, grants, asks, claims and retirements in any stable order', () => {
    const op = fc.oneof(
      rangeOp,
      fc.tuple(fc.integer({ min: 1, max: 8 }), fc.constantFrom('i' as const, 'd' as const)).map(([n, k]): BoundedCounterOp => ['c', n, k]),
      fc.constantFrom(...REPLICAS).map((r): BoundedCounterOp => ['r', r]),
    )
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), op), { maxLength: 80 }), (steps) => {
        const params = { min: 0, max: 60, initial: 30 }
        const c = new BoundedCounter(params)
        const sum = (kind: 'i' | 'd') => [...REPLICAS, POOL].reduce((s, r) => s + c.localRights(r, kind), 0)
        steps.forEach(([who, o], i) => {
          const replica = REPLICAS[who] as string
          const before = REPLICAS.map((r) => [c.localRights(r, 'i'), c.localRights(r, 'd')])
          const ok = c.tryApply(o, { replica, tag: `${replica}:${i}` }).ok
          if (ok && o[0] === 'r') {
            expect([c.localRights(o[1], 'i'), c.localRights(o[1], 'd')]).toEqual([0, 0])
            // Nobody else's rights move.
            REPLICAS.forEach((r, k) => r !== o[1] && expect([c.localRights(r, 'i'), c.localRights(r, 'd')]).toEqual(before[k]))
            // A retired replica spends only rights it gets again.
            expect(c.tryApply(['d', 1], { replica: o[1], tag: `late:${i}` }).ok).toBe(false)
          }
          expect(c.value()).toBeGreaterThanOrEqual(params.min)
          expect(c.value()).toBeLessThanOrEqual(params.max)
          expect(sum('d')).toBe(c.value() - params.min)
          expect(sum('i')).toBe(params.max - c.value())
          expect(c.invariantsHold()).toBe(true)
        })
        expect(BoundedCounter.fromSnapshot(params, c.snapshot()).snapshot()).toEqual(c.snapshot())
      }),
    )
  })

  it('refuses declarations it cannot keep', () => {
    expect(() => new BoundedCounter({ min: 5, max: 4, initial: 5 })).toThrow(/above max/)
    expect(() => new BoundedCounter({ min: 0, max: 10, initial: -1 })).toThrow(/below min/)
    expect(() => new BoundedCounter({ min: -Number.MAX_SAFE_INTEGER, initial: Number.MAX_SAFE_INTEGER })).toThrow(/too far/)
    expect(() => new BoundedCounter({ initial: 0 } as unknown as BoundedCounterParams)).toThrow(/min, max or both/)
    expect(() => new BoundedCounter({ min: 0, max: 1.5, initial: 0 })).toThrow(/max must be a safe integer/)
  })

  // The point of escrow: replicas act on their own copies with no coordination,
  // merge in any pattern, and no copy, nor the merge of all, ever crosses the bound.
  const variants: Array<[BoundedCounterParams, fc.Arbitrary<BoundedCounterOp>, ReadonlyArray<BoundedCounterOp>]> = [
    [{ min: 0, initial: 30 }, boundedOp, [['c', 10]]],
    [{ max: 0, initial: -30 }, boundedOp, [['c', 10]]],
    [{ min: 0, max: 60, initial: 30 }, rangeOp, [['c', 10, 'd'], ['c', 10, 'i']]],
  ]
  for (const [params, opArb, claims] of variants) {
    it(`never crosses its bound under any interleaving (${JSON.stringify(params)})`, () => {
      fc.assert(
        fc.property(
          fc.array(
            fc.oneof(
              fc.tuple(fc.constant('op' as const), fc.integer({ min: 0, max: 2 }), opArb),
              fc.tuple(fc.constant('merge' as const), fc.integer({ min: 0, max: 2 }), fc.integer({ min: 0, max: 2 })),
            ),
            { maxLength: 60 },
          ),
          (actions) => {
            // Rights start with the replicas through claims settled in the stable order.
            const base = new BoundedCounter(params)
            REPLICAS.forEach((r, i) => claims.forEach((claim, j) => expect(base.tryApply(claim, { replica: r, tag: `claim:${i}:${j}` }).ok).toBe(true)))
            const copies = REPLICAS.map(() => base.clone())
            // Escrow's own invariant: the distance to each bound is the sum of the rights toward it.
            const rightsToward = (c: BoundedCounter, kind: 'i' | 'd') => [...REPLICAS, POOL].reduce((sum, r) => sum + c.spendable(r, kind), 0)
            const inBound = (c: BoundedCounter) =>
              (params.min === undefined || (c.value() >= params.min && rightsToward(c, 'd') === c.value() - params.min)) &&
              (params.max === undefined || (c.value() <= params.max && rightsToward(c, 'i') === params.max - c.value()))
            actions.forEach((a, i) => {
              if (a[0] === 'op') {
                ;(copies[a[1]] as BoundedCounter).tryApply(a[2], ctxOf(a[1], i))
              } else {
                ;(copies[a[1]] as BoundedCounter).merge(copies[a[2]] as BoundedCounter)
              }
              for (const c of copies) {
                expect(inBound(c)).toBe(true)
                expect(c.invariantsHold()).toBe(true)
              }
            })
            const all = copies[0]!.clone()
            for (const c of copies) all.merge(c)
            expect(inBound(all)).toBe(true)
          },
        ),
      )
    })
  }
})

describe('declarations and compaction', () => {
  it('round-trip through their wire form', () => {
    const decls: Declaration[] = [
      { type: 'counter', bounds: { min: 0 } },
      { type: 'counter', bounds: {} },
      { type: 'set', bounds: { maxSize: 3 } },
      { type: 'register' },
      { type: 'bounded-counter', params: { min: 0, initial: 5 } },
      { type: 'bounded-counter', params: { max: 9, initial: 1 } },
      { type: 'bounded-counter', params: { min: -3, max: 9, initial: 1 } },
      { type: 'text', bounds: {} },
      { type: 'text', bounds: { maxLength: 280 } },
    ]
    for (const d of decls) expect(encodeDeclaration(decodeDeclaration(encodeDeclaration(d)))).toEqual(encodeDeclaration(d))
  })
  it('reject unknown or invalid declarations with malformed', () => {
    for (const bad of [['q'], ['x', 1], ['c', 5, 1], ['b', 'min', 5, 1], ['s', -1], 'c', ['r', 1], ['t'], ['t', -1], ['t', 1.5], [7]]) {
      expect(() => decodeDeclaration(bad)).toThrowError(expect.objectContaining({ reason: 'malformed' }))
    }
  })
  it('compaction keeps the net effect', () => {
    fc.assert(
      fc.property(fc.array(counterOp, { maxLength: 20 }), (ops) => {
        const d: Declaration = { type: 'counter', bounds: {} }
        const a = createCrdt(d)
        const b = createCrdt(d)
        ops.forEach((o, i) => asGeneric(a).apply(o, { replica: 'x', tag: String(i) }))
        compactOps(d, ops).forEach((o, i) => asGeneric(b).apply(o, { replica: 'x', tag: String(i) }))
        expect(b.value()).toBe(a.value())
      }),
    )
  })
})
