import { encode } from '../codec.ts'
import { arrayPatch, stringPatch, type ValuePatch } from './value-patch.ts'
import { FugueOrder, uncovered, parseSlotId, slotId, type Placement, type Slot } from './fugue.ts'
import { MarkSet, STANDARD_MARKS, canonicalMarkValue, markAnchors, validateMarkOp, type MarkExpand, type MarkOp, type MarkValue, type TextSpan } from './marks.ts'
import { OK, invalid, isSafeInt, violates, type ApplyResult, type Crdt, decodeBounds, encodeBounds, type ObjectType, type OpContext } from './types.ts'
import { relativeIn, resolveIn, type Assoc, type RelativePosition } from './position.ts'

/** Declared invariants of a text. */
export interface TextBounds {
  /** The text never holds more than this many code points. */
  readonly maxLength?: number
}

/** A run of one insert's characters: `[tag, from, count]` names characters `from` to `from + count - 1` of the insert tagged `tag`. */
export type TextRange = readonly [string, number, number]

/**
 * Text operations (positions are code points; characters never move):
 * - `['i', parent, side, rightOrigin, text]` inserts `text` as one run at a
 *   FugueMax placement (see fugue.ts); its characters get the ids
 *   `${tag}.${k}`, k counting code points;
 * - `['d', ranges]` deletes the characters the ranges name;
 * - `['D', ranges]` takes back the delete made under the same context: only
 *   ever produced by `inverse`, never accepted from the wire;
 * - `['m', type, value, start, end, stamp, kind]` formats characters (a
 *   Peritext mark, see marks.ts), `['M', ...]` takes it back (from
 *   `inverse` only).
 */
export type TextOp = readonly ['i', string, 0 | 1, string, string] | readonly ['d', readonly TextRange[]] | readonly ['D', readonly TextRange[]] | MarkOp

/** Most ranges one delete may name. */
export const MAX_TEXT_DELETE_RANGES = 65_536
/** Longest slot id or tag an op may name. */
const MAX_ID_CHARS = 128

interface Cell {
  readonly ch: string
  /** Tags of the deletes (and of the insert's own withdrawal) that hide this character; visible iff none. */
  deleters: Set<string> | undefined
}

interface Run {
  readonly author: string
  readonly place: Placement
  readonly text: string
  readonly length: number
  /** The run's slots once placed (undefined while it waits for the slot it is placed against). */
  slots: Array<Slot<Cell>> | undefined
}

/** A delete that named characters of an insert not seen yet: applied when the insert arrives. */
interface PendingDelete {
  readonly from: number
  readonly count: number
  readonly deleter: string
}

function validId(id: unknown, allowEmpty: boolean): boolean {
  if (typeof id !== 'string' || id.length > MAX_ID_CHARS) return false
  if (id === '') return allowEmpty
  const parsed = parseSlotId(id)
  return parsed !== undefined && validTag(parsed.tag)
}

/** A tag an op may name: another op's (`prefix:n`), or `^n` for op n of the op's own envelope. */
function validTag(tag: string): boolean {
  if (tag.startsWith('^')) return /^\^(0|[1-9][0-9]{0,8})$/.test(tag)
  return tag.length > 0 && tag.length <= MAX_ID_CHARS
}

/**
 * The tag `tag` names when an op under `ctx` names it: `^n` is op n of the
 * same envelope (an envelope cannot name its own id, which hashes its
 * content), so its characters can be named by the ops after it.
 */
function resolveTag(tag: string, ctx: OpContext): string {
  if (!tag.startsWith('^')) return tag
  return `${ctx.tag.slice(0, ctx.tag.lastIndexOf(':'))}:${tag.slice(1)}`
}

function resolveId(id: string, ctx: OpContext): string {
  if (!id.startsWith('^')) return id
  const dot = id.lastIndexOf('.')
  return `${resolveTag(id.slice(0, dot), ctx)}${id.slice(dot)}`
}

/** `op` with the ids it names resolved against `ctx` (see resolveTag). */
export function resolveTextOp(op: TextOp, ctx: OpContext): TextOp {
  if (op[0] === 'm' || op[0] === 'M') return op[3][0].startsWith('^') || op[4][0].startsWith('^') ? [op[0], op[1], op[2], [resolveId(op[3][0], ctx), op[3][1]], [resolveId(op[4][0], ctx), op[4][1]], op[5], op[6]] : op
  if (op[0] === 'i') return op[1].startsWith('^') || op[3].startsWith('^') ? ['i', resolveId(op[1], ctx), op[2], resolveId(op[3], ctx), op[4]] : op
  return op[1].some((r) => r[0].startsWith('^')) ? [op[0], op[1].map((r): TextRange => [resolveTag(r[0], ctx), r[1], r[2]])] : op
}

