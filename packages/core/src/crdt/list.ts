import { FugueOrder, parseSlotId, slotId, uncovered, type Placement, type Slot } from './fugue.ts'
import { relativeIn, resolveIn, type Assoc, type RelativePosition } from './position.ts'
import { arrayPatch } from './value-patch.ts'
import { registerWriteWins, validateRegisterValue, type RegisterValue } from './register.ts'
import { continuesRun, renameTextOp, resolveTextOp, validatePlacement, validateRanges, type TextOp, type TextRange } from './text.ts'
import { OK, decodeBounds, encodeBounds, invalid, isSafeInt, violates, type ApplyResult, type Crdt, type ObjectType, type OpContext } from './types.ts'

/** Declared invariants of a list. */
export interface ListBounds {
  /** The list never holds more than this many elements. */
  readonly maxLength?: number
}

/**
 * List operations. Elements are placed as text characters are (FugueMax,
 * see fugue.ts), and each can move:
 * - `['i', parent, side, rightOrigin, values]` inserts plain values (msgpack
 *   data) as one run; element k gets the id `${tag}.${k}`;
 * - `['o', parent, side, rightOrigin, declaration, name]` inserts one
 *   element holding a nested object of the declared type: the object keyed
 *   `nestedKey(list key, name, 1, declaration)`, `name` chosen by its
 *   maker at random (the element's id is only known once it is signed);
 * - `['m', element, parent, side, rightOrigin, stamp]` moves an element to
 *   a new place. Of concurrent moves of one element the one with the
 *   highest Lamport stamp wins (then author id, then tag): an element is
 *   never duplicated or lost;
 * - `['d', ranges]` deletes elements (ranges of insert tags, as text's);
 * - `['D', ranges]` and `['M']` take back a delete or a move made under the
 *   same context: only ever produced by `inverse`.
 * Ids may name ops of the same envelope as `^n` (see text.ts).
 */
export type ListOp =
  | readonly ['i', string, 0 | 1, string, readonly RegisterValue[]]
  | readonly ['o', string, 0 | 1, string, readonly unknown[], string]
  | readonly ['m', string, string, 0 | 1, string, number]
  | readonly ['d', readonly TextRange[]]
  | readonly ['D', readonly TextRange[]]
  | readonly ['M']

/** What a list element holds: a plain value, or a nested object (its declaration's wire form). */
export type ListEntry =
  | {
      /** The element's id. */
      readonly id: string
      /** The plain value. */
      readonly value: RegisterValue
    }
  | {
      /** The element's id. */
      readonly id: string
      /** The nested object's declaration, in its wire form. */
      readonly object: readonly unknown[]
      /** The nested object's name (see {@link nestedKey}). */
      readonly name: string
    }

/** Most values one insert may carry. */
export const MAX_LIST_INSERT = 10_000

interface Position {
  readonly t: number
  readonly replica: string
  readonly tag: string
  /** The slot this position is: the element's own (t 0) or a move's. */
  readonly slot: string
}

interface Element {
  readonly value: RegisterValue | undefined
  readonly object: readonly unknown[] | undefined
  readonly name: string
  deleters: Set<string> | undefined
}

interface Run {
  readonly author: string
  readonly place: Placement
  readonly values: readonly RegisterValue[] | undefined
  readonly object: readonly unknown[] | undefined
  /** A nested object's name ('' for plain values). */
  readonly name: string
  readonly length: number
}

interface MoveRecord {
  readonly author: string
  readonly element: string
  readonly place: Placement
  readonly t: number
  /** Taken back by its inverse: its slot stays (later inserts may be placed against it), its place does not count. */
  withdrawn: boolean
}

