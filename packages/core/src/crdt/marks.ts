import { encode } from '../codec.ts'
import { MAX_STAMP_JUMP } from './map.ts'
import { OK, isSafeInt, type ApplyResult } from './types.ts'
import { ActiveMarks, type Mark, type Shown } from './active-marks.ts'

/**
 * Formatting marks on a text, as Peritext has them (Litt, Lim, Kleppmann,
 * van Hardenberg, "Peritext: A CRDT for Collaborative Rich Text Editing",
 * CSCW 2022). A mark op names a mark type, a value and two anchors, each
 * the gap just before or just after one character (deleted or not). A
 * character carries the mark if it lies between the two anchors; which
 * side of its edge characters an anchor takes is what makes a mark grow
 * when someone types at its edge or not (see MarkExpand). Characters never
 * move, so a mark covers exactly what its author marked plus what is
 * typed inside it, on every replica, whatever arrives when.
 *
 * Of the ops of one type that cover a character, the latest wins: the
 * highest Lamport stamp (one more than any mark stamp its author had seen
 * on the text), then author id, then op tag, the same on every replica, so
 * a mark made after another is seen wins over it and concurrent ones are
 * decided the same way everywhere. A value of a multi-valued mark (a
 * comment) is its own mark: concurrent comments on one character are all
 * kept.
 */

/**
 * Where a mark starts or ends: `[character id, side]`, side 0 the gap just
 * before that character, 1 the gap just after it. `['', 0]` is the start
 * of the text, `['', 1]` its end.
 */
export type MarkAnchor = readonly [string, 0 | 1]

/** What a mark holds: JSON data (`true` for bold, `{ href }` for a link). */
export type MarkValue = null | boolean | number | string | readonly MarkValue[] | { readonly [key: string]: MarkValue }

/**
 * What a mark op does: 0 sets the mark of its type on its characters
 * (value null: takes it off); 1 adds its value to a multi-valued mark
 * (comments: several values of the type live side by side); 2 takes that
 * value off.
 */
export type MarkKind = 0 | 1 | 2

/**
 * `['m', type, value, start, end, stamp, kind]`: formats the characters
 * between the two anchors. `['M', ...]` with the same fields takes back the
 * mark made under the same context: only ever produced by `inverse`, never
 * accepted from the wire.
 */
export type MarkOp = readonly ['m', string, MarkValue, MarkAnchor, MarkAnchor, number, MarkKind] | readonly ['M', string, MarkValue, MarkAnchor, MarkAnchor, number, MarkKind]

/**
 * How a mark grows when someone types at its edges: `after` (bold,
 * italic: typing at its end continues it), `before` (at its start), `both`,
 * or `none` (links, comments). It only decides which anchors an op
 * takes, so it travels in the op itself and every replica agrees.
 */
export type MarkExpand = 'after' | 'before' | 'both' | 'none'

/** How a mark type behaves (see `STANDARD_MARKS`). */
export interface MarkSpec {
  /** How it grows when someone types at its edges; default `after`. */
  readonly expand?: MarkExpand
  /** Several values live side by side on one character (comments), each taken off by its value; default false. */
  readonly multiple?: boolean
}

/** The mark types every text knows: bold, italic, underline, strike and code grow at their end, links never grow. */
export const STANDARD_MARKS: Readonly<Record<string, MarkSpec>> = Object.freeze({
  bold: { expand: 'after' },
  italic: { expand: 'after' },
  underline: { expand: 'after' },
  strike: { expand: 'after' },
  code: { expand: 'after' },
  link: { expand: 'none' },
})

/** Longest mark type name, in UTF-16 units. */
export const MAX_MARK_TYPE_CHARS = 64
/** Most bytes a mark's value takes, msgpack-encoded. */
export const MAX_MARK_VALUE_BYTES = 4096
const MAX_MARK_VALUE_DEPTH = 8

/** A run of characters formatted alike: the text and its marks (type to value; a multi-valued type to its values, sorted). */
export interface TextSpan {
  /** The characters. */
  readonly text: string
  /** Their marks, by type: each type's value, or for a multi-valued type (comments) its values. */
  readonly marks: Readonly<Record<string, unknown>>
}