/**
 * `op` with the tags it names renamed: `rename(tag)` gives the new tag and
 * how far its offsets move (a run merged after another), or undefined to
 * keep it. What a client uses to turn ids of its unsigned drafts into the
 * ids they get in an envelope.
 */
export function renameTextOp(op: TextOp, rename: (tag: string) => { tag: string; shift: number } | undefined): TextOp {
  const id = (ref: string): string => {
    if (ref === '') return ref
    const parsed = parseSlotId(ref)
    const to = parsed && rename(parsed.tag)
    return to ? slotId(to.tag, parsed.k + to.shift) : ref
  }
  if (op[0] === 'i') return ['i', id(op[1]), op[2], id(op[3]), op[4]]
  if (op[0] === 'm' || op[0] === 'M') return [op[0], op[1], op[2], [id(op[3][0]), op[3][1]], [id(op[4][0]), op[4][1]], op[5], op[6]]
  return [
    op[0],
    op[1].map((r): TextRange => {
      const to = rename(r[0])
      return to ? [to.tag, r[1] + to.shift, r[2]] : r
    }),
  ]
}

/**
 * Whether insert `next` continues insert `prev` as typing does: placed
 * right after prev's last character (whose id is `lastId`), with the same
 * right origin. Then both are one run: prev's text followed by next's.
 */
export function continuesRun(prev: TextOp, lastId: string, next: TextOp): boolean {
  if (prev[0] !== 'i' || next[0] !== 'i' || next[2] !== 1) return false
  const chainOrigin = prev[2] === 1 ? prev[3] : prev[1]
  return next[1] === lastId && next[3] === chainOrigin
}

/** What is wrong with the ranges a delete names, or null. */
export function validateRanges(ranges: unknown): string | null {
  if (!Array.isArray(ranges) || ranges.length === 0 || ranges.length > MAX_TEXT_DELETE_RANGES) return `a delete names 1 to ${MAX_TEXT_DELETE_RANGES} ranges`
  for (const r of ranges) {
    if (!Array.isArray(r) || r.length !== 3 || typeof r[0] !== 'string' || !validTag(r[0])) return 'a delete range is [tag, from, count]'
    if (!isSafeInt(r[1]) || r[1] < 0 || !isSafeInt(r[2]) || r[2] < 1 || r[1] + r[2] > 2 ** 31) return 'a delete range needs from >= 0 and count >= 1'
  }
  return null
}

/** What is wrong with a text op from the wire, or null. */
export function validateTextOp(op: unknown): string | null {
  if (!Array.isArray(op)) return 'text op must be an array'
  if (op[0] === 'i') {
    if (op.length !== 5) return "text insert must be ['i', parent, side, rightOrigin, text]"
    if (typeof op[4] !== 'string' || op[4].length === 0) return 'text insert needs a non-empty string'
    return validatePlacement(op[1], op[2], op[3])
  }
  if (op[0] === 'd') return op.length === 2 ? validateRanges(op[1]) : "text delete must be ['d', ranges]"
  if (op[0] === 'm') return validateMarkOp(op, (id) => validId(id, true))
  return `unknown text op ${JSON.stringify(op[0])}`
}

/** What is wrong with an insert's placement (parent, side, right origin), or null. */
export function validatePlacement(parent: unknown, side: unknown, rightOrigin: unknown): string | null {
  if (!validId(parent, true)) return 'an insert parent must be a slot id or ""'
  if (side !== 0 && side !== 1) return 'an insert side must be 0 or 1'
  if (!validId(rightOrigin, true) || (side === 0 && rightOrigin !== '')) return 'an insert right origin must be a slot id or "" (always "" on the left side)'
  return null
}

/** What is wrong with text bounds, or null. */
export function validateTextBounds(b: TextBounds): string | null {
  if (b.maxLength !== undefined && (!Number.isSafeInteger(b.maxLength) || b.maxLength < 0)) return 'maxLength must be a non-negative safe integer'
  return null
}

function codePoints(s: string): string[] {
  return [...s]
}

/** A text's canonical snapshot (see CollabText.snapshot); the marks only when it has some, so a text without marks has the snapshot it had before marks existed. */
export type TextSnapshot = [Array<[string, string, string, 0 | 1, string, string, Array<[number, string[]]>]>, Array<[string, number, number, string]>, Array<[string, string, MarkOp]>?]

/** How many buckets a text's digest keeps (see CollabText.digest). */
const DIGEST_BUCKETS = 256

