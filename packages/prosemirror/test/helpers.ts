import { createClient, type Space, type SteadClient, type TextHandle } from '@stead/client'
import { SimCluster } from '@stead/sim'
import type { Node } from 'prosemirror-model'
import { EditorState, TextSelection } from 'prosemirror-state'
import { EditorView } from 'prosemirror-view'
import { docPos } from '../src/flat.ts'
import { steadDoc, steadRichText, steadSchema, type SteadRichTextOptions } from '../src/index.ts'

/** Everything a test opened, closed after it (views first: a view takes its cursor out of presence while the space is open). */
const views: EditorView[] = []
const clients: SteadClient[] = []
const clusters: SimCluster[] = []

export async function closeAll(): Promise<void> {
  for (const v of views.splice(0)) v.destroy()
  for (const c of clients.splice(0)) await c.close()
  for (const c of clusters.splice(0)) await c.close()
  document.body.replaceChildren()
}

/** Real relays in simulated time and `n` clients of space 'doc' on them. */
export async function world(n: number): Promise<{ c: SimCluster; spaces: Space[] }> {
  const c = await SimCluster.start()
  clusters.push(c)
  const spaces: Space[] = []
  for (let i = 0; i < n; i++) {
    const client = await createClient(c.clientOptions())
    clients.push(client)
    spaces.push(await client.space('doc'))
  }
  return { c, spaces }
}

/** A view the test made itself, destroyed after it as the others are. */
export function closeWith(view: EditorView): void {
  views.push(view)
}

export interface Editor {
  readonly view: EditorView
  readonly text: TextHandle
}

/** An EditorView on text 'notes' of `space`, in the document, with the binding (options as given). */
export function editor(space: Space, options: SteadRichTextOptions = {}, doc?: Node): Editor {
  const text = space.text('notes')
  const place = document.createElement('div')
  document.body.append(place)
  const view = new EditorView(place, { state: EditorState.create({ schema: steadSchema, doc: doc ?? steadDoc(text), plugins: [steadRichText(text, options)] }) })
  views.push(view)
  return { view, text }
}

/** The document position of code point `index` of the editor's flat text. */
export const at = (e: Editor, index: number): number => docPos(e.view.state.doc, index)

/** Types `s` at code point `index`, as a keystroke would (one transaction). */
export function type(e: Editor, index: number, s: string): void {
  e.view.dispatch(e.view.state.tr.insertText(s, at(e, index)))
}

/** Presses Enter at code point `index`: splits the paragraph. */
export function enter(e: Editor, index: number): void {
  e.view.dispatch(e.view.state.tr.split(at(e, index)))
}

/** Selects code points [from, to). */
export function select(e: Editor, from: number, to: number): void {
  e.view.dispatch(e.view.state.tr.setSelection(TextSelection.create(e.view.state.doc, at(e, from), at(e, to))))
}

/** Whether two editors show the same document, their texts hold the same marks, and each document is what its text shows. */
export function converged(...editors: Editor[]): boolean {
  const [first, ...rest] = editors as [Editor, ...Editor[]]
  const spans = JSON.stringify(first.text.spans)
  return editors.every((e) => e.view.state.doc.eq(steadDoc(e.text))) && rest.every((e) => e.view.state.doc.eq(first.view.state.doc) && JSON.stringify(e.text.spans) === spans)
}

/** The flat text of an editor's document: its paragraphs joined by newlines. */
export const flatText = (e: Editor): string => e.view.state.doc.children.map((p) => p.textContent).join('\n')
