import type { EditorState, Range } from '@codemirror/state'
import { Decoration, EditorView, WidgetType, type DecorationSet } from '@codemirror/view'
import { ClosedError, SteadError, type Presence, type PresencePeer, type RegisterValue, type TextHandle } from '@stead/client'
import { Positions } from './positions.ts'

/**
 * The `cursor` field the binding keeps in this client's presence state
 * while its editor has focus (null once it loses it), and reads from
 * others' states to show their cursors.
 */
export interface PresenceCursor {
  /** The key of the text the cursor is in (`TextHandle.key`): an app can have several editors in one space. */
  readonly key: string
  /** Where the selection starts, as `TextHandle.anchor` returns it (it stays beside its character as the text changes). */
  readonly anchor: string
  /** Where the selection ends and the caret is, as an anchor too (the same place as `anchor` for a bare caret). */
  readonly head: string
  /** The name shown on the caret (the `user` option); else the state's top-level `name`. */
  readonly name?: string
  /** A CSS colour for the caret and the selection (the `user` option); else the state's top-level `colour`. */
  readonly colour?: string
}

/** Who the local user is, as others see them (see SteadTextOptions.user). */
export interface CursorUser {
  readonly name: string
  readonly colour: string
}

/** Longest name shown on a caret, in UTF-16 units: a label is no place for a paragraph. */
const MAX_NAME = 40

/**
 * CSS colours taken from others' states: a hex colour, a named colour, or
 * a colour function of numbers (rgb(), hsl(), oklch(), ...). Nothing else,
 * since the colour goes into a style attribute and a peer may be hostile.
 */
const COLOUR = /^(?:#[0-9a-fA-F]{3,8}|[a-zA-Z]{1,32}|(?:rgba?|hsla?|hwb|lab|lch|oklab|oklch)\([0-9a-zA-Z.,%\s/+-]{1,64}\))$/

/** Whether `colour` is one the binding shows (see COLOUR). */
function isColour(colour: unknown): colour is string {
  return typeof colour === 'string' && COLOUR.test(colour)
}

/** The `user` option checked. @throws SteadError `malformed` for a missing name or a colour the binding would not show. */
export function checkUser(user: unknown): CursorUser | undefined {
  if (user === undefined) return undefined
  const u = user as Partial<CursorUser> | null
  if (typeof u !== 'object' || u === null || typeof u.name !== 'string' || u.name.length === 0) {
    throw new SteadError('malformed', `@stead/codemirror: user needs a non-empty name and a colour, got ${JSON.stringify(user)}`)
  }
  if (!isColour(u.colour)) throw new SteadError('malformed', `@stead/codemirror: user.colour ${JSON.stringify(u.colour)} is not a colour the binding shows: use #rgb, #rrggbb, a colour name, or rgb()/hsl()/oklch() of numbers`)
  return { name: u.name, colour: u.colour }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array)
}

/**
 * Publishes where this editor's selection is, as text anchors in the
 * presence field `cursor`, while the editor has focus.
 *
 * An anchor names a character; one typed here and not yet signed is known
 * to other clients only once signed, and until then they place the anchor
 * at the index it was taken at. So the anchors lean on characters that are
 * likely old (a caret on the one after it, a selection's ends on the
 * selected characters), and the cursor is published again once every edit
 * of this editor is signed (`republish`).
 */
export class LocalCursor {
  /** What this binding last put in presence, while it is there. */
  private published: { anchor: string; head: string } | undefined

  private readonly text: TextHandle
  private readonly presence: Presence
  private readonly user: CursorUser | undefined
  private readonly failed: (err: unknown) => void

  constructor(text: TextHandle, presence: Presence, user: CursorUser | undefined, failed: (err: unknown) => void) {
    this.text = text
    this.presence = presence
    this.user = user
    this.failed = failed
  }

  /**
   * Publishes the main selection of `state`. After a selection or document
   * change (`moved`), only if what is published no longer resolves to it:
   * a change elsewhere moves the anchors along with no message, and typing
   * at a caret keeps it beside the character after it. Once this editor's
   * edits are signed (`signed`), only if the anchors taken now differ from
   * the published ones (they named characters of unsigned drafts, which
   * other clients could not resolve).
   */
  publish(state: EditorState, why: 'moved' | 'signed'): void {
    if (why === 'signed' && !this.published) return
    const pos = Positions.of(state.doc)
    // The editor is not in step with the text (a resync is due): its positions would anchor the wrong characters.
    if (pos.points !== this.text.length) return
    const anchor = pos.toPoints(state.selection.main.anchor)
    const head = pos.toPoints(state.selection.main.head)
    try {
      if (why === 'moved' && this.published && this.text.position(this.published.anchor) === anchor && this.text.position(this.published.head) === head) return
      // A caret leans on the character after it (typing puts new characters before it, and that one is old); a selection's ends on the selected characters.
      const assoc = (at: number, other: number): 'before' | 'after' => (at <= other ? 'after' : 'before')
      const taken = { anchor: this.text.anchor(anchor, { assoc: assoc(anchor, head) }), head: this.text.anchor(head, { assoc: assoc(head, anchor) }) }
      if (why === 'signed' && taken.anchor === this.published?.anchor && taken.head === this.published.head) return
      this.presence.update({ cursor: { key: this.text.key, ...taken, ...(this.user ? { name: this.user.name, colour: this.user.colour } : {}) } })
      this.published = taken
    } catch (err) {
      this.failed(err)
    }
  }

