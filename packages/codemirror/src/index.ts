/**
 * @stead/codemirror: a CodeMirror 6 binding for Stead. {@link steadText}
 * keeps an editor and a collaborative text (`space.text(key)`) equal as
 * both change, and with `space.presence` shows where the others are: their
 * carets, names and selections. The package README walks through it.
 *
 * @module @stead/codemirror
 */
import { EditorState, Prec, type Extension } from '@codemirror/state'
import { EditorView, ViewPlugin } from '@codemirror/view'
import type { Presence, TextHandle } from '@stead/client'
import { Binding } from './binding.ts'
import { checkUser, cursorTheme } from './cursors.ts'

export type { PresenceCursor } from './cursors.ts'
export { steadUndo } from './undo.ts'

/** How {@link steadText} binds an editor. */
export interface SteadTextOptions {
  /**
   * The space's presence (`space.presence`): the editor publishes its
   * selection there while it has focus (the field `cursor`, see
   * {@link PresenceCursor}) and shows the cursors and selections of the
   * others in the same text. Without it, only the text is shared.
   */
  readonly presence?: Presence
  /**
   * The name and CSS colour others see on this user's caret (put in the
   * published cursor). Without it, others show the presence state's
   * top-level `name` and `colour` if it has them (as set with
   * `presence.set({ name, colour })`), else a short author id and a colour
   * made from it. The colour is a hex colour, a colour name, or a colour
   * function of numbers such as `hsl(200, 70%, 45%)`.
   */
  readonly user?: {
    /** The name on this user's caret (others show at most 40 characters of it). */
    readonly name: string
    /** The CSS colour of this user's caret and selection. */
    readonly colour: string
  }
  /**
   * Hears what went wrong without the editor being able to say so: an
   * edit the text refused (the space was closed, a `maxLength` holds it
   * back; the editor is set back to the text) or failed to store, or a
   * presence update that failed (a state over 4 KiB). Default:
   * `console.error`.
   */
  readonly onError?: (error: unknown) => void
}

/**
 * A CodeMirror extension that binds the editor to a Stead text: the user's
 * edits go into the text at once (code points, so emoji and other
 * characters beyond the BMP count as one), and every other change of the
 * text (other clients', this client's made through the handle elsewhere,
 * reversals) shows in the editor, mapping the user's selection over it.
 * Changes the binding dispatches carry `Transaction.remote` and are kept
 * out of CodeMirror's undo history.
 *
 * Create the editor with the text's value (`doc: text.value`); an editor
 * created with anything else is set to the text right after. Destroying
 * the view (`view.destroy()`) stops the binding and withdraws this
 * editor's cursor from presence.
 *
 * The editor splits lines at "\n" only (`EditorState.lineSeparator`), so
 * its document is exactly the text, "\r" included; pasted and dropped text
 * has its "\r\n" and "\r" turned into "\n".
 *
 * @param text The text to edit, from `space.text(key)`.
 * @param options Presence for remote cursors, the user's name and colour, an error listener.
 * @returns The extension, for `EditorState.create({ extensions })`.
 * @throws SteadError `malformed` for a `user` without a name or with a colour the binding would not show.
 * @example
 * ```ts
 * import { EditorState } from '@codemirror/state'
 * import { EditorView } from '@codemirror/view'
 * import { steadText } from '@stead/codemirror'
 *
 * const space = await client.space('notes')
 * const text = space.text('readme')
 * const view = new EditorView({
 *   parent: document.querySelector('#editor')!,
 *   state: EditorState.create({
 *     doc: text.value,
 *     extensions: [steadText(text, { presence: space.presence, user: { name: 'Ada', colour: '#30bced' } })],
 *   }),
 * })
 * // later: view.destroy()
 * ```
 */
export function steadText(text: TextHandle, options: SteadTextOptions = {}): Extension {
  const user = checkUser(options.user)
  const config = { text, presence: options.presence, user, onError: options.onError ?? ((err: unknown) => console.error('@stead/codemirror:', err)) }
  return [
    // Positions are only comparable if the document is the text character for character.
    Prec.highest(EditorState.lineSeparator.of('\n')),
    EditorView.clipboardInputFilter.of((s) => s.replace(/\r\n?/g, '\n')),
    ViewPlugin.define((view) => new Binding(view, config), { decorations: (b) => b.decorations }),
    options.presence ? cursorTheme : [],
  ]
}