/** What is wrong with a mark value, or null: JSON data, nested at most 8 deep. */
export function validateMarkValue(v: unknown, depth = 0): string | null {
  if (depth > MAX_MARK_VALUE_DEPTH) return `a mark value is nested at most ${MAX_MARK_VALUE_DEPTH} deep`
  if (v === null || typeof v === 'boolean' || typeof v === 'string') return null
  if (typeof v === 'number') return Number.isFinite(v) ? null : 'a mark value has finite numbers only'
  if (Array.isArray(v)) {
    for (const item of v) {
      const p = validateMarkValue(item, depth + 1)
      if (p) return p
    }
    return null
  }
  if (typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) {
    if (Object.hasOwn(v, '__proto__')) return 'a mark value has no "__proto__" key'
    for (const item of Object.values(v as object)) {
      const p = validateMarkValue(item, depth + 1)
      if (p) return p
    }
    return null
  }
  return `a mark value is JSON data (null, boolean, number, string, array, object), not ${v instanceof Uint8Array ? 'bytes' : typeof v}`
}

/** What is wrong with a mark op from the wire (`validId` checks an anchor's character id), or null. */
export function validateMarkOp(op: readonly unknown[], validId: (id: unknown) => boolean): string | null {
  if (op.length !== 7) return "a mark is ['m', type, value, start, end, stamp, kind]"
  const [, type, value, start, end, stamp, kind] = op
  if (typeof type !== 'string' || type.length === 0 || type.length > MAX_MARK_TYPE_CHARS) return `a mark type is 1 to ${MAX_MARK_TYPE_CHARS} characters`
  if (kind !== 0 && kind !== 1 && kind !== 2) return 'a mark kind is 0 (set it, or take it off with null), 1 (add a value) or 2 (take a value off)'
  if (kind !== 0 && value === null) return 'a mark of a multi-valued type names its value'
  const bad = validateMarkValue(value)
  if (bad) return bad
  if (encode(value).length > MAX_MARK_VALUE_BYTES) return `a mark value takes at most ${MAX_MARK_VALUE_BYTES} bytes`
  for (const a of [start, end]) {
    if (!Array.isArray(a) || a.length !== 2 || !validId(a[0]) || (a[1] !== 0 && a[1] !== 1)) return 'a mark anchor is [character id or "", 0 (before) or 1 (after)]'
  }
  if (!isSafeInt(stamp) || stamp < 0) return 'a mark stamp is a non-negative safe integer'
  return null
}

/** `v` as canonical JSON (object keys sorted): what tells two values of a multi-valued mark apart. */
export function canonicalMarkValue(v: MarkValue): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v)
  if (Array.isArray(v)) return `[${(v as readonly MarkValue[]).map(canonicalMarkValue).join(',')}]`
  const o = v as { readonly [key: string]: MarkValue }
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalMarkValue(o[k] as MarkValue)}`)
    .join(',')}}`
}

/**
 * The anchors of a mark on visible characters `from` to `to - 1` that
 * grows as `expand` says: `idAt(i)` is the id of visible character i of
 * the `length` there are. A mark that grows at its end ends just before
 * the next character (or at the text's end), one that does not just after
 * its last character; likewise at its start.
 */
export function markAnchors(from: number, to: number, length: number, expand: MarkExpand, idAt: (i: number) => string): [MarkAnchor, MarkAnchor] {
  const growsBefore = expand === 'before' || expand === 'both'
  const growsAfter = expand === 'after' || expand === 'both'
  const start: MarkAnchor = growsBefore ? (from === 0 ? ['', 0] : [idAt(from - 1), 1]) : [idAt(from), 0]
  const end: MarkAnchor = growsAfter ? (to === length ? ['', 1] : [idAt(to), 0]) : [idAt(to - 1), 1]
  return [start, end]
}

function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v)
    for (const x of Object.values(v)) deepFreeze(x)
  }
  return v
}

/**
 * Mark ops a text holds at most. Every change of a text computes its spans
 * again (the relays too, for its stable history), in time that grows with
 * its marks and their boundaries: this bounds what one writer can make
 * every replica spend.
 */