const byString = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)
const byPending = (a: readonly unknown[], b: readonly unknown[]): number => (a.join('\u0000') < b.join('\u0000') ? -1 : 1)

/**
 * A snapshot's runs (sorted by tag) reordered so that each comes after the
 * runs holding its parent and right origin, as far as the snapshot has
 * them: restoring them in this order places each at once instead of
 * keeping most waiting for their anchors (linear; a cycle, which no
 * snapshot of a real text has, is broken and left to wait).
 */
function causalOrder<R extends readonly [string, string, string, 0 | 1, string, ...unknown[]]>(runs: readonly R[]): R[] {
  const byTag = new Map(runs.map((r) => [r[0], r]))
  const tagOf = (id: string): string => (id === '' ? '' : id.slice(0, id.lastIndexOf('.')))
  const state = new Map<string, 'open' | 'done'>()
  const out: R[] = []
  for (const root of runs) {
    const stack: R[] = [root]
    while (stack.length) {
      const r = stack[stack.length - 1] as R
      if (state.get(r[0]) === 'done') {
        stack.pop()
        continue
      }
      state.set(r[0], 'open')
      const parent = byTag.get(tagOf(r[2]))
      const origin = byTag.get(tagOf(r[4]))
      const next = parent && !state.has(parent[0]) ? parent : origin && !state.has(origin[0]) ? origin : undefined
      if (next) {
        stack.push(next)
        continue
      }
      state.set(r[0], 'done')
      out.push(r)
      stack.pop()
    }
  }
  return out
}

/** A tag's digest bucket: FNV-1a over its UTF-16 units, the same on every replica. */
function bucketOf(tag: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < tag.length; i++) h = Math.imul(h ^ tag.charCodeAt(i), 0x01000193)
  return (h >>> 0) % DIGEST_BUCKETS
}

/**
 * The digest of a text snapshot, computed from the snapshot alone (what a
 * verifier of an object proof has): its entries in 256 buckets by tag,
 * each bucket hashed, then the list of bucket hashes. CollabText.digest
 * gives the same for its state, keeping the bucket hashes between edits.
 */
export function textSnapshotDigest(snap: unknown, sha256: (bytes: Uint8Array) => Uint8Array): Uint8Array {
  const shaped = Array.isArray(snap) && (snap.length === 2 || (snap.length === 3 && Array.isArray(snap[2]))) && Array.isArray(snap[0]) && Array.isArray(snap[1])
  const [runs, pending, marks = []] = (shaped ? snap : [[], []]) as [unknown[][], unknown[][], unknown[][]?]
  const buckets = Array.from({ length: DIGEST_BUCKETS }, (): [unknown[], unknown[], unknown[]] => [[], [], []])
  const bucket = (e: unknown): [unknown[], unknown[], unknown[]] => buckets[bucketOf(String(Array.isArray(e) ? e[0] : e))] as [unknown[], unknown[], unknown[]]
  for (const r of runs) bucket(r)[0].push(r)
  for (const p of pending) bucket(p)[1].push(p)
  for (const m of marks) bucket(m)[2].push(m)
  // A bucket without marks hashes as it did before texts had marks.
  return sha256(encode(['text', buckets.map((b) => (b[0].length || b[1].length || b[2].length ? sha256(encode(b[2].length ? b : [b[0], b[1]])) : null))]))
}

/**
 * Collaborative text: a FugueMax sequence of characters (see fugue.ts), so
 * two people typing at one place never interleave. Each insert is one run;
 * a deleted character keeps its slot. Deletes are recorded by deleter, as
 * the OR-Set records removes, so every op is undone exactly by its
 * `inverse` and ops commute in any delivery order.
 */
export class CollabText implements Crdt<TextOp, string> {
  readonly type = 'text' as const
  /** The declared invariants. */
  readonly bounds: TextBounds
  private readonly order: FugueOrder<Cell>
  private readonly runs = new Map<string, Run>()
  private readonly pendingDeletes = new Map<string, PendingDelete[]>()
  /** Inserts whose first character waits for the character it is placed against (out of causal order). */
  private readonly waitingRuns = new Set<string>()
  /** How many characters of waitingRuns no delete hides: they show once placed (see potentialLength). */
  private waitingLive = 0
  private cached: string | undefined
  /** The mark ops (see marks.ts). */
  private marks = new MarkSet()
  /** The spans, until the next change. */
  private formatted: readonly TextSpan[] | undefined
  /** Digest buckets (see digest): the tags in each, each one's digest, and which changed since. */
  private readonly byBucket = new Map<number, Set<string>>()
  private readonly bucketDigests: Array<Uint8Array | null> = new Array<Uint8Array | null>(DIGEST_BUCKETS).fill(null)
  private readonly dirty = new Set<number>()

