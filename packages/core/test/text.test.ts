import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { createHash } from 'node:crypto'
import { CollabText, continuesRun, renameTextOp, textSnapshotDigest, validateTextOp, type TextOp } from '../src/crdt/text.ts'
import type { OpContext } from '../src/crdt/types.ts'

/** One op as made by a replica: the op and the context every replica applies it under. */
interface Made {
  readonly op: TextOp
  readonly ctx: OpContext
}

let counter = 0
function ctxOf(replica: string): OpContext {
  return { replica, tag: `${replica}:${counter++}` }
}

/** Makes an op on `t` as its replica would (applied there at once) and returns it for the others. */
function edit(t: CollabText, replica: string, make: (t: CollabText) => TextOp | undefined): Made | undefined {
  const op = make(t)
  if (!op) return undefined
  const ctx = ctxOf(replica)
  t.apply(op, ctx)
  return { op, ctx }
}

function typeAt(t: CollabText, replica: string, index: number, text: string, perChar = true): Made[] {
  if (!perChar) return [edit(t, replica, (x) => x.insertOp(index, text)) as Made]
  return [...text].map((ch, i) => edit(t, replica, (x) => x.insertOp(index + i, ch)) as Made)
}

function deliver(t: CollabText, ops: readonly Made[]): void {
  for (const m of ops) t.apply(m.op, m.ctx)
}

