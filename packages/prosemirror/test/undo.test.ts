// @vitest-environment happy-dom
/**
 * steadUndo: Mod-z and Mod-y in a bound ProseMirror editor over Stead's
 * undo manager (typing, paragraphs, formatting), with real clients and
 * relays in simulated time.
 */
import { EditorState, TextSelection } from 'prosemirror-state'
import { EditorView } from 'prosemirror-view'
import { afterEach, describe, expect, it } from 'vitest'
import { steadDoc, steadRichText, steadSchema, steadUndo } from '../src/index.ts'
import { at, closeAll, closeWith, converged, editor, flatText, type Editor, world } from './helpers.ts'

afterEach(closeAll)

/** Presses Ctrl+`key` in the editor as its plugins see it; true when one took it. */
function press(e: Editor, key: string, shift = false): boolean {
  const event = new KeyboardEvent('keydown', { key: shift ? key.toUpperCase() : key, ctrlKey: true, shiftKey: shift })
  return e.view.someProp('handleKeyDown', (f) => f(e.view, event)) === true
}

describe('steadUndo', () => {
  it('takes back this user\'s typing, paragraph split and bold step by step, never the other user\'s, redoes them, and puts the selection back', async () => {
    const { c, spaces } = await world(2)
    const [sa, sb] = spaces as [NonNullable<(typeof spaces)[0]>, NonNullable<(typeof spaces)[1]>]
    const text = sa.text('notes')
    const undo = sa.undoManager([text])
    const place = document.createElement('div')
    document.body.append(place)
    const view = new EditorView(place, { state: EditorState.create({ schema: steadSchema, doc: steadDoc(text), plugins: [steadUndo(undo, text), steadRichText(text)] }) })
    closeWith(view)
    const a: Editor = { view, text }
    const b = editor(sb)
    view.focus()
    view.dispatch(view.state.tr.insertText('Hello world', at(a, 0)))
    await c.advance(1000)
    view.dispatch(view.state.tr.addMark(at(a, 0), at(a, 5), steadSchema.marks.strong.create()))
    await c.advance(1000)
    // The caret after "Hello", then Enter there.
    view.dispatch(view.state.tr.setSelection(TextSelection.create(view.state.doc, at(a, 5))))
    view.dispatch(view.state.tr.split(at(a, 5)))
    view.dispatch(view.state.tr.setSelection(TextSelection.create(view.state.doc, at(a, 0))))
    expect(flatText(a)).toBe('Hello\n world')
    await c.until('b has it', () => converged(a, b))
    // The other user types meanwhile: never undone here.
    b.view.dispatch(b.view.state.tr.insertText('!', at(b, flatText(b).length)))
    await c.until('a has it', () => flatText(a) === 'Hello\n world!')

    expect(press(a, 'z')).toBe(true)
    expect(flatText(a)).toBe('Hello world!')
    // The selection the split was made at (the caret after "Hello") is back.
    await c.until('the caret is back', () => view.state.selection.head === at(a, 5))
    expect(press(a, 'z')).toBe(true)
    expect(text.spans).toEqual([{ text: 'Hello world!', marks: {} }])
    expect(press(a, 'z')).toBe(true)
    expect(flatText(a)).toBe('!')
    expect(undo.canUndo()).toBe(false)
    expect(press(a, 'y')).toBe(true)
    expect(flatText(a)).toBe('Hello world!')
    expect(press(a, 'z', true)).toBe(true)
    expect(text.spans[0]).toEqual({ text: 'Hello', marks: { bold: true } })
    expect(press(a, 'y')).toBe(true)
    expect(flatText(a)).toBe('Hello\n world!')
    await c.until('both end equal', () => converged(a, b))
    // A key that is neither is left to others.
    expect(press(a, 'b')).toBe(false)
  })
})