  constructor(bounds: TextBounds = {}) {
    const problem = validateTextBounds(bounds)
    if (problem) throw new RangeError(problem)
    this.bounds = bounds
    this.order = new FugueOrder<Cell>({ ch: '', deleters: undefined })
  }

  /** The text as a string. */
  value(): string {
    if (this.cached === undefined) {
      let s = ''
      this.order.forEachVisible((slot) => void (s += slot.data.ch))
      this.cached = s
    }
    return this.cached
  }

  /** Its length in code points. */
  get length(): number {
    return this.order.length
  }

  /**
   * The text with its marks (Peritext, see marks.ts): runs of characters
   * formatted alike, `{ text, marks }` with marks by type (a multi-valued
   * type's values sorted); [] for an empty text. Frozen: keep it as it is.
   */
  spans(): readonly TextSpan[] {
    if (this.formatted === undefined) {
      if (this.marks.size === 0) {
        const text = this.value()
        this.formatted = text ? [Object.freeze({ text, marks: Object.freeze({}) })] : []
      } else {
        this.formatted = this.marks.spans(
          this.value(),
          (visit) => this.order.forEachSlot((s) => visit(s.id, s.visible ? s.data.ch.length : 0)),
          (id) => this.order.get(id) !== undefined,
        )
      }
      Object.freeze(this.formatted)
    }
    return this.formatted
  }

  /** How many mark ops it holds, and of those how many are of multi-valued types (see MAX_MARKS, MAX_MULTI_VALUED_MARKS). */
  get markCounts(): {
    /** Mark ops of every type. */
    readonly all: number
    /** Mark ops of multi-valued types (comments). */
    readonly multiValued: number
  } {
    return { all: this.marks.size, multiValued: this.marks.multiValuedSize }
  }

  /** Whether it holds any mark op (then its history values are spans, see textType). */
  get hasMarks(): boolean {
    return this.marks.size > 0
  }

  /**
   * The op that formats code points `from` to `to - 1` with mark `type`:
   * sets `value` (null takes the mark off), or for a multi-valued type
   * (`multiple`) adds `value`, or takes it off with `remove`. `expand` says
   * how the mark grows when someone types at its edges (default: the
   * type's in STANDARD_MARKS, else `after`).
   *
   * @throws RangeError unless 0 <= from < to <= length.
   */
  markOp(from: number, to: number, type: string, value: MarkValue, options: { readonly expand?: MarkExpand; readonly multiple?: boolean; readonly remove?: boolean } = {}): TextOp {
    if (!Number.isSafeInteger(from) || !Number.isSafeInteger(to) || from < 0 || to <= from || to > this.length) throw new RangeError(`cannot format ${from} to ${to} of a text of ${this.length}`)
    const expand = options.expand ?? (Object.hasOwn(STANDARD_MARKS, type) ? STANDARD_MARKS[type]?.expand : undefined) ?? 'after'
    const [start, end] = markAnchors(from, to, this.length, expand, (i) => (this.order.at(i) as Slot<Cell>).id)
    const kind = options.multiple ? (options.remove ? 2 : 1) : 0
    return ['m', type, kind === 0 && options.remove ? null : value, start, end, this.marks.nextStamp(), kind]
  }

  /** The ids of the visible characters, in order. */
  visibleIds(): string[] {
    const ids: string[] = []
    this.order.forEachVisible((slot) => void ids.push(slot.id))
    return ids
  }

  /** Character `id` and the author id that inserted it, or undefined if this text has no such character. */
  charOf(id: string):
    | {
        /** The character (one code point). */
        readonly ch: string
        /** The author id that inserted it. */
        readonly author: string
      }
    | undefined {
    const slot = this.order.get(id)
    return slot && { ch: slot.data.ch, author: slot.author }
  }

  /** The op that inserts `text` at code point `index`, as this replica sees the text. */
  insertOp(index: number, text: string): TextOp {
    const p = this.marks.size ? this.placementPastMarks(index) : this.order.placementAt(index)
    return ['i', p.parent, p.side, p.rightOrigin, text]
  }

  /**
   * Where typing at `index` goes in a text with marks: after the last of
   * the deleted characters right after that position that a mark starts or
   * ends just after, else where placementAt puts it (before them). As
   * Peritext does: a link whose last character was deleted does not take
   * in what is typed after it.
   */
  private placementPastMarks(index: number): Placement {
    const left = index === 0 ? this.order.start : this.order.at(index - 1)
    let past: Slot<Cell> | undefined
    if (left) {
      this.order.forEachAfter(left, (s) => {
        if (s.visible) return false
        if (this.marks.anchoredAfter(s.id)) past = s
        return true
      })
    }
    return past ? this.order.placementAfter(past) : this.order.placementAt(index)
  }

