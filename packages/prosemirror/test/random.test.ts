// @vitest-environment happy-dom
/**
 * Random concurrent editing: two editors on two clients make random
 * transactions at once (typing, emoji, Enter, deletes across paragraphs,
 * replacing ranges, marks on and off, several steps in one transaction),
 * then wait; after every round both documents must be equal, equal to what
 * their texts show, and both texts' spans equal. Seeded: a failing seed
 * replays the same edits.
 */
import type { Space } from '@stead/client'
import { afterEach, describe, expect, it } from 'vitest'
import { docPos, flatLength } from '../src/flat.ts'
import { steadDoc, steadSchema as s } from '../src/index.ts'
import { closeAll, converged, editor, world, type Editor } from './helpers.ts'

afterEach(closeAll)

/** mulberry32: a small seeded generator, so a failure replays. */
function rng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const PIECES = ['a', 'bc', '😀', 'x y', 'é', '👩‍💻', 'long words here']
const MARKS = [s.mark('strong'), s.mark('em'), s.mark('code'), s.mark('link', { href: 'https://a.test' }), s.mark('link', { href: 'https://b.test' })]

/** One random transaction of one to three steps on `e`. */
function randomEdit(e: Editor, next: () => number): void {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)] as T
  const tr = e.view.state.tr
  const steps = 1 + Math.floor(next() * 3)
  for (let k = 0; k < steps; k++) {
    const n = flatLength(tr.doc)
    const x = Math.floor(next() * (n + 1))
    const y = Math.floor(next() * (n + 1))
    const [from, to] = [docPos(tr.doc, Math.min(x, y)), docPos(tr.doc, Math.max(x, y))]
    switch (pick(['type', 'type', 'enter', 'delete', 'replace', 'mark', 'unmark'] as const)) {
      case 'type':
        tr.insertText(pick(PIECES), from)
        break
      case 'enter':
        tr.split(from)
        break
      case 'delete':
        if (from < to) tr.delete(from, to)
        break
      case 'replace':
        tr.insertText(pick(PIECES), from, to)
        break
      case 'mark':
        if (from < to) tr.addMark(from, to, pick(MARKS))
        break
      case 'unmark':
        if (from < to) tr.removeMark(from, to, pick(MARKS).type)
        break
    }
  }
  e.view.dispatch(tr)
}

describe('steadRichText: random concurrent editing', () => {
  for (const seed of [1, 2, 3]) {
    it(`converges after every round (seed ${seed})`, async () => {
      const next = rng(seed)
      const { c, spaces } = await world(2)
      const [a, b] = (spaces as Space[]).map((sp) => editor(sp))
      for (let round = 0; round < 8; round++) {
        const edits = 1 + Math.floor(next() * 4)
        for (let i = 0; i < edits; i++) {
          randomEdit(a as Editor, next)
          randomEdit(b as Editor, next)
        }
        // Each editor's own text shows its document at once.
        for (const e of [a, b] as Editor[]) expect(e.view.state.doc.eq(steadDoc(e.text)), `${e.view.state.doc.toString()} vs ${JSON.stringify(e.text.spans)}`).toBe(true)
        await c.until(`round ${round} converged`, () => converged(a as Editor, b as Editor))
      }
      expect((a as Editor).text.value.length).toBeGreaterThan(0)
    })
  }
})
