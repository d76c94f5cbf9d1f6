import { EditorSelection, EditorState, type Extension } from '@codemirror/state'
import { EditorView } from '@codemirror/view'
import { createClient, type Space, type SteadClient, type TextHandle } from '@stead/client'
import { SimCluster } from '@stead/sim'
import { steadText, type SteadTextOptions } from '../src/index.ts'

/**
 * happy-dom fires `selectionchange` synchronously, from inside the
 * Selection call that set it, and even when nothing changed; browsers queue
 * it, and only for a change. CodeMirror sets the DOM selection of a focused
 * editor mid-update (and again after reading it), and answers
 * selectionchange with an update of its own, which it refuses mid-update:
 * deliver the event a moment later and only when the selection moved, as a
 * browser does.
 */
export function queueSelectionChange(doc: Document): void {
  const dispatch = doc.dispatchEvent.bind(doc)
  let last: unknown[] = []
  doc.dispatchEvent = (event: Event): boolean => {
    if (event.type !== 'selectionchange') return dispatch(event)
    queueMicrotask(() => {
      const s = doc.getSelection()
      const now = [s?.anchorNode, s?.anchorOffset, s?.focusNode, s?.focusOffset]
      if (now.every((x, i) => x === last[i])) return
      last = now
      dispatch(event)
    })
    return true
  }
}

/** Clusters, clients and views a test opened, closed after it (see `world`). */
export function world(): {
  cluster(): Promise<SimCluster>
  client(c: SimCluster): Promise<{ client: SteadClient; space: Space }>
  editor(text: TextHandle, options?: SteadTextOptions & { doc?: string; extensions?: Extension }): EditorView
  close(): Promise<void>
} {
  queueSelectionChange(document)
  const clusters: SimCluster[] = []
  const clients: SteadClient[] = []
  const views: EditorView[] = []
  return {
    async cluster() {
      const c = await SimCluster.start()
      clusters.push(c)
      return c
    },
    async client(c) {
      const client = await createClient(c.clientOptions())
      clients.push(client)
      const space = await client.space('doc')
      await c.until('the client is online', () => space.status.online)
      return { client, space }
    },
    editor(text, options = {}) {
      const parent = document.createElement('div')
      document.body.appendChild(parent)
      const { doc, extensions, ...binding } = options
      const view = new EditorView({
        parent,
        state: EditorState.create({ doc: doc ?? text.value, extensions: [EditorState.allowMultipleSelections.of(true), steadText(text, binding), extensions ?? []] }),
      })
      views.push(view)
      return view
    },
    async close() {
      for (const v of views.splice(0)) {
        v.destroy()
        v.dom.parentElement?.remove()
      }
      for (const c of clients.splice(0)) await c.close()
      for (const c of clusters.splice(0)) await c.close()
    },
  }
}

/** The editor's document. */
export function docOf(view: EditorView): string {
  return view.state.doc.toString()
}

/** UTF-16 offset of code point index `point` of `s`. */
export function unitsAt(s: string, point: number): number {
  return [...s].slice(0, point).join('').length
}

/** Types `insert` at code point `point` as a user does: the caret moves behind it. */
export function typeAt(view: EditorView, point: number, insert: string): void {
  const from = unitsAt(docOf(view), point)
  view.dispatch({ changes: { from, insert }, selection: EditorSelection.cursor(from + insert.length), userEvent: 'input.type' })
}

/** Deletes `count` code points at code point `point`, as a user does. */
export function deleteAt(view: EditorView, point: number, count: number): void {
  const doc = docOf(view)
  const from = unitsAt(doc, point)
  view.dispatch({ changes: { from, to: unitsAt(doc, point + count) }, selection: EditorSelection.cursor(from), userEvent: 'delete' })
}

/** A seeded generator of numbers in [0, 1) (mulberry32): a failing run replays. */
export function seeded(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let t = s
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