  /** The op that deletes `count` code points from `index`, or undefined if there is nothing to delete. */
  deleteOp(index: number, count: number): TextOp | undefined {
    const ranges: Array<[string, number, number]> = []
    let slot = this.order.at(index)
    for (let n = 0; slot && n < count; slot = this.order.next(slot)) {
      if (!slot.visible) continue
      n++
      const id = parseSlotId(slot.id) as { tag: string; k: number }
      const last = ranges[ranges.length - 1]
      if (last && last[0] === id.tag && last[1] + last[2] === id.k) last[2]++
      else ranges.push([id.tag, id.k, 1])
    }
    return ranges.length ? ['d', ranges] : undefined
  }

  /** An anchor for position `index`: the id of the character before it ('' at the start). It stays beside that character as others edit (see positionOf). */
  anchorAt(index: number): string {
    return index <= 0 ? '' : (this.order.at(index - 1)?.id ?? '')
  }

  /** Where an anchor (see anchorAt) is now: just after its character, deleted or not; undefined if this text has no such character. */
  positionOf(anchor: string): number | undefined {
    if (anchor === '') return 0
    const slot = this.order.get(anchor)
    return slot && this.order.indexOf(slot) + (slot.visible ? 1 : 0)
  }

  /**
   * The relative position of code point position `index` (0 to length):
   * held by the character on its `assoc` side, so it stays beside that
   * character on every replica (see position.ts). anchorAt is its 'before'
   * form as a bare id.
   *
   * @throws RangeError for an index outside 0..length.
   */
  relativePosition(index: number, assoc: Assoc = 'before'): RelativePosition {
    return relativeIn(this.order, index, assoc, (slot) => slot.id)
  }

  /** Where a relative position is now (see resolveIn), or undefined if this text has no such character (yet). */
  absolutePosition(pos: RelativePosition): number | undefined {
    return resolveIn(this.order, pos, pos.id === '' ? undefined : this.order.get(pos.id))
  }

  /** The code point index of character `id` if it is visible, else undefined. */
  indexOfId(id: string): number | undefined {
    const slot = this.order.get(id)
    return slot?.visible ? this.order.indexOf(slot) : undefined
  }

  tryApply(op: TextOp, ctx: OpContext): ApplyResult {
    if (op[0] === 'm' || op[0] === 'M') {
      const problem = validateMarkOp(op, (id) => validId(id, true))
      if (problem) return invalid(problem)
      const ahead = op[0] === 'm' ? this.marks.check(op) : OK
      if (!ahead.ok) return ahead
      this.apply(op, ctx)
      return OK
    }
    const problem = op[0] === 'D' ? validateRanges(op[1]) : validateTextOp(op)
    if (problem) return invalid(problem)
    const max = this.bounds.maxLength
    if (max !== undefined) {
      const grows = this.growth(resolveTextOp(op, ctx), ctx)
      if (this.potentialLength() + grows > max) return violates(`text would exceed its maximum length ${max}`)
    }
    this.apply(op, ctx)
    return OK
  }

  apply(op: TextOp, ctx: OpContext): void {
    this.cached = undefined
    this.formatted = undefined
    const resolved = resolveTextOp(op, ctx)
    if (resolved[0] === 'm' || resolved[0] === 'M') {
      if (resolved[0] === 'm') this.marks.add(ctx.tag, ctx.replica, resolved)
      else this.marks.remove(ctx.tag)
      return this.touch(ctx.tag)
    }
    if (resolved[0] === 'i') return this.insert(resolved, ctx)
    for (const [tag, from, count] of resolved[1]) {
      if (resolved[0] === 'd') this.hide(tag, from, count, ctx.tag)
      else this.unhide(tag, from, count, ctx.tag)
    }
  }

  inverse(op: TextOp, ctx: OpContext): TextOp {
    if (op[0] === 'm' || op[0] === 'M') return [op[0] === 'm' ? 'M' : 'm', op[1], op[2], op[3], op[4], op[5], op[6]]
    if (op[0] === 'i') return ['d', [[ctx.tag, 0, codePoints(op[4]).length]]]
    return [op[0] === 'd' ? 'D' : 'd', op[1]]
  }

