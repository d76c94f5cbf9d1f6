import { useEffect, useMemo, useRef } from 'react'
import { baseKeymap, toggleMark } from 'prosemirror-commands'
import { keymap } from 'prosemirror-keymap'
import { EditorState, type Command } from 'prosemirror-state'
import { EditorView } from 'prosemirror-view'
import 'prosemirror-view/style/prosemirror.css'
import { steadDoc, steadRichText, steadSchema, steadUndo } from '@stead/prosemirror'
import type { TextSpan } from '@stead/client'
import { useHandle, useSpace, useText } from '@stead/react'
import { useDemo } from '../demo-context.ts'
import { colourOf } from './People.tsx'

/** Whether two span lists show the same text with the same marks (in whatever key order). */
function sameSpans(a: readonly TextSpan[], b: readonly TextSpan[]): boolean {
  const key = (spans: readonly TextSpan[]) => JSON.stringify(spans.map((s) => [s.text, Object.entries(s.marks).sort(([x], [y]) => (x < y ? -1 : 1))]))
  return key(a) === key(b)
}

/** The note every page of the space edits. */
const NOTE = 'note'

const bold = toggleMark(steadSchema.marks.strong)
const italic = toggleMark(steadSchema.marks.em)
/** A link on the selection (or off it, if it has one): the demo puts Stead's site. */
const link = toggleMark(steadSchema.marks.link, { href: 'https://example.com/stead' })

/**
 * The Notes page: one shared rich-text note (a Stead text with marks) in a
 * ProseMirror editor. Everyone's edits merge character by character, and
 * formatting merges as Peritext says (bold typed at a bold word's end stays
 * bold; a link does not grow). The others' cursors and selections show in
 * their colours (presence); undo and redo take back this page's own edits
 * only. Below, whether what shows is stable yet.
 */
export function RichNotes() {
  const space = useSpace()
  const { config } = useDemo()
  const host = useRef<HTMLDivElement>(null)
  const view = useRef<EditorView | null>(null)
  const { handle } = useText(NOTE, { maxLength: 100_000 })
  // Read in the store (not from this render's values): a commit that only settles marks changes stableSpans alone.
  const synced = useHandle(handle, (h) => h.stable === h.value && sameSpans(h.stableSpans, h.spans))
  const undo = useMemo(() => space.undoManager([handle]), [space, handle])
  useEffect(() => () => undo.destroy(), [undo])
  // For the console and the e2e tests' checks, as `window.stead` is.
  useEffect(() => void Object.assign(window, { steadNote: handle }), [handle])

  useEffect(() => {
    if (!host.current) return
    const v = new EditorView(host.current, {
      state: EditorState.create({
        schema: steadSchema,
        doc: steadDoc(handle),
        plugins: [
          steadUndo(undo, handle),
          keymap({ 'Mod-b': bold, 'Mod-i': italic }),
          keymap(baseKeymap),
          steadRichText(handle, { presence: space.presence, user: { name: config.user, colour: colourOf(config.user) } }),
        ],
      }),
    })
    view.current = v
    return () => {
      view.current = null
      v.destroy()
    }
  }, [handle, space, undo, config.user])

  const run = (command: Command) => () => {
    const v = view.current
    if (!v) return
    command(v.state, v.dispatch)
    v.focus()
  }

  return (
    <section className="panel rich-notes" data-testid="rich-notes">
      <h2>Shared note</h2>
      <div className="toolbar" role="toolbar" aria-label="formatting">
        <button type="button" data-testid="bold" title="Bold (Ctrl-B)" onMouseDown={(e) => e.preventDefault()} onClick={run(bold)}>
          <b>B</b>
        </button>
        <button type="button" data-testid="italic" title="Italic (Ctrl-I)" onMouseDown={(e) => e.preventDefault()} onClick={run(italic)}>
          <i>I</i>
        </button>
        <button type="button" data-testid="link" title="Link" onMouseDown={(e) => e.preventDefault()} onClick={run(link)}>
          link
        </button>
        <button type="button" data-testid="undo" title="Undo your last edit (Ctrl-Z)" onMouseDown={(e) => e.preventDefault()} onClick={() => undo.undo()}>
          undo
        </button>
        <button type="button" data-testid="redo" title="Redo (Ctrl-Y)" onMouseDown={(e) => e.preventDefault()} onClick={() => undo.redo()}>
          redo
        </button>
      </div>
      <div className="editor" ref={host} data-testid="note-editor" />
      <p className="hint" data-testid="note-stable" data-synced={synced}>
        {synced ? 'stable: every correct replica has this note' : 'prospective: your edits show at once, the relays are still ordering some'}
      </p>
    </section>
  )
}