describe('text: a FugueMax sequence of characters', () => {
  it('inserts and deletes by code point, and hands out the ops to send', () => {
    const t = new CollabText()
    typeAt(t, 'a', 0, 'hello', false)
    typeAt(t, 'a', 5, ' world')
    expect(t.value()).toBe('hello world')
    edit(t, 'a', (x) => x.deleteOp(0, 1))
    expect(t.value()).toBe('ello world')
    typeAt(t, 'a', 0, '😀 ', false)
    expect(t.value()).toBe('😀 ello world')
    expect(t.length).toBe(12)
    edit(t, 'a', (x) => x.deleteOp(0, 1))
    expect(t.value()).toBe(' ello world')
    expect(t.deleteOp(11, 3)).toBeUndefined()
  })

  it('keeps two users typing at one place from interleaving, forwards and backwards', () => {
    for (const backwards of [false, true]) {
      const base = new CollabText()
      const start = typeAt(base, 'o', 0, 'AB', false)
      const a = new CollabText()
      const b = new CollabText()
      deliver(a, start)
      deliver(b, start)
      // Both type between A and B: forwards each char goes after the last one typed, backwards each goes before it.
      const byA = [...'abc'].map((ch, i) => edit(a, 'a', (x) => x.insertOp(backwards ? 1 : 1 + i, ch)) as Made)
      const byB = [...'xyz'].map((ch, i) => edit(b, 'b', (x) => x.insertOp(backwards ? 1 : 1 + i, ch)) as Made)
      deliver(a, byB)
      deliver(b, byA)
      expect(a.value()).toBe(b.value())
      const runA = backwards ? 'cba' : 'abc'
      const runB = backwards ? 'zyx' : 'xyz'
      expect([`A${runA}${runB}B`, `A${runB}${runA}B`]).toContain(a.value())
    }
  })

  it('places an insert that arrives before the character it is placed against once that one arrives', () => {
    const a = new CollabText()
    const first = typeAt(a, 'a', 0, 'ab', false)
    const second = typeAt(a, 'a', 1, 'XY', false)
    const b = new CollabText()
    deliver(b, second)
    expect(b.value()).toBe('')
    const del = edit(a, 'a', (x) => x.deleteOp(0, 1)) as Made
    deliver(b, [del])
    deliver(b, first)
    expect(b.value()).toBe(a.value())
    expect(a.value()).toBe('XYb')
    expect(b.snapshot()).toEqual(a.snapshot())
  })

  it('undoes every op exactly with its inverse, and a withdrawn insert applied again comes back', () => {
    const t = new CollabText()
    typeAt(t, 'a', 0, 'hello', false)
    const ins = edit(t, 'a', (x) => x.insertOp(5, ' there')) as Made
    const del = edit(t, 'a', (x) => x.deleteOp(1, 3)) as Made
    expect(t.value()).toBe('ho there')
    t.apply(t.inverse(del.op, del.ctx), del.ctx)
    expect(t.value()).toBe('hello there')
    t.apply(t.inverse(ins.op, ins.ctx), ins.ctx)
    expect(t.value()).toBe('hello')
    t.apply(ins.op, ins.ctx)
    expect(t.value()).toBe('hello there')
  })

  it('lets an op name the characters of an earlier op of its own envelope (^n), and renames draft ids', () => {
    // A client types 'ab' then 'c' after it and deletes 'a', all in one envelope with prefix E.
    const draft = new CollabText()
    const d1 = draft.insertOp(0, 'ab')
    draft.apply(d1, { replica: 'me', tag: '~d:1' })
    const d2 = draft.insertOp(2, 'c')
    draft.apply(d2, { replica: 'me', tag: '~d:2' })
    const d3 = draft.deleteOp(0, 1) as TextOp
    draft.apply(d3, { replica: 'me', tag: '~d:3' })
    expect(continuesRun(d1, '~d:1.1', d2)).toBe(true)
    expect(continuesRun(d1, '~d:1.0', d2)).toBe(false)
    expect(continuesRun(d2, '~d:2.0', d1)).toBe(false)
    // As the client compiles it: 'ab' and 'c' merge into op 0; the delete is op 1.
    const rename = (tag: string) => (tag === '~d:1' ? { tag: '^0', shift: 0 } : tag === '~d:2' ? { tag: '^0', shift: 2 } : undefined)
    const merged: TextOp = ['i', d1[1] as string, d1[2] as 0 | 1, d1[3] as string, 'abc']
    const del = renameTextOp(d3, rename)
    expect(del).toEqual(['d', [['^0', 0, 1]]])
    expect(validateTextOp(del)).toBeNull()
    expect(validateTextOp(['d', [['^x', 0, 1]]])).toMatch(/range/)
    for (const t of [new CollabText(), new CollabText()]) {
      t.apply(merged, { replica: 'me', tag: 'E:0' })
      t.apply(del, { replica: 'me', tag: 'E:1' })
      expect(t.value()).toBe('bc')
      expect(t.indexOfId('E:0.2')).toBe(1)
    }
    expect(draft.value()).toBe('bc')
  })

  it('keeps an anchor beside its character while others insert before it and delete it', () => {
    const t = new CollabText()
    typeAt(t, 'a', 0, 'hello world', false)
    const cursor = t.anchorAt(5)
    expect(t.positionOf(cursor)).toBe(5)
    typeAt(t, 'b', 0, '>> ', false)
    expect(t.positionOf(cursor)).toBe(8)
    // A concurrent insert at the cursor goes after it: the anchor stays beside 'o'.
    typeAt(t, 'b', 8, '!', false)
    expect(t.positionOf(cursor)).toBe(8)
    edit(t, 'b', (x) => x.deleteOp(3, 5))
    expect(t.value()).toBe('>> ! world')
    expect(t.positionOf(cursor)).toBe(3)
    expect(t.positionOf('')).toBe(0)
    expect(t.positionOf('nope:1.0')).toBeUndefined()
  })

  it('keeps maxLength when inserts come out of causal order: one waiting for its anchor counts already, and a rejected one leaves no trace', () => {
    const t = new CollabText({ maxLength: 5 })
    expect(t.tryApply(['i', 'p:1.0', 1, '', 'xx'], { replica: 'a', tag: 'a:1' }).ok).toBe(true)
    expect(t.length).toBe(0)
    expect(t.tryApply(['i', '', 1, '', 'yyy'], { replica: 'b', tag: 'b:1' }).ok).toBe(true)
    const before = JSON.stringify(t.snapshot())
    // p:1 would make 'xx' show too: six characters.
    expect(t.tryApply(['i', '', 1, '', 'p'], { replica: 'p', tag: 'p:1' }).ok).toBe(false)
    expect(t.invariantsHold()).toBe(true)
    expect(JSON.stringify(t.snapshot())).toBe(before)
    // A delete of waiting characters makes room.
    expect(t.tryApply(['d', [['a:1', 0, 1]]], { replica: 'a', tag: 'a:2' }).ok).toBe(true)
    expect(t.tryApply(['i', '', 1, '', 'p'], { replica: 'p', tag: 'p:1' }).ok).toBe(true)
    expect(t.value()).toBe('yyypx')
  })

  it('refuses what breaks maxLength on the stable path, and malformed ops', () => {
    const t = new CollabText({ maxLength: 5 })
    expect(t.tryApply(t.insertOp(0, 'hello'), ctxOf('a')).ok).toBe(true)
    const r = t.tryApply(t.insertOp(5, '!'), ctxOf('a'))
    expect(r.ok ? 'ok' : r.reason).toBe('invariant')
    expect(t.value()).toBe('hello')
    expect(validateTextOp(['i', 'nope', 1, '', 'x'])).toMatch(/parent/)
    expect(validateTextOp(['i', '', 0, 'a:1.0', 'x'])).toMatch(/right origin/)
    expect(validateTextOp(['i', '', 1, '', ''])).toMatch(/non-empty/)
    expect(validateTextOp(['d', []])).toMatch(/ranges/)
    expect(validateTextOp(['d', [['t', -1, 1]]])).toMatch(/from/)
    expect(validateTextOp(['D', [['t', 0, 1]]])).toMatch(/unknown/)
  })
})