  merge(other: CollabText): void {
    this.cached = undefined
    this.formatted = undefined
    this.marks.merge(other.marks, (tag) => this.touch(tag))
    for (const [tag, run] of other.runs) {
      if (!this.runs.has(tag)) this.addRun(tag, run.author, run.place, run.text)
      if (!run.slots) continue
      run.slots.forEach((s, k) => {
        for (const d of s.data.deleters ?? []) this.hide(tag, k, 1, d)
      })
    }
    for (const [tag, list] of other.pendingDeletes) for (const p of list) this.hide(tag, p.from, p.count, p.deleter)
  }

  clone(): this {
    // Views of the client clone the prospective text often: copy the structure, not rebuild it.
    if (this.order.hasWaiting) return CollabText.fromSnapshot(this.bounds, this.snapshot()) as this
    const { order, twin } = this.order.copy((c) => ({ ch: c.ch, deleters: c.deleters && new Set(c.deleters) }))
    const copy = new CollabText(this.bounds)
    ;(copy as unknown as { order: FugueOrder<Cell> }).order = order
    for (const [tag, r] of this.runs) copy.runs.set(tag, { ...r, slots: r.slots?.map((s) => twin.get(s) as Slot<Cell>) })
    for (const [tag, list] of this.pendingDeletes) copy.pendingDeletes.set(tag, [...list])
    for (const [b, tags] of this.byBucket) copy.byBucket.set(b, new Set(tags))
    this.bucketDigests.forEach((d, i) => (copy.bucketDigests[i] = d))
    for (const b of this.dirty) copy.dirty.add(b)
    copy.cached = this.cached
    copy.marks = this.marks.copy()
    copy.formatted = this.formatted
    return copy as this
  }

  /**
   * `[runs, pending]`: every insert as `[tag, author, parent, side,
   * rightOrigin, text, hidden]` sorted by tag, with `hidden` the
   * `[k, deleters]` of its deleted characters; deletes of inserts not
   * seen yet as `[tag, from, count, deleter]`, sorted; and if it has marks,
   * each as `[tag, author, op]` sorted by tag.
   */
  snapshot(): TextSnapshot {
    return this.entries([...this.runs.keys()], [...this.pendingDeletes.keys()], this.marks.tags())
  }

  /**
   * The digest of this text's state, equal to `textSnapshotDigest` of its
   * snapshot, and cheap after a small change: the runs are kept in 256
   * buckets by tag, and only buckets an op touched are hashed again. What
   * the state hash uses for a text, so a commit costs the edit, not the
   * whole document.
   */
  digest(sha256: (bytes: Uint8Array) => Uint8Array): Uint8Array {
    for (const b of this.dirty) {
      const tags = this.byBucket.get(b)
      const runs = [...(tags ?? [])].filter((t) => this.runs.has(t))
      const pending = [...(tags ?? [])].filter((t) => this.pendingDeletes.has(t))
      const marks = [...(tags ?? [])].filter((t) => this.marks.has(t))
      this.bucketDigests[b] = runs.length || pending.length || marks.length ? sha256(encode(this.entries(runs, pending, marks))) : null
    }
    this.dirty.clear()
    return sha256(encode(['text', this.bucketDigests]))
  }

  /** The snapshot entries of these runs, of the pending deletes of these tags and of these marks, sorted as `snapshot` sorts them. */
  private entries(runTags: string[], pendingTags: string[], markTags: string[]): TextSnapshot {
    const out = runTags.sort(byString).map((tag): TextSnapshot[0][number] => {
      const r = this.runs.get(tag) as Run
      const hidden: Array<[number, string[]]> = []
      r.slots?.forEach((s, k) => {
        if (s.data.deleters?.size) hidden.push([k, [...s.data.deleters].sort()])
      })
      return [tag, r.author, r.place.parent, r.place.side, r.place.rightOrigin, r.text, hidden]
    })
    const pending: Array<[string, number, number, string]> = []
    for (const tag of pendingTags) for (const p of this.pendingDeletes.get(tag) ?? []) pending.push([tag, p.from, p.count, p.deleter])
    pending.sort(byPending)
    return markTags.length ? [out, pending, this.marks.entries(markTags)] : [out, pending]
  }

  /** A run's bucket changed: its digest is computed again when next asked. */
  private touch(tag: string): void {
    const b = bucketOf(tag)
    this.dirty.add(b)
    let tags = this.byBucket.get(b)
    if (!tags) this.byBucket.set(b, (tags = new Set()))
    tags.add(tag)
  }

