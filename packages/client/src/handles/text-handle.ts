import { CollabText, MAX_MARKS, MAX_MULTI_VALUED_MARKS, MAX_MARK_TYPE_CHARS, MAX_MARK_VALUE_BYTES, STANDARD_MARKS, SteadError, canonicalMarkValue, encode, validateMarkValue, type MarkExpand, type MarkSpec, type MarkValue, type TextOp, type TextSpan } from '@stead/core'
import { anchorPosition, takeAnchor, type AnchorOptions } from './anchors.ts'
import { ChangeFeed, textChange, textState, type TextChange, type TextState } from './changes.ts'
import { Handle, guarded } from './handles.ts'
import type { SafeResult, UpdateOptions, UpdateResult, WaitOptions } from '../types.ts'

/** Most code points one insert may carry (an envelope holds at most 1 MiB). */
export const MAX_TEXT_INSERT = 200_000

/** Most mark types one `format` call may set. */
export const MAX_FORMAT_MARKS = 32

const EXPANDS: readonly MarkExpand[] = ['after', 'before', 'both', 'none']

/**
 * Collaborative text, as Y.Text users know it. Open it with
 * `space.text(key)`. Positions count Unicode code points (an emoji is one);
 * two people typing at one place never interleave (FugueMax), and a
 * delete removes exactly the characters its author saw.
 */
export class TextHandle extends Handle {
  private feed: ChangeFeed<TextState, TextChange> | undefined
  /** Mark types declared on this handle (see declareMarks). */
  private readonly markSpecs = new Map<string, MarkSpec>()

  /** Prospective text: this client's edits at once, and every edit it received. */
  get value(): string {
    return this.view()?.value() ?? ''
  }

  /** Stable text: as every correct replica has it in the stable order, within `maxLength`. */
  get stable(): string {
    return (this.host.stable(this.key) as CollabText | undefined)?.value() ?? ''
  }

  /**
   * Prospective text with its formatting: runs of characters formatted
   * alike, `{ text, marks }`, marks by type (`{ bold: true, link: { href } }`;
   * a multi-valued type such as a comment gives its values, sorted). [] for
   * an empty text. Frozen: read it, do not change it.
   */
  get spans(): readonly TextSpan[] {
    return this.view()?.spans() ?? []
  }

  /** Stable text with its formatting, as every correct replica has it (see `spans`). */
  get stableSpans(): readonly TextSpan[] {
    return (this.host.stable(this.key) as CollabText | undefined)?.spans() ?? []
  }

  /** Prospective length in code points. */
  get length(): number {
    return this.view()?.length ?? 0
  }

  /**
   * An anchor for code point position `index` (0 to `length`): a cursor or
   * a selection end that stays beside the same character while this client
   * and others edit, as Yjs's relative positions, and beside where it was
   * once that character is deleted. `position(anchor)` says where it is
   * now. It is a short JSON-safe string that still resolves after a
   * reload: keep it in localStorage or a presence state (others resolve an
   * anchor beside a character typed here once that edit is signed: share
   * anchors taken after its `stored`). By default it sticks to the
   * character before it; `{ assoc: 'after' }` sticks to the one after it,
   * so what anyone types at it lands in front of it (see
   * {@link AnchorOptions}).
   *
   * @throws SteadError `malformed` for an index that is not an integer from 0 to `length`, or an `assoc` other than 'before' and 'after'.
   */
  anchor(index: number, options?: AnchorOptions): string {
    return takeAnchor(this.host, 't', this.key, this.view(), index, options)
  }

  /**
   * Where an anchor of this text (see `anchor`) is now, in code points (0
   * to `length`). Before the character it sticks to reaches this client
   * (another client's anchor, sent ahead of its edit), it is the index the
   * anchor was taken at, within the text. Anchors of earlier versions (''
   * and a bare character id) still work.
   *
   * @throws SteadError `malformed` for anything `anchor` did not return, and an anchor of another object.
   */
  position(anchor: string): number {
    return anchorPosition(this.host, 't', this.key, this.view(), anchor)
  }