/** A random edit: where and what, resolved against the replica's current text. */
const editArb = fc.record({
  replica: fc.integer({ min: 0, max: 2 }),
  kind: fc.constantFrom('ins', 'ins', 'del'),
  at: fc.nat(),
  text: fc.string({ minLength: 1, maxLength: 4, unit: fc.constantFrom('a', 'b', 'c', 'é', '😀') }),
  count: fc.integer({ min: 1, max: 3 }),
  sync: fc.boolean(),
})

/** Runs a history of three replicas that sometimes sync; returns every op made and the replicas. */
function history(edits: ReadonlyArray<{ replica: number; kind: string; at: number; text: string; count: number; sync: boolean }>): { made: Made[]; replicas: CollabText[] } {
  const replicas = [new CollabText(), new CollabText(), new CollabText()]
  const seen = replicas.map(() => 0)
  const made: Made[] = []
  for (const e of edits) {
    const t = replicas[e.replica] as CollabText
    if (e.sync) {
      deliver(t, made.slice(seen[e.replica]).filter((m) => m.ctx.replica !== `r${e.replica}`))
      seen[e.replica] = made.length
    }
    const m = edit(t, `r${e.replica}`, (x) => (e.kind === 'ins' ? x.insertOp(e.at % (x.length + 1), e.text) : x.length ? x.deleteOp(e.at % x.length, e.count) : undefined))
    if (m) made.push(m)
  }
  return { made, replicas }
}