  /** Rebuilds a text from its `snapshot()` (trusted input). */
  static fromSnapshot(bounds: TextBounds, snap: TextSnapshot): CollabText {
    const t = new CollabText(bounds)
    for (const [tag, author, parent, side, rightOrigin, text, hidden] of causalOrder(snap[0])) {
      t.addRun(tag, author, { parent, side, rightOrigin }, text)
      for (const [k, deleters] of hidden) for (const d of deleters) t.hide(tag, k, 1, d)
    }
    for (const [tag, from, count, deleter] of snap[1]) t.hide(tag, from, count, deleter)
    for (const [tag, author, op] of snap[2] ?? []) {
      t.marks.add(tag, author, op)
      t.touch(tag)
    }
    return t
  }

  invariantsHold(): boolean {
    return this.bounds.maxLength === undefined || this.order.length <= this.bounds.maxLength
  }

  /**
   * How long the text can get without another insert: its visible
   * characters and the live ones of inserts waiting for their anchor (any
   * later op may place them). maxLength bounds this, so no op can take the
   * text past it by placing characters that waited.
   */
  private potentialLength(): number {
    return this.order.length + this.waitingLive
  }

  /** How many of characters 0..length-1 of the insert `tag` no recorded pending delete hides. */
  private undeleted(tag: string, length: number): number {
    return uncovered(this.pendingDeletes.get(tag), length)
  }

  /** The deletes recorded for character k of a run whose characters are not in the order yet. */
  private pendingDeleters(tag: string, k: number): string[] {
    return (this.pendingDeletes.get(tag) ?? []).filter((p) => p.from <= k && k < p.from + p.count).map((p) => p.deleter)
  }

  /** Runs `change` (which may add or drop pending deletes of `tag`) keeping waitingLive exact. */
  private changingPending(tag: string, change: () => void): void {
    const run = this.waitingRuns.has(tag) ? this.runs.get(tag) : undefined
    if (run) this.waitingLive -= this.undeleted(tag, run.length)
    change()
    if (run) this.waitingLive += this.undeleted(tag, run.length)
  }

  /** How many characters applying `op` would add to potentialLength (0 for a delete). */
  private growth(op: TextOp, ctx: OpContext): number {
    if (op[0] === 'd' || op[0] === 'm' || op[0] === 'M') return 0
    // Characters hidden by ctx's own delete only: applying ctx again (an insert or the undo of its delete) shows them.
    const onlyBy = (tag: string, k: number): boolean => {
      const slot = this.runs.get(tag)?.slots?.[k]
      const deleters = slot ? [...(slot.data.deleters ?? [])] : this.pendingDeleters(tag, k)
      return deleters.length > 0 && deleters.every((d) => d === ctx.tag)
    }
    const length = (tag: string): number => this.runs.get(tag)?.length ?? 0
    if (op[0] === 'i') {
      if (!this.runs.has(ctx.tag)) return this.undeleted(ctx.tag, codePoints(op[4]).length)
      let n = 0
      for (let k = 0; k < length(ctx.tag); k++) if (onlyBy(ctx.tag, k)) n++
      return n
    }
    let n = 0
    for (const [tag, from, count] of op[1]) for (let k = from; k < Math.min(from + count, length(tag)); k++) if (onlyBy(tag, k)) n++
    return n
  }

  private insert(op: Extract<TextOp, readonly ['i', ...unknown[]]>, ctx: OpContext): void {
    const run = this.runs.get(ctx.tag)
    if (run) {
      // Applied again (a withdrawn insert that commits after all): only its withdrawal is undone.
      this.unhide(ctx.tag, 0, run.length, ctx.tag)
      return
    }
    this.addRun(ctx.tag, ctx.replica, { parent: op[1], side: op[2], rightOrigin: op[3] }, op[4])
  }

  private addRun(tag: string, author: string, place: Placement, text: string): void {
    const chars = codePoints(text)
    const run: Run = { author, place, text, length: chars.length, slots: undefined }
    this.runs.set(tag, run)
    this.touch(tag)
    // Each character after the first is the right child of the one before it, with the run's right origin.
    const chainOrigin = place.side === 1 ? place.rightOrigin : place.parent
    this.order.add(slotId(tag, 0), author, place, { ch: chars[0] as string, deleters: undefined }, (first) => {
      if (this.waitingRuns.delete(tag)) this.waitingLive -= this.undeleted(tag, run.length)
      const slots = [first]
      for (let k = 1; k < chars.length; k++) {
        this.order.add(slotId(tag, k), author, { parent: slotId(tag, k - 1), side: 1, rightOrigin: chainOrigin }, { ch: chars[k] as string, deleters: undefined }, (s) => slots.push(s))
      }
      run.slots = slots
      this.touch(tag)
      const pending = this.pendingDeletes.get(tag)
      this.pendingDeletes.delete(tag)
      for (const s of slots) this.order.setVisible(s, true)
      for (const p of pending ?? []) this.hide(tag, p.from, p.count, p.deleter)
      this.cached = undefined
    })
    // Not placed at once: it waits for the character it is placed against, and counts towards potentialLength meanwhile.
    if (!run.slots) {
      this.waitingRuns.add(tag)
      this.waitingLive += this.undeleted(tag, run.length)
    }
  }

