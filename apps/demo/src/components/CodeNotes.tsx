import { useEffect, useRef } from 'react'
import { EditorState } from '@codemirror/state'
import { EditorView } from '@codemirror/view'
import { steadText } from '@stead/codemirror'
import { useSpace, useText } from '@stead/react'
import { useDemo } from '../demo-context.ts'
import { colourOf } from './People.tsx'

/** The snippet every page of the space edits. */
const SNIPPET = 'snippet'

/**
 * A shared plain-text snippet in a CodeMirror editor (@stead/codemirror):
 * the same kind of collaborative text as the note above, without marks, as
 * a code editor shows it. The others' carets and selections show in their
 * colours.
 */
export function CodeNotes() {
  const space = useSpace()
  const { config } = useDemo()
  const host = useRef<HTMLDivElement>(null)
  const { handle } = useText(SNIPPET, { maxLength: 100_000 })
  // For the console and the e2e tests' checks, as `window.steadNote` is.
  useEffect(() => void Object.assign(window, { steadSnippet: handle }), [handle])

  useEffect(() => {
    if (!host.current) return
    const view = new EditorView({
      parent: host.current,
      state: EditorState.create({
        doc: handle.value,
        extensions: [steadText(handle, { presence: space.presence, user: { name: config.user, colour: colourOf(config.user) } })],
      }),
    })
    return () => view.destroy()
  }, [handle, space, config.user])

  return (
    <section className="panel code-notes" data-testid="code-notes">
      <h2>Shared snippet</h2>
      <div className="editor" ref={host} data-testid="snippet-editor" />
    </section>
  )
}