describe('text laws (property tests)', () => {
  it('converges to one value and one state under any delivery order, causal or not', () => {
    fc.assert(
      fc.property(fc.array(editArb, { maxLength: 40 }), fc.array(fc.nat(), { minLength: 3, maxLength: 3 }), (edits, seeds) => {
        const { made } = history(edits)
        const results = seeds.map((seed) => {
          const t = new CollabText()
          deliver(t, shuffle(made, seed))
          return t
        })
        const reference = new CollabText()
        deliver(reference, made)
        for (const t of results) {
          expect(t.value()).toBe(reference.value())
          expect(t.snapshot()).toEqual(reference.snapshot())
        }
      }),
      { numRuns: 300 },
    )
  })

  it('apply then inverse restores the value', () => {
    fc.assert(
      fc.property(fc.array(editArb, { maxLength: 30 }), fc.nat(), (edits, pick) => {
        const { made } = history(edits)
        if (made.length === 0) return
        const t = new CollabText()
        deliver(t, made)
        const m = made[pick % made.length] as Made
        const before = t.value()
        // Withdraw an op that was applied, then apply it again: both are exact. A withdrawn
        // insert hides exactly its own characters that were visible.
        const own = m.op[0] === 'i' ? [...m.op[4]].map((_, k) => t.indexOfId(`${m.ctx.tag}.${k}`)).filter((i): i is number => i !== undefined) : []
        t.apply(t.inverse(m.op, m.ctx), m.ctx)
        if (m.op[0] === 'i') expect(t.value()).toBe([...before].filter((_, i) => !own.includes(i)).join(''))
        t.apply(m.op, m.ctx)
        expect(t.value()).toBe(before)
      }),
      { numRuns: 300 },
    )
  })

  it('merge is a lattice join: commutative, associative, idempotent, and equal to applying the union', () => {
    fc.assert(
      fc.property(fc.array(editArb, { maxLength: 30 }), (edits) => {
        const { replicas, made } = history(edits)
        const [a, b, c] = replicas as [CollabText, CollabText, CollabText]
        const ab = a.clone()
        ab.merge(b)
        const ba = b.clone()
        ba.merge(a)
        expect(ab.snapshot()).toEqual(ba.snapshot())
        const abc1 = ab.clone()
        abc1.merge(c)
        const bc = b.clone()
        bc.merge(c)
        const abc2 = a.clone()
        abc2.merge(bc)
        expect(abc1.snapshot()).toEqual(abc2.snapshot())
        const aa = a.clone()
        aa.merge(a)
        expect(aa.snapshot()).toEqual(a.snapshot())
        const all = new CollabText()
        deliver(all, made)
        expect(abc1.value()).toBe(all.value())
      }),
      { numRuns: 200 },
    )
  })

  it('keeps its digest equal to the digest of its snapshot, edit after edit, and equal states have equal digests', () => {
    const sha256 = (b: Uint8Array): Uint8Array => createHash('sha256').update(b).digest()
    fc.assert(
      fc.property(fc.array(editArb, { maxLength: 30 }), fc.nat(), (edits, seed) => {
        const { made } = history(edits)
        const t = new CollabText()
        for (const m of shuffle(made, seed)) {
          t.apply(m.op, m.ctx)
          // Asked between edits too: the cached buckets must follow every change.
          if (m.ctx.tag.endsWith('0') || m.ctx.tag.endsWith('5')) expect(t.digest(sha256)).toEqual(textSnapshotDigest(t.snapshot(), sha256))
        }
        expect(t.digest(sha256)).toEqual(textSnapshotDigest(t.snapshot(), sha256))
        const other = new CollabText()
        deliver(other, made)
        expect(other.digest(sha256)).toEqual(t.digest(sha256))
        const copy = t.clone()
        expect(copy.digest(sha256)).toEqual(t.digest(sha256))
        expect(copy.snapshot()).toEqual(t.snapshot())
        // Independent: an edit of the copy leaves the original as it was.
        const before = t.snapshot()
        copy.apply(copy.insertOp(0, 'z'), { replica: 'q', tag: 'q:1' })
        if (copy.length) copy.apply(copy.deleteOp(copy.length - 1, 1) as TextOp, { replica: 'q', tag: 'q:2' })
        expect(t.snapshot()).toEqual(before)
        expect(copy.value()).toBe(CollabText.fromSnapshot({}, copy.snapshot()).value())
      }),
      { numRuns: 200 },
    )
  })

  it('never interleaves two runs typed concurrently at one place', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 2, maxLength: 6, unit: fc.constantFrom('a', 'b', 'c') }), fc.string({ minLength: 2, maxLength: 6, unit: fc.constantFrom('x', 'y', 'z') }), fc.boolean(), fc.boolean(), fc.nat(), (s1, s2, back1, back2, seed) => {
        const base = new CollabText()
        const start = typeAt(base, 'o', 0, 'PQ', false)
        const a = new CollabText()
        const b = new CollabText()
        deliver(a, start)
        deliver(b, start)
        const byA = [...s1].map((ch, i) => edit(a, 'a', (x) => x.insertOp(back1 ? 1 : 1 + i, ch)) as Made)
        const byB = [...s2].map((ch, i) => edit(b, 'b', (x) => x.insertOp(back2 ? 1 : 1 + i, ch)) as Made)
        const t = new CollabText()
        deliver(t, shuffle([...start, ...byA, ...byB], seed))
        const run1 = back1 ? [...s1].reverse().join('') : s1
        const run2 = back2 ? [...s2].reverse().join('') : s2
        expect([`P${run1}${run2}Q`, `P${run2}${run1}Q`]).toContain(t.value())
      }),
      { numRuns: 300 },
    )
  })
})

/** A deterministic shuffle (mulberry32). */
function shuffle<T>(items: readonly T[], seed: number): T[] {
  const out = [...items]
  let s = seed >>> 0
  const rand = (): number => {
    s = (s + 0x6d2b79f5) >>> 0
    let x = s
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1))
    ;[out[i], out[j]] = [out[j] as T, out[i] as T]
  }
  return out
}