  private hide(tag: string, from: number, count: number, deleter: string): void {
    this.touch(tag)
    const slots = this.runs.get(tag)?.slots
    if (!slots) {
      let list = this.pendingDeletes.get(tag)
      if (!list) this.pendingDeletes.set(tag, (list = []))
      if (list.some((p) => p.from === from && p.count === count && p.deleter === deleter)) return
      const run = this.waitingRuns.has(tag) ? this.runs.get(tag) : undefined
      // Characters of a waiting insert this delete is the first to hide no longer count towards potentialLength.
      if (run) for (let k = from; k < Math.min(from + count, run.length); k++) if (!(list as PendingDelete[]).some((p) => p.from <= k && k < p.from + p.count)) this.waitingLive--
      list.push({ from, count, deleter })
      return
    }
    for (let k = from; k < Math.min(from + count, slots.length); k++) {
      const s = slots[k] as Slot<Cell>
      ;(s.data.deleters ??= new Set()).add(deleter)
      this.order.setVisible(s, false)
    }
  }

  private unhide(tag: string, from: number, count: number, deleter: string): void {
    this.touch(tag)
    const slots = this.runs.get(tag)?.slots
    if (!slots) {
      this.changingPending(tag, () => {
        const list = this.pendingDeletes.get(tag)?.filter((p) => !(p.deleter === deleter && p.from < from + count && from < p.from + p.count))
        if (list?.length) this.pendingDeletes.set(tag, list)
        else this.pendingDeletes.delete(tag)
      })
      return
    }
    for (let k = from; k < Math.min(from + count, slots.length); k++) {
      const s = slots[k] as Slot<Cell>
      if (!s.data.deleters?.delete(deleter)) continue
      if (s.data.deleters.size === 0) {
        s.data.deleters = undefined
        this.order.setVisible(s, true)
      }
    }
  }
}

/** The patch from one history value of a text to the next (strings, or spans once it has marks); undefined from a string to spans (stored whole). */
function textHistoryPatch(before: unknown, after: unknown): ValuePatch | undefined {
  if (typeof before === 'string' && typeof after === 'string') return stringPatch(before, after)
  if (!Array.isArray(before) || !Array.isArray(after)) return undefined
  const key = (s: TextSpan): string => canonicalMarkValue(s.marks as MarkValue)
  return arrayPatch(before as TextSpan[], after as TextSpan[], (a, b) => a.text === b.text && key(a) === key(b))
}

/** A text's declaration: its `maxLength`, if any. */
export interface TextDeclaration {
  /** Collaborative text. */
  readonly type: 'text'
  /** Its `maxLength` in code points, if any. */
  readonly bounds: TextBounds
}

/** Text in the registry; wire form `['t', maxLength]`. Every op is kept: each names its own characters. */
export const textType: ObjectType<TextDeclaration, CollabText> = {
  name: 'text',
  code: 't',
  encode: (d) => encodeBounds('t', d.bounds, ['maxLength']),
  decode: (enc) => ({ type: 'text', bounds: decodeBounds(enc, 'text', ['maxLength'], validateTextBounds) }),
  validateOp: validateTextOp,
  create: (d) => new CollabText(d.bounds),
  restore: (d, snap) => CollabText.fromSnapshot(d.bounds, snap as TextSnapshot),
  hasInvariants: (d) => d.bounds.maxLength !== undefined,
  digest: (c, sha256) => c.digest(sha256),
  digestSnapshot: textSnapshotDigest,
  // A text with marks keeps its spans in its history (its string before its first mark).
  historyValue: (c) => (c.hasMarks ? c.spans() : c.value()),
  historyPatch: textHistoryPatch,
  rename: (op, rename) => renameTextOp(op as TextOp, rename),
  runLength: (op) => ((op as TextOp)[0] === 'i' ? codePoints((op as Extract<TextOp, readonly ['i', ...unknown[]]>)[4]).length : 0),
  joinRun(prev, lastId, next) {
    const [p, n] = [prev as TextOp, next as TextOp]
    return p[0] === 'i' && n[0] === 'i' && continuesRun(p, lastId, n) ? ['i', p[1], p[2], p[3], p[4] + n[4]] : undefined
  },
}
