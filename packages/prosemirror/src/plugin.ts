import { SteadError, type Presence, type TextHandle } from '@stead/client'
import type { Node, Schema } from 'prosemirror-model'
import { Plugin, PluginKey, type EditorState, type Transaction } from 'prosemirror-state'
import { DecorationSet, type DecorationAttrs } from 'prosemirror-view'
import { Binding, type Context, type Meta, type Shared, type SyncState } from './binding.ts'
import { cursorDecorations, defaultRenderCursor, defaultSelectionAttrs, remoteCursors, type RemoteCursor } from './cursors.ts'
import { defaultMarks, SchemaMarks, type MarkMapping } from './marks.ts'
import { blockType, docOfSpans } from './remote.ts'
import { steadSchema } from './schema.ts'

/** Options of {@link steadRichText}. */
export interface SteadRichTextOptions {
  /** How the schema's marks map to Stead mark types; default {@link defaultMarks} (steadSchema's). */
  readonly marks?: readonly MarkMapping[]
  /** The space's presence (`space.presence`): publishes this editor's selection and shows the others' cursors. Without it, no cursors. */
  readonly presence?: Presence
  /** Who this is, put in presence as its `name` and `colour` fields (a CSS hex colour, #rgb or #rrggbb) for others' editors to show. */
  readonly user?: {
    /** The name others' editors show beside this client's caret. */
    readonly name: string
    /** Its colour there, a CSS hex colour (#rgb or #rrggbb; others show anything else in a colour of their choosing). */
    readonly colour: string
  }
  /** The presence field that holds the cursor, `{ anchor, head }` as text anchors; default `'cursor'`. */
  readonly cursorField?: string
  /** Builds the caret shown for another client (default: a bar in its colour with its name above). */
  readonly renderCursor?: (cursor: RemoteCursor) => HTMLElement
  /** The attributes of another client's selected text (default: its colour, translucent, class `stead-selection`). */
  readonly selectionAttrs?: (cursor: RemoteCursor) => DecorationAttrs
  /**
   * Called when the text refuses an edit of the editor (the space closed,
   * a too-long text); the editor then shows the text as it is. Default:
   * `console.error`.
   */
  readonly onError?: (err: unknown) => void
}

/** The key of the binding's plugin state (one steadRichText plugin per editor). */
const steadKey = new PluginKey<SyncState>('stead-rich-text')

/**
 * Whether the binding made transaction `tr` to show a change of the Stead
 * text (another client's, another tab's, or one made on the handle
 * directly, as an undo manager would): such a transaction is not sent back
 * and carries `addToHistory: false`, so an editor history leaves it out.
 */
export function isRemoteChange(tr: Transaction): boolean {
  return (tr.getMeta(steadKey) as Meta | undefined)?.remote === true
}

/**
 * The document a Stead text shows in `schema` (default {@link steadSchema}):
 * one paragraph per line, the mapped marks. Pass it as `doc` to
 * `EditorState.create` so the first render already shows the text (the
 * plugin replaces any other document with this one when its view starts).
 *
 * @throws SteadError `malformed` for a schema whose top node does not hold text blocks, or marks the schema lacks.
 */
export function steadDoc(text: TextHandle, schema: Schema = steadSchema, marks: readonly MarkMapping[] = defaultMarks): Node {
  return docOfSpans(text.spans, schema, boundMarks(schema, marks))
}

function boundMarks(schema: Schema, marks: readonly MarkMapping[]): SchemaMarks {
  try {
    blockType(schema)
  } catch (err) {
    throw new SteadError('malformed', `@stead/prosemirror: ${(err as Error).message}`)
  }
  return new SchemaMarks(schema, marks)
}

