// @vitest-environment happy-dom
/**
 * The text sync of @stead/codemirror: real EditorViews (happy-dom) bound to
 * texts of real clients against real relays in simulated time (SimCluster).
 * After every local dispatch the editor and its text must be equal at once
 * (the binding is synchronous), and editors of different clients must
 * converge to the text both clients hold.
 */
import { EditorSelection, Transaction } from '@codemirror/state'
import type { EditorView } from '@codemirror/view'
import { ClosedError, type TextHandle } from '@stead/client'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { deleteAt, docOf, seeded, typeAt, unitsAt, world } from './helpers.ts'

const w = world()
afterEach(() => w.close())

/** The editor shows the text, character for character. */
function inStep(view: EditorView, text: TextHandle): void {
  expect(docOf(view)).toBe(text.value)
}

describe('local edits', () => {
  it('go into the text at once, in code points: emoji and other astral characters count as one', async () => {
    const c = await w.cluster()
    const { space } = await w.client(c)
    const text = space.text('note')
    await text.insert(0, 'a😀b')
    const view = w.editor(text)
    inStep(view, text)
    // After the emoji: UTF-16 offset 3, code point 2.
    typeAt(view, 2, '🎉x')
    expect(text.value).toBe('a😀🎉xb')
    expect(text.length).toBe(5)
    deleteAt(view, 1, 2)
    expect(text.value).toBe('axb')
    view.dispatch({ changes: { from: 0, to: 3, insert: '𝒜\r\n\tz' } })
    inStep(view, text)
    // "\r" stays a character of its line: the document is the text exactly.
    expect(view.state.doc.lines).toBe(2)
  })

  it('of one transaction with several changes (multi-cursor typing, a paste over selections) all land where they were made', async () => {
    const c = await w.cluster()
    const [a, b] = [await w.client(c), await w.client(c)]
    const ta = a.space.text('note')
    const tb = b.space.text('note')
    await ta.insert(0, 'one 😀 two 😀 three')
    await c.until('b has it', () => tb.value === 'one 😀 two 😀 three')
    const va = w.editor(ta)
    const vb = w.editor(tb)
    // Three carets, one per word start, typing one character: a single transaction of three changes.
    const doc = docOf(va)
    va.dispatch({ selection: EditorSelection.create([0, doc.indexOf('two'), doc.indexOf('three')].map((p) => EditorSelection.cursor(p))) })
    va.dispatch(va.state.replaceSelection('>'))
    expect(ta.value).toBe('>one 😀 >two 😀 >three')
    // Two selections replaced by one paste, one of them ending right after an emoji.
    const d2 = docOf(va)
    va.dispatch({ selection: EditorSelection.create([EditorSelection.range(1, 7), EditorSelection.range(d2.indexOf('three'), d2.length)]) })
    va.dispatch(va.state.replaceSelection('🐢'))
    expect(ta.value).toBe('>🐢 >two 😀 >🐢')
    // Explicit changes listed out of order, an insert and deletes at both ends.
    const d3 = docOf(va)
    va.dispatch({ changes: [{ from: d3.length - 2, to: d3.length }, { from: 0, to: 1 }, { from: unitsAt(d3, 5), insert: '[x]' }] })
    inStep(va, ta)
    expect(ta.value).toBe('🐢 >t[x]wo 😀 >')
    await c.until('b shows it', () => docOf(vb) === ta.value && tb.value === ta.value)
  })

  it('past a maxLength, which the text holds back, are undone in the editor; typed after the space closed, undone and reported', async () => {
    const c = await w.cluster()
    const { space } = await w.client(c)
    const text = space.text('short', { maxLength: 5 })
    const errors: unknown[] = []
    const view = w.editor(text, { onError: (e) => errors.push(e) })
    typeAt(view, 0, 'abcd')
    await c.until('it is stable', () => text.stable === 'abcd')
    // The prospective text never goes past maxLength: it holds the insert back, and the editor shows the text again right after.
    typeAt(view, 4, 'efg')
    expect(text.value).toBe('abcd')
    await c.until('the editor is set back', () => docOf(view) === 'abcd')
    typeAt(view, 4, 'e')
    expect(text.value).toBe('abcde')
    await space.close()
    typeAt(view, 0, 'zz')
    await c.until('the editor is set back', () => docOf(view) === 'abcde')
    await c.until('the refusal is reported', () => errors.length > 0)
    expect(errors[0]).toBeInstanceOf(ClosedError)
  })
})