  /** Withdraws the cursor (the editor lost focus or closes), unless another editor's cursor replaced it in presence meanwhile. */
  clear(): void {
    const mine = this.published
    this.published = undefined
    if (!mine) return
    const state = this.presence.state
    const cursor = isRecord(state) ? state.cursor : undefined
    if (!isRecord(cursor) || cursor.key !== this.text.key || cursor.anchor !== mine.anchor || cursor.head !== mine.head) return
    try {
      this.presence.update({ cursor: null })
    } catch (err) {
      // A space closed before its editor: its presence is withdrawn already.
      if (!(err instanceof ClosedError)) this.failed(err)
    }
  }
}

/** Another client's cursor in this text, as shown. */
interface ShownCursor {
  readonly author: string
  readonly name: string
  readonly colour: string
  /** Code point positions in the text. */
  readonly anchor: number
  readonly head: number
}

/** The cursor `peer` shows in the text `text`, or undefined (none, another text's, or not well formed: a peer may send anything). */
function cursorOf(peer: PresencePeer, text: TextHandle): ShownCursor | undefined {
  const state: RegisterValue = peer.state
  if (!isRecord(state)) return undefined
  const cursor = state.cursor
  if (!isRecord(cursor) || cursor.key !== text.key || typeof cursor.anchor !== 'string' || typeof cursor.head !== 'string') return undefined
  let anchor: number
  let head: number
  try {
    anchor = text.position(cursor.anchor)
    head = text.position(cursor.head)
  } catch {
    // `malformed`: not an anchor of this text.
    return undefined
  }
  const named = typeof cursor.name === 'string' && cursor.name ? cursor.name : typeof state.name === 'string' && state.name ? state.name : peer.author.slice(0, 8)
  const colour = isColour(cursor.colour) ? cursor.colour : isColour(state.colour) ? state.colour : colourOf(peer.author)
  return { author: peer.author, name: named.length > MAX_NAME ? `${named.slice(0, MAX_NAME - 1)}…` : named, colour, anchor, head }
}

/** A colour of its own for an author that shows none: a hue from its id. */
function colourOf(author: string): string {
  let h = 0
  for (let i = 0; i < author.length; i++) h = (h * 31 + author.charCodeAt(i)) % 360
  return `hsl(${h}, 70%, 45%)`
}

/** Other clients' cursors and selections in `text` as decorations of `doc` (which holds the text). */
export function remoteCursors(doc: EditorState['doc'], text: TextHandle, presence: Presence): DecorationSet {
  const ranges: Array<Range<Decoration>> = []
  let pos: Positions | undefined
  for (const peer of presence.others) {
    const cursor = cursorOf(peer, text)
    if (!cursor) continue
    // A pass over the document, made only when someone's cursor is in it.
    pos ??= Positions.of(doc)
    // Within the document even if it is not in step with the text this moment.
    const anchor = pos.toUnits(Math.min(cursor.anchor, pos.points))
    const head = pos.toUnits(Math.min(cursor.head, pos.points))
    const style = `--stead-colour: ${cursor.colour}`
    if (anchor !== head) {
      ranges.push(Decoration.mark({ class: 'cm-stead-selection', attributes: { style, 'data-author': cursor.author } }).range(Math.min(anchor, head), Math.max(anchor, head)))
    }
    // Outside the selection, so that it does not sit between the selection and a caret of this editor at the same place.
    ranges.push(Decoration.widget({ widget: new RemoteCaret(cursor.author, cursor.name, cursor.colour), side: head > anchor ? -1 : 1 }).range(head))
  }
  return Decoration.set(ranges, true)
}

/** A remote caret: a thin bar in the author's colour with their name above it. */
class RemoteCaret extends WidgetType {
  readonly author: string
  readonly name: string
  readonly colour: string

  constructor(author: string, name: string, colour: string) {
    super()
    this.author = author
    this.name = name
    this.colour = colour
  }

  override eq(other: RemoteCaret): boolean {
    return other.author === this.author && other.name === this.name && other.colour === this.colour
  }

  toDOM(view: EditorView): HTMLElement {
    const doc = view.dom.ownerDocument
    const caret = doc.createElement('span')
    caret.className = 'cm-stead-caret'
    caret.setAttribute('data-author', this.author)
    caret.style.setProperty('--stead-colour', this.colour)
    const label = doc.createElement('span')
    label.className = 'cm-stead-caret-label'
    // textContent: a name is text, whatever a peer puts in it.
    label.textContent = this.name
    caret.appendChild(label)
    return caret
  }

  override ignoreEvent(): boolean {
    return true
  }
}

/** How remote cursors look; an app's theme can restyle the same classes. */
export const cursorTheme = EditorView.baseTheme({
  '.cm-stead-selection': {
    backgroundColor: 'color-mix(in srgb, var(--stead-colour) 25%, transparent)',
  },
  '.cm-stead-caret': {
    position: 'relative',
    borderLeft: '2px solid var(--stead-colour)',
    marginLeft: '-1px',
    marginRight: '-1px',
    boxSizing: 'border-box',
    display: 'inline',
  },
  '.cm-stead-caret-label': {
    position: 'absolute',
    bottom: '100%',
    left: '-2px',
    padding: '0 3px',
    borderRadius: '3px 3px 3px 0',
    backgroundColor: 'var(--stead-colour)',
    color: 'white',
    fontSize: '.75em',
    fontStyle: 'normal',
    fontWeight: 'normal',
    lineHeight: 'normal',
    whiteSpace: 'nowrap',
    userSelect: 'none',
    pointerEvents: 'none',
    zIndex: '10',
  },
})