export const MAX_MARKS = 20_000
/**
 * Marks of multi-valued types (comments) a text holds at most: a character
 * covered by n of them shows n values, so n overlapping comments make
 * spans whose values add up to n² (2,000 nested: 4 million, about half a
 * second), however they are computed.
 */
export const MAX_MULTI_VALUED_MARKS = 2_000

/** @internal A text's mark ops, by tag (see the module comment): what CollabText keeps them in. */
export class MarkSet {
  private readonly byTag = new Map<string, Mark>()
  /** How many marks have an anchor just after each character: typing there goes past it (see CollabText.insertOp). */
  private readonly afterAnchors = new Map<string, number>()
  private maxStamp = 0
  /** How many of them are of multi-valued types. */
  private multiValued = 0

  /** How many mark ops it holds. */
  get size(): number {
    return this.byTag.size
  }

  /** How many of its mark ops are of multi-valued types. */
  get multiValuedSize(): number {
    return this.multiValued
  }

  /** Whether it holds the mark op made under `tag`. */
  has(tag: string): boolean {
    return this.byTag.has(tag)
  }

  /** The stamp a new mark op should carry: one more than any this text has seen. */
  nextStamp(): number {
    return this.maxStamp + 1
  }

  /**
   * Refuses a stamp too far ahead (`clock-ahead`: one mark stamped far
   * ahead would win every concurrent one for good), and a mark past
   * MAX_MARKS or MAX_MULTI_VALUED_MARKS (`invariant`).
   */
  check(op: MarkOp): ApplyResult {
    const t = op[5]
    if (t > this.maxStamp + MAX_STAMP_JUMP) return { ok: false, reason: 'clock-ahead', detail: `mark stamp ${t} is more than ${MAX_STAMP_JUMP} past the highest seen (${this.maxStamp})` }
    if (this.byTag.size >= MAX_MARKS) return { ok: false, reason: 'invariant', detail: `a text holds at most ${MAX_MARKS} marks` }
    if (op[6] !== 0 && this.multiValued >= MAX_MULTI_VALUED_MARKS) return { ok: false, reason: 'invariant', detail: `a text holds at most ${MAX_MULTI_VALUED_MARKS} marks of multi-valued types (comments)` }
    return OK
  }

  /** Adds the mark op made under `tag` (its ids resolved); adding it again changes nothing. */
  add(tag: string, author: string, op: MarkOp): void {
    if (this.byTag.has(tag)) return
    const valueKey = canonicalMarkValue(op[2])
    const m: Mark = { tag, author, op: deepFreeze(['m', op[1], op[2], op[3], op[4], op[5], op[6]]), valueKey, key: op[6] === 0 ? op[1] : `${op[1]}\u0000${valueKey}` }
    this.byTag.set(tag, m)
    if (op[6] !== 0) this.multiValued++
    if (op[5] > this.maxStamp) this.maxStamp = op[5]
    for (const a of [op[3], op[4]]) if (a[0] !== '' && a[1] === 1) this.afterAnchors.set(a[0], (this.afterAnchors.get(a[0]) ?? 0) + 1)
  }

  /** Takes back the mark op made under `tag`, if held. */
  remove(tag: string): void {
    const m = this.byTag.get(tag)
    if (!m) return
    this.byTag.delete(tag)
    if (m.op[6] !== 0) this.multiValued--
    for (const a of [m.op[3], m.op[4]]) {
      if (a[0] === '' || a[1] !== 1) continue
      const n = (this.afterAnchors.get(a[0]) ?? 1) - 1
      if (n > 0) this.afterAnchors.set(a[0], n)
      else this.afterAnchors.delete(a[0])
    }
  }

  /** Whether some mark starts or ends just after character `id`. */
  anchoredAfter(id: string): boolean {
    return this.afterAnchors.has(id)
  }

  /** Adds every mark op `other` holds. */
  merge(other: MarkSet, added: (tag: string) => void): void {
    for (const m of other.byTag.values()) {
      if (this.byTag.has(m.tag)) continue
      this.add(m.tag, m.author, m.op)
      added(m.tag)
    }
  }

