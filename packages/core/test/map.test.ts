import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { CollabMap, MAX_STAMP_JUMP, decodeDeclaration, encodeDeclaration, nestedKey, sameDeclaration, validateOp, type MapBounds, type MapOp, type OpContext } from '../src/crdt/index.ts'

interface Made {
  readonly op: MapOp
  readonly ctx: OpContext
}

let counter = 0
function make(m: CollabMap, replica: string, op: (m: CollabMap) => MapOp): Made {
  const made = { op: op(m), ctx: { replica, tag: `${replica}:${counter++}` } }
  m.apply(made.op, made.ctx)
  return made
}

const set = (field: string, value: string) => (m: CollabMap): MapOp => ['s', field, value, m.nextStamp()]
const del = (field: string) => (m: CollabMap): MapOp => ['x', field, m.nextStamp()]
const obj = (field: string, decl: readonly unknown[]) => (m: CollabMap): MapOp => {
  const e = m.get(field)
  return ['o', field, decl, m.nextStamp(), e && 'object' in e && e.object[0] === decl[0] ? e.gen : m.nextGen(field)]
}

function deliver(m: CollabMap, ops: readonly Made[]): void {
  for (const x of ops) m.apply(x.op, x.ctx)
}

describe('map: fields decided by Lamport stamps', () => {
  it('a write that saw another wins over it, whatever the device clocks', () => {
    const a = new CollabMap()
    const b = new CollabMap()
    const first = make(a, 'zed', set('title', 'groceries'))
    deliver(b, [first])
    // 'aaa' sorts before 'zed', so it would lose a tie: it wins because it saw the first write.
    const second = make(b, 'aaa', set('title', 'shopping'))
    deliver(a, [second])
    expect(a.value()).toEqual({ title: { value: 'shopping' } })
    expect(b.value()).toEqual(a.value())
  })

  it('concurrent creations of one nested field pick one object; a field deleted and made again gets a fresh one', () => {
    const a = new CollabMap()
    const b = new CollabMap()
    const ma = make(a, 'a', obj('card', ['t', null]))
    const mb = make(b, 'b', obj('card', ['t', null]))
    deliver(a, [mb])
    deliver(b, [ma])
    const ea = a.get('card') as { object: unknown[]; gen: number }
    expect(ea.gen).toBe(1)
    expect(b.get('card')).toEqual(ea)
    expect(nestedKey('doc', 'card', ea.gen, ea.object)).toBe('doc\u0000card\u00001t')
    const gone = make(a, 'a', del('card'))
    expect(a.get('card')).toBeUndefined()
    const again = make(a, 'a', obj('card', ['t', null]))
    expect((a.get('card') as { gen: number }).gen).toBe(2)
    deliver(b, [gone, again])
    expect(b.value()).toEqual(a.value())
  })

  it('keeps maxKeys on the stable path, refuses stamps far ahead and malformed ops', () => {
    const m = new CollabMap({ maxKeys: 2 })
    expect(m.tryApply(['s', 'a', 1, 1], { replica: 'r', tag: 't:1' }).ok).toBe(true)
    expect(m.tryApply(['s', 'b', 1, 2], { replica: 'r', tag: 't:2' }).ok).toBe(true)
    const over = m.tryApply(['s', 'c', 1, 3], { replica: 'r', tag: 't:3' })
    expect(over.ok ? 'ok' : over.reason).toBe('invariant')
    expect(m.tryApply(['s', 'a', 2, 4], { replica: 'r', tag: 't:4' }).ok).toBe(true)
    const ahead = m.tryApply(['s', 'a', 3, 5 + MAX_STAMP_JUMP], { replica: 'r', tag: 't:5' })
    expect(ahead.ok ? 'ok' : ahead.reason).toBe('clock-ahead')
    const d = { type: 'map', bounds: {} } as const
    expect(validateOp(d, ['o', 'f', ['zz'], 1, 1])).toMatch(/unknown object type/)
    expect(validateOp(d, ['o', 'f', ['t', null], 1, 0])).toMatch(/generation/)
    expect(validateOp(d, ['s', '', 1, 1])).toMatch(/field/)
    expect(validateOp(d, ['s', 'f', undefined, 1])).toMatch(/msgpack/)
    expect(validateOp(d, ['u'])).toMatch(/unknown/)
    expect(validateOp(d, ['o', 'f', ['t', null], 1, 1])).toBeNull()
  })
})

const opArb = fc.record({
  replica: fc.integer({ min: 0, max: 2 }),
  kind: fc.constantFrom('set', 'set', 'del', 'obj'),
  field: fc.constantFrom('a', 'b', 'c', '__proto__'),
  value: fc.string({ maxLength: 3 }),
  sync: fc.boolean(),
})