describe('changes of the text made elsewhere', () => {
  it("show in the editor: another client's, and this client's own made through the handle or inside space.transact", async () => {
    const c = await w.cluster()
    const [a, b] = [await w.client(c), await w.client(c)]
    const ta = a.space.text('note')
    const tb = b.space.text('note')
    const va = w.editor(ta)
    await tb.insert(0, 'from b 😀')
    await c.until('a shows it', () => docOf(va) === 'from b 😀')
    // Local to this client, but not made in this editor (a toolbar button, an undo manager).
    await ta.insert(ta.length, '!')
    expect(docOf(va)).toBe('from b 😀!')
    // An editor edit and a handle edit in one transaction: the text reports them once, together.
    await a.space.transact(() => {
      typeAt(va, 0, '> ')
      void ta.insert(ta.length, ' <')
    })
    await c.until('the editor has both', () => docOf(va) === '> from b 😀! <')
    inStep(va, ta)
    await c.until('b has both', () => tb.value === ta.value)
    // With "\r\n" from a client that does not split lines as CodeMirror does.
    await tb.insert(0, 'x\r\ny\rz\n')
    await c.until('a shows it exactly', () => docOf(va) === tb.value)
    expect(va.state.doc.lines).toBe(3)
  })

  it('are annotated as remote and kept out of the undo history, and the editor created with another document is set to the text', async () => {
    const c = await w.cluster()
    const [a, b] = [await w.client(c), await w.client(c)]
    const ta = a.space.text('note')
    await ta.insert(0, 'shared')
    const tb = b.space.text('note')
    await c.until('b has it', () => tb.value === 'shared')
    const seen: Transaction[] = []
    const vb = w.editor(tb, { doc: 'stale' })
    vb.dispatch = ((...args: Parameters<EditorView['dispatch']>) => {
      const tr = vb.state.update(...(args as [Transaction]))
      seen.push(tr)
      vb.update([tr])
    }) as EditorView['dispatch']
    await c.until('the editor shows the text', () => docOf(vb) === 'shared')
    await ta.insert(0, 'now ')
    await c.until('b shows the change', () => docOf(vb) === 'now shared')
    expect(seen.length).toBeGreaterThanOrEqual(2)
    for (const tr of seen) {
      expect(tr.annotation(Transaction.remote)).toBe(true)
      expect(tr.annotation(Transaction.addToHistory)).toBe(false)
    }
    // The text was never changed by setting the editor to it.
    expect(tb.value).toBe('now shared')
  })

  it("keep the local selection on the same characters, before and after an emoji, and a caret at another's typing stays in front of it", async () => {
    const c = await w.cluster()
    const [a, b] = [await w.client(c), await w.client(c)]
    const ta = a.space.text('note')
    const tb = b.space.text('note')
    await ta.insert(0, 'hello 😀 world')
    await c.until('b has it', () => tb.value === 'hello 😀 world')
    const vb = w.editor(tb)
    const world16 = docOf(vb).indexOf('world')
    vb.dispatch({ selection: EditorSelection.create([EditorSelection.range(world16, world16 + 5), EditorSelection.cursor(0)]) })
    await ta.insert(0, '🎉🎉 ')
    await ta.insert(ta.length - 5, 'big ')
    await c.until('b shows it', () => docOf(vb) === '🎉🎉 hello 😀 big world')
    // CodeMirror keeps ranges in document order: the caret first.
    const [caret, sel] = vb.state.selection.ranges as [EditorSelection['main'], EditorSelection['main']]
    expect(docOf(vb).slice(sel.from, sel.to)).toBe('world')
    // The caret was at 0, where a typed in front of everything: it stays at 0, a's text after it.
    expect(caret.head).toBe(0)
    // A delete across the selection's start takes it to where the deleted text was.
    const at = [...ta.value].indexOf('b')
    await ta.delete(at, 6)
    await c.until('b shows the delete', () => docOf(vb) === '🎉🎉 hello 😀 rld')
    const moved = vb.state.selection.ranges[1] as EditorSelection['main']
    expect(docOf(vb).slice(moved.from, moved.to)).toBe('rld')
  })
})

