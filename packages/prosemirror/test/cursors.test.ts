// @vitest-environment happy-dom
/**
 * Remote cursors from presence: two EditorViews on two real clients of real
 * relays in simulated time (SimCluster), each publishing its selection as
 * text anchors and showing the other's as decorations.
 */
import type { RegisterValue, Space } from '@stead/client'
import { afterEach, describe, expect, it } from 'vitest'
import { at, closeAll, converged, editor, flatText, select, type, world, type Editor } from './helpers.ts'

afterEach(closeAll)

/** The other clients' carets an editor shows: where each is (document position), its name, its style. */
function carets(e: Editor): Array<{ pos: number; name: string; style: string }> {
  return Array.from(e.view.dom.querySelectorAll<HTMLElement>('.stead-cursor')).map((el) => ({
    pos: e.view.posAtDOM(el, 0),
    name: el.querySelector('.stead-cursor-name')?.textContent ?? '',
    style: el.getAttribute('style') ?? '',
  }))
}

/** The text the editor shows selected by others. */
const selected = (e: Editor): string => Array.from(e.view.dom.querySelectorAll('.stead-selection')).map((el) => el.textContent).join('')

/** What `space` shows of another client's presence. */
const stateOf = (space: Space, author: string): Record<string, RegisterValue> | undefined => space.presence.others.find((p) => p.author === author)?.state as Record<string, RegisterValue> | undefined