  /**
   * Calls `listener` with what changed each time the prospective text
   * changes: a delta (retain, insert with its author, delete; code points,
   * as Y.Text's and Quill's) from the text as last told to the text now,
   * and whether this client made it. An editor applies it instead of
   * diffing. Edits of one `space.transact` come as one change. Returns the
   * function that stops it.
   *
   * Each change costs a pass over the text while any listener is on
   * (median 7 ms for a 100,000-character text on one core of the 2-core
   * test machine), so observe long texts only where an editor needs it.
   */
  observe(listener: (change: TextChange) => void): () => void {
    this.feed ??= new ChangeFeed(this.host, this.key, () => textState(this.view()), (a, b, local) => textChange(a, b, local, (id) => this.host.signedId(id), this.view()))
    return this.feed.listen(listener)
  }

  /** The prospective text. */
  override toString(): string {
    return this.value
  }

  /**
   * Inserts `text` at code point `index` (0 to `length`). Regular: shows
   * in `value` at once and resolves `stored` once durable on this device.
   *
   * @throws SteadError `malformed` (the promise rejects) for an index outside the text or an empty or non-string text, `too-large` over 200,000 code points; {@link ClosedError} after the space closed.
   */
  insert(index: number, text: string): Promise<UpdateResult>
  /**
   * Inserts `text` as a safe update: resolves once the stable order decided it (`rejected` with `invariant` past `maxLength`).
   *
   * @throws SteadError as the regular form, and `timeout` or `aborted` as `options` say.
   */
  insert(index: number, text: string, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Inserts `text`, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError as the other forms.
   */
  insert(index: number, text: string, options?: UpdateOptions): Promise<UpdateResult>
  insert(index: number, text: string, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      if (typeof text !== 'string' || text.length === 0) throw new SteadError('malformed', `${this.key}: insert needs a non-empty string`)
      const view = this.view() ?? new CollabText()
      this.checkIndex(index, view.length, 'insert at')
      const points = [...text].length
      if (points > MAX_TEXT_INSERT) throw new SteadError('too-large', `${this.key}: an insert carries at most ${MAX_TEXT_INSERT} code points, got ${points}; split it`)
      return this.send(view.insertOp(index, text), options)
    })
  }

  /**
   * Deletes `count` (at least 1) code points from `index`. Regular: shows
   * at once and resolves `stored` once durable on this device.
   *
   * @throws SteadError `malformed` (the promise rejects) for a range outside the text or a count below 1; {@link ClosedError} after the space closed.
   */
  delete(index: number, count: number): Promise<UpdateResult>
  /**
   * Deletes as a safe update: resolves once the stable order decided it.
   *
   * @throws SteadError as the regular form, and `timeout` or `aborted` as `options` say.
   */
  delete(index: number, count: number, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Deletes, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError as the other forms.
   */
  delete(index: number, count: number, options?: UpdateOptions): Promise<UpdateResult>
  delete(index: number, count: number, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      const view = this.view() ?? new CollabText()
      this.checkIndex(index, view.length, 'delete from')
      if (!Number.isSafeInteger(count) || count < 1 || index + count > view.length) {
        throw new SteadError('malformed', `${this.key}: cannot delete ${String(count)} code points from ${index} of a text of ${view.length}`)
      }
      return this.send(view.deleteOp(index, count) as TextOp, options)
    })
  }

  /**
   * Formats `length` code points from `index` with `marks`, as Quill's
   * `formatText`: each mark type set to its value (`{ bold: true }`,
   * `{ link: { href } }`, any JSON value of at most 4,096 bytes), or taken
   * off with null. Concurrent formatting merges as Peritext does: marks of
   * different types combine, of one type the latest wins (the same on every
   * replica), and text typed at a mark's edge takes the mark as its type
   * grows: bold, italic, underline, strike and code at their end, links
   * never (see `declareMarks` for other types, `options.expand` for one
   * call). A multi-valued type (`declareMarks({ comment: { multiple: true } })`)
   * adds the value beside the others; null takes off every value shown on
   * the range (`unformat` takes off one). One op per mark type; with
   * `safe`, all of them as one atomic group.
   *
   * @throws SteadError `malformed` (the promise rejects) for a range outside the text or empty, more than 32 mark types, a type name not 1 to 64 characters, a value that is not JSON data; `too-large` for a value over 4,096 bytes; {@link ClosedError} after the space closed.
   */
  format(index: number, length: number, marks: Readonly<Record<string, MarkValue | null>>, options: UpdateOptions & { readonly expand?: MarkExpand } = {}): Promise<UpdateResult> {
    return guarded(() => {
      const view = this.checkRange(index, length, 'format')
      if (typeof marks !== 'object' || marks === null || Array.isArray(marks)) throw new SteadError('malformed', `${this.key}: format takes marks as an object, { bold: true, link: null }`)
      const types = Object.keys(marks)
      if (types.length === 0 || types.length > MAX_FORMAT_MARKS) throw new SteadError('malformed', `${this.key}: format sets 1 to ${MAX_FORMAT_MARKS} mark types, got ${types.length}`)
      if (options.expand !== undefined && !EXPANDS.includes(options.expand)) throw new SteadError('malformed', `${this.key}: expand is one of ${EXPANDS.join(', ')}, got ${String(options.expand)}`)
      const ops: TextOp[] = []
      for (const type of types) {
        const value = this.checkMark(type, marks[type])
        const spec = this.specOf(type)
        const expand = options.expand ?? spec.expand
        if (!spec.multiple) ops.push(view.markOp(index, index + length, type, value, { expand }))
        else if (value !== null) ops.push(view.markOp(index, index + length, type, value, { expand, multiple: true }))
        else for (const v of valuesOn(view.spans(), index, length, type)) ops.push(view.markOp(index, index + length, type, v, { expand, multiple: true, remove: true }))
      }
      this.checkMarkRoom(view, ops)
      return this.sendAll(ops, options)
    })
  }

  /**
   * Takes mark `type` off `length` code points from `index`: for a
   * multi-valued type only `value` (one comment) if given, else every
   * value shown there; for the others as `format` with null.
   *
   * @throws SteadError as `format`.
   */
  unformat(index: number, length: number, type: string, value?: MarkValue, options: UpdateOptions = {}): Promise<UpdateResult> {
    return guarded(() => {
      if (value === undefined || !this.specOf(type).multiple) return this.format(index, length, { [type]: null }, options)
      const view = this.checkRange(index, length, 'unformat')
      const v = this.checkMark(type, value)
      const op = view.markOp(index, index + length, type, v, { expand: this.specOf(type).expand, multiple: true, remove: true })
      this.checkMarkRoom(view, [op])
      return this.sendAll([op], options)
    })
  }

  /**
   * Declares how mark types behave on this handle: `expand` (how a mark
   * grows when someone types at its edges: `after` by default, `before`,
   * `both` or `none`) and `multiple` (several values side by side, as
   * comments). Bold, italic, underline, strike and code grow `after`,
   * links `none`; other types `after` unless declared. What `format` puts
   * in each op: other clients need no declaration to show it, and
   * `space.text(key, { marks })` declares the same way.
   *
   * @throws SteadError `malformed` for a bad declaration, `type-mismatch` for a type declared otherwise on this handle before.
   */
  declareMarks(specs: Readonly<Record<string, MarkSpec>>): void {
    if (typeof specs !== 'object' || specs === null || Array.isArray(specs)) throw new SteadError('malformed', `${this.key}: marks are declared as { name: { expand, multiple } }`)
    for (const [type, spec] of Object.entries(specs)) {
      this.checkMark(type, null)
      if (typeof spec !== 'object' || spec === null || Object.keys(spec).some((k) => k !== 'expand' && k !== 'multiple')) throw new SteadError('malformed', `${this.key}: mark ${type} is declared as { expand, multiple }`)
      if (spec.expand !== undefined && !EXPANDS.includes(spec.expand)) throw new SteadError('malformed', `${this.key}: mark ${type}: expand is one of ${EXPANDS.join(', ')}, got ${String(spec.expand)}`)
      if (spec.multiple !== undefined && typeof spec.multiple !== 'boolean') throw new SteadError('malformed', `${this.key}: mark ${type}: multiple is a boolean`)
      const known = this.markSpecs.get(type)
      const given: MarkSpec = { expand: spec.expand ?? 'after', multiple: spec.multiple ?? false }
      if (known && (known.expand !== given.expand || known.multiple !== given.multiple)) throw new SteadError('type-mismatch', `${this.key}: mark ${type} is declared ${JSON.stringify(known)} here already, not ${JSON.stringify(given)}`)
    }
    for (const [type, spec] of Object.entries(specs)) this.markSpecs.set(type, { expand: spec.expand ?? 'after', multiple: spec.multiple ?? false })
  }

  private specOf(type: string): MarkSpec {
    return this.markSpecs.get(type) ?? (Object.hasOwn(STANDARD_MARKS, type) ? STANDARD_MARKS[type] : undefined) ?? { expand: 'after' }
  }

  /** A mark's type and value checked, the value copied (ops keep their values frozen). */
  private checkMark(type: string, value: unknown): MarkValue {
    if (typeof type !== 'string' || type.length === 0 || type.length > MAX_MARK_TYPE_CHARS) throw new SteadError('malformed', `${this.key}: a mark type is 1 to ${MAX_MARK_TYPE_CHARS} characters, got ${JSON.stringify(type)}`)
    if (value === null) return null
    const problem = value === undefined ? 'a mark value is JSON data or null, not undefined' : validateMarkValue(value)
    if (problem) throw new SteadError('malformed', `${this.key}: mark ${type}: ${problem}`)
    const bytes = encode(value).length
    if (bytes > MAX_MARK_VALUE_BYTES) throw new SteadError('too-large', `${this.key}: mark ${type}: a value takes at most ${MAX_MARK_VALUE_BYTES} bytes, got ${bytes}`)
    return JSON.parse(JSON.stringify(value)) as MarkValue
  }

  /** Refuses, at the call, mark ops the text has no room for (the audit would reject them). */
  private checkMarkRoom(view: CollabText, ops: readonly TextOp[]): void {
    const { all, multiValued } = view.markCounts
    const multi = ops.filter((op) => op[0] === 'm' && op[6] !== 0).length
    if (all + ops.length > MAX_MARKS) throw new SteadError('too-large', `${this.key}: a text holds at most ${MAX_MARKS} marks (it has ${all}); formatting adds one per type`)
    if (multiValued + multi > MAX_MULTI_VALUED_MARKS) throw new SteadError('too-large', `${this.key}: a text holds at most ${MAX_MULTI_VALUED_MARKS} marks of multi-valued types such as comments (it has ${multiValued})`)
  }

  /** The prospective text, after checking that [index, index + length) is a non-empty range of it. */
  private checkRange(index: number, length: number, what: string): CollabText {
    const view = this.view() ?? new CollabText()
    this.checkIndex(index, view.length, what)
    if (!Number.isSafeInteger(length) || length < 1 || index + length > view.length) {
      throw new SteadError('malformed', `${this.key}: cannot ${what} ${String(length)} code points from ${index} of a text of ${view.length}`)
    }
    return view
  }

  /** Sends ops made together: one as any update, several at once (an atomic group when safe). */
  private sendAll(ops: readonly TextOp[], options: UpdateOptions): Promise<UpdateResult> {
    if (ops.length === 0) return Promise.resolve({ status: 'stored' })
    if (ops.length === 1) return this.send(ops[0] as TextOp, options)
    if (options.safe) return this.host.wait(this.host.safeGroup(ops.map((op) => ({ key: this.key, decl: this.declaration, intent: op }))), options, `a format of ${this.key}`, true)
    return Promise.all(ops.map((op) => this.send(op, options))).then((results) => results[0] as UpdateResult)
  }

  private view(): CollabText | undefined {
    return this.host.prospective(this.key) as CollabText | undefined
  }

  private checkIndex(index: number, length: number, what: string): void {
    if (!Number.isSafeInteger(index) || index < 0 || index > length) throw new SteadError('malformed', `${this.key}: cannot ${what} ${String(index)} in a text of ${length} code points`)
  }
}

/** The values of multi-valued mark `type` shown on code points [index, index + length) of `spans`, each once. */
function valuesOn(spans: readonly TextSpan[], index: number, length: number, type: string): MarkValue[] {
  const out = new Map<string, MarkValue>()
  let at = 0
  for (const span of spans) {
    const n = [...span.text].length
    const values = at < index + length && index < at + n && Object.hasOwn(span.marks, type) ? span.marks[type] : undefined
    // Not an array: a set-style op of the same type won there (see marks.ts), no values to take off.
    if (Array.isArray(values)) for (const v of values as MarkValue[]) out.set(canonicalMarkValue(v), v)
    at += n
  }
  return [...out.values()]
}