describe('two editors on two clients typing at once', () => {
  it('converge to the same document, equal to both texts, with every local dispatch in the text at once', async () => {
    const c = await w.cluster()
    const [a, b] = [await w.client(c), await w.client(c)]
    const ta = a.space.text('note')
    const tb = b.space.text('note')
    await ta.insert(0, 'The quick 🦊 jumps over the lazy 🐶.')
    await c.until('b has it', () => tb.value === ta.value)
    const va = w.editor(ta)
    const vb = w.editor(tb)
    const random = seeded(45)
    const pieces = ['a', 'b', ' ', '😀', 'ü', '\n', '👩‍💻', 'xyz', '𝄞']
    for (let round = 0; round < 30; round++) {
      for (const [view, text] of [[va, ta], [vb, tb]] as const) {
        for (let k = 0; k < 3; k++) {
          const length = [...docOf(view)].length
          const point = Math.floor(random() * (length + 1))
          if (random() < 0.3 && length > 0) deleteAt(view, Math.min(point, length - 1), 1 + Math.floor(random() * Math.min(3, length - Math.min(point, length - 1))))
          else typeAt(view, point, pieces[Math.floor(random() * pieces.length)] as string)
          inStep(view, text)
        }
      }
      // Some rounds reach the other side before the next, some cross on the way.
      await c.advance(Math.floor(random() * 8))
    }
    await c.until('both editors show one document', () => docOf(va) === docOf(vb) && ta.value === docOf(va) && tb.value === docOf(vb))
    inStep(va, ta)
    inStep(vb, tb)
  })
})

describe('destroying the view', () => {
  it('stops the binding: changes of the text no longer reach the editor, edits no longer reach the text', async () => {
    const c = await w.cluster()
    const [a, b] = [await w.client(c), await w.client(c)]
    const ta = a.space.text('note')
    const tb = b.space.text('note')
    const va = w.editor(ta)
    typeAt(va, 0, 'before')
    await c.until('b has it', () => tb.value === 'before')
    const dispatch = vi.spyOn(va, 'dispatch')
    va.destroy()
    await tb.insert(0, 'after ')
    await ta.insert(ta.length, '!')
    await c.until('a has both', () => ta.value === 'after before!')
    expect(dispatch).not.toHaveBeenCalled()
    expect(docOf(va)).toBe('before')
    // A transaction on the destroyed view goes nowhere.
    va.dispatch({ changes: { from: 0, insert: 'x' } })
    expect(ta.value).toBe('after before!')
  })
})

describe('two users typing at one place', () => {
  it('each keeps typing after their own characters: the carets stay beside what each typed last, so the runs never interleave', async () => {
    const c = await w.cluster()
    const [a, b] = [await w.client(c), await w.client(c)]
    const ta = a.space.text('note')
    const tb = b.space.text('note')
    const va = w.editor(ta)
    const vb = w.editor(tb)
    for (let i = 0; i < 6; i++) {
      va.dispatch(va.state.replaceSelection('a'))
      vb.dispatch(vb.state.replaceSelection('b'))
      await c.until('both see both keys', () => docOf(va) === docOf(vb) && ta.length === 2 * (i + 1))
    }
    expect(['aaaaaabbbbbb', 'bbbbbbaaaaaa']).toContain(docOf(va))
  })
})