/** What is wrong with a list op from the wire, or null. */
export function validateListOp(op: unknown, declaration: (enc: unknown) => string | null = () => null): string | null {
  if (!Array.isArray(op)) return 'list op must be an array'
  switch (op[0]) {
    case 'i': {
      if (op.length !== 5) return "list insert must be ['i', parent, side, rightOrigin, values]"
      const values = op[4] as unknown
      if (!Array.isArray(values) || values.length === 0 || values.length > MAX_LIST_INSERT) return `a list insert carries 1 to ${MAX_LIST_INSERT} values`
      for (const v of values) {
        const p = validateRegisterValue(v)
        if (p) return p
      }
      return validatePlacement(op[1], op[2], op[3])
    }
    case 'o':
      if (op.length !== 6) return "list object insert must be ['o', parent, side, rightOrigin, declaration, name]"
      if (typeof op[5] !== 'string' || !/^[A-Za-z0-9_-]{1,32}$/.test(op[5])) return 'a nested object name is 1 to 32 characters of [A-Za-z0-9_-]'
      return validatePlacement(op[1], op[2], op[3]) ?? declaration(op[4])
    case 'm':
      if (op.length !== 6) return "list move must be ['m', element, parent, side, rightOrigin, stamp]"
      if (typeof op[1] !== 'string' || parseSlotId(op[1]) === undefined) return 'a list move names an element id'
      if (!isSafeInt(op[5]) || op[5] < 1) return 'a list move stamp is a positive safe integer'
      return validatePlacement(op[2], op[3], op[4])
    case 'd':
      return op.length === 2 ? validateRanges(op[1]) : "list delete must be ['d', ranges]"
    default:
      return `unknown list op ${JSON.stringify(op[0])}`
  }
}

/** What is wrong with list bounds, or null. */
export function validateListBounds(b: ListBounds): string | null {
  if (b.maxLength !== undefined && (!Number.isSafeInteger(b.maxLength) || b.maxLength < 0)) return 'maxLength must be a non-negative safe integer'
  return null
}

const wins = (a: Position, b: Position): boolean => registerWriteWins({ t: a.t, replica: a.replica, tag: a.tag, value: null }, { t: b.t, replica: b.replica, tag: b.tag, value: null })

/**
 * A list: a FugueMax sequence of elements (see fugue.ts) that can also
 * move. An element's place is a last-writer-wins choice among its own slot
 * and the slots its moves made, so concurrent moves never duplicate it.
 * Deletes are recorded by deleter and moves by tag, so every op is undone
 * exactly by its `inverse` and ops commute in any delivery order.
 */
export class CollabList implements Crdt<ListOp, ListEntry[]> {
  readonly type = 'list' as const
  /** The declared invariants. */
  readonly bounds: ListBounds
  /** Each slot holds the id of the element it can show. */
  private readonly order = new FugueOrder<string>('')
  private readonly runs = new Map<string, Run>()
  private readonly elements = new Map<string, Element>()
  private readonly moves = new Map<string, MoveRecord>()
  /** Every element's places, by element id (known before the element itself when a move arrives first). */
  private readonly positions = new Map<string, Map<string, Position>>()
  /** Deletes of elements not seen yet, by insert tag. */
  private readonly pendingDeletes = new Map<string, Array<{ from: number; count: number; deleter: string }>>()
  private maxStamp = 0
  /** Elements no delete hides, shown or not yet placed: what the list holds once every place arrives (bounded by maxLength). */
  private live = 0

  constructor(bounds: ListBounds = {}) {
    const problem = validateListBounds(bounds)
    if (problem) throw new RangeError(problem)
    this.bounds = bounds
  }

  /** The elements in order. */
  value(): ListEntry[] {
    const out: ListEntry[] = []
    this.order.forEachVisible((slot) => {
      const e = this.elements.get(slot.data) as Element
      out.push(e.object ? { id: slot.data, object: e.object, name: e.name } : { id: slot.data, value: e.value as RegisterValue })
    })
    return out
  }

  /** Who placed each element where it is (its inserter, or the author of the move that put it there), in the order of `value()`. */
  placers(): string[] {
    const out: string[] = []
    this.order.forEachVisible((slot) => void out.push(slot.author))
    return out
  }

  /** How many elements the list holds. */
  get length(): number {
    return this.order.length
  }

  /** The id of the element at `index`, or undefined. */
  idAt(index: number): string | undefined {
    return this.order.at(index)?.data
  }

  /**
   * The relative position of `index` (0 to length): held by the element on
   * its `assoc` side, so it stays beside that element on every replica,
   * wherever the element moves (see position.ts).
   *
   * @throws RangeError for an index outside 0..length.
   */
  relativePosition(index: number, assoc: Assoc = 'before'): RelativePosition {
    return relativeIn(this.order, index, assoc, (slot) => slot.data)
  }

  /** Where a relative position is now: beside its element at the element's current place (see resolveIn), or undefined if this list has no such element placed (yet). */
  absolutePosition(pos: RelativePosition): number | undefined {
    return resolveIn(this.order, pos, pos.id === '' ? undefined : this.placeOf(pos.id))
  }

