// @vitest-environment happy-dom
/**
 * Two EditorViews on two real clients of real relays in simulated time
 * (SimCluster): what one editor does reaches the other's document and both
 * texts, and both end the same, prospective and stable.
 */
import type { Space } from '@stead/client'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { docPos } from '../src/flat.ts'
import { Schema } from 'prosemirror-model'
import { EditorState } from 'prosemirror-state'
import { EditorView } from 'prosemirror-view'
import { defaultMarks, steadDoc, steadRichText, steadSchema as s } from '../src/index.ts'
import { at, closeAll, closeWith, converged, editor, enter, flatText, select, type, world, type Editor } from './helpers.ts'

afterEach(closeAll)

const strong = s.marks.strong
const bold = s.mark('strong')

describe('steadRichText: two editors in step', () => {
  it('typing, formatting, Enter and emoji made concurrently on two clients converge to one document and the same spans', async () => {
    const { c, spaces } = await world(2)
    const a = editor(spaces[0]!)
    const b = editor(spaces[1]!)
    type(a, 0, 'Hello world')
    enter(a, 11)
    type(a, 12, 'Second line')
    expect(a.text.value).toBe('Hello world\nSecond line')
    await c.until('b shows both lines', () => converged(a, b) && flatText(b) === 'Hello world\nSecond line')

    // At once, before either hears the other: inserts in different paragraphs, bold on "world"
    // while the other types at its end, Enter in the middle of a line, an emoji and text after it.
    type(a, 0, 'A:')
    a.view.dispatch(a.view.state.tr.addMark(at(a, 8), at(a, 13), bold))
    type(a, 7, '😀x')
    type(b, 12, 'B:')
    type(b, 11, '!')
    enter(b, 21)
    expect(a.text.value).toBe('A:Hello😀x world\nSecond line')
    expect(b.text.value).toBe('Hello world!\nB:Second\n line')
    await c.until('converged', () => converged(a, b) && a.text.value === 'A:Hello😀x world!\nB:Second\n line')
    expect(flatText(a)).toBe('A:Hello😀x world!\nB:Second\n line')
    expect(a.text.value).toBe(flatText(a))
    // "world" is bold everywhere; whether the "!" typed at its end is, Peritext decides the same on both.
    const world1 = a.view.state.doc.child(0)
    expect(world1.textBetween(0, world1.content.size)).toBe('A:Hello😀x world!')
    const boldText = a.text.spans.filter((sp) => sp.marks.bold === true).map((sp) => sp.text).join('')
    expect(boldText.startsWith('world')).toBe(true)
    await c.until('stable too', () => JSON.stringify(a.text.stableSpans) === JSON.stringify(a.text.spans) && JSON.stringify(b.text.stableSpans) === JSON.stringify(b.text.spans))
  })

  it('a bold toggle over a range (across an emoji and a paragraph boundary) is one format of exactly that range, and shows as bold on the other client', async () => {
    const { c, spaces } = await world(2)
    const a = editor(spaces[0]!)
    const b = editor(spaces[1]!)
    type(a, 0, 'one 😀 two\nthree')
    await c.until('b has it', () => converged(a, b) && b.text.length === 15)
    const format = vi.spyOn(a.text, 'format')
    // "😀 two\nth": code points 4 to 12
    a.view.dispatch(a.view.state.tr.addMark(at(a, 4), at(a, 12), bold))
    expect(format.mock.calls).toEqual([[4, 8, { bold: true }]])
    expect(a.text.spans).toEqual([
      { text: 'one ', marks: {} },
      { text: '😀 two\nth', marks: { bold: true } },
      { text: 'ree', marks: {} },
    ])
    await c.until('b shows it bold', () => converged(a, b) && b.text.spans.length === 3)
    const [p1, p2] = [b.view.state.doc.child(0), b.view.state.doc.child(1)]
    expect(p1.child(1).text).toBe('😀 two')
    expect(p1.child(1).marks.map((m) => m.type.name)).toEqual(['strong'])
    expect(p2.child(0).text).toBe('th')
    expect(strong.isInSet(p2.child(0).marks)).toBeTruthy()
    expect(strong.isInSet(p2.child(1).marks)).toBeUndefined()

    // Toggled off over part of it: one format with null.
    format.mockClear()
    a.view.dispatch(a.view.state.tr.removeMark(at(a, 7), at(a, 9), strong))
    expect(format.mock.calls).toEqual([[7, 2, { bold: null }]])
    await c.until('b shows it plain', () => converged(a, b) && b.text.spans.length === 5)
  })

  it('a format made on the other client (italic, a link, then bold taken off) shows as marks on exactly its characters', async () => {
    const { c, spaces } = await world(2)
    const a = editor(spaces[0]!)
    const tb = spaces[1]!.text('notes')
    type(a, 0, 'see the 😀 docs\nnow')
    await c.until('b has it', () => tb.value === 'see the 😀 docs\nnow')
    await tb.format(4, 5, { italic: true })
    await tb.format(10, 4, { link: { href: 'https://stead.test/docs' } })
    await c.until('a shows them', () => a.view.state.doc.child(0).childCount === 4)
    const p = a.view.state.doc.child(0)
    expect(p.child(1).text).toBe('the 😀')
    expect(p.child(1).marks.map((m) => m.type.name)).toEqual(['em'])
    expect(p.child(3).text).toBe('docs')
    expect(p.child(3).marks[0]?.attrs).toEqual({ href: 'https://stead.test/docs' })
    expect(converged(a, { view: a.view, text: tb })).toBe(true)
    await tb.format(0, 18, { italic: null })
    await c.until('a drops italic', () => a.view.state.doc.child(0).childCount === 2)
    expect(a.text.spans).toEqual(tb.spans)
  })

  it('a paste of marked paragraphs over a selection, then Backspace joining two paragraphs, comes out right on both sides', async () => {
    const { c, spaces } = await world(2)
    const a = editor(spaces[0]!)
    const b = editor(spaces[1]!)
    type(a, 0, 'first line\nsecond line\nthird')
    await c.until('b has it', () => converged(a, b) && b.text.length === 28)
    // Select "line\nsecond" and paste "BIG\n" (bold) + "small" over it.
    select(a, 6, 17)
    const pasted = s.node('doc', null, [s.node('paragraph', null, [s.text('BIG', [bold])]), s.node('paragraph', null, [s.text('small')])])
    a.view.dispatch(a.view.state.tr.replaceSelection(pasted.slice(1, pasted.content.size - 1)))
    expect(a.text.value).toBe('first BIG\nsmall line\nthird')
    expect(a.text.spans[1]).toEqual({ text: 'BIG', marks: { bold: true } })
    // Backspace at the start of "third": the paragraphs join.
    const third = docPos(a.view.state.doc, 21)
    a.view.dispatch(a.view.state.tr.join(third - 1))
    expect(a.text.value).toBe('first BIG\nsmall linethird')
    await c.until('b shows it', () => converged(a, b) && b.text.value === 'first BIG\nsmall linethird')
    expect(b.view.state.doc.childCount).toBe(2)
  })

  it('text typed after bold with bold turned off (stored marks) is plain in the text, though Stead would grow the bold over it', async () => {
    const { c, spaces } = await world(2)
    const a = editor(spaces[0]!)
    const b = editor(spaces[1]!)
    type(a, 0, 'bold')
    a.view.dispatch(a.view.state.tr.addMark(at(a, 0), at(a, 4), bold))
    const tr = a.view.state.tr.setStoredMarks([])
    a.view.dispatch(tr.insertText(' plain', at(a, 4)))
    expect(a.text.spans).toEqual([
      { text: 'bold', marks: { bold: true } },
      { text: ' plain', marks: {} },
    ])
    // And the reverse: typing at the end of plain text with bold stored makes bold text.
    a.view.dispatch(a.view.state.tr.setStoredMarks([bold]).insertText('!', at(a, 10)))
    expect(a.text.spans[2]).toEqual({ text: '!', marks: { bold: true } })
    await c.until('b shows it', () => converged(a, b) && b.text.length === 11)
  })

  it('edits made on the handle itself (app code, another tab, an undo manager) show in the editor and are not sent back', async () => {
    const { spaces } = await world(1)
    const a = editor(spaces[0]!)
    type(a, 0, 'abc')
    const insert = vi.spyOn(a.text, 'insert')
    await a.text.insert(1, '😀\nX')
    await a.text.format(0, 1, { code: true })
    expect(flatText(a)).toBe('a😀\nXbc')
    expect(converged(a)).toBe(true)
    // Only the app's own insert: nothing came back from the editor.
    expect(insert).toHaveBeenCalledTimes(1)
    type(a, 5, 'Y')
    expect(a.text.value).toBe('a😀\nXbYc')
  })

  it('a view starts from the text as it is, replacing whatever document its state was made with, without sending that document', async () => {
    const { c, spaces } = await world(2)
    const ta = spaces[0]!.text('notes')
    await ta.insert(0, 'kept\ntext')
    await ta.format(0, 4, { underline: true })
    const tb = spaces[1]!.text('notes')
    await c.until('b has it', () => JSON.stringify(tb.spans) === JSON.stringify(ta.spans))
    const other = s.node('doc', null, [s.node('paragraph', null, [s.text('something else')])])
    const insert = vi.spyOn(tb, 'insert')
    const b = editor(spaces[1]!, {}, other)
    expect(flatText(b)).toBe('kept\ntext')
    expect(b.view.state.doc.child(0).child(0).marks.map((m) => m.type.name)).toEqual(['underline'])
    expect(insert).not.toHaveBeenCalled()
    expect(tb.value).toBe('kept\ntext')
  })

  it('text with a newline in it (insertText from code) becomes paragraphs in the document, as in the text', async () => {
    const { c, spaces } = await world(2)
    const a = editor(spaces[0]!)
    const b = editor(spaces[1]!)
    a.view.dispatch(a.view.state.tr.insertText('one\ntwo\n\nfour'))
    expect(a.view.state.doc.childCount).toBe(4)
    expect(a.text.value).toBe('one\ntwo\n\nfour')
    await c.until('b shows it', () => converged(a, b) && b.view.state.doc.childCount === 4)
  })

  it('destroying the view stops the binding: no listener is left on the text or presence, and later changes reach no editor', async () => {
    const { c, spaces } = await world(2)
    const [sa, sb] = spaces as [Space, Space]
    const tb = sb.text('notes')
    const listening = { text: 0, presence: 0 }
    const count = <K extends 'text' | 'presence'>(which: K, target: { observe?: unknown; subscribe?: unknown }, method: 'observe' | 'subscribe'): void => {
      const original = (target[method] as (l: unknown) => () => void).bind(target)
      Object.assign(target, {
        [method]: (l: unknown) => {
          const stop = original(l)
          listening[which]++
          return () => {
            listening[which]--
            stop()
          }
        },
      })
    }
    count('text', tb, 'observe')
    count('presence', sb.presence, 'subscribe')
    const a = editor(sa, { presence: sa.presence })
    const b = editor(sb, { presence: sb.presence, user: { name: 'Bob', colour: '#2e86ab' } })
    expect(listening).toEqual({ text: 1, presence: 1 })
    type(a, 0, 'before')
    await c.until('b has it', () => converged(a, b) && b.text.length === 6)
    b.view.destroy()
    expect(listening).toEqual({ text: 0, presence: 0 })
    const shown = b.view.state.doc
    type(a, 6, ' and after')
    await c.until('the text on b has it', () => tb.value === 'before and after')
    expect(b.view.state.doc).toBe(shown)
  })

  it('a state built outside dispatch (state.apply, then view.updateState) is sent step by step', async () => {
    const { c, spaces } = await world(2)
    const a = editor(spaces[0]!)
    const b = editor(spaces[1]!)
    type(a, 0, 'draft one')
    await c.until('b has it', () => converged(a, b) && b.text.length === 9)
    // A transaction applied outside the view's dispatch, then the resulting state set on the view.
    const next = a.view.state.apply(a.view.state.tr.insertText('final', at(a, 6), at(a, 9)))
    a.view.updateState(next)
    expect(a.text.value).toBe('draft final')
    await c.until('b shows it', () => converged(a, b) && b.text.value === 'draft final')
  })

  it('a new state the app sets (EditorState.create, then view.updateState) is sent as its difference from the text', async () => {
    const { c, spaces } = await world(2)
    const a = editor(spaces[0]!)
    const b = editor(spaces[1]!)
    type(a, 0, 'keep this, drop that')
    await c.until('b has it', () => converged(a, b) && b.text.length === 20)
    const insert = vi.spyOn(a.text, 'insert')
    const del = vi.spyOn(a.text, 'delete')
    const doc = s.node('doc', null, [s.node('paragraph', null, [s.text('keep this, add '), s.text('more', [bold])])])
    a.view.updateState(EditorState.create({ schema: s, doc, plugins: a.view.state.plugins }))
    expect(a.text.value).toBe('keep this, add more')
    // Only what differs: "drop that" goes, "add more" comes.
    expect(del.mock.calls).toEqual([[11, 9]])
    expect(insert.mock.calls).toEqual([[11, 'add more']])
    await c.until('b shows it', () => converged(a, b) && b.text.value === 'keep this, add more')
  })

  it("marks of the app's own schema sync through a mapping; marks no mapping names stay out of the text", async () => {
    const schema = new Schema({ nodes: s.spec.nodes, marks: s.spec.marks.append({ highlight: { attrs: { colour: { default: 'yellow' } }, toDOM: () => ['mark', 0] }, secret: { toDOM: () => ['span', 0] } }) })
    const marks = [...defaultMarks, { mark: 'highlight', type: 'highlight' }]
    const { c, spaces } = await world(2)
    const [sa, sb] = spaces as [Space, Space]
    const make = (space: Space): Editor => {
      const text = space.text('notes')
      const place = document.createElement('div')
      document.body.append(place)
      const view = new EditorView(place, { state: EditorState.create({ schema, doc: steadDoc(text, schema, marks), plugins: [steadRichText(text, { marks })] }) })
      closeWith(view)
      return { view, text }
    }
    const a = make(sa)
    const b = make(sb)
    type(a, 0, 'marked text')
    a.view.dispatch(a.view.state.tr.addMark(at(a, 0), at(a, 6), schema.mark('highlight', { colour: 'green' })).addMark(at(a, 7), at(a, 11), schema.mark('secret')))
    expect(a.text.spans).toEqual([
      { text: 'marked', marks: { highlight: { colour: 'green' } } },
      { text: ' text', marks: {} },
    ])
    await c.until('b shows the highlight', () => b.view.state.doc.child(0).childCount === 2)
    expect(b.view.state.doc.child(0).child(0).marks[0]?.eq(schema.mark('highlight', { colour: 'green' }))).toBe(true)
    expect(b.text.spans).toEqual(a.text.spans)
  })
})

describe('two users typing at one place', () => {
  it('each keeps typing after their own characters: the carets stay beside what each typed last, so the runs never interleave', async () => {
    const { c, spaces } = await world(2)
    const a = editor(spaces[0] as Space)
    const b = editor(spaces[1] as Space)
    // Both carets at the start of the one empty paragraph; keys typed at the caret, each pair at the same moment.
    for (let i = 0; i < 6; i++) {
      a.view.dispatch(a.view.state.tr.insertText('a'))
      b.view.dispatch(b.view.state.tr.insertText('b'))
      await c.until('both see both keys', () => converged(a, b) && a.text.length === 2 * (i + 1))
    }
    expect(['aaaaaabbbbbb', 'bbbbbbaaaaaa']).toContain(flatText(a))
  })
})
