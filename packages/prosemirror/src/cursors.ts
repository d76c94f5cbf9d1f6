import type { Presence, RegisterValue, TextHandle } from '@stead/client'
import type { Node } from 'prosemirror-model'
import type { Selection } from 'prosemirror-state'
import { Decoration, DecorationSet, type DecorationAttrs } from 'prosemirror-view'
import { docPos, flatIndex, flatLength } from './flat.ts'

/** Another client's cursor in this editor, as its presence shows it (what `renderCursor` and `selectionAttrs` get). */
export interface RemoteCursor {
  /** Its author id (see `PresencePeer.author`). */
  readonly author: string
  /** The name it shows (its presence's `name`, or the start of its author id). */
  readonly name: string
  /** Its colour: its presence's `colour` if that is a CSS hex colour (#rgb or #rrggbb), else one picked from its author id. */
  readonly colour: string
  /** Its selection's anchor, a document position (where the selection started). */
  readonly anchor: number
  /** Its selection's head, a document position (where the caret is). */
  readonly head: number
}

/** What this binding puts in presence for the cursor: two anchors of the text (see `TextHandle.anchor`). */
export interface CursorState {
  readonly anchor: string
  readonly head: string
}

const PALETTE = ['#d1495b', '#2e86ab', '#e6a100', '#3f8f3f', '#8e44ad', '#e0662c', '#16a085', '#c0397b']

/** A hex colour as #rrggbb, or undefined for anything else (a presence state is another client's input: never put it in a style unchecked). */
function hexColour(v: unknown): string | undefined {
  if (typeof v !== 'string') return undefined
  if (/^#[0-9a-fA-F]{6}$/.test(v)) return v.toLowerCase()
  if (/^#[0-9a-fA-F]{3}$/.test(v)) return `#${[...v.slice(1)].map((c) => c + c).join('')}`.toLowerCase()
  return undefined
}

function paletteColour(author: string): string {
  let h = 0
  for (let i = 0; i < author.length; i++) h = (h * 31 + author.charCodeAt(i)) >>> 0
  return PALETTE[h % PALETTE.length] as string
}

const isObject = (v: RegisterValue | undefined): v is { [key: string]: RegisterValue } => typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array)

/**
 * The anchors of a selection of `doc` (which shows `text`): a caret sticks
 * to the character after it, so it moves along behind what others type
 * there; a range's start sticks to the character before it and its end to
 * the one after, so text typed at either edge joins the range.
 */
export function cursorState(text: TextHandle, doc: Node, selection: Selection): CursorState {
  const anchor = flatIndex(doc, selection.anchor)
  const head = flatIndex(doc, selection.head)
  if (anchor === head) {
    const a = text.anchor(head, { assoc: 'after' })
    return { anchor: a, head: a }
  }
  const side = (i: number): 'before' | 'after' => (i === Math.min(anchor, head) ? 'before' : 'after')
  return { anchor: text.anchor(anchor, { assoc: side(anchor) }), head: text.anchor(head, { assoc: side(head) }) }
}

/** The other clients' cursors in `doc` (which shows `text`) from `presence`, those whose state has a cursor of this text under `field`. */
export function remoteCursors(presence: Presence, text: TextHandle, doc: Node, field: string): RemoteCursor[] {
  const out: RemoteCursor[] = []
  // Clamped to the document: a cursor is placed while the text and the document agree, but a bad anchor must never break a render.
  const length = flatLength(doc)
  for (const peer of presence.others) {
    const state = peer.state
    if (!isObject(state)) continue
    const cursor = state[field]
    if (!isObject(cursor) || typeof cursor.anchor !== 'string' || typeof cursor.head !== 'string') continue
    let anchor: number
    let head: number
    try {
      anchor = Math.min(text.position(cursor.anchor), length)
      head = Math.min(text.position(cursor.head), length)
    } catch {
      // An anchor of another text (the peer edits another one), or not an anchor at all: no cursor here.
      continue
    }
    const name = typeof state.name === 'string' && state.name.length > 0 ? state.name.slice(0, 64) : peer.author.slice(0, 8)
    out.push({ author: peer.author, name, colour: hexColour(state.colour) ?? paletteColour(peer.author), anchor: docPos(doc, anchor), head: docPos(doc, head) })
  }
  return out
}

/** The default caret: a thin bar in the cursor's colour with its name above it (classes `stead-cursor`, `stead-cursor-name`). */
export function defaultRenderCursor(cursor: RemoteCursor): HTMLElement {
  const caret = document.createElement('span')
  caret.className = 'stead-cursor'
  caret.style.borderLeft = `2px solid ${cursor.colour}`
  caret.style.marginLeft = '-1px'
  caret.style.marginRight = '-1px'
  caret.style.position = 'relative'
  caret.setAttribute('data-author', cursor.author)
  const label = document.createElement('span')
  label.className = 'stead-cursor-name'
  label.textContent = cursor.name
  label.style.position = 'absolute'
  label.style.top = '-1.3em'
  label.style.left = '-1px'
  label.style.fontSize = '0.75em'
  label.style.whiteSpace = 'nowrap'
  label.style.color = '#fff'
  label.style.backgroundColor = cursor.colour
  label.style.padding = '0 2px'
  label.style.userSelect = 'none'
  caret.append('\u2060', label, '\u2060')
  return caret
}

/** The default look of a selected range: the cursor's colour, translucent (class `stead-selection`). */
export function defaultSelectionAttrs(cursor: RemoteCursor): DecorationAttrs {
  return { class: 'stead-selection', style: `background-color: ${cursor.colour}40` }
}

/** Decorations for `cursors`: a caret widget at each head, the selected range highlighted. */
export function cursorDecorations(doc: Node, cursors: readonly RemoteCursor[], render: (c: RemoteCursor) => HTMLElement, selection: (c: RemoteCursor) => DecorationAttrs): DecorationSet {
  const decorations: Decoration[] = []
  for (const c of cursors) {
    decorations.push(Decoration.widget(c.head, () => render(c), { key: `${c.author}:${c.name}:${c.colour}`, side: 10, ignoreSelection: true }))
    const from = Math.min(c.anchor, c.head)
    const to = Math.max(c.anchor, c.head)
    if (from < to) decorations.push(Decoration.inline(from, to, selection(c), { inclusiveStart: false, inclusiveEnd: true }))
  }
  return DecorationSet.create(doc, decorations)
}
