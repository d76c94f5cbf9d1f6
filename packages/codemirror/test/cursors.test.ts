// @vitest-environment happy-dom
/**
 * Remote cursors of @stead/codemirror: each client's editor publishes its
 * selection in presence while focused, and draws the others' carets and
 * selections from their anchors; real clients and relays in simulated time.
 */
import { EditorSelection } from '@codemirror/state'
import type { EditorView } from '@codemirror/view'
import { SteadError, type RegisterValue, type TextHandle } from '@stead/client'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { steadText, type PresenceCursor } from '../src/index.ts'
import { docOf, typeAt, world } from './helpers.ts'

const w = world()
afterEach(() => w.close())

/** The remote carets an editor draws: who, the name on it, its colour, and where it is (UTF-16). */
function caretsOf(view: EditorView): Array<{ author: string | null; name: string | null; colour: string; at: number }> {
  return Array.from(view.contentDOM.querySelectorAll<HTMLElement>('.cm-stead-caret')).map((el) => ({
    author: el.getAttribute('data-author'),
    name: el.querySelector('.cm-stead-caret-label')?.textContent ?? null,
    colour: el.style.getPropertyValue('--stead-colour'),
    at: view.posAtDOM(el),
  }))
}

/** The text of the remote selections an editor draws, with their colours. */
function selectionsOf(view: EditorView): Array<{ text: string; colour: string }> {
  return Array.from(view.contentDOM.querySelectorAll<HTMLElement>('.cm-stead-selection')).map((el) => ({ text: el.textContent ?? '', colour: el.style.getPropertyValue('--stead-colour') }))
}

/** The `cursor` field of a presence state (undefined: none). */
function cursorIn(state: RegisterValue | null | undefined): RegisterValue | undefined {
  return typeof state === 'object' && state !== null && !Array.isArray(state) && !(state instanceof Uint8Array) ? state.cursor : undefined
}

/** Counts the subscriptions open through `target[method]` (a listener in, the function that stops it out). */
function track<T extends object, K extends keyof T>(target: T, method: K): { active: number } {
  const stats = { active: 0 }
  const original = (target[method] as (listener: unknown) => () => void).bind(target)
  target[method] = ((listener: unknown) => {
    const stop = original(listener)
    stats.active++
    let stopped = false
    return () => {
      if (!stopped) stats.active--
      stopped = true
      stop()
    }
  }) as T[K]
  return stats
}

/** Two clients of one cluster, each with an editor on the text 'note' holding `initial`. */
async function pair(initial: string) {
  const c = await w.cluster()
  const [a, b] = [await w.client(c), await w.client(c)]
  const ta = a.space.text('note')
  const tb = b.space.text('note')
  if (initial) await ta.insert(0, initial)
  await c.until('b has the text', () => tb.value === initial)
  return { c, a, b, ta, tb }
}