describe('steadRichText: remote cursors', () => {
  it("shows the other client's caret and selection with its name and colour, where its anchors are, and follows its typing", async () => {
    const { c, spaces } = await world(2)
    const [sa, sb] = spaces as [Space, Space]
    const a = editor(sa, { presence: sa.presence, user: { name: 'Ann', colour: '#D1495B' } })
    const b = editor(sb, { presence: sb.presence, user: { name: 'Bob', colour: '#2e86ab' } })
    type(a, 0, 'Hello 😀 world')
    await c.until('b has the text', () => converged(a, b) && b.text.length === 13)
    // Ann selects "😀 world" (code points 6 to 13).
    select(a, 6, 13)
    await c.until('b shows her selection', () => selected(b) === '😀 world')
    expect(carets(b)).toHaveLength(1)
    const [caret] = carets(b)
    expect(caret?.name).toBe('Ann')
    expect(caret?.pos).toBe(at(b, 13))
    expect(caret?.style).toMatch(/#d1495b|rgb\(209, 73, 91\)/)
    // And Ann shows Bob's caret where his is: it was in the empty document, and her text went in after it
    // (a caret stays beside what its user typed last, here nothing: the start); his anchor, which leans on
    // the character after it, stood at the end then, so he published it again.
    expect(b.view.state.selection.head).toBe(at(b, 0))
    await c.until('a shows bob at the start', () => carets(a).length === 1 && carets(a)[0]?.pos === at(a, 0))
    expect(carets(a)[0]?.name).toBe('Bob')

    // Ann types at the end: her caret follows her typing on Bob's screen.
    select(a, 13, 13)
    type(a, 13, '!!')
    await c.until("b shows ann's caret after her text, her selection gone", () => flatText(b) === 'Hello 😀 world!!' && carets(b)[0]?.pos === at(b, 15) && selected(b) === '')
  })

  it('re-publishes the cursor once the typing is stored, so other clients resolve it by character, not by the index it was taken at', async () => {
    const { c, spaces } = await world(2)
    const [sa, sb] = spaces as [Space, Space]
    const a = editor(sa, { presence: sa.presence, user: { name: 'Ann', colour: '#d1495b' } })
    const b = editor(sb, { presence: sb.presence })
    type(a, 0, 'abc')
    // Her caret between "b" and "c": its anchor sticks to the "c" just typed, an unsigned character only Ann's client resolves.
    select(a, 2, 2)
    const draft = (sa.presence.state as { cursor: { head: string } }).cursor.head
    await c.until('b has the text and her cursor', () => b.text.value === 'abc' && stateOf(sb, sa.authorId)?.cursor !== undefined)
    // Bob types in front of her caret: an anchor resolved by its character moves with the text, the index it was taken at does not.
    type(b, 0, '12')
    await c.until('a has it', () => a.text.value === '12abc')
    const head = (): string => (stateOf(sb, sa.authorId)?.cursor as { head: string }).head
    await c.until('her anchor resolves by character on b', () => b.text.position(head()) === 4)
    expect(head()).not.toBe(draft)
    expect(a.view.state.selection.head).toBe(at(a, 4))
    expect(carets(b)[0]?.pos).toBe(at(b, 4))
  })

  it("takes a cursor away when its editor is destroyed, and all of the client's when it leaves", async () => {
    const { c, spaces } = await world(3)
    const [sa, sb, sc] = spaces as [Space, Space, Space]
    const a = editor(sa, { presence: sa.presence, user: { name: 'Ann', colour: '#d1495b' } })
    const b = editor(sb, { presence: sb.presence, user: { name: 'Bob', colour: '#2e86ab' } })
    const watcher = editor(sc, { presence: sc.presence, user: { name: 'Cy', colour: '#3f8f3f' } })
    type(a, 0, 'three people here')
    select(b, 0, 0)
    await c.until('cy shows both', () => converged(a, b, watcher) && carets(watcher).length === 2)
    expect(carets(watcher).map((k) => k.name).sort()).toEqual(['Ann', 'Bob'])

    // Ann's editor closes: her cursor goes, her presence (name, colour) stays.
    a.view.destroy()
    expect(sa.presence.state).toEqual({ name: 'Ann', colour: '#d1495b', cursor: null })
    await c.until("ann's cursor is gone", () => carets(watcher).length === 1)
    expect(carets(watcher)[0]?.name).toBe('Bob')
    expect(stateOf(sc, sa.authorId)).toEqual({ name: 'Ann', colour: '#d1495b', cursor: null })

    // Bob's client leaves altogether.
    await sb.close()
    await c.until("bob's cursor is gone", () => carets(watcher).length === 0)
  })

  it("never puts another client's colour in a style unchecked, nor its name in HTML", async () => {
    const { c, spaces } = await world(2)
    const [sa, sb] = spaces as [Space, Space]
    const a = editor(sa, { presence: sa.presence })
    type(a, 0, 'text')
    sb.presence.set({ name: '<img src=x onerror=alert(1)>', colour: 'red; background-image: url(https://evil.test/)', cursor: { anchor: sb.text('notes').anchor(0), head: sb.text('notes').anchor(0) } })
    await c.until('a shows the cursor', () => carets(a).length === 1)
    const [caret] = carets(a)
    expect(caret?.name).toBe('<img src=x onerror=alert(1)>')
    expect(a.view.dom.querySelector('img')).toBeNull()
    expect(caret?.style).not.toContain('evil')
  })

  it("keeps a selection the browser made but has not told the editor of yet when another's cursor moves first", async () => {
    const { c, spaces } = await world(2)
    const [sa, sb] = spaces as [Space, Space]
    const a = editor(sa, { presence: sa.presence, user: { name: 'Ann', colour: '#d1495b' } })
    const b = editor(sb, { presence: sb.presence, user: { name: 'Bob', colour: '#2e86ab' } })
    type(a, 0, 'Shared note')
    await c.until('b has the text', () => converged(a, b))
    a.view.focus()
    select(a, 0, 0)
    // Shift-End, as a browser does it: the page's selection covers the line, and the selectionchange event
    // that tells the editor comes later (here: held back once).
    const hold = (event: Event): void => {
      event.stopImmediatePropagation()
      window.removeEventListener('selectionchange', hold, true)
    }
    window.addEventListener('selectionchange', hold, true)
    const line = a.view.domAtPos(at(a, 0)).node
    document.getSelection()?.setBaseAndExtent(line, 0, line, line.childNodes.length)
    // Before the editor hears of it, Bob's caret moves: Ann's editor draws it anew.
    const drawn = carets(a).map((k) => k.pos).join()
    select(b, 6, 6)
    await c.until("a shows bob's caret moved", () => carets(a).map((k) => k.pos).join() !== drawn)
    // Ann's selection is the whole line in the editor, and still on the page (not put back to where the editor
    // had it): the browser's late event reads it again.
    expect([a.view.state.selection.from, a.view.state.selection.to]).toEqual([at(a, 0), at(a, 11)])
    document.dispatchEvent(new Event('selectionchange'))
    expect([a.view.state.selection.from, a.view.state.selection.to]).toEqual([at(a, 0), at(a, 11)])
  })
})