  /**
   * The slot that holds an element's place: of its places whose slot is in
   * the tree, the winning one, as refresh shows it. A deleted element keeps
   * it (hidden), so a position beside it stays where the element was.
   */
  private placeOf(element: string): Slot<string> | undefined {
    let best: { p: Position; slot: Slot<string> } | undefined
    for (const p of this.positions.get(element)?.values() ?? []) {
      const slot = this.order.get(p.slot)
      if (slot && slot.data === element && (!best || wins(p, best.p))) best = { p, slot }
    }
    return best?.slot
  }

  /** The stamp a new move should carry: one more than any this list has seen. */
  nextStamp(): number {
    return this.maxStamp + 1
  }

  /** The op that inserts `values` at `index`, as this replica sees the list. */
  insertOp(index: number, values: readonly RegisterValue[]): ListOp {
    const p = this.order.placementAt(index)
    return ['i', p.parent, p.side, p.rightOrigin, values]
  }

  /** The op that inserts a nested object of the declared type, named `name`, at `index`. */
  insertObjectOp(index: number, declaration: readonly unknown[], name: string): ListOp {
    const p = this.order.placementAt(index)
    return ['o', p.parent, p.side, p.rightOrigin, declaration, name]
  }

  /** The op that moves the element at `from` so that it ends at index `to`. */
  moveOp(from: number, to: number): ListOp | undefined {
    const element = this.idAt(from)
    if (element === undefined || to < 0 || to >= this.length) return undefined
    // The element still holds its place while the new one is chosen: past it, count it too.
    const p = this.order.placementAt(to > from ? to + 1 : to)
    return ['m', element, p.parent, p.side, p.rightOrigin, this.nextStamp()]
  }

  /** The op that deletes `count` elements from `index`, or undefined if there are none. */
  deleteOp(index: number, count: number): ListOp | undefined {
    const ranges: Array<[string, number, number]> = []
    for (let i = index; i < Math.min(index + count, this.length); i++) {
      const id = parseSlotId(this.idAt(i) as string) as { tag: string; k: number }
      const last = ranges[ranges.length - 1]
      if (last && last[0] === id.tag && last[1] + last[2] === id.k) last[2]++
      else ranges.push([id.tag, id.k, 1])
    }
    return ranges.length ? ['d', ranges] : undefined
  }

  tryApply(op: ListOp, ctx: OpContext): ApplyResult {
    const problem = op[0] === 'D' ? validateRanges(op[1]) : op[0] === 'M' ? null : validateListOp(op)
    if (problem) return invalid(problem)
    const max = this.bounds.maxLength
    // Checked before applying: a rejected op leaves nothing behind (replicas that catch up without it hold the same state).
    if (max !== undefined && this.live + this.growth(op, ctx) > max) return violates(`list would exceed its maximum length ${max}`)
    this.apply(op, ctx)
    return OK
  }

  /** How many elements applying `op` would make live: a new insert's (less those already deleted), or those only ctx's own delete hides (applied again, or its delete undone). */
  private growth(op: ListOp, ctx: OpContext): number {
    if (op[0] !== 'i' && op[0] !== 'o' && op[0] !== 'D') return 0
    const onlyBy = (tag: string, from: number, count: number): number => {
      const run = this.runs.get(tag)
      let n = 0
      for (let k = from; run && k < Math.min(from + count, run.length); k++) {
        const d = this.elements.get(slotId(tag, k))?.deleters
        if (d?.size === 1 && d.has(ctx.tag)) n++
      }
      return n
    }
    if (op[0] === 'D') return (resolveListOp(op, ctx) as typeof op)[1].reduce((n, [tag, from, count]) => n + onlyBy(tag, from, count), 0)
    const length = op[0] === 'i' ? op[4].length : 1
    return this.runs.has(ctx.tag) ? onlyBy(ctx.tag, 0, length) : uncovered(this.pendingDeletes.get(ctx.tag), length)
  }

  apply(op: ListOp, ctx: OpContext): void {
    const r = resolveListOp(op, ctx)
    switch (r[0]) {
      case 'i':
      case 'o':
        return this.insert(r, ctx)
      case 'm':
        return this.move(r, ctx)
      case 'M':
        return this.unmove(ctx.tag)
      default:
        for (const [tag, from, count] of r[1]) {
          if (r[0] === 'd') this.hide(tag, from, count, ctx.tag)
          else this.unhide(tag, from, count, ctx.tag)
        }
    }
  }