describe('remote cursors', () => {
  it("show the other user's caret with their name and colour where it is, moving as text is typed before it, and their selection", async () => {
    const { c, a, b, ta, tb } = await pair('hello 😀 world')
    const va = w.editor(ta, { presence: a.space.presence, user: { name: 'Ada', colour: '#e0457b' } })
    const vb = w.editor(tb, { presence: b.space.presence, user: { name: 'Bo', colour: 'hsl(200, 70%, 45%)' } })
    va.focus()
    // After the emoji: UTF-16 8, code point 7.
    va.dispatch({ selection: EditorSelection.cursor(8) })
    await c.until('b draws a caret', () => caretsOf(vb).length === 1)
    expect(caretsOf(vb)).toEqual([{ author: a.client.authorId, name: 'Ada', colour: '#e0457b', at: 8 }])
    expect(caretsOf(va)).toEqual([])
    const published = cursorIn(a.space.presence.state) as unknown as PresenceCursor
    expect(published).toMatchObject({ key: 'note', name: 'Ada', colour: '#e0457b' })
    expect(ta.position(published.head)).toBe(7)

    // b types in front of it: the caret moves along at once, with no message from a.
    typeAt(vb, 0, '🎉 ')
    expect(caretsOf(vb)[0]?.at).toBe(11)
    // a third client types in front of it too: the caret moves when that arrives.
    const { space: third } = await w.client(c)
    const tc = third.text('note')
    // After b's edit reached it: two inserts at 0 made concurrently could land in either order.
    await c.until("the third client has b's edit", () => tc.value === docOf(vb))
    await tc.insert(0, '>> ')
    await c.until('b shows the third edit', () => docOf(vb).startsWith('>> 🎉 '))
    expect(caretsOf(vb)[0]?.at).toBe(14)
    await c.until('a shows it too', () => docOf(va) === docOf(vb))

    // a selects "world" backwards: b shows the selection in a's colour, the caret at its start.
    const start = docOf(va).indexOf('world')
    va.dispatch({ selection: EditorSelection.range(start + 5, start) })
    await c.until('b draws the selection', () => selectionsOf(vb).length === 1)
    expect(selectionsOf(vb)).toEqual([{ text: 'world', colour: '#e0457b' }])
    expect(caretsOf(vb).map((x) => x.at)).toEqual([docOf(vb).indexOf('world')])
    // Typing inside it on b's side keeps it around the same characters.
    typeAt(vb, [...docOf(vb)].length - 3, 'LD')
    expect(selectionsOf(vb).map((s) => s.text).join('')).toBe('woLDrld')
  })

  it('go when the other editor loses focus or is destroyed, come back with focus, and go when the other client leaves', async () => {
    const { c, a, b, ta, tb } = await pair('some text')
    const va = w.editor(ta, { presence: a.space.presence, user: { name: 'Ada', colour: 'teal' } })
    const vb = w.editor(tb, { presence: b.space.presence })
    va.focus()
    va.dispatch({ selection: EditorSelection.cursor(4) })
    await c.until('b draws it', () => caretsOf(vb).length === 1)
    va.contentDOM.blur()
    await c.until('it goes on blur', () => caretsOf(vb).length === 0)
    expect(cursorIn(a.space.presence.state)).toBeNull()
    va.focus()
    await c.until('it comes back with focus', () => caretsOf(vb)[0]?.at === 4)
    va.destroy()
    await c.until('it goes when the editor is destroyed', () => caretsOf(vb).length === 0)
    expect(cursorIn(a.space.presence.state)).toBeNull()

    const va2 = w.editor(ta, { presence: a.space.presence })
    va2.focus()
    va2.dispatch({ selection: EditorSelection.cursor(2) })
    await c.until('b draws the new editor', () => caretsOf(vb)[0]?.at === 2)
    await a.client.close()
    await c.until('it goes when the client leaves', () => caretsOf(vb).length === 0)
  })

  it('resolve on other clients once the characters they lean on are signed (the cursor is published again)', async () => {
    const { c, a, b, ta, tb } = await pair('abc')
    const va = w.editor(ta, { presence: a.space.presence, user: { name: 'Ada', colour: '#123' } })
    const vb = w.editor(tb, { presence: b.space.presence })
    va.focus()
    // a types "xy" at the end and puts the caret between them: it leans on "y", not signed yet.
    typeAt(va, 3, 'xy')
    va.dispatch({ selection: EditorSelection.cursor(4) })
    // Meanwhile b types in front of it, before it heard anything of a's.
    typeAt(vb, 0, '123')
    await c.until('both show one text', () => docOf(va) === docOf(vb) && docOf(vb) === '123abcxy')
    await c.until("b draws a's caret between x and y", () => caretsOf(vb)[0]?.at === 7)
  })

  it("take the name and colour from the state's top-level fields, and show hostile states harmlessly", async () => {
    const { c, a, b, ta, tb } = await pair('abcdef')
    const vb = w.editor(tb, { presence: b.space.presence })
    const anchor = ta.anchor(2)
    a.space.presence.set({ name: 'Top', colour: 'rebeccapurple', cursor: { key: 'note', anchor, head: anchor } })
    await c.until('b draws it', () => caretsOf(vb).length === 1)
    expect(caretsOf(vb)).toEqual([{ author: a.client.authorId, name: 'Top', colour: 'rebeccapurple', at: 2 }])
    // Markup as a name, CSS that breaks out of the style as a colour: shown as text, and a colour of its own.
    a.space.presence.set({ cursor: { key: 'note', anchor, head: anchor, name: '<img src=x onerror=alert(1)>', colour: 'red; background: url(https://evil.example/)' } })
    await c.until('b draws the new state', () => caretsOf(vb)[0]?.name?.startsWith('<img') === true)
    const [shown] = caretsOf(vb)
    expect(shown?.colour).toMatch(/^hsl\(\d+, 70%, 45%\)$/)
    expect(shown?.name).toBe('<img src=x onerror=alert(1)>')
    expect(vb.contentDOM.querySelector('.cm-stead-caret-label')?.children.length).toBe(0)
    // Not an anchor, an anchor of another text, another text's cursor, no cursor: nothing is drawn, nothing breaks.
    for (const cursor of [{ key: 'note', anchor: 'nonsense', head: 7 }, { key: 'note', anchor: a.space.text('other').anchor(0), head: anchor }, { key: 'other', anchor, head: anchor }, 'cursor', null]) {
      a.space.presence.set({ cursor })
      await c.until('b hears it', () => JSON.stringify(b.space.presence.others[0]?.state) === JSON.stringify({ cursor }))
      expect(caretsOf(vb)).toEqual([])
    }
    expect(docOf(vb)).toBe('abcdef')
  })
})

describe('the binding with presence', () => {
  it('refuses a user whose colour it would not show', () => {
    const text = { key: 'note' } as TextHandle
    expect(() => steadText(text, { user: { name: 'Ada', colour: 'red; x: y' } })).toThrowError(SteadError)
    expect(() => steadText(text, { user: { name: '', colour: 'red' } })).toThrowError(expect.objectContaining({ reason: 'malformed' }))
  })

  it('stops on destroy: its subscriptions are gone, no more dispatches for presence or text changes', async () => {
    const { c, a, b, ta, tb } = await pair('text')
    const va = w.editor(ta, { presence: a.space.presence })
    const observing = track(tb, 'observe')
    const subscribed = track(b.space.presence, 'subscribe')
    const vb = w.editor(tb, { presence: b.space.presence })
    expect([observing.active, subscribed.active]).toEqual([1, 1])
    vb.focus()
    vb.dispatch({ selection: EditorSelection.cursor(1) })
    va.focus()
    va.dispatch({ selection: EditorSelection.cursor(2) })
    await c.until('b draws a', () => caretsOf(vb).length === 1)
    const dispatch = vi.spyOn(vb, 'dispatch')
    vb.destroy()
    va.dispatch({ selection: EditorSelection.cursor(3) })
    typeAt(va, 0, 'more ')
    await c.until('b has both', () => tb.value === 'more text' && cursorIn(b.space.presence.others[0]?.state) !== undefined)
    await c.advance(500)
    expect(dispatch).not.toHaveBeenCalled()
    expect([observing.active, subscribed.active]).toEqual([0, 0])
  })
})