function history(edits: ReadonlyArray<{ replica: number; kind: string; field: string; value: string; sync: boolean }>): { made: Made[]; replicas: CollabMap[] } {
  const replicas = [new CollabMap(), new CollabMap(), new CollabMap()]
  const seen = [0, 0, 0]
  const made: Made[] = []
  for (const e of edits) {
    const m = replicas[e.replica] as CollabMap
    if (e.sync) {
      deliver(m, made.slice(seen[e.replica]).filter((x) => x.ctx.replica !== `r${e.replica}`))
      seen[e.replica] = made.length
    }
    made.push(make(m, `r${e.replica}`, e.kind === 'set' ? set(e.field, e.value) : e.kind === 'del' ? del(e.field) : obj(e.field, ['t', null])))
  }
  return { made, replicas }
}

describe('map laws (property tests)', () => {
  it('converges under any delivery order; apply then inverse restores the value; merge is a join', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 30 }), fc.nat(), (edits, pick) => {
        const { made, replicas } = history(edits)
        const ref = new CollabMap()
        deliver(ref, made)
        const rev = new CollabMap()
        deliver(rev, [...made].reverse())
        expect(rev.value()).toEqual(ref.value())
        expect(rev.snapshot()).toEqual(ref.snapshot())
        if (made.length) {
          const x = made[pick % made.length] as Made
          const before = ref.value()
          ref.apply(ref.inverse(), x.ctx)
          const without = new CollabMap()
          deliver(without, made.filter((y) => y !== x))
          expect(ref.value()).toEqual(without.value())
          ref.apply(x.op, x.ctx)
          expect(ref.value()).toEqual(before)
        }
        const [a, b, c] = replicas as [CollabMap, CollabMap, CollabMap]
        const ab = a.clone()
        ab.merge(b)
        ab.merge(c)
        const cb = c.clone()
        cb.merge(b)
        cb.merge(a)
        cb.merge(a)
        expect(ab.snapshot()).toEqual(cb.snapshot())
        const all = new CollabMap()
        deliver(all, made)
        expect(ab.value()).toEqual(all.value())
      }),
      { numRuns: 300 },
    )
  })

  it('the stable path (tryApply in one order everywhere) ends where apply does', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 30 }), (edits) => {
        const { made } = history(edits)
        const stable = new CollabMap()
        for (const x of made) expect(stable.tryApply(x.op, x.ctx).ok).toBe(true)
        const prospective = new CollabMap()
        deliver(prospective, made)
        expect(stable.value()).toEqual(prospective.value())
        for (const x of made) if (x.op[0] === 'o') expect(stable.nextGen(x.op[1])).toBe(prospective.nextGen(x.op[1]))
      }),
      { numRuns: 200 },
    )
  })
})

describe('map schema', () => {
  it('round-trips through the wire form and refuses writes of another kind with type-mismatch', () => {
    const decl = { type: 'map', bounds: { maxKeys: 10, schema: { title: ['t', 80], done: 'value', card: ['m', null] } } } as const
    const enc = encodeDeclaration(decl)
    expect(enc).toEqual(['m', 10, [['card', ['m', null]], ['done', 'v'], ['title', ['t', 80]]]])
    const back = decodeDeclaration(enc)
    expect(sameDeclaration(back, decl)).toBe(true)
    expect(sameDeclaration(back, { type: 'map', bounds: { maxKeys: 10 } })).toBe(false)
    expect(encodeDeclaration({ type: 'map', bounds: {} })).toEqual(['m', null])
    for (const bad of [['m', null, [['b', 'v'], ['a', 'v']]], ['m', null, [['a', ['zz']]]], ['m', null, [['', 'v']]], ['m', null, 'v']]) {
      expect(() => decodeDeclaration(bad)).toThrowError(expect.objectContaining({ reason: 'malformed' }))
    }
    const m = new CollabMap((back as { bounds: MapBounds }).bounds)
    const ctx = (n: number) => ({ replica: 'r', tag: `t:${n}` })
    const reason = (r: ReturnType<CollabMap['tryApply']>) => (r.ok ? 'ok' : r.reason)
    expect(reason(m.tryApply(['s', 'done', true, 1], ctx(1)))).toBe('ok')
    expect(reason(m.tryApply(['o', 'done', ['t', null], 2, 1], ctx(2)))).toBe('type-mismatch')
    expect(reason(m.tryApply(['s', 'title', 'x', 3], ctx(3)))).toBe('type-mismatch')
    expect(reason(m.tryApply(['o', 'title', ['t', null], 4, 1], ctx(4)))).toBe('type-mismatch')
    expect(reason(m.tryApply(['o', 'title', ['t', 80], 5, 1], ctx(5)))).toBe('ok')
    expect(reason(m.tryApply(['x', 'title', 6], ctx(6)))).toBe('ok')
    expect(reason(m.tryApply(['s', 'other', 1, 7], ctx(7)))).toBe('ok')
  })
})