/**
 * A ProseMirror plugin that keeps the editor and a Stead text with marks
 * (`space.text(key)`) in step, both ways, and shows the other clients'
 * cursors from presence. Use it with {@link steadSchema} (or a schema of
 * the same shape, `doc > paragraph+ > text`, with `marks` mapping its
 * marks) and one plugin per EditorView:
 *
 * ```ts
 * const text = space.text('doc')
 * const view = new EditorView(element, {
 *   state: EditorState.create({ schema: steadSchema, doc: steadDoc(text), plugins: [steadRichText(text, { presence: space.presence, user: { name: 'Ann', colour: '#d1495b' } })] }),
 * })
 * ```
 *
 * The editor's transactions become `insert`, `delete` and `format` calls
 * on the text (code points; a paragraph boundary is one '\n'); the text's
 * changes made elsewhere come in as transactions {@link isRemoteChange}
 * tells apart. The view must apply what is dispatched at once, as
 * EditorView's default `dispatch` does. Destroying the view stops the
 * binding and takes this client's cursor out of presence.
 *
 * @throws SteadError `malformed` (when the state is made) for a schema of another shape or marks it lacks; (when a view starts) for a plugin already bound to another live view.
 */
export function steadRichText(text: TextHandle, options: SteadRichTextOptions = {}): Plugin {
  const shared: Shared = { sentId: 0, nextId: 0, synced: undefined, view: undefined }
  const render = options.renderCursor ?? defaultRenderCursor
  const selection = options.selectionAttrs ?? defaultSelectionAttrs
  const cursorField = options.cursorField ?? 'cursor'
  let ctx: Context | undefined
  const contextFor = (schema: Schema): Context => {
    if (ctx?.schema === schema) return ctx
    ctx = {
      text,
      key: steadKey,
      schema,
      marks: boundMarks(schema, options.marks ?? defaultMarks),
      shared,
      presence: options.presence,
      user: options.user,
      cursorField,
      onError: options.onError ?? ((err) => console.error('@stead/prosemirror:', err)),
    }
    return ctx
  }
  const cursors = (doc: Node): DecorationSet => (options.presence ? cursorDecorations(doc, remoteCursors(options.presence, text, doc, cursorField), render, selection) : DecorationSet.empty)

  return new Plugin<SyncState>({
    key: steadKey,
    state: {
      init: (_config, state) => {
        contextFor(state.schema)
        return { id: ++shared.nextId, entries: [], cursors: DecorationSet.empty }
      },
      apply: (tr, value, _old, state) => {
        const meta = tr.getMeta(steadKey) as Meta | undefined
        let { id, entries } = value
        if (tr.docChanged) {
          // Entries of a state already sent are done with: a transaction on it starts a new list.
          entries = [...(value.id === shared.sentId ? [] : entries), { tr, remote: meta?.remote === true }]
          id = ++shared.nextId
        }
        // The binding's own transactions come when the text shows what the document does: place the cursors from their anchors again.
        // Other transactions map them (the text catches up in the view update that follows).
        const placed = meta?.remote || meta?.cursors ? cursors(state.doc) : value.cursors.map(tr.mapping, tr.doc)
        return { id, entries, cursors: placed }
      },
    },
    // Text with a newline in it (insertText('a\nb') from code): a newline is a paragraph boundary in the text, so in the document too.
    appendTransaction: (trs, _old, state) => (trs.some((tr) => tr.docChanged && !isRemoteChange(tr)) ? splitNewlines(state) : null),
    props: {
      decorations: (state) => steadKey.getState(state)?.cursors,
    },
    view: (view) => {
      const binding = new Binding(view, contextFor(view.state.schema))
      return {
        update: (_view, prevState) => binding.update(prevState),
        destroy: () => binding.destroy(),
      }
    },
  })
}

/** A transaction that turns every newline inside a text node into a paragraph boundary, or null if there is none. */
function splitNewlines(state: EditorState): Transaction | null {
  const found: number[] = []
  state.doc.descendants((node, pos) => {
    if (!node.isText) return true
    const text = node.text as string
    for (let i = text.indexOf('\n'); i >= 0; i = text.indexOf('\n', i + 1)) found.push(pos + i)
    return false
  })
  if (found.length === 0) return null
  const tr = state.tr
  // From the end, so the positions before each stay valid.
  for (const pos of found.reverse()) tr.delete(pos, pos + 1).split(pos)
  return tr
}
