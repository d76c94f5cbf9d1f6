import { SteadError, validateRelativePosition, type Assoc, type RelativePosition } from '@stead/core'
import { isDraftId } from '../space/draft-ids.ts'
import type { HandleHost } from './handles.ts'

/** How `anchor` holds a position (see TextHandle.anchor, ListHandle.anchor). */
export interface AnchorOptions {
  /**
   * Which neighbour the anchor sticks to. `'before'` (the default): the
   * element before the position; what anyone inserts at the position lands
   * after the anchor, which stays in front of it (a selection's start).
   * `'after'`: the element after it; inserts land in front of the anchor,
   * which moves along behind them (a caret that follows typing, a
   * selection's end).
   */
  readonly assoc?: Assoc
}

/** A text's or list's prospective view, as anchors need it. */
export interface AnchoredSequence {
  readonly length: number
  relativePosition(index: number, assoc?: Assoc): RelativePosition
  absolutePosition(pos: RelativePosition): number | undefined
}

/** Which kind of handle an anchor belongs to: its first character. */
type Kind = 't' | 'l'

/**
 * The object an anchor belongs to, as 1 to 7 base-36 characters: FNV-1a of
 * its key. It lets `position` tell an anchor of another object (an app's
 * mix-up) from one whose element has not arrived here yet.
 */
function scopeOf(key: string): string {
  let h = 0x811c9dc5
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193)
  return (h >>> 0).toString(36)
}

const FORMAT = /^([tl])([<>])([0-9a-z]{1,7}):(0|[1-9][0-9]{0,15}):(.*)$/s

/**
 * An anchor as apps keep it: a short JSON-safe string, `${kind}${'<' or
 * '>'}${scope}:${hint}:${element id}` (`t<1x2y3z:42:AbC…:3.0`): the kind
 * of object, the side the element is on, the object (see scopeOf), the
 * index the anchor was taken at, and the element ('' for the start or the
 * end). The hint is only where `position` falls back to when the element
 * is not known here: never a second source of truth.
 */
function encodeAnchor(kind: Kind, key: string, pos: RelativePosition, hint: number): string {
  return `${kind}${pos.assoc === 'before' ? '<' : '>'}${scopeOf(key)}:${hint}:${pos.id}`
}

/**
 * The relative position and hint an anchor holds. `''` and a bare element
 * id, the anchors of earlier versions, are 'before' anchors without a hint.
 *
 * @throws SteadError `malformed` for anything else, or an anchor of another object.
 */
function decodeAnchor(kind: Kind, key: string, anchor: unknown): { pos: RelativePosition; hint: number } {
  const bad = (why: string): SteadError => new SteadError('malformed', `${key}: ${why}; pass a string anchor() returned`)
  if (typeof anchor !== 'string') throw bad(`an anchor is a string, got ${anchor === null ? 'null' : typeof anchor}`)
  const m = FORMAT.exec(anchor)
  if (!m) {
    if (validateRelativePosition({ id: anchor, assoc: 'before' }) === null) return { pos: { id: anchor, assoc: 'before' }, hint: 0 }
    throw bad(`${JSON.stringify(anchor.slice(0, 40))} is not an anchor`)
  }
  const [, k, side, scope, hint, id] = m as unknown as [string, Kind, string, string, string, string]
  if (k !== kind) throw bad(`this is ${k === 't' ? "a text's" : "a list's"} anchor`)
  if (scope !== scopeOf(key)) throw bad('this anchor belongs to another object')
  const pos: RelativePosition = { id, assoc: side === '<' ? 'before' : 'after' }
  const problem = validateRelativePosition(pos)
  if (problem || !Number.isSafeInteger(Number(hint))) throw bad(problem ?? 'its index is too large')
  return { pos, hint: Number(hint) }
}

/**
 * An anchor for `index` of `view` (what TextHandle.anchor and
 * ListHandle.anchor return). An element of an unsigned draft has a draft
 * id (`~tab:n.k`) that only this tab knows: the anchor names its signed id
 * if it has one already, and else the draft id, which `position` resolves
 * through the client's record of what drafts became (DraftIds; kept in
 * storage, so it survives a restart: see ClientRecords.names).
 *
 * @throws SteadError `malformed` for an index that is not an integer from 0 to the length, or bad options.
 */
export function takeAnchor(host: HandleHost, kind: Kind, key: string, view: AnchoredSequence | undefined, index: number, options: AnchorOptions | undefined): string {
  if (options !== undefined && (typeof options !== 'object' || options === null)) throw new SteadError('malformed', `${key}: anchor options are an object, got ${String(options)}`)
  const assoc = options?.assoc ?? 'before'
  if (assoc !== 'before' && assoc !== 'after') throw new SteadError('malformed', `${key}: an anchor's assoc is 'before' or 'after', got ${JSON.stringify(assoc)}`)
  const length = view?.length ?? 0
  if (!Number.isSafeInteger(index) || index < 0 || index > length) throw new SteadError('malformed', `${key}: cannot anchor at ${String(index)}: positions go from 0 to ${length}`)
  const pos = view ? view.relativePosition(index, assoc) : { id: '', assoc }
  const id = isDraftId(pos.id) ? (host.signedId(pos.id) ?? pos.id) : pos.id
  return encodeAnchor(kind, key, { id, assoc }, index)
}

/**
 * Where an anchor is now in `view`: beside its element, or where the
 * element was if it was deleted. Its element named by a draft id is found
 * by the id the draft got when signed. An element not known here (not
 * received yet, an insert lost before it was signed, a draft this client
 * no longer remembers) leaves the index the anchor was taken at, within
 * the sequence: the best guess there is.
 *
 * @throws SteadError `malformed` for something that is not an anchor of this object.
 */
export function anchorPosition(host: HandleHost, kind: Kind, key: string, view: AnchoredSequence | undefined, anchor: string): number {
  const { pos, hint } = decodeAnchor(kind, key, anchor)
  const length = view?.length ?? 0
  if (pos.id === '') return pos.assoc === 'before' ? 0 : length
  const here = view?.absolutePosition(pos)
  if (here !== undefined) return here
  const signed = isDraftId(pos.id) ? host.signedId(pos.id) : undefined
  const there = signed !== undefined ? view?.absolutePosition({ id: signed, assoc: pos.assoc }) : undefined
  return there ?? Math.min(hint, length)
}