  /** An independent copy (the ops themselves are frozen, so shared). */
  copy(): MarkSet {
    const c = new MarkSet()
    for (const [tag, m] of this.byTag) c.byTag.set(tag, m)
    for (const [id, n] of this.afterAnchors) c.afterAnchors.set(id, n)
    c.maxStamp = this.maxStamp
    c.multiValued = this.multiValued
    return c
  }

  /** The snapshot entries `[tag, author, op]` of the marks of these tags (those held), sorted by tag. */
  entries(tags: Iterable<string>): Array<[string, string, MarkOp]> {
    const out: Array<[string, string, MarkOp]> = []
    for (const tag of tags) {
      const m = this.byTag.get(tag)
      if (m) out.push([m.tag, m.author, m.op])
    }
    return out.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
  }

  /** Every tag held. */
  tags(): string[] {
    return [...this.byTag.keys()]
  }

  /**
   * The formatted text: `walk` visits every character in order with its
   * length in `text` (UTF-16 units; 0 for a deleted one), `text` being the
   * visible characters; `placed(id)` says whether a character is in the
   * text yet (a mark whose anchor is not waits, as an insert does). Runs
   * formatted alike are one span; the spans and their marks are frozen.
   */
  spans(text: string, walk: (visit: (id: string, units: number) => void) => void, placed: (id: string) => boolean): TextSpan[] {
    interface Event {
      readonly m: Mark
      readonly isStart: boolean
    }
    const atStart: Event[] = []
    const before = new Map<string, Event[]>()
    const after = new Map<string, Event[]>()
    const at = (a: MarkAnchor, m: Mark, isStart: boolean): void => {
      if (a[0] === '') {
        // The text's start; its end is never passed (a mark starting there covers nothing, one ending there runs on).
        if (a[1] === 0) atStart.push({ m, isStart })
        return
      }
      const map = a[1] === 0 ? before : after
      let list = map.get(a[0])
      if (!list) map.set(a[0], (list = []))
      list.push({ m, isStart })
    }
    for (const m of this.byTag.values()) {
      const s = m.op[3]
      const e = m.op[4]
      if ((s[0] !== '' && !placed(s[0])) || (e[0] !== '' && !placed(e[0]))) continue
      at(s, m, true)
      at(e, m, false)
    }
    // 1: covering the characters passed; 2: ended (an end met before the start ends a mark that covers nothing).
    const state = new Map<Mark, 1 | 2>()
    const active = new Map<string, ActiveMarks>()
    const dirty = new Set<string>()
    const values = new Map<string, Shown>()
    const pass = (events: readonly Event[] | undefined): void => {
      if (events === undefined) return
      for (let k = 0; k < events.length; k++) {
        const { m, isStart } = events[k] as Event
        const s = state.get(m)
        if (isStart && s === undefined) {
          state.set(m, 1)
          let set = active.get(m.op[1])
          if (!set) active.set(m.op[1], (set = new ActiveMarks()))
          set.add(m)
          dirty.add(m.op[1])
        } else if (!isStart) {
          if (s === 1) {
            active.get(m.op[1])?.delete(m)
            dirty.add(m.op[1])
          }
          state.set(m, 2)
        }
      }
    }
    const out: TextSpan[] = []
    let from = 0
    let to = 0
    let marks: Readonly<Record<string, unknown>> = Object.freeze({})
    let key = '{}'
    const flush = (): void => {
      if (to > from) out.push(Object.freeze({ text: text.slice(from, to), marks }))
      from = to
    }
    const recompute = (): void => {
      for (const type of dirty) {
        const v = active.get(type)?.shown()
        if (v) values.set(type, v)
        else values.delete(type)
      }
      dirty.clear()
      const types = [...values.keys()].sort()
      const nextKey = `{${types.map((t) => `${JSON.stringify(t)}:${(values.get(t) as Shown).key}`).join(',')}}`
      if (nextKey === key) return
      flush()
      const record: Record<string, unknown> = {}
      for (const t of types) Object.defineProperty(record, t, { value: (values.get(t) as Shown).value, enumerable: true })
      marks = Object.freeze(record)
      key = nextKey
    }
    pass(atStart)
    walk((id, units) => {
      pass(before.get(id))
      if (units > 0) {
        if (dirty.size) recompute()
        to += units
      }
      pass(after.get(id))
    })
    flush()
    return out
  }
}