  inverse(op: ListOp, ctx: OpContext): ListOp {
    switch (op[0]) {
      case 'i':
        return ['d', [[ctx.tag, 0, op[4].length]]]
      case 'o':
        return ['d', [[ctx.tag, 0, 1]]]
      case 'm':
        return ['M']
      case 'M':
        // Never asked: a withdrawal is not itself withdrawn.
        return ['M']
      default:
        return [op[0] === 'd' ? 'D' : 'd', op[1]]
    }
  }

  merge(other: CollabList): void {
    for (const [tag, run] of other.runs) {
      if (!this.runs.has(tag)) this.addRun(tag, run)
      for (let k = 0; k < run.length; k++) for (const d of other.elements.get(slotId(tag, k))?.deleters ?? []) this.hide(tag, k, 1, d)
    }
    for (const [tag, list] of other.pendingDeletes) for (const p of list) this.hide(tag, p.from, p.count, p.deleter)
    for (const [tag, m] of other.moves) if (!this.moves.has(tag)) this.addMove(tag, { ...m })
  }

  clone(): this {
    return CollabList.fromSnapshot(this.bounds, this.snapshot()) as this
  }

  /**
   * `[runs, moves, pending]`: inserts as `[tag, author, parent, side,
   * rightOrigin, values | null, [...declaration, name] | null, hidden]` with `hidden`
   * the `[k, deleters]` of deleted elements; moves as `[tag, author,
   * element, parent, side, rightOrigin, stamp, withdrawn]`; deletes of inserts not
   * seen yet as `[tag, from, count, deleter]`. All sorted.
   */
  snapshot(): ListSnapshot {
    const byTag = <T>(m: Map<string, T>): Array<[string, T]> => [...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    const runs = byTag(this.runs).map(([tag, r]): ListSnapshot[0][number] => {
      const hidden: Array<[number, string[]]> = []
      for (let k = 0; k < r.length; k++) {
        const d = this.elements.get(slotId(tag, k))?.deleters
        if (d?.size) hidden.push([k, [...d].sort()])
      }
      return [tag, r.author, r.place.parent, r.place.side, r.place.rightOrigin, r.values ? [...r.values] : null, r.object ? [...r.object, r.name] : null, hidden]
    })
    const moves = byTag(this.moves).map(([tag, m]): ListSnapshot[1][number] => [tag, m.author, m.element, m.place.parent, m.place.side, m.place.rightOrigin, m.t, m.withdrawn])
    const pending: Array<[string, number, number, string]> = []
    for (const [tag, list] of this.pendingDeletes) for (const p of list) pending.push([tag, p.from, p.count, p.deleter])
    pending.sort((a, b) => (a.join('\u0000') < b.join('\u0000') ? -1 : 1))
    return [runs, moves, pending]
  }

  /** Rebuilds a list from its `snapshot()` (trusted input). */
  static fromSnapshot(bounds: ListBounds, snap: ListSnapshot): CollabList {
    const l = new CollabList(bounds)
    for (const [tag, author, parent, side, rightOrigin, values, object, hidden] of snap[0]) {
      const [decl, name] = object ? [object.slice(0, -1), object[object.length - 1] as string] : [undefined, '']
      l.addRun(tag, { author, place: { parent, side, rightOrigin }, values: values ?? undefined, object: decl, name, length: values ? values.length : 1 })
      for (const [k, deleters] of hidden) for (const d of deleters) l.hide(tag, k, 1, d)
    }
    for (const [tag, author, element, parent, side, rightOrigin, t, withdrawn] of snap[1]) l.addMove(tag, { author, element, place: { parent, side, rightOrigin }, t, withdrawn })
    for (const [tag, from, count, deleter] of snap[2]) l.hide(tag, from, count, deleter)
    return l
  }

  invariantsHold(): boolean {
    return this.bounds.maxLength === undefined || this.order.length <= this.bounds.maxLength
  }

  private insert(op: Extract<ListOp, readonly ['i' | 'o', ...unknown[]]>, ctx: OpContext): void {
    const known = this.runs.get(ctx.tag)
    if (known) return this.unhide(ctx.tag, 0, known.length, ctx.tag)
    const place = { parent: op[1], side: op[2], rightOrigin: op[3] }
    if (op[0] === 'i') this.addRun(ctx.tag, { author: ctx.replica, place, values: op[4], object: undefined, name: '', length: op[4].length })
    else this.addRun(ctx.tag, { author: ctx.replica, place, values: undefined, object: op[4], name: op[5], length: 1 })
  }

  private addRun(tag: string, run: Run): void {
    this.runs.set(tag, run)
    const pending = this.pendingDeletes.get(tag)
    this.pendingDeletes.delete(tag)
    for (let k = 0; k < run.length; k++) {
      const id = slotId(tag, k)
      this.elements.set(id, { value: run.values?.[k], object: run.object, name: run.name, deleters: undefined })
      this.live++
      this.place(id, { t: 0, replica: run.author, tag, slot: id })
    }
    for (const p of pending ?? []) this.hide(tag, p.from, p.count, p.deleter)
    // Each element after the first is the right child of the one before it, with the run's right origin.
    const chainOrigin = run.place.side === 1 ? run.place.rightOrigin : run.place.parent
    for (let k = 0; k < run.length; k++) {
      const place = k === 0 ? run.place : { parent: slotId(tag, k - 1), side: 1 as const, rightOrigin: chainOrigin }
      this.order.add(slotId(tag, k), run.author, place, slotId(tag, k), () => this.refresh(slotId(tag, k)))
    }
  }

  private move(op: Extract<ListOp, readonly ['m', ...unknown[]]>, ctx: OpContext): void {
    const known = this.moves.get(ctx.tag)
    if (!known) return this.addMove(ctx.tag, { author: ctx.replica, element: op[1], place: { parent: op[2], side: op[3], rightOrigin: op[4] }, t: op[5], withdrawn: false })
    // Applied again (a withdrawn move that commits after all).
    known.withdrawn = false
    this.place(known.element, { t: known.t, replica: known.author, tag: ctx.tag, slot: slotId(ctx.tag, 0) })
  }

  private addMove(tag: string, m: MoveRecord): void {
    this.moves.set(tag, m)
    if (m.t > this.maxStamp) this.maxStamp = m.t
    const slot = slotId(tag, 0)
    if (!m.withdrawn) this.place(m.element, { t: m.t, replica: m.author, tag, slot })
    this.order.add(slot, m.author, m.place, m.element, () => this.refresh(m.element))
  }

  private unmove(tag: string): void {
    const m = this.moves.get(tag)
    if (!m || m.withdrawn) return
    m.withdrawn = true
    this.positions.get(m.element)?.delete(tag)
    const slot = this.order.get(slotId(tag, 0))
    if (slot) this.order.setVisible(slot, false)
    this.refresh(m.element)
  }

  private place(element: string, p: Position): void {
    let map = this.positions.get(element)
    if (!map) this.positions.set(element, (map = new Map()))
    map.set(p.tag, p)
    this.refresh(element)
  }

  /** Shows the element at its winning place, if it is live and that place is in the tree, and nowhere else. */
  private refresh(element: string): void {
    const e = this.elements.get(element)
    let best: Position | undefined
    for (const p of this.positions.get(element)?.values() ?? []) if (!best || wins(p, best)) best = p
    for (const p of this.positions.get(element)?.values() ?? []) {
      const slot = this.order.get(p.slot)
      if (slot && slot.data === element) this.order.setVisible(slot, p === best && e !== undefined && !e.deleters?.size)
    }
  }

  private hide(tag: string, from: number, count: number, deleter: string): void {
    const run = this.runs.get(tag)
    if (!run) {
      let list = this.pendingDeletes.get(tag)
      if (!list) this.pendingDeletes.set(tag, (list = []))
      if (!list.some((p) => p.from === from && p.count === count && p.deleter === deleter)) list.push({ from, count, deleter })
      return
    }
    for (let k = from; k < Math.min(from + count, run.length); k++) {
      const e = this.elements.get(slotId(tag, k)) as Element
      if (!e.deleters?.size) this.live--
      ;(e.deleters ??= new Set()).add(deleter)
      this.refresh(slotId(tag, k))
    }
  }

  private unhide(tag: string, from: number, count: number, deleter: string): void {
    const run = this.runs.get(tag)
    if (!run) {
      const list = this.pendingDeletes.get(tag)?.filter((p) => !(p.deleter === deleter && p.from < from + count && from < p.from + p.count))
      if (list?.length) this.pendingDeletes.set(tag, list)
      else this.pendingDeletes.delete(tag)
      return
    }
    for (let k = from; k < Math.min(from + count, run.length); k++) {
      const e = this.elements.get(slotId(tag, k)) as Element
      if (!e.deleters?.delete(deleter)) continue
      if (e.deleters.size === 0) {
        e.deleters = undefined
        this.live++
      }
      this.refresh(slotId(tag, k))
    }
  }
}

/** A list's canonical snapshot (see CollabList.snapshot). */
export type ListSnapshot = [
  Array<[string, string, string, 0 | 1, string, RegisterValue[] | null, unknown[] | null, Array<[number, string[]]>]>,
  Array<[string, string, string, string, 0 | 1, string, number, boolean]>,
  Array<[string, number, number, string]>,
]

/** `op` with every id it names passed through `ids` (which rewrites the ids a text op names). */
function mapIds(op: ListOp, ids: (op: TextOp) => TextOp): ListOp {
  switch (op[0]) {
    case 'i':
    case 'o': {
      const r = ids(['i', op[1], op[2], op[3], 'x'])
      return (op[0] === 'i' ? ['i', r[1], op[2], r[3], op[4]] : ['o', r[1], op[2], r[3], op[4], op[5]]) as ListOp
    }
    case 'm': {
      const place = ids(['i', op[2], op[3], op[4], 'x'])
      const element = ids(['i', op[1], 1, '', 'x'])
      return ['m', element[1] as string, place[1] as string, op[3], place[3] as string, op[5]]
    }
    case 'M':
      return op
    default:
      return ids(op) as ListOp
  }
}

/** `op` with the ids it names resolved against `ctx` (`^n` is op n of the same envelope). */
function resolveListOp(op: ListOp, ctx: OpContext): ListOp {
  return mapIds(op, (t) => resolveTextOp(t, ctx))
}

/** `op` with the tags it names renamed (see renameTextOp): what a client uses for its unsigned drafts. */
export function renameListOp(op: ListOp, rename: (tag: string) => { tag: string; shift: number } | undefined): ListOp {
  return mapIds(op, (t) => renameTextOp(t, rename))
}

/** Whether list insert `next` continues insert `prev` as typing does (see continuesRun). */
export function continuesListRun(prev: ListOp, lastId: string, next: ListOp): boolean {
  if (prev[0] !== 'i' || next[0] !== 'i') return false
  return continuesRun(['i', prev[1], prev[2], prev[3], 'x'], lastId, ['i', next[1], next[2], next[3], 'x'])
}

/** A list's declaration: its `maxLength`, if any. */
export interface ListDeclaration {
  /** A list. */
  readonly type: 'list'
  /** Its `maxLength`, if any. */
  readonly bounds: ListBounds
}

/** The list in the registry; wire form `['l', maxLength]`. Every op is kept: each names its own elements. */
export const listType: ObjectType<ListDeclaration, CollabList> = {
  name: 'list',
  code: 'l',
  encode: (d) => encodeBounds('l', d.bounds, ['maxLength']),
  decode: (enc) => ({ type: 'list', bounds: decodeBounds(enc, 'list', ['maxLength'], validateListBounds) }),
  validateOp: validateListOp,
  create: (d) => new CollabList(d.bounds),
  restore: (d, snap) => CollabList.fromSnapshot(d.bounds, snap as ListSnapshot),
  hasInvariants: (d) => d.bounds.maxLength !== undefined,
  // Element ids are unique and an element never changes what it holds.
  historyPatch: (before, after) => arrayPatch(before as ListEntry[], after as ListEntry[], (a, b) => a.id === b.id),
  rename: (op, rename) => renameListOp(op as ListOp, rename),
  runLength: (op) => ((op as ListOp)[0] === 'i' ? ((op as ListOp)[4] as unknown[]).length : (op as ListOp)[0] === 'o' ? 1 : 0),
  joinRun(prev, lastId, next) {
    const [p, n] = [prev as ListOp, next as ListOp]
    return p[0] === 'i' && n[0] === 'i' && continuesListRun(p, lastId, n) ? ['i', p[1], p[2], p[3], [...p[4], ...n[4]]] : undefined
  },
}
