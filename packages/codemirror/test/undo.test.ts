// @vitest-environment happy-dom
/**
 * steadUndo: Mod-z and Mod-y in a bound editor over Stead's undo manager,
 * with real clients and relays in simulated time.
 */
import { runScopeHandlers } from '@codemirror/view'
import { afterEach, describe, expect, it } from 'vitest'
import { steadUndo } from '../src/index.ts'
import { docOf, typeAt, world } from './helpers.ts'

const w = world()
afterEach(() => w.close())

/** Presses Ctrl+`key` in the editor as its keymaps see it; true when a binding took it. */
function press(view: Parameters<typeof runScopeHandlers>[0], key: 'z' | 'y', shift = false): boolean {
  // As browsers send it: with Shift held, the key is the capital letter.
  return runScopeHandlers(view, new KeyboardEvent('keydown', { key: shift ? key.toUpperCase() : key, keyCode: key.toUpperCase().charCodeAt(0), ctrlKey: true, shiftKey: shift }), 'editor')
}

describe('steadUndo', () => {
  it('undoes this user\'s typing with Mod-z, not the other user\'s, redoes with Mod-y and Mod-Shift-z, and puts the caret back', async () => {
    const c = await w.cluster()
    const [a, b] = [await w.client(c), await w.client(c)]
    const ta = a.space.text('note')
    const tb = b.space.text('note')
    const undo = a.space.undoManager([ta])
    const va = w.editor(ta, { extensions: steadUndo(undo, ta) })
    va.focus()
    typeAt(va, 0, 'Hello')
    await c.advance(1000)
    undo.stopCapturing()
    va.dispatch({ selection: { anchor: 5 } })
    typeAt(va, 5, ' world')
    await c.until('b has it', () => tb.value === 'Hello world')
    // The other user types at the start meanwhile: never undone here.
    await tb.insert(0, '> ')
    await c.until('a shows it', () => docOf(va) === '> Hello world')
    expect(press(va, 'z')).toBe(true)
    expect(ta.value).toBe('> Hello')
    await c.until('the editor shows it', () => docOf(va) === '> Hello')
    await c.until('the caret is back where the undone edit began', () => va.state.selection.main.head === 7)
    expect(press(va, 'z')).toBe(true)
    expect(ta.value).toBe('> ')
    // Nothing of this user's left: the key does nothing (and the browser's own undo is kept out).
    expect(undo.canUndo()).toBe(false)
    press(va, 'z')
    expect(ta.value).toBe('> ')
    expect(press(va, 'y')).toBe(true)
    expect(ta.value).toBe('> Hello')
    expect(press(va, 'z', true)).toBe(true)
    expect(ta.value).toBe('> Hello world')
    await c.until('both end equal', () => tb.value === ta.value && docOf(va) === ta.value)
  })
})
